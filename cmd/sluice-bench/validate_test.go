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

	"github.com/sluice-llm/sluice/gpuworker"
)

// TestValidation runs every case once and checks the rows and their
// sensitivity runs.
func TestValidation(t *testing.T) {
	profiles := gpuworker.NewProfileSet(nil)
	cases := validationCases()
	rows, err := runValidation(profiles, cases, nil)
	require.NoError(t, err)

	t.Run("rows within bounds", func(t *testing.T) {
		for _, r := range rows {
			if r.KnownOut != "" {
				assert.False(t, r.inBounds(), "%s %s %s=%d %s: ratio %.2f is back in bounds; drop its known-out reason",
					r.Profile, r.Source, r.Mode, r.Concurrency, r.Metric, r.Ratio)
				continue
			}
			assert.True(t, r.inBounds(), "%s %s %s=%d %s: simulated %.2f, published %.2f, ratio %.2f",
				r.Profile, r.Source, r.Mode, r.Concurrency, r.Metric, r.Simulated, r.Published, r.Ratio)
		}
		figures := 0
		for _, vc := range cases {
			figures += len(vc.figures)
		}
		assert.Len(t, rows, figures, "one row per published figure")
	})

	t.Run("sensitivity", func(t *testing.T) {
		results, err := runSensitivity(profiles, cases, rows)
		require.NoError(t, err)
		variants, err := sensitivityVariants(profiles)
		require.NoError(t, err)
		require.Len(t, results, len(variants))
		for _, res := range results {
			v := res.variant
			out := false
			for _, r := range res.rows {
				// Only rows whose profile the variant changes are rerun,
				// each paired with the same row as validated.
				p, err := profiles.Lookup(r.base.Profile)
				require.NoError(t, err)
				q := p
				v.adjust(&q)
				assert.NotEqual(t, p, q, "%s %s reran %s", v.param, v.variant, r.base.Profile)
				assert.Equal(t, r.base.Profile, r.varied.Profile)
				assert.Equal(t, r.base.Metric, r.varied.Metric)
				assert.Equal(t, r.base.Concurrency, r.varied.Concurrency)
				out = out || (r.base.inBounds() && !r.varied.inBounds())
			}
			// Each fitted value carries at least one row: undone, it takes
			// some row out of bounds.
			if v.undoesFit {
				assert.True(t, out, "%s %s moves no row out of bounds", v.param, v.variant)
			}
		}
		var buf bytes.Buffer
		require.NoError(t, writeSensitivity(&buf, results))
		for _, v := range variants {
			assert.Contains(t, buf.String(), v.param+" "+v.variant)
		}
	})
}

func TestValidationCasesCiteSources(t *testing.T) {
	keys := map[string]bool{}
	for _, s := range validationSources() {
		assert.False(t, keys[s.key], "duplicate source %q", s.key)
		keys[s.key] = true
		assert.NotEmpty(t, s.setup)
		assert.Contains(t, s.where, "GPU-FACTS §")
	}
	used := map[string]bool{}
	for _, vc := range validationCases() {
		assert.True(t, keys[vc.source], "%s: unknown source %q", vc.profile, vc.source)
		used[vc.source] = true
		_, err := gpuworker.LookupProfile(vc.profile)
		assert.NoError(t, err, "cases run built-in profiles")
		assert.NotEmpty(t, vc.figures)
	}
	for k := range keys {
		assert.True(t, used[k], "source %q cited by no case", k)
	}
	for _, x := range validationExclusions() {
		assert.NotEmpty(t, x.reason, x.setup)
	}
}

func TestRowStatus(t *testing.T) {
	tests := []struct {
		name   string
		ratio  float64
		known  string
		status string
		failed bool
	}{
		{"in", 1.0, "", "", false},
		{"out", 1.5, "", "OUT", true},
		{"known out", 1.5, "why", "known out", false},
		{"stale", 1.0, "why", "STALE", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validationRow{Ratio: tt.ratio, KnownOut: tt.known}
			assert.Equal(t, tt.status, r.status())
			assert.Equal(t, tt.failed, r.failed())
		})
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "v.json")
	var stdout, stderr bytes.Buffer
	code := cli(t.Context(), []string{"validate", "--json", out}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	for _, s := range []string{"2xh100-llama3-70b-fp8kv", "h100-llama3-8b", "batch=16", "output_tok_s",
		"Sources:", "Known out of bounds:", "Not run:", "Concurrency 1 against ranges"} {
		assert.Contains(t, stdout.String(), s)
	}
	assert.NotContains(t, stdout.String(), "OUT")
	assert.NotContains(t, stdout.String(), "STALE")
	assert.NotContains(t, stdout.String(), "Sensitivity")

	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(b, &rows))
	require.NotEmpty(t, rows)
	for _, k := range []string{"profile", "source", "mode", "concurrency", "prompt_tokens", "output_tokens",
		"metric", "simulated", "published", "ratio"} {
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
	assert.Equal(t, exitUsage, cli(t.Context(), []string{"validate", "--sensitivity=maybe"}, &stdout, &stderr))
}

func TestStaticBatch(t *testing.T) {
	p, err := gpuworker.LookupProfile("h100-llama3-8b")
	require.NoError(t, err)

	// Sixteen 1,024-token prompts with one output token each fill two
	// 8,192-token steps of eight prompts.
	st, err := staticBatch(p, 16, 1024, 1)
	require.NoError(t, err)
	step := p.StepDuration(gpuworker.StepWork{Tokens: 8192, ContextTokens: 8192, AttnWork: 8 * 1024 * 1024, Seqs: 8})
	assert.InDelta(t, ms(2*step), st[metricBatchE2E], 1e-6)

	// One request alone: the batch ends when its last token does.
	st, err = staticBatch(p, 1, 128, 64)
	require.NoError(t, err)
	assert.InEpsilon(t, st[metricTTFT]+63*st[metricITL], st[metricBatchE2E], 1e-9)
	assert.InEpsilon(t, 64/(st[metricBatchE2E]/float64(time.Second/time.Millisecond)), st[metricOutputTok], 1e-9)
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

func TestBracketChecks(t *testing.T) {
	res, err := runBrackets(gpuworker.NewProfileSet(nil))
	require.NoError(t, err)
	require.Len(t, res, len(bracketChecks()))
	for _, b := range res {
		assert.Positive(t, b.simulated, "%s %s", b.profile, b.metric)
		assert.Less(t, b.lo, b.hi)
		assert.Contains(t, []string{"in", "below", "above"}, b.status())
	}
}
