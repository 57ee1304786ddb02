package configs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const minimal = `
models:
  - name: llama-3-8b
    backends:
      - url: http://127.0.0.1:9001
`

func TestParseAppliesDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	require.NoError(t, err)
	assert.Equal(t, DefaultListen, c.Listen)
	assert.EqualValues(t, DefaultMaxBodyBytes, c.MaxBodyBytes)
	assert.Equal(t, DefaultPolicy, c.Models[0].Policy)
	assert.Equal(t, 1, c.Models[0].Backends[0].Weight)
	assert.Equal(t, DefaultDialTimeout, c.Upstream.DialTimeout.Std())
	assert.Equal(t, DefaultResponseHeaderTimeout, c.Upstream.ResponseHeaderTimeout.Std())
	assert.Equal(t, DefaultMaxIdleConnsPerHost, c.Upstream.MaxIdleConnsPerHost)
	require.NotNil(t, c.Upstream.Retries)
	assert.Equal(t, DefaultRetries, *c.Upstream.Retries)
	assert.Equal(t, "X-Session-Id", c.SessionHeader)
	assert.True(t, c.Scrape.On())
	assert.Equal(t, 100*time.Millisecond, c.Scrape.Interval.Std())
	assert.Equal(t, 80*time.Millisecond, c.Scrape.Timeout.Std())
	assert.Equal(t, "/metrics", c.Scrape.Path)
	assert.Equal(t, DefaultBatchReserve, c.Models[0].Admission.BatchReserve)
	assert.Equal(t, DefaultAdmissionQueueSize, c.Models[0].Admission.QueueSize)
	assert.Equal(t, DefaultMaxPendingPrefill, c.Models[0].Admission.MaxPendingPrefill.Std())
}

// max_pending_prefill's default holds only where no max_pending_prompt_tokens
// bounds the backends (the model's or a backend's own); an explicit value
// stays, and a negative one (off) is valid.
func TestMaxPendingPrefillDefault(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		want        time.Duration
	}{
		{"defaulted", "admission: {max_in_flight_per_backend: 8}\n    backends:\n      - url: http://a:1\n", DefaultMaxPendingPrefill},
		{"model's step budget", "admission: {max_pending_prompt_tokens: 8192}\n    backends:\n      - url: http://a:1\n", 0},
		{"a backend's step budget", "backends:\n      - url: http://a:1\n      - {url: http://b:1, max_pending_prompt_tokens: 2048}\n", 0},
		{"explicit", "admission: {max_pending_prefill: 35ms}\n    backends:\n      - url: http://a:1\n", 35 * time.Millisecond},
		{"explicit beside a step budget", "admission: {max_pending_prefill: 35ms, max_pending_prompt_tokens: 8192}\n    backends:\n      - url: http://a:1\n", 35 * time.Millisecond},
		{"off", "admission: {max_pending_prefill: -1s}\n    backends:\n      - url: http://a:1\n", -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("models:\n  - name: m\n    " + tc.model))
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.Models[0].Admission.MaxPendingPrefill.Std())
		})
	}
}

func TestMaxDetourBelowShareDefault(t *testing.T) {
	for model, want := range map[string]time.Duration{
		"backends:\n      - url: http://a:1\n":                                               DefaultMaxDetourBelowShare,
		"admission: {max_detour_below_share: 1s}\n    backends:\n      - url: http://a:1\n":  time.Second,
		"admission: {max_detour_below_share: -1s}\n    backends:\n      - url: http://a:1\n": -time.Second,
	} {
		c, err := Parse([]byte("models:\n  - name: m\n    " + model))
		require.NoError(t, err)
		assert.Equal(t, want, c.Models[0].Admission.MaxDetourBelowShare.Std(), model)
	}
}

func TestMaxPendingPrefillAboveShareDefault(t *testing.T) {
	for model, want := range map[string]time.Duration{
		"backends:\n      - url: http://a:1\n":                                                         DefaultMaxPendingPrefillAboveShare,
		"admission: {max_pending_prefill_above_share: 20ms}\n    backends:\n      - url: http://a:1\n": 20 * time.Millisecond,
		"admission: {max_pending_prefill_above_share: -1s}\n    backends:\n      - url: http://a:1\n":  -time.Second,
	} {
		c, err := Parse([]byte("models:\n  - name: m\n    " + model))
		require.NoError(t, err)
		assert.Equal(t, want, c.Models[0].Admission.MaxPendingPrefillAboveShare.Std(), model)
	}
}

func TestMaxPendingPrefillWorseClassDefault(t *testing.T) {
	for model, want := range map[string]time.Duration{
		"backends:\n      - url: http://a:1\n":                                                         DefaultMaxPendingPrefillWorseClass,
		"admission: {max_pending_prefill_worse_class: 20ms}\n    backends:\n      - url: http://a:1\n": 20 * time.Millisecond,
		"admission: {max_pending_prefill_worse_class: -1s}\n    backends:\n      - url: http://a:1\n":  -time.Second,
	} {
		c, err := Parse([]byte("models:\n  - name: m\n    " + model))
		require.NoError(t, err)
		assert.Equal(t, want, c.Models[0].Admission.MaxPendingPrefillWorseClass.Std(), model)
	}
}

func TestMaxDetourBetterClassIsOffByDefault(t *testing.T) {
	for model, want := range map[string]time.Duration{
		"backends:\n      - url: http://a:1\n":                                                  0,
		"admission: {max_detour_better_class: 100ms}\n    backends:\n      - url: http://a:1\n": 100 * time.Millisecond,
	} {
		c, err := Parse([]byte("models:\n  - name: m\n    " + model))
		require.NoError(t, err)
		assert.Equal(t, want, c.Models[0].Admission.MaxDetourBetterClass.Std(), model)
	}
}

func TestScrapeTimeoutFollowsTheInterval(t *testing.T) {
	c, err := Parse([]byte("scrape:\n  interval: 1s\n  enabled: false\n" + minimal))
	require.NoError(t, err)
	assert.False(t, c.Scrape.On())
	assert.Equal(t, 800*time.Millisecond, c.Scrape.Timeout.Std())
}

func TestParseKeepsExplicitValues(t *testing.T) {
	c, err := Parse([]byte(`
listen: 0.0.0.0:9000
max_body_bytes: 1024
upstream:
  dial_timeout: 250ms
  retries: 0
models:
  - name: m
    policy: round_robin
    backends:
      - url: http://a:1
        weight: 3
`))
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:9000", c.Listen)
	assert.EqualValues(t, 1024, c.MaxBodyBytes)
	assert.Equal(t, 250*time.Millisecond, c.Upstream.DialTimeout.Std())
	assert.Equal(t, 0, *c.Upstream.Retries)
	assert.Equal(t, "round_robin", c.Models[0].Policy)
	assert.Equal(t, 3, c.Models[0].Backends[0].Weight)
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string
		fields []string // every field path the error must name
	}{
		{"empty", ``, []string{"config is empty"}},
		{"unknown top-level field", "listen: a:1\nmodel: x\n" + minimal, []string{"field model not found"}},
		{"unknown backend field", "models:\n  - name: m\n    backends:\n      - url: http://a:1\n        urls: x\n", []string{"field urls not found"}},
		{"wrong type", "max_body_bytes: lots\n" + minimal, []string{"max_body_bytes", "lots"}},
		{"bad duration", "upstream:\n  dial_timeout: soon\n" + minimal, []string{"soon"}},
		// The decoder truncated these silently: 0.5 requests a minute was no limit.
		{"a fraction for an integer", "max_body_bytes: 1.5\n" + minimal, []string{"line 1 (max_body_bytes): must be a whole number, got 1.5"}},
		{"a fraction for a backend's weight", "models:\n  - name: m\n    backends:\n      - url: http://a:1\n        weight: 2.7\n", []string{"models[0].backends[0].weight", "2.7"}},
		{"a fraction for a tier's limit", "tiers:\n  - name: free\n    requests_per_minute: 0.5\n" + minimal, []string{"tiers[0].requests_per_minute", "0.5"}},
		{"a fraction in a map of integers", "batch:\n  queued_tokens: {free: 1.5}\n" + minimal, []string{"batch.queued_tokens.free", "1.5"}},
		{"no models", "listen: 127.0.0.1:1\n", []string{"models: at least one model"}},
		{"bad listen", "listen: nowhere\n" + minimal, []string{"listen: want host:port"}},
		{"a certificate without its key", "tls:\n  cert_file: /c.pem\n" + minimal, []string{`tls.key_file: must be set with cert_file ("/c.pem")`}},
		{"a key without its certificate", "admin:\n  tls:\n    key_file: /k.pem\n" + minimal, []string{`admin.tls.cert_file: must be set with key_file ("/k.pem")`}},
		{"an unknown TLS field", "upstream:\n  tls:\n    ca: /ca.pem\n" + minimal, []string{"field ca not found"}},
		{"negative body", "max_body_bytes: -1\n" + minimal, []string{"max_body_bytes: must be positive"}},
		{"bodies in flight below one body", "max_body_bytes: 2048\nmax_body_bytes_in_flight: 1024\n" + minimal, []string{"max_body_bytes_in_flight: must be at least max_body_bytes (2048), got 1024"}},
		{"negative body read timeout", "body_read_timeout: -1s\n" + minimal, []string{"body_read_timeout: must be positive"}},
		{"negative stored responses ttl", "stored_responses_ttl: -1h\n" + minimal, []string{"stored_responses_ttl: must be positive"}},
		{"retries out of range", "upstream:\n  retries: 11\n" + minimal, []string{"upstream.retries"}},
		{"scrape too often", "scrape:\n  interval: 1ms\n" + minimal, []string{"scrape.interval: must be at least 10ms"}},
		{"scrape timeout not below interval", "scrape:\n  interval: 50ms\n  timeout: 50ms\n" + minimal, []string{"scrape.timeout: must be positive and below"}},
		{"negative scrape timeout", "scrape:\n  timeout: -1s\n" + minimal, []string{"scrape.timeout"}},
		{"relative scrape path", "scrape:\n  path: metrics\n" + minimal, []string{"scrape.path: want an absolute path"}},
		{"unknown scrape field", "scrape:\n  every: 1s\n" + minimal, []string{"field every not found"}},
		{"batch reserve the whole budget", "models:\n  - name: m\n    admission:\n      batch_reserve: 1\n    backends:\n      - url: http://a:1\n", []string{"models[0].admission.batch_reserve: must be below 1"}},
		{"bad CORS origins", "cors:\n  allowed_origins: [\"app.example.com\", \"https://a.example.com/path\", \"https://*.*.example.com\", \"https://*.example.com\"]\n  max_age: -1s\n" + minimal,
			[]string{"cors.allowed_origins[0]: want an origin", "cors.allowed_origins[1]: want an origin", "cors.allowed_origins[2]: at most one * wildcard", "cors.max_age: must be positive"}},
		{"bad session header", "session_header: \"X Session\"\n" + minimal, []string{"session_header: want an HTTP header name"}},
		{"negative model timeouts", "models:\n  - name: m\n    timeouts: {first_byte: -1s, total: -2s}\n    backends:\n      - url: http://a:1\n",
			[]string{"models[0].timeouts.first_byte: must not be negative", "models[0].timeouts.total: must not be negative"}},
		{"negative admission bounds", "models:\n  - name: m\n    admission: {max_pending_prompt_tokens: -1, max_pending_prefill_below_share: -1s, max_detour_better_class: -1s}\n    backends:\n      - url: http://a:1\n",
			[]string{"models[0].admission.max_pending_prompt_tokens: must not be negative", "models[0].admission.max_pending_prefill_below_share: must not be negative", "models[0].admission.max_detour_better_class: must not be negative"}},
		{"negative backend pending prompt tokens", "models:\n  - name: m\n    backends:\n      - {url: http://a:1, max_in_flight: 4, max_pending_prompt_tokens: -2048}\n",
			[]string{"models[0].backends[0].max_pending_prompt_tokens: must not be negative"}},
		{"below share with redis", "limits:\n  redis_url: redis://127.0.0.1:6379/0\nmodels:\n  - name: m\n    admission: {max_pending_prefill_below_share: 70ms}\n    backends:\n      - url: http://a:1\n",
			[]string{"models[0].admission.max_pending_prefill_below_share: is for one replica"}},
		{"pending prefill by class", "models:\n  - name: m\n    admission: {max_pending_prefill_by_class: {priority: 0s, urgent: 1s}}\n    backends:\n      - url: http://a:1\n",
			[]string{"models[0].admission.max_pending_prefill_by_class.priority: must be positive", "models[0].admission.max_pending_prefill_by_class.urgent: not a service class"}},
		{"pending_until_step alone", "models:\n  - name: m\n    admission: {pending_until_step: true, max_pending_prefill: -1s}\n    backends:\n      - url: http://a:1\n",
			[]string{"models[0].admission.pending_until_step: changes how max_pending_prefill counts prompts"}},
		{"many problems at once", `
models:
  - backends: []
  - name: a
    backends:
      - url: ftp://x
      - url: http://b:1
        weight: -2
      - url: http://b:1
  - name: a
    backends:
      - url: ""
`, []string{
			"models[0].name: is required",
			"models[0].backends: at least one backend",
			"models[1].backends[0].url: want an http or https URL",
			"models[1].backends[1].weight: must be positive",
			"models[1].backends[2].url: \"http://b:1\" is already listed as backends[1]",
			"models[2].name: \"a\" is already used by models[1]",
			"models[2].backends[0].url: is required",
		}},
		{"aliases that clash", "models:\n  - name: a\n    aliases: [b, x, \"\"]\n    backends:\n      - url: http://a:1\n  - name: b\n    aliases: [x, a]\n    backends:\n      - url: http://a:1\n",
			[]string{`models[0].aliases[0]: "b" is already used by models[1]`, "models[0].aliases[2]: must not be empty",
				`models[1].aliases[0]: "x" is already used by models[0].aliases[1]`, `models[1].aliases[1]: "a" is already used by models[0]`}},
		{"a backend's model name with spaces", "models:\n  - name: m\n    backends:\n      - {url: http://a:1, served_model: \" meta-llama/x\"}\n",
			[]string{`models[0].backends[0].served_model: must not begin or end with spaces, got " meta-llama/x"`}},
		{"url with query", "models:\n  - name: m\n    backends:\n      - url: http://a:1/?x=1\n", []string{"models[0].backends[0].url: must not carry a query"}},
		{"port out of range", "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:99999\n", []string{"models[0].backends[0].url: port 99999 is out of range 1-65535"}},
		{"two documents", minimal + "---\n" + minimal, []string{"more than one YAML document"}},
		{"one backend spelled twice", "models:\n  - name: m\n    backends:\n      - url: http://a:1\n      - url: HTTP://A:1/\n",
			[]string{`models[0].backends[1].url: "HTTP://A:1/" is already listed as backends[0]`}},
		{"every breaker problem, each by its field", "upstream:\n  breaker: {failure_ratio: 1.5, consecutive_failures: -1, probes: -2, open_for: -1s}\n" + minimal,
			[]string{"upstream.breaker.failure_ratio", "upstream.breaker.consecutive_failures: must be at least 1, got -1", "upstream.breaker.probes", "upstream.breaker.open_for"}},
		{"an unknown key in flow style is named itself", "upstream: {retriess: 1, dial_timeout: 1s}\n" + minimal, []string{"line 1 (upstream.retriess): field retriess not found"}},
		{"an SDK's base url", "models:\n  - name: m\n    backends:\n      - url: http://a:1/v1/\n",
			[]string{`models[0].backends[0].url: ends in /v1 in "http://a:1/v1/": give the server's base URL`, "e.g. http://a:1"}},
		{"one address for both listeners", "listen: 127.0.0.1:8080\nadmin:\n  listen: 127.0.0.1:8080\n" + minimal,
			[]string{`admin.listen: must differ from listen ("127.0.0.1:8080")`}},
		{"credentials in a url", "models:\n  - name: m\n    backends:\n      - url: http://u:secret@a:1\n",
			[]string{`models[0].backends[0].url: must not carry credentials (user:password@) in "http://u:xxxxx@a:1": set the backend's api_key`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			require.Error(t, err)
			for _, f := range tt.fields {
				assert.Contains(t, err.Error(), f)
			}
		})
	}
}

func TestURLCredentialsAreNeverEchoed(t *testing.T) {
	_, err := Parse([]byte("models:\n  - name: m\n    backends:\n      - url: http://u:s3cret@a:1\n"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret")
}

func TestValidateReturnsFieldErrors(t *testing.T) {
	_, err := Parse([]byte("models:\n  - name: m\n    backends: []\n"))
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "models[0].backends", fe.Field)
}

func TestLoadExampleConfigs(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files, "configs/ ships example files")
	for _, f := range files {
		_, err := Load(f)
		assert.NoError(t, err, f)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(p, []byte("listen: x\n"), 0o600))
	_, err := Load(p)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), p+": "), err.Error())
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("models: [{name: a, backends: [{url: 'http://x:1'}]}]"))
	f.Add([]byte("upstream: {retries: -1}"))
	f.Add([]byte("models: [{name: a, backends: [{url: 'http://x:1'}]}]\ntiers: [{name: t, requests_per_minute: 5}]\n" +
		"tenants: [{name: n, tier: t, api_keys: ['sha256:" + freeHash + "'], overrides: {requests_burst: 2}}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil && (len(c.Models) == 0 || c.Upstream.Retries == nil) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
		if err != nil {
			return
		}
		for _, tn := range c.Tenants {
			tier, ok := c.Tier(tn.Tier)
			if !ok || len(tn.APIKeys) == 0 {
				t.Fatalf("accepted a tenant without a tier or keys: %+v", tn)
			}
			if q := tier.Effective(tn.Overrides).Quota; q.RequestsPerMinute > 0 && q.RequestsBurst < 1 {
				t.Fatalf("accepted a rate without a burst: %+v", q)
			}
		}
	})
}
