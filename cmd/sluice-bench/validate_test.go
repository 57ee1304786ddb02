package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

func TestValidationRowsWithinBounds(t *testing.T) {
	rows, err := runValidation(gpuworker.NewProfileSet(nil), validationCases())
	require.NoError(t, err)
	for _, r := range rows {
		assert.True(t, r.inBounds(), "%s c=%d %s: simulated %.2f, published %.2f, ratio %.2f",
			r.Profile, r.Concurrency, r.Metric, r.Simulated, r.Published, r.Ratio)
	}
	assert.Len(t, rows, 23)
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "v.json")
	var stdout, stderr bytes.Buffer
	code := cli(t.Context(), []string{"validate", "--json", out}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), "2xh100-llama3-70b-fp8kv")
	assert.Contains(t, stdout.String(), "output_tok_s")
	assert.NotContains(t, stdout.String(), "OUT")

	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(b, &rows))
	require.NotEmpty(t, rows)
	for _, k := range []string{"profile", "concurrency", "metric", "simulated", "published", "ratio"} {
		assert.Contains(t, rows[0], k)
	}
}

func TestValidateCommandProfilesOverride(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	// A much slower GPU pushes the calibrated rows out of bounds.
	require.NoError(t, os.WriteFile(file, []byte("profiles:\n  - name: 2xh100-llama3-70b-fp8kv-trtllm\n    eta_bw: 0.2\n"), 0o644))
	var stdout, stderr bytes.Buffer
	code := cli(t.Context(), []string{"validate", "--profiles", file}, &stdout, &stderr)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stdout.String(), "OUT")

	require.NoError(t, os.WriteFile(file, []byte("profiles:\n  - name: x\n    bogus: 1\n"), 0o644))
	stderr.Reset()
	assert.Equal(t, exitError, cli(t.Context(), []string{"validate", "--profiles", file}, &stdout, &stderr))
	assert.True(t, strings.Contains(stderr.String(), "bogus"), stderr.String())
	assert.Equal(t, exitUsage, cli(t.Context(), []string{"validate", "extra"}, &stdout, &stderr))
}

func TestClosedLoopLittlesLaw(t *testing.T) {
	p, err := gpuworker.LookupProfile("h100-llama3-8b")
	require.NoError(t, err)
	st, err := closedLoop(p, 8, 1000, 200, requestsFor(8), 1)
	require.NoError(t, err)
	// c clients with no think time: throughput = c * output / e2e.
	e2e := st[metricTTFT] + 199*st[metricITL]
	assert.InEpsilon(t, 8*200/(e2e/1000), st[metricOutputTok], 0.05)
}
