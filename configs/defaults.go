package configs

import (
	"slices"
	"time"
)

// Defaults for fields left empty. Each field's doc comment repeats its default.
const (
	DefaultListen                = "127.0.0.1:8080"
	DefaultMaxBodyBytes          = 10 << 20
	DefaultPolicy                = "scored"
	DefaultDialTimeout           = 2 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultMaxIdleConnsPerHost   = 256
	DefaultRetries               = 1
	DefaultWeight                = 1
	DefaultSessionHeader         = "X-Session-Id"
	DefaultScrapeInterval        = 100 * time.Millisecond
	DefaultScrapePath            = "/metrics"
	DefaultAdmissionQueueSize    = 10_000 // as admission.DefaultQueueSize
	// DefaultMaxPendingPrefill is admission.max_pending_prefill's default
	// where no max_pending_prompt_tokens is set, as
	// admission.DefaultMaxPendingPrefill.
	DefaultMaxPendingPrefill = 500 * time.Millisecond
	// DefaultMaxDetourBelowShare is admission.max_detour_below_share's
	// default, as admission.DefaultBelowShareDetour.
	DefaultMaxDetourBelowShare = 250 * time.Millisecond
	// DefaultMaxPendingPrefillAboveShare is
	// admission.max_pending_prefill_above_share's default, as
	// admission.DefaultAboveSharePrefill.
	DefaultMaxPendingPrefillAboveShare = 10 * time.Millisecond
	// DefaultMaxPendingPrefillWorseClass is
	// admission.max_pending_prefill_worse_class's default, as
	// admission.DefaultWorseClassPrefill.
	DefaultMaxPendingPrefillWorseClass = 10 * time.Millisecond
	// DefaultBatchPrefill is admission.batch_prefill's default, as
	// admission.DefaultBatchPrefill.
	DefaultBatchPrefill = 50 * time.Millisecond
	// DefaultBatchReserve is admission.batch_reserve's default.
	DefaultBatchReserve = 0.125
	// MinScrapeInterval is the shortest scrape interval allowed.
	MinScrapeInterval = 10 * time.Millisecond
	DefaultMaxTokens  = 1024
	// DefaultLimitTimeout bounds each call to the limit store's Redis;
	// MinLimitTimeout and MaxLimitTimeout bound the setting.
	DefaultLimitTimeout = 50 * time.Millisecond
	MinLimitTimeout     = time.Millisecond
	MaxLimitTimeout     = 5 * time.Second
	// DefaultLeaseTTL is how long an unreleased concurrency slot counts
	// past its last renewal; MinLeaseTTL is the shortest allowed.
	DefaultLeaseTTL  = 30 * time.Second
	MinLeaseTTL      = time.Second
	DefaultKeyPrefix = "sluice"
)

// DefaultScrapeTimeout is the scrape timeout for an interval: 80% of it.
func DefaultScrapeTimeout(interval time.Duration) time.Duration { return interval * 4 / 5 }

// ApplyDefaults fills every empty field with its documented default. It is the
// one place defaults are set; applyTenantDefaults, which it calls, holds the
// part for tiers, tenants and the limit store.
func (c *Config) ApplyDefaults() {
	if c.CORS.MaxAge == 0 {
		c.CORS.MaxAge = Duration(10 * time.Minute)
	}
	if c.Admin.Listen == "" {
		c.Admin.Listen = "127.0.0.1:8081"
	}
	if c.Admin.TokenEnv == "" {
		c.Admin.TokenEnv = "SLUICE_ADMIN_TOKEN"
	}
	for i := range c.Models {
		a := &c.Models[i].Admission
		if a.QueueSize == 0 {
			a.QueueSize = DefaultAdmissionQueueSize
		}
		if a.Replicas == 0 {
			a.Replicas = 1
		}
		if a.KVMax == 0 {
			a.KVMax = 0.95
		}
		if a.MaxPendingPrefill == 0 && !c.Models[i].SetsPromptTokens() {
			a.MaxPendingPrefill = Duration(DefaultMaxPendingPrefill)
		}
		if a.MaxDetourBelowShare == 0 {
			a.MaxDetourBelowShare = Duration(DefaultMaxDetourBelowShare)
		}
		if a.MaxPendingPrefillAboveShare == 0 {
			a.MaxPendingPrefillAboveShare = Duration(DefaultMaxPendingPrefillAboveShare)
		}
		if a.MaxPendingPrefillWorseClass == 0 {
			a.MaxPendingPrefillWorseClass = Duration(DefaultMaxPendingPrefillWorseClass)
		}
		if a.BatchPrefill == 0 {
			a.BatchPrefill = Duration(DefaultBatchPrefill)
		}
		if a.BatchReserve == 0 {
			a.BatchReserve = DefaultBatchReserve
		}
		if a.MaxWait == nil {
			a.MaxWait = map[string]Duration{}
		}
		for _, class := range ServiceClasses() {
			if _, set := a.MaxWait[class]; !set {
				a.MaxWait[class] = Duration(DefaultMaxWait(class))
			}
		}
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MetricsTokenEnv == "" {
		c.MetricsTokenEnv = "SLUICE_METRICS_TOKEN"
	}
	if c.MaxBodyBytesInFlight == 0 {
		c.MaxBodyBytesInFlight = max(256<<20, 4*c.MaxBodyBytes)
	}
	if c.StoredResponsesTTL == 0 {
		c.StoredResponsesTTL = Duration(24 * time.Hour)
	}
	if c.BodyReadTimeout == 0 {
		c.BodyReadTimeout = Duration(30 * time.Second)
	}
	u := &c.Upstream
	if u.DialTimeout == 0 {
		u.DialTimeout = Duration(DefaultDialTimeout)
	}
	if u.ResponseHeaderTimeout == 0 {
		u.ResponseHeaderTimeout = Duration(DefaultResponseHeaderTimeout)
	}
	if u.MaxIdleConnsPerHost == 0 {
		u.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if u.Retries == nil {
		r := DefaultRetries
		u.Retries = &r
	}
	if u.StreamIdleTimeout == 0 {
		u.StreamIdleTimeout = Duration(60 * time.Second)
	}
	b := &u.Breaker
	if b.ConsecutiveFailures == 0 {
		b.ConsecutiveFailures = 5
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = 0.5
	}
	if b.MinRequests == 0 {
		b.MinRequests = 20
	}
	if b.Window == 0 {
		b.Window = Duration(10 * time.Second)
	}
	if b.OpenFor == 0 {
		b.OpenFor = Duration(5 * time.Second)
	}
	if b.Probes == 0 {
		b.Probes = 1
	}
	if c.SessionHeader == "" {
		c.SessionHeader = DefaultSessionHeader
	}
	sc := &c.Scrape
	if sc.Enabled == nil {
		on := true
		sc.Enabled = &on
	}
	if sc.Interval == 0 {
		sc.Interval = Duration(DefaultScrapeInterval)
	}
	if sc.Timeout == 0 {
		sc.Timeout = Duration(DefaultScrapeTimeout(sc.Interval.Std()))
	}
	if sc.Path == "" {
		sc.Path = DefaultScrapePath
	}
	for i := range c.Models {
		m := &c.Models[i]
		if m.Policy == "" {
			m.Policy = DefaultPolicy
		}
		for j := range m.Backends {
			if m.Backends[j].Weight == 0 {
				m.Backends[j].Weight = DefaultWeight
			}
		}
	}
	c.applyTenantDefaults() // tiers, tenants' overrides, limits (tenants.go)
	c.Batch.applyDefaults() // batch.go
}

// DefaultMaxWait is how long a request of class may wait for admission by
// default: priority 5s (an interactive user would rather be told), default
// 30s, flex 10m (throughput work that does not mind waiting), as
// admission.DefaultMaxWait.
func DefaultMaxWait(class string) time.Duration {
	switch class {
	case "priority":
		return 5 * time.Second
	case "flex":
		return 10 * time.Minute
	}
	return 30 * time.Second
}

// SetsPromptTokens reports whether the model, or one of its backends, sets
// max_pending_prompt_tokens: its backends are then bound by those, and
// max_pending_prefill has no default. Both together measured worse than
// either alone (docs/benchmarks.md).
func (m Model) SetsPromptTokens() bool {
	return m.Admission.MaxPendingPromptTokens > 0 ||
		slices.ContainsFunc(m.Backends, func(b Backend) bool { return b.MaxPendingPromptTokens > 0 })
}
