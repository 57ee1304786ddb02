package workload

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyntheticStatistics(t *testing.T) {
	opts := SyntheticOptions{
		Rate:     50,
		Count:    20000,
		Prompt:   LengthDist{Mean: 512, Sigma: 0.5, Max: 100000},
		Output:   LengthDist{Mean: 128, Sigma: 0.8, Max: 100000},
		Seed:     7,
		Duration: 0,
	}
	reqs, err := Synthetic(opts)
	require.NoError(t, err)
	require.Len(t, reqs, 20000)
	s := Summarize(reqs)
	assert.InEpsilon(t, 50, s.RatePerSec, 0.03)
	assert.InEpsilon(t, 512, s.PromptMean, 0.02)
	assert.InEpsilon(t, 128, s.OutputMean, 0.03)
	assert.Zero(t, reqs[0].Arrival)
	for i := 1; i < len(reqs); i++ {
		require.GreaterOrEqual(t, reqs[i].Arrival, reqs[i-1].Arrival)
	}

	again, err := Synthetic(opts)
	require.NoError(t, err)
	assert.Equal(t, reqs, again, "same seed, same workload")
	opts.Seed = 8
	other, err := Synthetic(opts)
	require.NoError(t, err)
	assert.NotEqual(t, reqs[:10], other[:10])
}

func TestSyntheticBoundsAndClamp(t *testing.T) {
	reqs, err := Synthetic(SyntheticOptions{
		Rate:     100,
		Duration: 2 * time.Second,
		Prompt:   LengthDist{Mean: 1000, Sigma: 2, Max: 1500},
		Output:   LengthDist{Mean: 1, Sigma: 0},
		Seed:     1,
	})
	require.NoError(t, err)
	assert.InDelta(t, 200, len(reqs), 60)
	for _, r := range reqs {
		assert.Less(t, r.Arrival, 2*time.Second)
		assert.GreaterOrEqual(t, r.PromptTokens, 1)
		assert.LessOrEqual(t, r.PromptTokens, 1500)
		assert.Equal(t, 1, r.OutputTokens)
	}

	reqs, err = Synthetic(SyntheticOptions{Rate: 1, Duration: time.Hour, Count: 3, Prompt: LengthDist{Mean: 4}, Output: LengthDist{Mean: 2}})
	require.NoError(t, err)
	assert.Len(t, reqs, 3)
	assert.Equal(t, 4, reqs[2].PromptTokens)
}

func TestSyntheticInvalid(t *testing.T) {
	_, err := Synthetic(SyntheticOptions{Rate: 0, Prompt: LengthDist{Mean: 0.5}, Output: LengthDist{Mean: 10, Sigma: -1}})
	require.Error(t, err)
	for _, want := range []string{"rate 0", "set a duration or a count", "prompt: mean 0.5", "output: sigma -1"} {
		assert.Contains(t, err.Error(), want)
	}
}
