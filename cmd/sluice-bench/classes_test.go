package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/policies/admission"
)

// The same keys as a policy's report: the load report's and goodput.
var reportKeys = []string{"completed", "failed", "request_throughput", "output_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "goodput"}

func TestSimulateAdmissionSplitsByClassAndTenant(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sim.json")
	code, stdout, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b,1xl4-llama3-8b", "--synthetic",
		"--requests", "1500", "--load", "1.4", "--policy", "default", "--oracle", "--admission",
		"--mix", "priority=0.3,flex=0.7", "--tenants", "heavy=10,light=1", "--max-wait", "flex=2s", "--budget", "l4-llama3-8b=4",
		"--table", "compact", "--json", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "admission (policy rows): budget of requests in flight h100-llama3-8b ")
	assert.Contains(t, stderr, "l4-llama3-8b 4; max wait priority 5s, default 30s, flex 2s")
	assert.Contains(t, stderr, "room needs prompts pending under 500ms of prefill", "the room rules are named")
	assert.Contains(t, stderr, "classes: priority ")
	assert.Contains(t, stderr, "tenants: ")

	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2+2*(1+2+2), stdout)
	assert.True(t, strings.HasSuffix(strings.TrimSpace(lines[1]), "shed"), lines[1])
	for i, want := range []string{"scored", "class priority", "class flex", "tenant heavy", "tenant light", "oracle"} {
		assert.True(t, strings.HasPrefix(strings.TrimSpace(lines[2+i]), want), "line %d: %s", 2+i, lines[2+i])
	}

	results := readJSON(t, out)["results"].([]any)
	require.Len(t, results, 2)
	adm, oracle := results[0].(map[string]any), results[1].(map[string]any)
	for _, row := range []map[string]any{adm, oracle} {
		classes := row["classes"].(map[string]any)
		require.Len(t, classes, 2)
		tenants := row["tenants"].(map[string]any)
		require.Len(t, tenants, 2)
		total := 0.0
		for _, part := range []map[string]any{classes["priority"].(map[string]any), classes["flex"].(map[string]any)} {
			for _, k := range reportKeys {
				assert.Contains(t, part, k)
			}
			total += part["completed"].(float64) + part["failed"].(float64)
		}
		assert.EqualValues(t, 1500, total, "the classes split the requests")
		assert.Positive(t, classes["priority"].(map[string]any)["itl_ms"].(map[string]any)["p50"])
		heavy, light := tenants["heavy"].(map[string]any), tenants["light"].(map[string]any)
		assert.Greater(t, heavy["completed"].(float64), 5*light["completed"].(float64))
	}
	shed := adm["shed"].(map[string]any)
	assert.EqualValues(t, 0, shed["priority"])
	assert.Positive(t, shed["flex"])
	assert.NotContains(t, oracle, "shed", "the oracle row runs without admission")
	groups := adm["groups"].([]any)
	assert.EqualValues(t, 4, groups[1].(map[string]any)["budget"])
	assert.LessOrEqual(t, groups[1].(map[string]any)["peak_in_flight"], 4.0)
}

// Two tenants sending equal tokens at overload: the one weighted 4 waits
// less, since it is served 4 tokens to the other's 1 while both wait.
func TestSimulateTenantWeights(t *testing.T) {
	p50 := func(extra ...string) (a, b float64) {
		out := filepath.Join(t.TempDir(), "sim.json")
		args := append([]string{"simulate", "--fleet", "2xh100-llama3-8b", "--synthetic", "--requests", "1500",
			"--load", "1.5", "--policy", "default", "--admission", "--tenants", "a=1,b=1", "--json", out}, extra...)
		code, _, stderr := runCLI(t, args...)
		require.Equal(t, exitOK, code, stderr)
		tenants := readJSON(t, out)["results"].([]any)[0].(map[string]any)["tenants"].(map[string]any)
		ttft := func(n string) float64 {
			return tenants[n].(map[string]any)["ttft_ms"].(map[string]any)["p50"].(float64)
		}
		return ttft("a"), ttft("b")
	}
	a, b := p50()
	wa, wb := p50("--tenant-weights", "b=4")
	assert.Less(t, wb, b, "b weighted 4 waits less than at weight 1")
	assert.Greater(t, wa, a, "and a more")
	assert.Less(t, wb, wa/2)
}

// --only-tenant runs one tenant's requests as they were drawn beside the
// others: the same count, at a fraction of the offered load.
func TestSimulateOnlyTenant(t *testing.T) {
	run := func(extra ...string) map[string]any {
		out := filepath.Join(t.TempDir(), "sim.json")
		args := append([]string{"simulate", "--fleet", "2xh100-llama3-8b", "--synthetic", "--requests", "1000",
			"--load", "1.2", "--policy", "default", "--admission", "--tenants", "heavy=10,light=1", "--json", out}, extra...)
		code, _, stderr := runCLI(t, args...)
		require.Equal(t, exitOK, code, stderr)
		return readJSON(t, out)
	}
	both, alone := run(), run("--only-tenant", "light")
	tenants := func(j map[string]any) map[string]any {
		return j["results"].([]any)[0].(map[string]any)["tenants"].(map[string]any)
	}
	light := tenants(both)["light"].(map[string]any)["completed"].(float64)
	require.Positive(t, light)
	assert.Equal(t, light, alone["requests"].(float64))
	assert.Equal(t, light, tenants(alone)["light"].(map[string]any)["completed"].(float64))
	if heavy, ok := tenants(alone)["heavy"].(map[string]any); ok {
		assert.Zero(t, heavy["completed"].(float64)+heavy["failed"].(float64))
	}
	assert.Less(t, alone["offered_load"].(float64), both["offered_load"].(float64)/5)
}

func TestSimulateAdmissionFullTable(t *testing.T) {
	code, stdout, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b", "--synthetic", "--requests", "300",
		"--admission", "--policy", "round_robin")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `\n\n\s+class\s+ok\s+failed\s+shed\s`, stdout)
	assert.Regexp(t, `(?m)^\s+default\s+300\s+0\s+0\s`, stdout, "all default without --mix")
}

func TestSimulateClassFlagErrors(t *testing.T) {
	base := []string{"simulate", "--fleet", "h100-llama3-8b", "--synthetic", "--requests", "10"}
	tests := []struct {
		name string
		args []string
	}{
		{"unknown class", []string{"--mix", "urgent=1"}},
		{"bad share", []string{"--mix", "priority=x"}},
		{"zero share", []string{"--mix", "priority=0"}},
		{"twice", []string{"--tenants", "a=1,a=2"}},
		{"no name", []string{"--tenants", "=1"}},
		{"budget without admission", []string{"--budget", "4"}},
		{"bad budget", []string{"--admission", "--budget", "0"}},
		{"budget of another fleet", []string{"--admission", "--budget", "l4-llama3-8b=3"}},
		{"bad max wait", []string{"--admission", "--max-wait", "flex=soon"}},
		{"max wait of no class", []string{"--admission", "--max-wait", "batch=1m"}},
		{"negative queue", []string{"--admission", "--queue-max", "-1"}},
		{"pending prefill without admission", []string{"--max-pending-prefill", "50ms"}},
		{"pending prefill by class without admission", []string{"--max-pending-prefill-by-class", "priority=100ms"}},
		{"pending prefill of no class", []string{"--admission", "--max-pending-prefill-by-class", "batch=100ms"}},
		{"zero pending prefill of a class", []string{"--admission", "--max-pending-prefill-by-class", "priority=0s"}},
		{"weights without admission", []string{"--tenants", "a=1", "--tenant-weights", "a=2"}},
		{"weight below 1", []string{"--admission", "--tenants", "a=1", "--tenant-weights", "a=0.5"}},
		{"bad weight", []string{"--admission", "--tenants", "a=1", "--tenant-weights", "a=x"}},
		{"weight of no tenant", []string{"--admission", "--tenants", "a=1", "--tenant-weights", "b=2"}},
		{"only a tenant not drawn", []string{"--tenants", "a=1", "--only-tenant", "b"}},
		{"only a tenant without tenants", []string{"--only-tenant", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(base, tt.args...)...)
			assert.Equal(t, exitUsage, code, stderr)
		})
	}
}

func TestDrawShares(t *testing.T) {
	shares, err := parseShares("priority=0.3, flex=0.7")
	require.NoError(t, err)
	got := draw(shares, 20000, 1, mixStream)
	n := 0
	for _, k := range got {
		if k == 0 {
			n++
		}
	}
	assert.InDelta(t, 0.3, float64(n)/20000, 0.015)
	assert.Equal(t, got, draw(shares, 20000, 1, mixStream), "seeded")
	assert.NotEqual(t, got, draw(shares, 20000, 2, mixStream))

	f := classFlags{mix: "flex=1"}
	require.NoError(t, f.validate())
	for _, c := range f.classes(10, 1) {
		assert.Equal(t, admission.Flex, c)
	}
	assert.Nil(t, (&classFlags{}).classes(10, 1))
	assert.Nil(t, (&classFlags{}).tenantsOf(10, 1))
}

func TestShedSample(t *testing.T) {
	assert.True(t, shedSample(report.Sample{Err: `status 503: {"error":{"code":"fleet_saturated"}}`}))
	assert.True(t, shedSample(report.Sample{Err: `status 429: {"error":{"code":"resource_unavailable"}}`}))
	assert.False(t, shedSample(report.Sample{Err: `status 429: {"error":{"code":"rate_limit_exceeded"}}`}))
	assert.False(t, shedSample(report.Sample{OK: true}))
}

// load --mix sets service_tier per request and --tenants with --api-keys
// sends each tenant's requests with its key; the report splits by both.
func TestLoadMixAndTenants(t *testing.T) {
	type seen struct{ tier, auth string }
	var (
		mu   sync.Mutex
		reqs []seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			MaxTokens   int     `json:"max_tokens"`
			ServiceTier *string `json:"service_tier"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.ServiceTier == nil {
			http.Error(w, "no service_tier", http.StatusBadRequest)
			return
		}
		mu.Lock()
		reqs = append(reqs, seen{*body.ServiceTier, r.Header.Get("Authorization")})
		mu.Unlock()
		if *body.ServiceTier == "flex" && r.Header.Get("Authorization") == "Bearer sk-light" {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"code":"resource_unavailable"}}`)
			return
		}
		fmt.Fprintf(w, `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":1,"completion_tokens":%d}}`, body.MaxTokens)
	}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "load.json")
	code, stdout, stderr := runCLI(t, "load", "--target", srv.URL, "--model", "m", "--rate", "500", "--requests", "200",
		"--duration", "10s", "--prompt-mean", "16", "--output-mean", "4", "--quiet",
		"--mix", "priority=0.5,flex=0.5", "--tenants", "heavy=3,light=1", "--api-keys", "heavy=sk-heavy,light=sk-light", "--json", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `\s+class\s+ok\s+failed\s+shed\s`, stdout)
	assert.Regexp(t, `\s+tenant\s+ok\s+failed\s+req/s`, stdout)

	tiers, keys := map[string]int{}, map[string]int{}
	for _, r := range reqs {
		tiers[r.tier]++
		keys[r.auth]++
	}
	assert.Len(t, reqs, 200)
	assert.InDelta(t, 100, tiers["priority"], 25)
	assert.Equal(t, 200, tiers["priority"]+tiers["flex"])
	assert.InDelta(t, 150, keys["Bearer sk-heavy"], 25)
	assert.Equal(t, 200, keys["Bearer sk-heavy"]+keys["Bearer sk-light"])

	got := readJSON(t, out)
	classes := got["classes"].(map[string]any)
	for _, k := range reportKeys {
		assert.Contains(t, classes["flex"], k)
	}
	shed := got["shed"].(map[string]any)
	assert.EqualValues(t, 0, shed["priority"])
	assert.Positive(t, shed["flex"])
	assert.Equal(t, shed["flex"], classes["flex"].(map[string]any)["failed"])
	tenants := got["tenants"].(map[string]any)
	assert.EqualValues(t, keys["Bearer sk-light"], tenants["light"].(map[string]any)["completed"].(float64)+tenants["light"].(map[string]any)["failed"].(float64))

	// --only-tenant sends the light tenant's requests alone: the same ones,
	// with the same classes and key.
	var light []seen
	for _, r := range reqs {
		if r.auth == "Bearer sk-light" {
			light = append(light, r)
		}
	}
	mu.Lock()
	reqs = nil
	mu.Unlock()
	code, _, stderr = runCLI(t, "load", "--target", srv.URL, "--model", "m", "--rate", "500", "--requests", "200",
		"--duration", "10s", "--prompt-mean", "16", "--output-mean", "4", "--quiet", "--concurrency", "1",
		"--mix", "priority=0.5,flex=0.5", "--tenants", "heavy=3,light=1", "--api-keys", "heavy=sk-heavy,light=sk-light",
		"--only-tenant", "light", "--json", out)
	require.Equal(t, exitOK, code, stderr)
	alone := map[seen]int{}
	for _, r := range reqs {
		alone[r]++
	}
	both := map[seen]int{}
	for _, r := range light {
		both[r]++
	}
	assert.Len(t, reqs, len(light))
	assert.Equal(t, both, alone)
}

func TestLoadAPIKeysErrors(t *testing.T) {
	base := []string{"load", "--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1"}
	for _, args := range [][]string{
		{"--api-keys", "a=sk"},
		{"--tenants", "a=1", "--api-keys", "b=sk"},
		{"--tenants", "a=1", "--api-keys", "a"},
		{"--mix", "gold=1"},
		{"--tenants", "a=1", "--only-tenant", "b"},
		{"--only-tenant", "a"},
	} {
		code, _, stderr := runCLI(t, append(base, args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
}
