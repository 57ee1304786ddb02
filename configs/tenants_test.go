package configs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// The demo keys' hashes, as the example configs write them.
const (
	freeHash = "e47e4ba5a43e2315c5dacac8bb11b346f061d4cd69e59ec04cc41ac3971fc825" // sk-demo-free
	proHash  = "4e229d9ab3b9b47cf9e5249ce468d2eb6773ebd4ad2e50776684a44c7208bddb" // sk-demo-pro
)

func TestDemoHashes(t *testing.T) {
	assert.Equal(t, keyHash("sk-demo-free"), freeHash)
	assert.Equal(t, keyHash("sk-demo-pro"), proHash)
}

const tenantModels = `
models:
  - name: llama-3-8b
    aliases: [gpt-4o-mini]
    backends:
      - url: http://127.0.0.1:9001
  - name: embed-small
    backends:
      - url: http://127.0.0.1:9201
`

func tenantsConfig() string {
	return tenantModels + `
tiers:
  - name: free
    requests_per_minute: 60
    requests_burst: 10
    input_tokens_per_minute: 20000
    output_tokens_per_minute: 5000
    concurrent_requests: 4
    tokens_per_day: 200000
    models: [llama-3-8b]
  - name: pro
    requests_per_minute: 600
    output_tokens_per_minute: 60000
    default_max_tokens: 4096
    priority: 1
tenants:
  - name: demo-free
    tier: free
    api_keys: [` + freeHash + `]
  - name: Demo.Pro_2
    tier: pro
    api_keys: ["sha256:` + proHash + `"]
    overrides:
      requests_per_minute: 1200
      tokens_per_day: 0
      output_tokens_burst: 8000
limits:
  redis_url: redis://:secret@127.0.0.1:6379/0
  timeout: 20ms
  fail_open: false
`
}

func TestParseTenantsAppliesDefaults(t *testing.T) {
	c, err := Parse([]byte(tenantsConfig()))
	require.NoError(t, err)
	require.Len(t, c.Tiers, 2)
	free := c.Tiers[0]
	assert.Equal(t, Quota{
		RequestsPerMinute: 60, RequestsBurst: 10,
		InputTokensPerMinute: 20000, InputTokensBurst: 20000,
		OutputTokensPerMinute: 5000, OutputTokensBurst: 5000,
		ConcurrentRequests: 4, TokensPerDay: 200000,
	}, free.Quota)
	assert.EqualValues(t, DefaultMaxTokens, free.DefaultMaxTokens)
	assert.Equal(t, 0, free.Priority)
	pro := c.Tiers[1]
	assert.EqualValues(t, 4096, pro.DefaultMaxTokens)
	assert.Equal(t, 1, pro.Priority)
	assert.Zero(t, pro.InputTokensBurst, "no rate, no burst")

	require.Len(t, c.Tenants, 2)
	assert.Equal(t, []string{freeHash}, c.Tenants[0].KeyHashes())
	assert.Equal(t, []string{proHash}, c.Tenants[1].KeyHashes(), "the sha256: prefix is dropped")
	o := c.Tenants[1].Overrides
	require.NotNil(t, o.RequestsBurst, "an overridden rate brings its burst")
	assert.EqualValues(t, 1200, *o.RequestsBurst)

	l := c.Limits
	assert.Equal(t, "redis://:secret@127.0.0.1:6379/0", l.RedisURL)
	assert.Equal(t, 20*time.Millisecond, l.Timeout.Std())
	assert.False(t, l.FailsOpen())
	assert.Equal(t, DefaultLeaseTTL, l.LeaseTTL.Std())
	assert.Equal(t, "sluice", l.KeyPrefix)
}

func TestLimitsDefaultWithoutTenants(t *testing.T) {
	c, err := Parse([]byte(minimal))
	require.NoError(t, err)
	assert.Empty(t, c.Tiers)
	assert.Empty(t, c.Tenants)
	assert.Equal(t, "", c.Limits.RedisURL)
	assert.Equal(t, 50*time.Millisecond, c.Limits.Timeout.Std())
	assert.True(t, c.Limits.FailsOpen())
	assert.Equal(t, 30*time.Second, c.Limits.LeaseTTL.Std())
	assert.Equal(t, "sluice", c.Limits.KeyPrefix)

	c, err = Parse([]byte(minimal + "tiers:\n  - name: free\n    requests_per_minute: 1\n"))
	require.NoError(t, err, "tiers without tenants are allowed")
	assert.EqualValues(t, 1, c.Tiers[0].RequestsBurst)
}

func TestEffectiveMergesOverrides(t *testing.T) {
	c, err := Parse([]byte(tenantsConfig()))
	require.NoError(t, err)

	free, ok := c.Tier("free")
	require.True(t, ok)
	p := free.Effective(c.Tenants[0].Overrides)
	assert.Equal(t, free.Quota, p.Quota, "no overrides: the tier's values")
	assert.Equal(t, "free", p.Tier)
	assert.True(t, p.Allows("llama-3-8b"))
	assert.False(t, p.Allows("embed-small"))
	p.Models[0] = "changed"
	assert.Equal(t, "llama-3-8b", c.Tiers[0].Models[0], "the plan's models are a copy")

	pro, ok := c.Tier(c.Tenants[1].Tier)
	require.True(t, ok)
	p = pro.Effective(c.Tenants[1].Overrides)
	assert.Equal(t, Quota{
		RequestsPerMinute: 1200, RequestsBurst: 1200, // overridden; burst follows the new rate
		OutputTokensPerMinute: 60000, OutputTokensBurst: 8000, // burst overridden alone
		TokensPerDay: 0, // overridden to unlimited (it was already)
	}, p.Quota)
	assert.EqualValues(t, 4096, p.DefaultMaxTokens)
	assert.Equal(t, 1, p.Priority)
	assert.True(t, p.Allows("embed-small"), "no models: every model")

	_, ok = c.Tier("gold")
	assert.False(t, ok)

	var nilOverrides *Overrides
	assert.Equal(t, free.Quota, nilOverrides.Apply(free.Quota))
	zero := int64(0)
	q := (&Overrides{RequestsPerMinute: &zero, RequestsBurst: &zero}).Apply(free.Quota)
	assert.Zero(t, q.RequestsPerMinute)
	assert.Zero(t, q.RequestsBurst)
	assert.Equal(t, free.ConcurrentRequests, q.ConcurrentRequests)
}

// fieldsOf returns the Field of every *FieldError joined in err.
func fieldsOf(err error) []string {
	var out []string
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			out = append(out, fieldsOf(e)...)
		}
		return out
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		out = append(out, fe.Field)
	}
	return out
}

func TestTenantsReject(t *testing.T) {
	tier := "tiers:\n  - name: free\n    requests_per_minute: 60\n"
	tenant := func(name, tierName, key string) string {
		return "  - name: " + name + "\n    tier: " + tierName + "\n    api_keys: [\"" + key + "\"]\n"
	}
	ok := tenant("a", "free", freeHash)
	tests := []struct {
		name  string
		yaml  string
		field string // the exact path of one *FieldError
		msg   string // a part of the message
	}{
		{"unknown tier", tier + "tenants:\n" + tenant("a", "gold", freeHash), "tenants[0].tier", `unknown tier "gold"`},
		{"tenants without tiers", "tenants:\n" + ok, "tiers", "at least one tier"},
		{"tier missing", tier + "tenants:\n  - name: a\n    api_keys: [" + freeHash + "]\n", "tenants[0].tier", "is required"},
		{"bad hash", tier + "tenants:\n" + tenant("a", "free", "sk-demo-free"), "tenants[0].api_keys[0]", "64 lowercase hex digits"},
		{"upper-case hash", tier + "tenants:\n" + tenant("a", "free", strings.ToUpper(freeHash)), "tenants[0].api_keys[0]", "64 lowercase hex digits"},
		{"short hash", tier + "tenants:\n" + tenant("a", "free", "sha256:"+freeHash[:63]), "tenants[0].api_keys[0]", "got 70 characters"},
		{"no keys", tier + "tenants:\n  - name: a\n    tier: free\n    api_keys: []\n", "tenants[0].api_keys", "at least one"},
		{"duplicate key across tenants", tier + "tenants:\n" + ok + tenant("b", "free", proHash) +
			"  - name: c\n    tier: free\n    api_keys: [" + proHash + ", \"sha256:" + freeHash + "\"]\n",
			"tenants[2].api_keys[1]", `tenants[0].api_keys[0]: tenants "a" and "c" cannot share a key`},
		{"duplicate key in a tenant", tier + "tenants:\n  - name: a\n    tier: free\n    api_keys: [" + freeHash + ", \"sha256:" + freeHash + "\"]\n",
			"tenants[0].api_keys[1]", "the same key as api_keys[0]"},
		{"duplicate tenant", tier + "tenants:\n" + ok + tenant("a", "free", proHash), "tenants[1].name", `"a" is already used by tenants[0]`},
		{"tenant name with a brace", tier + "tenants:\n" + tenant("a{b}", "free", freeHash), "tenants[0].name", "want [A-Za-z0-9._-]+"},
		{"tenant name too long", tier + "tenants:\n" + tenant(strings.Repeat("x", 65), "free", freeHash), "tenants[0].name", "at most 64"},
		{"tier name with upper case", "tiers:\n  - name: Free\n", "tiers[0].name", "want [a-z0-9_-]+"},
		{"duplicate tier", tier + "  - name: free\n", "tiers[1].name", `"free" is already used by tiers[0]`},
		{"burst without rate", "tiers:\n  - name: free\n    input_tokens_burst: 100\n", "tiers[0].input_tokens_burst", "set without input_tokens_per_minute"},
		{"negative rate", "tiers:\n  - name: free\n    concurrent_requests: -1\n", "tiers[0].concurrent_requests", "must not be negative"},
		{"negative default_max_tokens", "tiers:\n  - name: free\n    default_max_tokens: -5\n", "tiers[0].default_max_tokens", "must be positive"},
		{"negative burst", "tiers:\n  - name: free\n    requests_burst: -1\n", "tiers[0].requests_burst", "0 is one minute's worth of the rate"},
		{"default_max_tokens above the output burst", "tiers:\n  - name: free\n    output_tokens_per_minute: 500\n", "tiers[0].default_max_tokens", "above output_tokens_burst (500)"},
		{"model not served", tier + "    models: [llama-3-8b, gpt-5]\n", "tiers[0].models[1]", `"gpt-5" is not one of the config's models`},
		{"an alias for a model", tier + "    models: [gpt-4o-mini]\n", "tiers[0].models[0]", `"gpt-4o-mini" is an alias of model "llama-3-8b": list the model`},
		{"override burst without rate", "tiers:\n  - name: free\n    concurrent_requests: 2\ntenants:\n" + ok + "    overrides:\n      requests_burst: 5\n",
			"tenants[0].overrides.requests_burst", "set without requests_per_minute"},
		{"override zero burst", tier + "tenants:\n" + ok + "    overrides:\n      requests_burst: 0\n",
			"tenants[0].overrides.requests_burst", "must be at least 1"},
		{"override negative", tier + "tenants:\n" + ok + "    overrides:\n      tokens_per_day: -1\n",
			"tenants[0].overrides.tokens_per_day", "must not be negative"},
		{"override burst below default_max_tokens", "tiers:\n  - name: free\n    output_tokens_per_minute: 5000\ntenants:\n" + ok + "    overrides:\n      output_tokens_burst: 100\n",
			"tenants[0].overrides.output_tokens_burst", "below the tier's default_max_tokens (1024)"},
		{"redis_url bad scheme", "limits:\n  redis_url: http://:hunter2@127.0.0.1:6379\n", "limits.redis_url", `got "http://:REDACTED@127.0.0.1:6379"`},
		{"redis_url without host", "limits:\n  redis_url: redis:///0\n", "limits.redis_url", "missing host"},
		{"redis_url bad db", "limits:\n  redis_url: redis://127.0.0.1:6379/zero\n", "limits.redis_url", "database number"},
		{"redis_url unparseable", "limits:\n  redis_url: \"redis://:pw@[::1\"\n", "limits.redis_url", "not a URL"},
		{"limits timeout too long", "limits:\n  timeout: 6s\n", "limits.timeout", "between 1ms and 5s"},
		{"limits timeout negative", "limits:\n  timeout: -1ms\n", "limits.timeout", "between 1ms and 5s"},
		{"lease ttl too short", "limits:\n  lease_ttl: 10ms\n", "limits.lease_ttl", "at least 1s"},
		{"bad key prefix", "limits:\n  key_prefix: \"a b\"\n", "limits.key_prefix", "want [A-Za-z0-9._:-]+"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tenantModels + tt.yaml))
			require.Error(t, err)
			assert.Contains(t, fieldsOf(err), tt.field, err.Error())
			assert.Contains(t, err.Error(), tt.field+": ")
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestTenantsErrorsNeverEchoSecrets(t *testing.T) {
	_, err := Parse([]byte(tenantModels + `
tiers: [{name: free}]
tenants: [{name: a, tier: free, api_keys: [sk-live-verysecret]}]
limits: {redis_url: "ftp://:hunter2@host"}
`))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "verysecret")
	assert.NotContains(t, err.Error(), "hunter2")
	_, err = Parse([]byte(tenantModels + "limits: {redis_url: \"redis://:hunter2@[::1\"}\n"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
}

func TestTenantsReportEveryProblem(t *testing.T) {
	_, err := Parse([]byte(tenantModels + `
tiers:
  - name: free
    requests_burst: 3
    models: [nope]
tenants:
  - name: "{x}"
    tier: gold
    api_keys: [abc]
limits:
  redis_url: "mysql://db"
`))
	require.Error(t, err)
	assert.ElementsMatch(t, []string{
		"tiers[0].requests_burst", "tiers[0].models[0]", "tenants[0].name",
		"tenants[0].tier", "tenants[0].api_keys[0]", "limits.redis_url",
	}, fieldsOf(err))
}

func TestTenantsDecodeStrictly(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown field under a tenant", "tiers: [{name: free}]\ntenants:\n  - name: a\n    tier: free\n    api_keys: [" + freeHash + "]\n    apikey: x\n",
			"(tenants[0].apikey): field apikey not found"},
		{"unknown field under overrides", "tiers: [{name: free}]\ntenants:\n  - name: a\n    tier: free\n    api_keys: [" + freeHash + "]\n    overrides:\n      priority: 3\n",
			"(tenants[0].overrides.priority): field priority not found"},
		{"unknown field under a tier", "tiers:\n  - name: free\n    rpm: 3\n", "(tiers[0].rpm): field rpm not found"},
		{"unknown field under limits", "limits:\n  redis: redis://x\n", "(limits.redis): field redis not found"},
		{"a rate that is not a number", "tiers:\n  - name: free\n    requests_per_minute: lots\n", "tiers[0].requests_per_minute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tenantModels + tt.yaml))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoadTenantsExample(t *testing.T) {
	c, err := Load("examples/tenants.yaml")
	require.NoError(t, err)
	names := map[string]string{}
	for _, tn := range c.Tenants {
		names[tn.Name] = tn.Tier
	}
	assert.Equal(t, map[string]string{"demo-free": "free", "demo-pro": "pro", "demo-enterprise": "enterprise"}, names)
	for key, tenant := range map[string]int{"sk-demo-free": 0, "sk-demo-pro": 1, "sk-demo-enterprise": 2} {
		assert.Contains(t, c.Tenants[tenant].KeyHashes(), keyHash(key), "the example's hash of %s", key)
	}
	free, ok := c.Tier("free")
	require.True(t, ok)
	assert.EqualValues(t, 60, free.RequestsPerMinute)
	assert.EqualValues(t, 4, free.ConcurrentRequests)
	assert.NotZero(t, free.TokensPerDay)
	ent, ok := c.Tier("enterprise")
	require.True(t, ok)
	assert.Zero(t, ent.TokensPerDay)
	assert.Equal(t, 2, ent.Priority)
}

func TestDemoConfigHasTheDemoTenants(t *testing.T) {
	c, err := Load("demo.yaml")
	require.NoError(t, err)
	ex, err := Load("examples/tenants.yaml")
	require.NoError(t, err)
	require.Len(t, c.Tiers, len(ex.Tiers))
	for i, want := range ex.Tiers {
		got := c.Tiers[i]
		assert.Equal(t, want.Quota, got.Quota, want.Name)
		assert.Equal(t, want.DefaultMaxTokens, got.DefaultMaxTokens, want.Name)
		assert.Equal(t, want.Priority, got.Priority, want.Name)
		assert.ElementsMatch(t, want.Models, got.Models, want.Name)
	}
	assert.Equal(t, ex.Tenants[0], c.Tenants[0])
	require.Len(t, c.Tenants, 3)
	for i := range c.Tenants {
		assert.Equal(t, ex.Tenants[i].Name, c.Tenants[i].Name)
		assert.Equal(t, ex.Tenants[i].KeyHashes(), c.Tenants[i].KeyHashes())
	}
}

// What the admin API's config and error messages show of a Redis URL:
// no password, in the user info or in a Sentinel URL's query.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:s3cret@10.0.0.1:6379/0":                               "redis://:REDACTED@10.0.0.1:6379/0",
		"redis://app:s3cret@10.0.0.1:6379":                              "redis://app:REDACTED@10.0.0.1:6379",
		"redis://10.0.0.1:26379/0?master_name=m&password=s3cret":        "redis://10.0.0.1:26379/0?master_name=m&password=REDACTED",
		"redis://10.0.0.1:26379?sentinel_password=s3cret&master_name=m": "redis://10.0.0.1:26379?master_name=m&sentinel_password=REDACTED",
		"redis://10.0.0.1:6379/0?db=1":                                  "redis://10.0.0.1:6379/0?db=1",
		"redis://:s3cret@%zz":                                           "(not a URL)",
	} {
		got := RedactURL(in)
		assert.Equal(t, want, got, in)
		assert.NotContains(t, got, "s3cret")
	}
	assert.NotContains(t, CheckRedisURL("http://:s3cret@h/?password=s3cret"), "s3cret")
}
