package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

// A batch file drawn from a trace: every line a valid chat request whose
// prompt, as a gpuworker counts it, is a row's; then simulate runs it
// beside the trace and reports the batch's keys.
func TestBatchFileAndSimulateBatch(t *testing.T) {
	trace := "../../../shared/workloads/azure_llm_2023_code.csv"
	if _, err := os.Stat(trace); err != nil {
		t.Skipf("no trace: %v", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "batch.jsonl")
	code, _, stderr := runCLI(t, "batch-file", "--trace", trace, "--lines", "300", "--seed", "3", "--out", file)
	require.Equal(t, exitOK, code, stderr)

	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	rows, err := readTrace(trace, "")
	require.NoError(t, err)
	sizes := map[[2]int]bool{}
	for _, r := range rows {
		sizes[[2]int{max(gpuworker.ChatTokensPerMessage+1, r.PromptTokens), max(1, r.OutputTokens)}] = true
	}
	n := 0
	for sc.Scan() {
		var line struct {
			CustomID string          `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		assert.Equal(t, "POST", line.Method)
		gens, err := gpuworker.Generations(line.URL, line.Body, 0)
		require.NoError(t, err)
		require.Len(t, gens, 1)
		assert.True(t, sizes[[2]int{gens[0].PromptTokens, gens[0].OutputTokens}], "line %s: %+v is no row of the trace", line.CustomID, gens[0])
		n++
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, 300, n)

	out := filepath.Join(dir, "sim.json")
	code, stdout, stderr := runCLI(t, "simulate", "--fleet", "1xh100-llama3-8b,1xl4-llama3-8b", "--trace", trace,
		"--requests", "400", "--load", "0.5", "--admission", "--batch", file, "--batch-concurrency", "32", "--json", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "batch beside the workload")
	row := readJSON(t, out)["results"].([]any)[0].(map[string]any)
	assert.EqualValues(t, 400, row["completed"], "the row's own keys are the trace's requests")
	b := row["batch"].(map[string]any)
	for _, key := range []string{"completed", "failed", "duration_s", "output_throughput", "vs_spare", "ttft_p99_vs_without", "without_batch"} {
		assert.Contains(t, b, key)
	}
	assert.EqualValues(t, 300, b["completed"])
	assert.EqualValues(t, 0, b["failed"])
	assert.Positive(t, b["duration_s"])
	assert.Positive(t, b["output_throughput"])
	assert.Positive(t, b["alone_request_throughput"])

	for _, args := range [][]string{
		{"--batch", file}, // no --admission
		{"--batch", file, "--admission", "--batch-class", "priority"}, // not a batch class
		{"--batch", file, "--admission", "--oracle"},
		{"--batch", file, "--admission", "--batch-concurrency", "0"},
	} {
		code, _, stderr := runCLI(t, append([]string{"simulate", "--fleet", "1xh100-llama3-8b", "--trace", trace}, args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"custom_id\":\"a\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[]}}\n"), 0o600))
	code, _, stderr = runCLI(t, "simulate", "--fleet", "1xh100-llama3-8b", "--trace", trace, "--admission", "--batch", bad)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "line 1")
}
