package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/loadgen"
	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

func TestSimulateJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sim.json")
	code, stdout, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b,1xl4-llama3-8b", "--synthetic",
		"--requests", "300", "--policy", "default,round_robin", "--oracle", "--routers", "2", "--json", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "estimated capacity")
	assert.Contains(t, stdout, "Policy: "+configs.DefaultPolicy)
	assert.Contains(t, stdout, "Goodput")
	assert.Contains(t, stdout, "l4-llama3-8b")

	got := readJSON(t, out)
	assert.Positive(t, got["capacity_estimate"])
	results, ok := got["results"].([]any)
	require.True(t, ok)
	require.Len(t, results, 3)
	var names []string
	for _, r := range results {
		row := r.(map[string]any)
		names = append(names, row["policy"].(string))
		for _, key := range []string{"completed", "failed", "request_throughput", "output_throughput",
			"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "goodput", "prefix_hit_ratio"} {
			assert.Contains(t, row, key)
		}
		assert.EqualValues(t, 300, row["completed"])
		assert.Positive(t, row["itl_ms"].(map[string]any)["p50"])
	}
	assert.Equal(t, []string{configs.DefaultPolicy, "round_robin", oracleName}, names)
}

func TestSimulateMooncakePrefixHits(t *testing.T) {
	trace := "../../../shared/workloads/mooncake_fast25_synthetic.jsonl"
	out := filepath.Join(t.TempDir(), "sim.json")
	code, _, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b", "--trace", trace,
		"--requests", "200", "--max-context", "32768", "--load", "0.5", "--json", out)
	if code != exitOK {
		t.Skipf("trace not usable here: %s", stderr)
	}
	row := readJSON(t, out)["results"].([]any)[0].(map[string]any)
	assert.Positive(t, row["prefix_hit_ratio"])
}

func TestSimulateUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no fleet", []string{"--synthetic"}},
		{"no workload", []string{"--fleet", "h100-llama3-8b"}},
		{"both workloads", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--trace", "x.csv"}},
		{"bad fleet", []string{"--fleet", "4xnope", "--synthetic"}},
		{"unknown policy", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--policy", "nope"}},
		{"bad routers", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--routers", "0"}},
		{"negative load", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--load", "-1"}},
		{"extra argument", []string{"--fleet", "h100-llama3-8b", "--synthetic", "extra"}},
		{"bad table", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--table", "wide"}},
		{"negative scrape", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--scrape-interval", "-1s"}},
		{"bad params", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--policy", "round_robin:{nope: 1}"}},
		{"unparsable params", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--policy", "round_robin:{"}},
		{"outcomes of saturation", []string{"--fleet", "h100-llama3-8b", "--synthetic", "--saturation", "--outcomes", "x.csv"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"simulate"}, tt.args...)...)
			assert.Equal(t, exitUsage, code, stderr)
		})
	}
	code, _, _ := runCLI(t, "simulate", "--fleet", "instant", "--synthetic", "--load", "1")
	assert.Equal(t, exitError, code, "--load needs a finite capacity")
}

// Every flag of the admit stage given without --admission is an error, even
// at its default value, and so is a flag whose companion is missing; none is
// silently ignored. --requests keeps a run that wrongly passed short.
func TestSimulateAdmissionFlagsNeedTheirCompanions(t *testing.T) {
	base := []string{"simulate", "--fleet", "h100-llama3-8b", "--synthetic", "--requests", "50"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"same-step", []string{"--same-step"}, "--same-step needs --admission"},
		{"same-step false", []string{"--same-step=false"}, "--same-step needs --admission"},
		{"release-at-step", []string{"--release-at-step"}, "--release-at-step needs --admission"},
		{"kv-max", []string{"--kv-max", "0.5"}, "--kv-max needs --admission"},
		{"kv-max default", []string{"--kv-max", "0"}, "--kv-max needs --admission"},
		{"max-detour", []string{"--max-detour", "2s"}, "--max-detour needs --admission"},
		{"prefill-steps", []string{"--prefill-steps", "2"}, "--prefill-steps needs --admission"},
		{"batch-prefill", []string{"--batch-prefill", "10ms"}, "--batch-prefill needs --admission"},
		{"max-wait", []string{"--max-wait", "flex=1m"}, "--max-wait needs --admission"},
		{"budget", []string{"--budget", "4"}, "--budget needs --admission"},
		{"queue-max", []string{"--queue-max", "10"}, "--queue-max needs --admission"},
		{"max-pending-prefill", []string{"--max-pending-prefill", "50ms"}, "--max-pending-prefill needs --admission"},
		{"tenant-weights", []string{"--tenants", "a=1,b=1", "--tenant-weights", "a=2"}, "--tenant-weights needs --admission"},
		{"several", []string{"--kv-max", "0.5", "--same-step", "--budget", "4"}, "--budget, --same-step and --kv-max need --admission"},
		{"release-at-step with the prefill bound off", []string{"--admission", "--release-at-step", "--max-pending-prefill=-1ms"}, "--release-at-step needs --max-pending-prefill"},
		{"release-at-step with step budgets", []string{"--admission", "--release-at-step", "--prefill-steps", "1"}, "--release-at-step needs --max-pending-prefill"},
		{"batch-prefill without batch", []string{"--admission", "--batch-prefill", "10ms"}, "--batch-prefill needs --batch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append(slices.Clone(base), tt.args...)...)
			assert.Equal(t, exitUsage, code, stderr)
			assert.Contains(t, stderr, tt.want)
			assert.Empty(t, stdout)
		})
	}
	f := parseSim(t, "--fleet", "h100-llama3-8b", "--synthetic", "--admission", "--max-pending-prefill", "50ms", "--release-at-step",
		"--same-step", "--kv-max", "0.9", "--max-detour", "2s", "--prefill-steps", "2")
	assert.True(t, f.releaseAtStep, "with its companions the flag is accepted")
}

func TestRescaleResult(t *testing.T) {
	res := loadgen.Result{
		Samples: []report.Sample{{OK: true, TTFT: time.Millisecond, E2E: 3 * time.Millisecond, ITL: []time.Duration{2 * time.Millisecond}}},
		Elapsed: time.Second,
	}
	got := rescaleResult(res, 10)
	assert.Equal(t, 10*time.Millisecond, got.Samples[0].TTFT)
	assert.Equal(t, 30*time.Millisecond, got.Samples[0].E2E)
	assert.Equal(t, 20*time.Millisecond, got.Samples[0].ITL[0])
	assert.Equal(t, 10*time.Second, got.Elapsed)

	reqs := []workload.Request{{Arrival: 10 * time.Second, PromptTokens: 1, OutputTokens: 1}}
	assert.Equal(t, time.Second, compressArrivals(reqs, 10)[0].Arrival)
	assert.Equal(t, 10*time.Second, reqs[0].Arrival, "the input is not modified")
}

func TestLoadTimeScaleFlag(t *testing.T) {
	code, _, stderr := runCLI(t, "load", "--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--time-scale", "0")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "--time-scale")
}

func TestSimulateIsReproducibleWithRandomizedPolicies(t *testing.T) {
	run := func(seed string) []byte {
		out := filepath.Join(t.TempDir(), "sim.json")
		code, _, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b,2xl4-llama3-8b", "--synthetic",
			"--requests", "300", "--policy", "p2c,random", "--routers", "2", "--seed", seed, "--json", out)
		require.Equal(t, exitOK, code, stderr)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		return b
	}
	assert.Equal(t, string(run("7")), string(run("7")), "the same --seed gives the same routing")
}

func TestSimulateOutcomes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outcomes.csv")
	code, _, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b,1xl4-llama3-8b", "--synthetic",
		"--requests", "300", "--load", "1.5", "--policy", "least_request", "--oracle", "--outcomes", path)
	require.Equal(t, exitOK, code, stderr)
	rows, col, num := readOutcomes(t, path)
	require.Len(t, rows, 1+2*300)
	assert.Equal(t, simOutcomesHeader, rows[0])
	estimated, detours := 0, 0
	for i, row := range rows[1:] {
		policy := "least_request"
		if i >= 300 {
			policy = oracleName
		}
		require.Equal(t, policy, row[col["policy"]])
		assert.Equal(t, strconv.Itoa(i%300), row[col["request"]])
		assert.Equal(t, "true", row[col["ok"]])
		assert.Contains(t, []string{"h100-llama3-8b", "l4-llama3-8b"}, row[col["profile"]])
		assert.GreaterOrEqual(t, num(row, "e2e_ms"), num(row, "ttft_ms"))
		assert.Positive(t, num(row, "ttft_ms"))
		exp, quick := row[col["expected_ttft_ms"]], row[col["quickest_ttft_ms"]]
		if policy == oracleName {
			assert.Empty(t, exp, "the reference records no estimate")
			continue
		}
		if exp == "" || quick == "" {
			continue // no prefill rate measured yet
		}
		estimated++
		assert.LessOrEqual(t, num(row, "quickest_ttft_ms"), num(row, "expected_ttft_ms"))
		if num(row, "expected_ttft_ms") > num(row, "quickest_ttft_ms") {
			detours++
		}
	}
	assert.Greater(t, estimated, 200, "most requests are bound after the first rates are measured")
	assert.Positive(t, detours, "least_request counts requests, not prefill time, so it does not always pick the quickest")
}
