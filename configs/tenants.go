package configs

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Tier is a named set of limits that tenants share by reference: every
// tenant on a tier gets its own counters with the tier's limits.
type Tier struct {
	// Name identifies the tier for tenants' "tier". Required, unique,
	// [a-z0-9_-]+.
	Name string `yaml:"name"`
	// Quota holds the rate limits and caps, written inline in the tier.
	Quota `yaml:",inline"`
	// DefaultMaxTokens is the number of output tokens reserved for a
	// request that sets no max_tokens; the real count is settled when the
	// answer ends; where the tier limits output tokens it is also sent as
	// the request's max_tokens. Default 1024; positive, and no more than
	// output_tokens_burst when output_tokens_per_minute is set (a larger
	// reservation could never be admitted).
	DefaultMaxTokens int64 `yaml:"default_max_tokens"`
	// Priority orders tiers when the fleet is saturated: higher is served
	// first. Default 0.
	Priority int `yaml:"priority"`
	// Models lists the model names this tier may use, each one of the
	// config's models. Empty (the default) allows every model.
	Models []string `yaml:"models"`
	// Classes lists the service classes (OpenAI's service_tier: priority,
	// default, flex) the tier may ask for. Default all three.
	Classes []string `yaml:"classes"`
	// DefaultClass is the class of a request that sends no service_tier
	// or "auto". Default "default"; one of classes.
	DefaultClass string `yaml:"default_class"`
}

// Quota is a tier's limits as plain values. Zero (the default) means that
// dimension is unlimited. A burst is how much may be taken at once after an
// idle spell; it defaults to one minute of its rate, must be at least 1 when
// its rate is set and must not be set without its rate.
type Quota struct {
	// RequestsPerMinute is the sustained request rate. Default 0 (unlimited).
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// InputTokensPerMinute is the sustained prompt-token rate. Default 0.
	InputTokensPerMinute int64 `yaml:"input_tokens_per_minute"`
	// OutputTokensPerMinute is the sustained completion-token rate. Default 0.
	OutputTokensPerMinute int64 `yaml:"output_tokens_per_minute"`
	// ConcurrentRequests caps requests in flight. Default 0 (unlimited).
	ConcurrentRequests int64 `yaml:"concurrent_requests"`
	// TokensPerDay caps input plus output tokens per UTC day. Default 0.
	TokensPerDay int64 `yaml:"tokens_per_day"`
	// RequestsBurst is the request burst. Default requests_per_minute.
	RequestsBurst int64 `yaml:"requests_burst"`
	// InputTokensBurst is the prompt-token burst; no prompt larger than it
	// is ever admitted. Default input_tokens_per_minute.
	InputTokensBurst int64 `yaml:"input_tokens_burst"`
	// OutputTokensBurst is the completion-token burst; no max_tokens larger
	// than it is ever admitted. Default output_tokens_per_minute.
	OutputTokensBurst int64 `yaml:"output_tokens_burst"`
}

// Overrides replace some of a tier's limits for one tenant. A field left out
// keeps the tier's value; 0 makes that dimension unlimited. An override that
// sets a rate but not its burst sets the burst to one minute of the new rate,
// as a tier does. Each field overrides the Quota field of the same name.
type Overrides struct {
	RequestsPerMinute     *int64 `yaml:"requests_per_minute"`
	InputTokensPerMinute  *int64 `yaml:"input_tokens_per_minute"`
	OutputTokensPerMinute *int64 `yaml:"output_tokens_per_minute"`
	ConcurrentRequests    *int64 `yaml:"concurrent_requests"`
	TokensPerDay          *int64 `yaml:"tokens_per_day"`
	RequestsBurst         *int64 `yaml:"requests_burst"`
	InputTokensBurst      *int64 `yaml:"input_tokens_burst"`
	OutputTokensBurst     *int64 `yaml:"output_tokens_burst"`
}

// Tenant is one client of the router, identified by any of its API keys.
type Tenant struct {
	// Name identifies the tenant in limits, logs and metrics. Required,
	// unique, [A-Za-z0-9._-]+, at most 64 characters.
	Name string `yaml:"name"`
	// Tier names the tenant's tier in tiers. Required.
	Tier string `yaml:"tier"`
	// Weight is the tenant's share of service against the other tenants
	// of its tier and class while they all wait for admission, counted in
	// tokens served. Default 1.
	Weight int `yaml:"weight"`
	// APIKeys lists the SHA-256 of each key the tenant may send, as 64
	// lowercase hex digits, optionally written "sha256:<hex>" (what
	// `sluice hash-key` prints). At least one; unique across tenants. The
	// keys themselves are never written in the config.
	APIKeys []string `yaml:"api_keys"`
	// Overrides replace some of the tier's limits for this tenant. Optional.
	Overrides *Overrides `yaml:"overrides"`
}

// LimitStore configures where tenants' counters live.
type LimitStore struct {
	// RedisURL is the Redis that router replicas share their counters in
	// (redis://, rediss:// or unix://, e.g. redis://127.0.0.1:6379/0).
	// Default empty: counters live in this process, so each replica
	// limits on its own.
	RedisURL string `yaml:"redis_url"`
	// Timeout bounds each Redis call. Default 50ms; between 1ms and 5s.
	Timeout Duration `yaml:"timeout"`
	// FailOpen admits requests when Redis cannot answer in time; false
	// refuses them instead. Default true.
	FailOpen *bool `yaml:"fail_open"`
	// LeaseTTL is how long a concurrency or admission slot that is never
	// released (its replica died mid-request) keeps counting past its last
	// renewal: a live replica renews its requests' slots every third of
	// it, for as long as they run. Default 30s; at least 1s.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// KeyPrefix starts every Redis key, so several deployments can share a
	// Redis. Default "sluice"; [A-Za-z0-9._:-]+.
	KeyPrefix string `yaml:"key_prefix"`
}

// FailsOpen reports whether requests are admitted when the store cannot
// answer (true when unset).
func (l LimitStore) FailsOpen() bool { return l.FailOpen == nil || *l.FailOpen }

// Plan is what one tenant gets: its tier's settings with the tenant's
// overrides applied, as plain values for cmd/sluice to map onto the
// runtime's limit types.
type Plan struct {
	// Tier is the tier's name.
	Tier string
	// Quota is the effective limits; zero means unlimited.
	Quota Quota
	// DefaultMaxTokens, Priority, Classes and DefaultClass are the tier's.
	DefaultMaxTokens int64
	Priority         int
	Classes          []string
	DefaultClass     string
	// Models is a copy of the tier's list; empty allows every model.
	Models []string
}

// Allows reports whether the plan may use model.
func (p Plan) Allows(model string) bool {
	return len(p.Models) == 0 || slices.Contains(p.Models, model)
}

// Effective returns the tier's plan with o (which may be nil) applied.
func (t Tier) Effective(o *Overrides) Plan {
	return Plan{
		Tier:             t.Name,
		Quota:            o.Apply(t.Quota),
		DefaultMaxTokens: t.DefaultMaxTokens,
		Priority:         t.Priority,
		Models:           slices.Clone(t.Models),
		Classes:          slices.Clone(t.Classes),
		DefaultClass:     t.DefaultClass,
	}
}

// Apply returns q with every field that o sets replaced. A nil o returns q.
func (o *Overrides) Apply(q Quota) Quota {
	if o == nil {
		return q
	}
	for _, f := range quotaFields(&q, o) {
		if f.over != nil {
			*f.dst = *f.over
		}
	}
	return q
}

// Tier returns the tier called name.
func (c *Config) Tier(name string) (Tier, bool) {
	i := slices.IndexFunc(c.Tiers, func(t Tier) bool { return t.Name == name })
	if i < 0 {
		return Tier{}, false
	}
	return c.Tiers[i], true
}

// KeyHashes returns the tenant's key hashes as bare lowercase hex (the
// "sha256:" prefix removed), ready to compare with hex(sha256(key)).
func (t Tenant) KeyHashes() []string {
	out := make([]string, len(t.APIKeys))
	for i, k := range t.APIKeys {
		out[i] = strings.TrimPrefix(k, keyHashPrefix)
	}
	return out
}

const keyHashPrefix = "sha256:"

// MaxTenantName is the longest tenant name allowed.
const MaxTenantName = 64

// quotaField is one limit field by its YAML name: the tier's value and the
// override's, and for a burst, the rate it belongs to.
type quotaField struct {
	name string
	dst  *int64
	over *int64
	rate string
}

// quotaFields lists q's limits with o's overrides (o may be nil), in file
// order.
func quotaFields(q *Quota, o *Overrides) []quotaField {
	if o == nil {
		o = &Overrides{}
	}
	return []quotaField{
		{"requests_per_minute", &q.RequestsPerMinute, o.RequestsPerMinute, ""},
		{"input_tokens_per_minute", &q.InputTokensPerMinute, o.InputTokensPerMinute, ""},
		{"output_tokens_per_minute", &q.OutputTokensPerMinute, o.OutputTokensPerMinute, ""},
		{"concurrent_requests", &q.ConcurrentRequests, o.ConcurrentRequests, ""},
		{"tokens_per_day", &q.TokensPerDay, o.TokensPerDay, ""},
		{"requests_burst", &q.RequestsBurst, o.RequestsBurst, "requests_per_minute"},
		{"input_tokens_burst", &q.InputTokensBurst, o.InputTokensBurst, "input_tokens_per_minute"},
		{"output_tokens_burst", &q.OutputTokensBurst, o.OutputTokensBurst, "output_tokens_per_minute"},
	}
}

// applyTenantDefaults fills the tiers', overrides' and limit store's empty
// fields; ApplyDefaults calls it.
func (c *Config) applyTenantDefaults() {
	for i := range c.Tiers {
		t := &c.Tiers[i]
		q := &t.Quota
		defaultBurst(&q.RequestsBurst, q.RequestsPerMinute)
		defaultBurst(&q.InputTokensBurst, q.InputTokensPerMinute)
		defaultBurst(&q.OutputTokensBurst, q.OutputTokensPerMinute)
		if t.DefaultMaxTokens == 0 {
			t.DefaultMaxTokens = DefaultMaxTokens
		}
		if len(t.Classes) == 0 {
			t.Classes = ServiceClasses()
		}
		if t.DefaultClass == "" {
			t.DefaultClass = DefaultServiceClass
		}
	}
	for i := range c.Tenants {
		if c.Tenants[i].Weight == 0 {
			c.Tenants[i].Weight = 1
		}
		if o := c.Tenants[i].Overrides; o != nil {
			defaultOverrideBurst(&o.RequestsBurst, o.RequestsPerMinute)
			defaultOverrideBurst(&o.InputTokensBurst, o.InputTokensPerMinute)
			defaultOverrideBurst(&o.OutputTokensBurst, o.OutputTokensPerMinute)
		}
	}
	l := &c.Limits
	if l.Timeout == 0 {
		l.Timeout = Duration(DefaultLimitTimeout)
	}
	if l.FailOpen == nil {
		on := true
		l.FailOpen = &on
	}
	if l.LeaseTTL == 0 {
		l.LeaseTTL = Duration(DefaultLeaseTTL)
	}
	if l.KeyPrefix == "" {
		l.KeyPrefix = DefaultKeyPrefix
	}
}

func defaultBurst(burst *int64, rate int64) {
	if *burst == 0 && rate > 0 {
		*burst = rate
	}
}

func defaultOverrideBurst(burst **int64, rate *int64) {
	if *burst == nil && rate != nil {
		v := *rate
		*burst = &v
	}
}

// validateTenants checks tiers, tenants and the limit store, reporting each
// problem through bad.
func (c *Config) validateTenants(bad func(field, format string, args ...any)) {
	served := make(map[string]bool, len(c.Models))
	aliasOf := map[string]string{}
	for _, m := range c.Models {
		served[m.Name] = true
		for _, a := range m.Aliases {
			aliasOf[a] = m.Name
		}
	}
	tiers := make(map[string]int, len(c.Tiers))
	for i, t := range c.Tiers {
		p := fmt.Sprintf("tiers[%d]", i)
		switch prev, dup := tiers[t.Name]; {
		case t.Name == "":
			bad(p+".name", "is required")
		case !nameOf(t.Name, "abcdefghijklmnopqrstuvwxyz0123456789_-"):
			bad(p+".name", "want [a-z0-9_-]+, got %q", t.Name)
		case dup:
			bad(p+".name", "%q is already used by tiers[%d]", t.Name, prev)
		default:
			tiers[t.Name] = i
		}
		q := t.Quota
		for _, f := range quotaFields(&q, nil) {
			if *f.dst < 0 {
				bad(p+"."+f.name, "must not be negative (%s), got %d", zeroMeans(f.name), *f.dst)
			}
		}
		checkBursts(&q, func(string) bool { return true }, p, bad)
		if t.DefaultMaxTokens < 0 {
			bad(p+".default_max_tokens", "must be positive, got %d", t.DefaultMaxTokens)
		} else if q.OutputTokensPerMinute > 0 && q.OutputTokensBurst > 0 && t.DefaultMaxTokens > q.OutputTokensBurst {
			bad(p+".default_max_tokens", "%d is above output_tokens_burst (%d), so a request without max_tokens could never be admitted",
				t.DefaultMaxTokens, q.OutputTokensBurst)
		}
		for j, cl := range t.Classes {
			if !slices.Contains(ServiceClasses(), cl) {
				bad(fmt.Sprintf("%s.classes[%d]", p, j), "want one of %s, got %q", strings.Join(ServiceClasses(), ", "), cl)
			}
		}
		if !slices.Contains(t.Classes, t.DefaultClass) {
			bad(p+".default_class", "%q is not one of the tier's classes %v", t.DefaultClass, t.Classes)
		}
		listed := make(map[string]int, len(t.Models))
		for j, m := range t.Models {
			mp := fmt.Sprintf("%s.models[%d]", p, j)
			if prev, dup := listed[m]; dup {
				bad(mp, "%q is already listed as models[%d]", m, prev)
			} else if owner := aliasOf[m]; owner != "" {
				bad(mp, "%q is an alias of model %q: list the model", m, owner)
			} else if !served[m] {
				bad(mp, "%q is not one of the config's models", m)
			}
			listed[m] = j
		}
	}

	if len(c.Tenants) > 0 && len(c.Tiers) == 0 {
		bad("tiers", "at least one tier is required when tenants are configured")
	}
	names := make(map[string]int, len(c.Tenants))
	type keyRef struct{ tenant, key int }
	keys := map[string]keyRef{}
	for i, t := range c.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		switch prev, dup := names[t.Name]; {
		case t.Name == "":
			bad(p+".name", "is required")
		case len(t.Name) > MaxTenantName || !nameOf(t.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"):
			bad(p+".name", "want [A-Za-z0-9._-]+ of at most %d characters, got %q", MaxTenantName, t.Name)
		case dup:
			bad(p+".name", "%q is already used by tenants[%d]", t.Name, prev)
		default:
			names[t.Name] = i
		}
		ti, known := tiers[t.Tier]
		switch {
		case t.Tier == "":
			bad(p+".tier", "is required")
		case !known && len(c.Tiers) > 0:
			bad(p+".tier", "unknown tier %q", t.Tier)
		}
		if t.Weight < 1 {
			bad(p+".weight", "must be at least 1, got %d", t.Weight)
		}
		if len(t.APIKeys) == 0 {
			bad(p+".api_keys", "at least one key hash is required (see `sluice hash-key`)")
		}
		for j, k := range t.APIKeys {
			kp := fmt.Sprintf("%s.api_keys[%d]", p, j)
			h := strings.TrimPrefix(k, keyHashPrefix)
			if len(h) != 64 || !nameOf(h, "0123456789abcdef") {
				// Never echo the value: it may be a real key pasted by mistake.
				bad(kp, "want the key's SHA-256 as 64 lowercase hex digits, optionally \"sha256:<hex>\" (`sluice hash-key` prints it), got %d characters", len(k))
				continue
			}
			switch prev, dup := keys[h]; {
			case dup && prev.tenant == i:
				bad(kp, "the same key as api_keys[%d]", prev.key)
				continue
			case dup:
				bad(kp, "the same key as tenants[%d].api_keys[%d]: tenants %q and %q cannot share a key",
					prev.tenant, prev.key, c.Tenants[prev.tenant].Name, t.Name)
				continue
			}
			keys[h] = keyRef{i, j}
		}
		if t.Overrides != nil {
			var tier *Tier
			if known {
				tier = &c.Tiers[ti]
			}
			checkOverrides(tier, t.Overrides, p+".overrides", bad)
		}
	}
	c.Limits.validate(bad)
}

// checkOverrides checks o's values and, when the tenant's tier is known, the
// limits they make with it; problems the tier alone has are reported on the
// tier.
func checkOverrides(tier *Tier, o *Overrides, p string, bad func(field, format string, args ...any)) {
	set := map[string]bool{}
	for _, f := range quotaFields(&Quota{}, o) {
		if f.over == nil {
			continue
		}
		set[f.name] = true
		if *f.over < 0 {
			bad(p+"."+f.name, "must not be negative (%s), got %d", zeroMeans(f.name), *f.over)
		}
	}
	if tier == nil {
		return
	}
	q := o.Apply(tier.Quota)
	checkBursts(&q, func(name string) bool { return set[name] }, p, bad)
	if set["output_tokens_burst"] && q.OutputTokensPerMinute > 0 && q.OutputTokensBurst > 0 && tier.DefaultMaxTokens > q.OutputTokensBurst {
		bad(p+".output_tokens_burst", "%d is below the tier's default_max_tokens (%d), so a request without max_tokens could never be admitted",
			q.OutputTokensBurst, tier.DefaultMaxTokens)
	}
}

// checkBursts reports each burst of q that is set without its rate or is 0
// with it, when mine says the burst or its rate is the caller's to report.
func checkBursts(q *Quota, mine func(name string) bool, p string, bad func(field, format string, args ...any)) {
	rates := map[string]int64{}
	for _, f := range quotaFields(q, nil) {
		if f.rate == "" {
			rates[f.name] = *f.dst
			continue
		}
		if !mine(f.name) && !mine(f.rate) {
			continue
		}
		switch r, b := rates[f.rate], *f.dst; { // a negative b is reported as such
		case r == 0 && b > 0:
			bad(p+"."+f.name, "is set without %s (a burst needs its rate)", f.rate)
		case r > 0 && b == 0:
			bad(p+"."+f.name, "must be at least 1 when %s is set, got 0", f.rate)
		}
	}
}

func (l LimitStore) validate(bad func(field, format string, args ...any)) {
	if l.RedisURL != "" {
		if msg := CheckRedisURL(l.RedisURL); msg != "" {
			bad("limits.redis_url", "%s", msg)
		}
	}
	if t := l.Timeout.Std(); t < MinLimitTimeout || t > MaxLimitTimeout {
		bad("limits.timeout", "must be between %s and %s, got %s", MinLimitTimeout, MaxLimitTimeout, t)
	}
	if t := l.LeaseTTL.Std(); t < MinLeaseTTL {
		bad("limits.lease_ttl", "must be at least %s, got %s", MinLeaseTTL, t)
	}
	if !nameOf(l.KeyPrefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") {
		bad("limits.key_prefix", "want [A-Za-z0-9._:-]+, got %q", l.KeyPrefix)
	}
}

// CheckRedisURL returns what is wrong with s, or "". Messages show the URL
// with its password redacted.
func CheckRedisURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message would repeat the URL, password and all
		}
		return fmt.Sprintf("not a URL: %v", err)
	}
	switch u.Scheme {
	case "redis", "rediss":
		if u.Host == "" {
			return fmt.Sprintf("missing host in %q", RedactURL(s))
		}
		if db := strings.TrimPrefix(u.Path, "/"); db != "" && !nameOf(db, "0123456789") {
			return fmt.Sprintf("the path must be a database number such as /0, got %q", u.Path)
		}
	case "unix":
		if u.Path == "" {
			return fmt.Sprintf("missing socket path in %q", RedactURL(s))
		}
	default:
		return fmt.Sprintf("want a redis://, rediss:// or unix:// URL, got %q", RedactURL(s))
	}
	return ""
}

// RedactURL returns s with its secrets replaced by REDACTED: the password
// of its user info, and the value of every query parameter whose name
// holds "password" (a Sentinel URL's password= and sentinel_password=).
// A string that does not parse as a URL comes back as a placeholder: its
// text may hold the secret.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(not a URL)"
	}
	if u.User != nil {
		if _, set := u.User.Password(); set {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		changed := false
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				q[k] = []string{"REDACTED"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// nameOf reports whether s is non-empty and made only of bytes in allowed.
func nameOf(s, allowed string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(allowed, s[i]) < 0 {
			return false
		}
	}
	return true
}

// zeroMeans says what 0 means for a quota field: no limit, except for a
// burst, where it is one minute's worth of the rate.
func zeroMeans(field string) string {
	if strings.HasSuffix(field, "_burst") {
		return "0 is one minute's worth of the rate"
	}
	return "0 is unlimited"
}
