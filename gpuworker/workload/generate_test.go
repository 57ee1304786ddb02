package workload

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// generator builds a workload of count requests at rate from a seed.
type generator func(seed uint64, rate float64, count int) ([]Request, error)

func poisson(seed uint64, rate float64, count int) ([]Request, error) {
	return Synthetic(SyntheticOptions{Rate: rate, Count: count, Seed: seed,
		Prompt: LengthDist{Mean: 512, Sigma: 0.5, Max: 8192}, Output: LengthDist{Mean: 128, Sigma: 0.5, Max: 2048}})
}

func sharedPrefix(seed uint64, rate float64, count int) ([]Request, error) {
	return SharedPrefix(SharedPrefixOptions{Rate: rate, Count: count, Seed: seed})
}

func multiTurn(seed uint64, rate float64, count int) ([]Request, error) {
	return MultiTurn(MultiTurnOptions{Rate: rate, Count: count, Seed: seed})
}

func longDoc(seed uint64, rate float64, count int) ([]Request, error) {
	return LongDoc(LongDocOptions{Rate: rate, Count: count, Seed: seed, Zipf: 1})
}

// TestGeneratorStatistics pins each generator's statistics on seed 1 with
// its default options: the means come from the documented distributions,
// the reuse ratios from the structure (a 2048-token system prompt before
// about 300 unique tokens, conversations of five turns on average without
// a system prompt, 1000 documents with Zipf popularity).
func TestGeneratorStatistics(t *testing.T) {
	tests := []struct {
		name     string
		gen      generator
		rate     float64
		count    int
		prompt   float64 // mean prompt tokens
		output   float64 // mean output tokens
		reuse    float64 // IdealPrefixReuse
		tol      float64 // relative tolerance of the means
		reuseTol float64 // absolute tolerance of the reuse ratio
	}{
		{"poisson", poisson, 10, 10000, 512, 128, 0, 0.02, 0},
		// 2048 shared of about 2348; the first request hits nothing.
		{"shared-prefix", sharedPrefix, 10, 10000, 2348, 150, 2048.0 / 2348, 0.02, 0.01},
		// Turn k of a conversation resends about 100 + 350(k-1) tokens
		// (no system prompt by default); weighted by turns, k-1 averages
		// about 3.7 after the cap at 20. Only whole 512-token blocks of
		// the previous turns' history are reused, and conversations under
		// way at the start of the window reuse nothing sent before it.
		{"multi-turn", multiTurn, 10, 10000, 1395, 250, 0.61, 0.04, 0.02},
		// Log-uniform documents in [8192, 32768] average 24576/ln 4 =
		// 17728 tokens, plus a question of about 118. The answer's clamp
		// at 500 pulls its mean from 350 to about 345. 1000 draws from a
		// Zipf pool of 1000 repeat a document about two times in three.
		{"long-doc", longDoc, 1, 1000, 17846, 345, 0.65, 0.03, 0.03},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := tt.gen(1, tt.rate, tt.count)
			require.NoError(t, err)
			require.Len(t, reqs, tt.count)
			s := Summarize(reqs)
			assert.InEpsilon(t, tt.prompt, s.PromptMean, tt.tol, "mean prompt")
			assert.InEpsilon(t, tt.output, s.OutputMean, tt.tol, "mean output")
			assert.InEpsilon(t, tt.rate, s.RatePerSec, 0.03, "request rate")
			assert.InDelta(t, tt.reuse, IdealPrefixReuse(reqs), tt.reuseTol, "ideal prefix reuse")
			assert.Zero(t, reqs[0].Arrival)
			assert.True(t, slices.IsSortedFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) }), "sorted by arrival")
			for i, r := range reqs {
				require.GreaterOrEqual(t, r.PromptTokens, 1, "request %d", i)
				require.GreaterOrEqual(t, r.OutputTokens, 1, "request %d", i)
				if tt.name != "poisson" {
					require.Len(t, r.HashIDs, blocks(r.PromptTokens), "request %d: one id per block", i)
				}
			}
		})
	}
}

// TestGeneratorDeterminism checks that a seed gives one workload, another
// seed another, and that the rate moves arrivals only: lengths and ids stay.
func TestGeneratorDeterminism(t *testing.T) {
	tests := []struct {
		name string
		gen  generator
	}{
		{"poisson", poisson},
		{"shared-prefix", sharedPrefix},
		{"long-doc", longDoc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.gen(1, 5, 2000)
			require.NoError(t, err)
			again, err := tt.gen(1, 5, 2000)
			require.NoError(t, err)
			assert.Equal(t, a, again, "same seed, same workload")
			other, err := tt.gen(2, 5, 2000)
			require.NoError(t, err)
			assert.NotEqual(t, shapes(a[:20]), shapes(other[:20]), "another seed, other lengths")

			fast, err := tt.gen(1, 50, 2000)
			require.NoError(t, err)
			assert.Equal(t, shapes(a), shapes(fast), "lengths and ids do not depend on the rate")
			for i := range a {
				require.InDelta(t, a[i].Arrival.Seconds()/10, fast[i].Arrival.Seconds(), 1e-6, "arrival %d scales with the rate", i)
			}
		})
	}
}

// shapes returns reqs without their arrivals.
func shapes(reqs []Request) []Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Arrival = 0
	}
	return out
}

func TestGeneratorBounds(t *testing.T) {
	tests := []struct {
		name string
		gen  func(d time.Duration, count int) ([]Request, error)
	}{
		{"shared-prefix", func(d time.Duration, n int) ([]Request, error) {
			return SharedPrefix(SharedPrefixOptions{Rate: 20, Duration: d, Count: n})
		}},
		{"multi-turn", func(d time.Duration, n int) ([]Request, error) {
			return MultiTurn(MultiTurnOptions{Rate: 20, Duration: d, Count: n})
		}},
		{"long-doc", func(d time.Duration, n int) ([]Request, error) {
			return LongDoc(LongDocOptions{Rate: 20, Duration: d, Count: n})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := tt.gen(100*time.Second, 0)
			require.NoError(t, err)
			assert.InDelta(t, 2000, len(reqs), 200)
			assert.Less(t, reqs[len(reqs)-1].Arrival, 100*time.Second)

			reqs, err = tt.gen(time.Hour, 7)
			require.NoError(t, err)
			assert.Len(t, reqs, 7, "the count stops first")
		})
	}
}

func TestGeneratorInvalid(t *testing.T) {
	tests := []struct {
		name string
		gen  func() ([]Request, error)
		want []string
	}{
		{"shared-prefix", func() ([]Request, error) {
			return SharedPrefix(SharedPrefixOptions{Rate: -1, SystemPrompts: -2, SystemTokens: 100, Zipf: -1, Unique: LengthDist{Mean: 0.5}})
		}, []string{"shared-prefix workload:", "rate -1", "set a duration or a count", "system prompts -2", "system tokens 100 must be at least 512", "zipf -1", "unique: mean 0.5"}},
		{"multi-turn", func() ([]Request, error) {
			return MultiTurn(MultiTurnOptions{Rate: 1, Count: 1, TurnsMean: 30, TurnsMax: 20, Think: -time.Second, Answer: LengthDist{Mean: 5, Sigma: -1}})
		}, []string{"multi-turn workload:", "turns mean 30 must be in [1, turns max 20]", "think -1s must be in [0, 24h0m0s]", "answer: sigma -1"}},
		{"multi-turn max", func() ([]Request, error) {
			return MultiTurn(MultiTurnOptions{Rate: 1, Count: 1, TurnsMax: -1, SystemTokens: -1})
		}, []string{"turns max -1", "system tokens -1"}},
		{"long-doc", func() ([]Request, error) {
			return LongDoc(LongDocOptions{Rate: 1, Duration: -1, Pool: -1, DocMin: 100, DocMax: 50, Question: LengthDist{Mean: 10, Max: -1}})
		}, []string{"long-doc workload:", "duration and count must not be negative", "pool -1", "doc min 100 must be at least 512", "doc max 50 must be at least doc min 100", "question: max -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.gen()
			require.Error(t, err)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestPopularity(t *testing.T) {
	tests := []struct {
		n    int
		s    float64
		want []float64 // probabilities of the first ranks
	}{
		{4, 1, []float64{12.0 / 25, 6.0 / 25, 4.0 / 25, 3.0 / 25}}, // 1/k over H_4 = 25/12
		{4, 0, []float64{0.25, 0.25, 0.25, 0.25}},
		{1000, 1, []float64{1 / 7.4855, 0.5 / 7.4855}}, // H_1000 = 7.4855
		{1, 2, []float64{1}},
	}
	for _, tt := range tests {
		p := newPopularity(tt.n, tt.s)
		rng := newTestRand(3)
		const draws = 200_000
		counts := make([]int, tt.n)
		for range draws {
			counts[p.draw(rng)]++
		}
		for k, want := range tt.want {
			assert.InDelta(t, want, float64(counts[k])/draws, 0.005, "n=%d s=%v rank %d", tt.n, tt.s, k)
		}
	}
}

func TestGeometricTurns(t *testing.T) {
	tests := []struct {
		mean   float64
		limit  int
		capped bool // whether draws reach the cap
	}{
		{5, 20, true}, {2, 3, true}, {1, 20, false}, {7, 7, true}, {1.5, 100, false},
	}
	for _, tt := range tests {
		q := geometricRatio(tt.mean, tt.limit)
		rng := newTestRand(5)
		const draws = 200_000
		sum, most := 0, 0
		for range draws {
			n := geometricTurns(rng, q, tt.limit)
			require.True(t, n >= 1 && n <= tt.limit, "turns %d outside [1, %d]", n, tt.limit)
			sum += n
			most = max(most, n)
		}
		assert.InEpsilon(t, tt.mean, float64(sum)/draws, 0.01, "mean %v limit %d", tt.mean, tt.limit)
		assert.Equal(t, tt.capped, most == tt.limit, "mean %v limit %d: largest draw %d", tt.mean, tt.limit, most)
	}
	assert.Equal(t, 31, geometricQuantile(0.8, 0.999))
	assert.False(t, math.IsNaN(geometricRatio(5, 20)))
}

func newTestRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }
