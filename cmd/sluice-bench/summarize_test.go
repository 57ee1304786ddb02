package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

func row(policy string, p50, p99, tpot, goodput, hit, util float64) simResult {
	r := simResult{Policy: policy, Goodput: goodput, PrefixHitRatio: hit, Utilization: util}
	r.TTFT = report.Dist{P50: p50, P99: p99}
	r.TPOT = report.Dist{P99: tpot}
	return r
}

func TestSummarizeRun(t *testing.T) {
	run := simOutput{Workload: "w", Fleet: "f", OfferedLoad: 0.8, Seed: 2, Routers: 1, Results: []simResult{
		row("scored", 3000, 20000, 500, 2.3, 0.5, 0.7),
		row("least_request", 3400, 100000, 520, 1.3, 0.1, 0.7),
		row("p2c", 3300, 200000, 540, 2.5, 0.1, 0.72),
		row("weighted", 5500, 28000, 490, 1.4, 0.1, 0.8),
		row("round_robin", 85000, 380000, 550, 2.9, 0.2, 0.68),
		row("prefix_affinity", 2900, 120000, 500, 1.6, 0.6, 0.6),
		row(oracleName, 6000, 12000, 550, 1.3, 0.5, 0.7),
	}}
	s := summarizeRun(run)
	assert.InDelta(t, 3000.0/3300, s.p50/s.p50Best, 1e-9)
	assert.Equal(t, "p2c", s.p50By)
	assert.InDelta(t, 2.3/2.5, s.goodput/s.goodputBest, 1e-9)
	assert.Equal(t, "weighted", s.p99By, "the best p99 among the baselines")
	assert.InDelta(t, 490, s.tpot99Best, 1e-9)
	assert.InDelta(t, 12000, s.p99Oracle, 1e-9)
	assert.InDelta(t, 2.5, s.hit/s.hitRR, 1e-9)
	assert.Equal(t, "prefix_affinity", s.worstUtilBy, "the oracle is not a policy")
	assert.InDelta(t, 0.6/0.68, s.worstUtil/s.utilRR, 1e-9)

	var out bytes.Buffer
	require.NoError(t, writeSummary(&out, []simOutput{run, {Workload: "empty"}}))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[1], "0.91 (p2c)")
	assert.Contains(t, lines[1], "0.71 (weighted)")
	assert.Contains(t, lines[2], "-", "no rows: no ratios")
}

func TestSummarizeCLI(t *testing.T) {
	dir := t.TempDir()
	json1 := filepath.Join(dir, "a.json")
	code, _, stderr := runCLI(t, "simulate", "--fleet", "2xh100-llama3-8b", "--synthetic", "--requests", "300",
		"--policy", "default,least_request,p2c,weighted,round_robin", "--oracle", "--table", "compact", "--json", json1)
	require.Equal(t, exitOK, code, stderr)
	b, err := os.ReadFile(json1)
	require.NoError(t, err)
	var run simOutput
	require.NoError(t, json.Unmarshal(b, &run))
	assert.Equal(t, "poisson", run.Workload)
	assert.InDelta(t, 0.8, run.OfferedLoad, 0.2)
	assert.InDelta(t, 1000, run.GoodputTTFTms, 1e-9)

	code, stdout, stderr := runCLI(t, "summarize", json1)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "poisson, 2xh100-llama3-8b")

	code, _, _ = runCLI(t, "summarize")
	assert.Equal(t, exitUsage, code)
	code, _, stderr = runCLI(t, "summarize", filepath.Join(dir, "missing.json"))
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "missing.json")
}

// summarize reads only simulate --json outputs: another command's JSON
// (load's report, a sweep) decodes without error into simOutput, and used
// to print an empty row and exit 0.
func TestSummarizeRejectsOtherJSON(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, body string
	}{
		{"load report", `{"completed": 10, "failed": 0, "ttft_ms": {"p50": 12}, "goodput": 1.5}`},
		{"sweep", `{"mode": "simulate", "fleet": "2xh100-llama3-8b", "points": [{"load": 0.5, "results": [{"policy": "scored"}]}]}`},
		{"empty object", `{}`},
		{"results without policies", `{"fleet": "2xh100-llama3-8b", "results": [{"completed": 3}]}`},
		{"array", `[{"policy": "scored"}]`},
		{"not JSON", `policy,ttft`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".json")
			require.NoError(t, os.WriteFile(path, []byte(tt.body), 0o600))
			code, stdout, stderr := runCLI(t, "summarize", path)
			assert.Equal(t, exitError, code, stderr)
			assert.Contains(t, stderr, path+`: not a "sluice-bench simulate --json" output`)
			assert.Empty(t, stdout, "no table for input that is not a simulate output")
		})
	}
}

func TestPoissonRetime(t *testing.T) {
	reqs := []workload.Request{
		{PromptTokens: 10, OutputTokens: 1, HashIDs: []int{1, 2}},
		{PromptTokens: 20, OutputTokens: 2, HashIDs: []int{1, 5}},
		{PromptTokens: 30, OutputTokens: 3},
	}
	out := poissonRetime(reqs, 10, 1)
	require.Equal(t, satMinRequests, len(out), "short workloads repeat to the minimum length")
	assert.Equal(t, int(100*satMinDuration.Seconds()), len(poissonRetime(reqs, 100, 1)), "and fill the minimum duration")
	for i, r := range out {
		assert.Equal(t, reqs[i%3].PromptTokens, r.PromptTokens)
		if i > 0 {
			assert.GreaterOrEqual(t, r.Arrival, out[i-1].Arrival)
		}
	}
	assert.Zero(t, out[0].Arrival)
	assert.Equal(t, []int{1, 2}, out[0].HashIDs)
	assert.Equal(t, []int{7, 8}, out[3].HashIDs, "a repetition renames its ids (offset 6)")
	assert.Equal(t, []int{7, 11}, out[4].HashIDs, "and keeps its own sharing")
	assert.Equal(t, []int{1, 2}, reqs[0].HashIDs, "the input is not modified")
	rate := float64(len(out)-1) / out[len(out)-1].Arrival.Seconds()
	assert.InEpsilon(t, 10, rate, 0.05)
	assert.Nil(t, poissonRetime(nil, 1, 1))
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	assert.Equal(t, time.Duration(3), quantile(ds, 0.5))
	assert.Equal(t, time.Duration(5), quantile(ds, 0.99))
	assert.Equal(t, time.Duration(1), quantile(ds, 0))
	assert.Zero(t, quantile(nil, 0.5))
}

// The search finds a saturation throughput near the capacity estimate (the
// estimate's accuracy is pinned in gpuworker/fleet), and a looser bound
// finds a higher rate, a tighter one a lower.
func TestMeasureSaturation(t *testing.T) {
	spec, err := fleet.ParseSpec("1xl4-llama3-8b")
	require.NoError(t, err)
	reqs, err := workload.Synthetic(workload.SyntheticOptions{Rate: 1, Count: 200, Seed: 3,
		Prompt: workload.LengthDist{Mean: 1000, Sigma: 0.3}, Output: workload.LengthDist{Mean: 50, Sigma: 0.3}})
	require.NoError(t, err)
	est := fleet.EstimateCapacity(spec, reqs)
	sat, err := measureSaturation(spec, est, func(rate float64) ([]workload.Request, error) { return poissonRetime(reqs, rate, 1), nil })
	require.NoError(t, err)
	t.Logf("estimate %.2f, measured %.2f (half %.2f, double %.2f)", est, sat.Measured, sat.Half, sat.Double)
	assert.InDelta(t, 1, sat.Ratio(), 0.3)
	assert.LessOrEqual(t, sat.Half, sat.Measured)
	assert.GreaterOrEqual(t, sat.Double, sat.Measured)
	assert.Equal(t, max(satBoundFactor*sat.Light, satBoundFloor), sat.Bound)
	var out bytes.Buffer
	require.NoError(t, sat.write(&out))
	assert.Contains(t, out.String(), "Saturation throughput")
}
