package configs

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one invalid field, named by its path in the file
// ("models[0].backends[1].url").
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Validate checks a defaulted Config and returns every problem joined with
// errors.Join, each a *FieldError. Policy names and parameters are checked by
// the policy registry when cmd/sluice builds the router.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "want host:port, got %q", c.Listen)
	}
	for _, t := range []struct {
		field string
		tls   TLS
	}{{"tls", c.TLS}, {"admin.tls", c.Admin.TLS}} {
		switch {
		case t.tls.CertFile == "" && t.tls.KeyFile != "":
			bad(t.field+".cert_file", "must be set with key_file (%q)", t.tls.KeyFile)
		case t.tls.CertFile != "" && t.tls.KeyFile == "":
			bad(t.field+".key_file", "must be set with cert_file (%q)", t.tls.CertFile)
		}
	}
	if _, port, err := net.SplitHostPort(c.Admin.Listen); err != nil {
		bad("admin.listen", "want host:port, got %q", c.Admin.Listen)
	} else if c.Admin.Listen == c.Listen && port != "0" {
		bad("admin.listen", "must differ from listen (%q): the admin API has a listener of its own", c.Listen)
	}
	for i, o := range c.CORS.AllowedOrigins {
		if err := validOrigin(o); err != nil {
			bad(fmt.Sprintf("cors.allowed_origins[%d]", i), "%v, got %q", err, o)
		}
	}
	if c.CORS.MaxAge < 0 {
		bad("cors.max_age", "must be positive, got %s", c.CORS.MaxAge.Std())
	}
	if c.MaxBodyBytesInFlight < c.MaxBodyBytes {
		bad("max_body_bytes_in_flight", "must be at least max_body_bytes (%d), got %d", c.MaxBodyBytes, c.MaxBodyBytesInFlight)
	}
	if c.StoredResponsesTTL < 0 {
		bad("stored_responses_ttl", "must be positive, got %s", c.StoredResponsesTTL.Std())
	}
	if c.BodyReadTimeout < 0 {
		bad("body_read_timeout", "must be positive, got %s", c.BodyReadTimeout.Std())
	}
	if c.MaxBodyBytes < 0 {
		bad("max_body_bytes", "must be positive, got %d", c.MaxBodyBytes)
	}
	u := c.Upstream
	if u.DialTimeout < 0 {
		bad("upstream.dial_timeout", "must be positive, got %s", u.DialTimeout.Std())
	}
	if u.ResponseHeaderTimeout < 0 {
		bad("upstream.response_header_timeout", "must be positive, got %s", u.ResponseHeaderTimeout.Std())
	}
	if u.MaxIdleConnsPerHost < 0 {
		bad("upstream.max_idle_conns_per_host", "must be positive, got %d", u.MaxIdleConnsPerHost)
	}
	if u.Retries != nil && (*u.Retries < 0 || *u.Retries > 10) {
		bad("upstream.retries", "must be between 0 and 10, got %d", *u.Retries)
	}
	if u.StreamIdleTimeout < 0 {
		bad("upstream.stream_idle_timeout", "must be positive, got %s", u.StreamIdleTimeout.Std())
	}
	br := u.Breaker // each field on its own, all of them at once
	for _, f := range []struct {
		name string
		v    int
	}{{"consecutive_failures", br.ConsecutiveFailures}, {"min_requests", br.MinRequests}, {"probes", br.Probes}} {
		if f.v < 1 {
			bad("upstream.breaker."+f.name, "must be at least 1, got %d", f.v)
		}
	}
	if br.FailureRatio <= 0 || br.FailureRatio > 1 {
		bad("upstream.breaker.failure_ratio", "must be in (0, 1], got %g", br.FailureRatio)
	}
	if br.Window <= 0 {
		bad("upstream.breaker.window", "must be positive, got %s", br.Window.Std())
	}
	if br.OpenFor <= 0 {
		bad("upstream.breaker.open_for", "must be positive, got %s", br.OpenFor.Std())
	}
	if !headerName(c.SessionHeader) {
		bad("session_header", "want an HTTP header name, got %q", c.SessionHeader)
	}
	sc := c.Scrape
	if sc.Interval < Duration(MinScrapeInterval) {
		bad("scrape.interval", "must be at least %s, got %s", MinScrapeInterval, sc.Interval.Std())
	}
	if sc.Timeout <= 0 || sc.Timeout >= sc.Interval {
		bad("scrape.timeout", "must be positive and below scrape.interval (%s), got %s", sc.Interval.Std(), sc.Timeout.Std())
	}
	if !strings.HasPrefix(sc.Path, "/") || strings.ContainsAny(sc.Path, "?# ") {
		bad("scrape.path", "want an absolute path such as /metrics, got %q", sc.Path)
	}
	if len(c.Models) == 0 {
		bad("models", "at least one model is required")
	}
	seen := make(map[string]string, len(c.Models)) // a model name or alias: the field that has it
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		switch prev, dup := seen[m.Name]; {
		case m.Name == "":
			bad(p+".name", "is required")
		case dup:
			bad(p+".name", "%q is already used by %s", m.Name, prev)
		default:
			seen[m.Name] = p
		}
	}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		for j, a := range m.Aliases {
			ap := fmt.Sprintf("%s.aliases[%d]", p, j)
			switch prev, dup := seen[a]; {
			case strings.TrimSpace(a) == "":
				bad(ap, "must not be empty")
			case dup:
				bad(ap, "%q is already used by %s", a, prev)
			default:
				seen[a] = ap
			}
		}
		if len(m.Backends) == 0 {
			bad(p+".backends", "at least one backend is required")
		}
		urls := make(map[string]int, len(m.Backends))
		for j, b := range m.Backends {
			bp := fmt.Sprintf("%s.backends[%d]", p, j)
			if msg := checkURL(b.URL); msg != "" {
				bad(bp+".url", "%s", msg)
			} else if prev, dup := urls[sameBackend(b.URL)]; dup {
				bad(bp+".url", "%q is already listed as backends[%d]", b.URL, prev)
			} else {
				urls[sameBackend(b.URL)] = j
			}
			if b.Weight < 0 {
				bad(bp+".weight", "must be positive, got %d", b.Weight)
			}
			if b.MaxInFlight < 0 {
				bad(bp+".max_in_flight", "must not be negative, got %d", b.MaxInFlight)
			}
			if b.MaxPendingPromptTokens < 0 {
				bad(bp+".max_pending_prompt_tokens", "must not be negative (0 is the model's), got %d", b.MaxPendingPromptTokens)
			}
			if b.APIKey != "" && b.APIKeyEnv != "" {
				bad(bp+".api_key_env", "set api_key or api_key_env, not both")
			}
			if b.ServedModel != "" && strings.TrimSpace(b.ServedModel) != b.ServedModel {
				bad(bp+".served_model", "must not begin or end with spaces, got %q", b.ServedModel)
			}
		}
	}
	names := make(map[string]bool, len(c.Models))
	for _, m := range c.Models {
		names[m.Name] = true
	}
	for i, m := range c.Models {
		if m.Timeouts.FirstByte < 0 {
			bad(fmt.Sprintf("models[%d].timeouts.first_byte", i), "must not be negative, got %s", m.Timeouts.FirstByte.Std())
		}
		if m.Timeouts.Total < 0 {
			bad(fmt.Sprintf("models[%d].timeouts.total", i), "must not be negative (0 is no limit), got %s", m.Timeouts.Total.Std())
		}
		for j, fb := range m.Fallbacks {
			switch {
			case fb == m.Name:
				bad(fmt.Sprintf("models[%d].fallbacks[%d]", i, j), "a model cannot fall back to itself")
			case !names[fb]:
				bad(fmt.Sprintf("models[%d].fallbacks[%d]", i, j), "%q is not one of the config's models", fb)
			}
		}
	}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d].admission", i)
		a := m.Admission
		if a.MaxInFlightPerBackend < 0 {
			bad(p+".max_in_flight_per_backend", "must not be negative (0 is off), got %d", a.MaxInFlightPerBackend)
		}
		if a.BatchReserve >= 1 {
			bad(p+".batch_reserve", "must be below 1 (a share of the budget; negative = off), got %g", a.BatchReserve)
		}
		if a.KVMax <= 0 || a.KVMax > 1 {
			bad(p+".kv_max", "must be in (0, 1], got %g", a.KVMax)
		}
		if a.MaxPendingPromptTokens < 0 {
			bad(p+".max_pending_prompt_tokens", "must not be negative (0 is off), got %d", a.MaxPendingPromptTokens)
		}
		checkClassDurations(bad, p+".max_pending_prefill_by_class", a.MaxPendingPrefillByClass, " (leave the class out for max_pending_prefill)")
		if a.MaxPendingPrefillBelowShare < 0 {
			bad(p+".max_pending_prefill_below_share", "must not be negative (0 is off), got %s", a.MaxPendingPrefillBelowShare.Std())
		}
		if a.MaxDetourBetterClass < 0 {
			bad(p+".max_detour_better_class", "must not be negative (0 is off), got %s", a.MaxDetourBetterClass.Std())
		}
		if a.MaxPendingPrefillBelowShare > 0 && c.Limits.RedisURL != "" {
			// Three replicas sharing Redis failed 590 of 1,802 requests
			// (median TTFT 30 s, max_wait) in one of two live runs (2026-12-06).
			bad(p+".max_pending_prefill_below_share", "is for one replica: it is not supported with limits.redis_url")
		}
		if a.PendingUntilStep && a.MaxPendingPrefill <= 0 && len(a.MaxPendingPrefillByClass) == 0 {
			bad(p+".pending_until_step", "changes how max_pending_prefill counts prompts; set max_pending_prefill too (it has no default where max_pending_prompt_tokens is set)")
		}
		if a.Replicas < 1 {
			bad(p+".replicas", "must be at least 1, got %d", a.Replicas)
		}
		if a.QueueSize < 1 {
			bad(p+".queue_size", "must be at least 1, got %d", a.QueueSize)
		}
		checkClassDurations(bad, p+".max_wait", a.MaxWait, "")
	}
	c.validateTenants(bad) // tiers, tenants, limits (tenants.go)
	c.validateBatch(bad)   // batch.go
	return errors.Join(errs...)
}

// headerName reports whether s is an HTTP field name (an RFC 9110 token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// sameBackend is the form of a valid backend URL two spellings of one
// backend share: scheme and host in lower case, no trailing slash
// (http://H:8000/ and HTTP://h:8000 are one backend).
// SameBackend reports whether two backend URLs name one server: they
// differ at most in the host's case and a trailing slash.
func SameBackend(a, b string) bool { return sameBackend(a) == sameBackend(b) }

func sameBackend(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u.String()
}

func checkURL(s string) string {
	if s == "" {
		return "is required"
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("want an http or https URL, got %q", s)
	}
	if u.Host == "" {
		return fmt.Sprintf("missing host in %q", s)
	}
	if u.User != nil {
		// Never echoed whole: the message reaches logs and the admin API.
		// The proxy does not send URL credentials; a backend's key goes in
		// api_key or api_key_env, as a bearer token.
		return fmt.Sprintf("must not carry credentials (user:password@) in %q: set the backend's api_key or api_key_env", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Sprintf("must not carry a query or fragment: %q", s)
	}
	if strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1") {
		// As an OpenAI SDK's base URL is written: every request went to
		// /v1/v1/... and got the server's 404.
		return fmt.Sprintf("ends in /v1 in %q: give the server's base URL (Sluice sends each request's own /v1/... path), e.g. %s://%s", s, u.Scheme, u.Host)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %s is out of range 1-65535 in %q", p, s)
		}
	}
	return ""
}

// validOrigin checks a CORS origin: "*", or scheme://host[:port] with no
// path and at most one "*" standing for any characters.
func validOrigin(o string) error {
	if o == "*" {
		return nil
	}
	if strings.Count(o, "*") > 1 {
		return errors.New("at most one * wildcard")
	}
	u, err := url.Parse(strings.Replace(o, "*", "x", 1))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New(`want an origin as a browser sends it ("https://app.example.com", no path), or "*"`)
	}
	return nil
}

// checkClassDurations checks a map of durations by service class, the map
// at path: every key a class, every duration positive (hint follows the
// message for one that is not).
func checkClassDurations(bad func(field, format string, args ...any), path string, m map[string]Duration, hint string) {
	for _, class := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(ServiceClasses(), class) {
			bad(path+"."+class, "not a service class; want one of %s", strings.Join(ServiceClasses(), ", "))
		} else if d := m[class]; d <= 0 {
			bad(path+"."+class, "must be positive%s, got %s", hint, d.Std())
		}
	}
}
