package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/leastrequest"
)

// saturated measures a fleet's real throughput on reqs: every request
// arrives at once, so the engines run flat out, and the rate is completions
// over the time to drain them all.
func saturated(t *testing.T, spec Spec, reqs []workload.Request) float64 {
	t.Helper()
	at := make([]workload.Request, len(reqs))
	for i, r := range reqs {
		r.Arrival = 0
		at[i] = r
	}
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, at)
	require.NoError(t, err)
	for _, o := range res.Requests {
		require.True(t, o.OK, o.Err)
	}
	return float64(len(reqs)) / res.Elapsed.Seconds()
}

// TestEstimateCapacityMatchesSaturation checks the estimate against the
// simulated engine's throughput when saturated, for decode-heavy,
// prefill-heavy (Azure code: ~2,000-token prompts, ~30 output tokens) and
// long-prompt (Mooncake: ~15,000-token prompts, where attention dominates)
// shapes. The estimate is the knee of the load curve, so it may sit a
// little above the measured rate, never far from it.
func TestEstimateCapacityMatchesSaturation(t *testing.T) {
	tests := []struct {
		name           string
		fleet          string
		n              int
		prompt, output workload.LengthDist
	}{
		{"decode heavy", "h100-llama3-8b", 3000, workload.LengthDist{Mean: 512, Sigma: 0.5, Max: 4096}, workload.LengthDist{Mean: 128, Sigma: 0.5, Max: 1024}},
		{"prefill heavy", "h100-llama3-8b", 3000, workload.LengthDist{Mean: 2048, Sigma: 0.8, Max: 7437}, workload.LengthDist{Mean: 28, Sigma: 0.9, Max: 1900}},
		{"prefill heavy on L4", "l4-llama3-8b", 600, workload.LengthDist{Mean: 2048, Sigma: 0.8, Max: 7437}, workload.LengthDist{Mean: 28, Sigma: 0.9, Max: 1900}},
		{"long prompts", "h100-llama3-8b", 400, workload.LengthDist{Mean: 15000, Sigma: 0.8, Max: 120000}, workload.LengthDist{Mean: 150, Sigma: 0.8, Max: 900}},
		// Conversation-like: KV-bound batches whose prompts arrive a few
		// per step, many steps decode only.
		{"KV-bound chat", "h100-llama3-8b", 4000, workload.LengthDist{Mean: 1400, Sigma: 0.8, Max: 8000}, workload.LengthDist{Mean: 250, Sigma: 0.6, Max: 2048}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := mustSpec(t, tt.fleet)
			reqs, err := workload.Synthetic(workload.SyntheticOptions{Rate: 1, Count: tt.n, Seed: 5, Prompt: tt.prompt, Output: tt.output})
			require.NoError(t, err)
			est := EstimateCapacity(spec, reqs)
			got := saturated(t, spec, reqs)
			t.Logf("estimate %.2f req/s, saturated %.2f req/s, ratio %.2f", est, got, est/got)
			assert.InDelta(t, 1, est/got, 0.2, "estimate %.2f req/s vs saturated %.2f req/s", est, got)
		})
	}
}
