package fleet

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// mooncakePath is the checked-in Mooncake trace, relative to this package.
const mooncakePath = "../../../shared/workloads/mooncake_fast25_synthetic.jsonl"

func mustSpec(t testing.TB, s string) Spec {
	t.Helper()
	spec, err := ParseSpec(s)
	require.NoError(t, err)
	return spec
}

// synthetic returns n requests at load times the fleet's estimated capacity.
func synthetic(t testing.TB, spec Spec, n int, load float64, seed uint64) []workload.Request {
	t.Helper()
	reqs, err := workload.Synthetic(workload.SyntheticOptions{
		Rate: 1, Count: n, Seed: seed,
		Prompt: workload.LengthDist{Mean: 512, Sigma: 0.5, Max: 4096},
		Output: workload.LengthDist{Mean: 128, Sigma: 0.5, Max: 1024},
	})
	require.NoError(t, err)
	capacity := EstimateCapacity(spec, reqs)
	return workload.Scale(reqs, load*capacity/workload.Summarize(reqs).RatePerSec)
}

// pickers builds one Picker per replica with the factory.
func pickers(t testing.TB, f policies.Factory, replicas int) []policies.Picker {
	t.Helper()
	out := make([]policies.Picker, replicas)
	for i := range out {
		p, err := f(nil)
		require.NoError(t, err)
		out[i] = p
	}
	return out
}

func TestParseSpec(t *testing.T) {
	spec, err := ParseSpec("4xh100-llama3-8b, 8xl4-llama3-8b,a10g-llama3-8b,2xh100-llama3-70b,3x2xh100-llama3-70b")
	require.NoError(t, err)
	require.Len(t, spec, 5)
	got := []int{spec[0].Count, spec[1].Count, spec[2].Count, spec[3].Count, spec[4].Count}
	assert.Equal(t, []int{4, 8, 1, 1, 3}, got)
	assert.Equal(t, "l4-llama3-8b", spec[1].Profile.Name)
	assert.Equal(t, "2xh100-llama3-70b", spec[3].Profile.Name)
	assert.Equal(t, "2xh100-llama3-70b", spec[4].Profile.Name)
	assert.Equal(t, 17, spec.Workers())
	assert.Len(t, spec.Profiles(), 17)
	again, err := ParseSpec(spec.String())
	require.NoError(t, err)
	assert.Equal(t, spec, again)

	tests := []struct {
		name, spec string
	}{
		{"empty", ""},
		{"blank group", "4xh100-llama3-8b,"},
		{"zero count", "0xh100-llama3-8b"},
		{"negative count", "-1xh100-llama3-8b"},
		{"unknown profile", "4xh200-llama3-8b"},
		{"count only", "4x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec(tt.spec)
			assert.ErrorIs(t, err, ErrBadSpec)
		})
	}
	_, err = ParseSpec("4xh200-llama3-8b")
	assert.ErrorIs(t, err, gpuworker.ErrUnknownProfile)
}

func TestConservation(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 600, 0.9, 7)
	for _, oracleMode := range []bool{false, true} {
		opts := Options{Spec: spec, Oracle: oracleMode}
		if !oracleMode {
			opts.Pickers = pickers(t, leastrequest.New, 3)
		}
		s, err := newSim(opts, reqs)
		require.NoError(t, err)
		require.NoError(t, s.loop())
		res := s.result()

		require.Len(t, res.Requests, len(reqs))
		var wantTokens, gotTokens, gaps int64
		dispatched := 0
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
			assert.Equal(t, reqs[i].OutputTokens, o.OutputTokens, "request %d", i)
			assert.Equal(t, reqs[i].PromptTokens, o.PromptTokens, "request %d", i)
			assert.Positive(t, o.TTFT, "request %d", i)
			assert.GreaterOrEqual(t, o.E2E, o.TTFT, "request %d", i)
			wantTokens += int64(reqs[i].OutputTokens)
			gotTokens += int64(o.OutputTokens)
			gaps += int64(o.OutputTokens - 1)
		}
		assert.Equal(t, wantTokens, gotTokens)
		assert.EqualValues(t, gaps, res.ITL.Count(), "one ITL gap per token after the first")
		var engineTokens int64
		for w, e := range s.engines {
			l := e.Load()
			engineTokens += l.GenerationTokens
			assert.Zero(t, l.Running+l.Waiting, "worker %d drained", w)
			dispatched += res.Workers[w].Requests
			assert.InDelta(t, 0.5, res.Workers[w].Utilization, 0.5, "utilization is a fraction")
			switch {
			case oracleMode:
				assert.Zero(t, res.Workers[w].MeasuredPrefill, "the reference scheduler measures nothing")
			case res.Workers[w].Requests > 0:
				// Three router replicas: the mean of their measured rates.
				var sum float64
				var k int
				for r := range s.eps {
					if v := s.eps[r][w].PrefillTokensPerSec(); v > 0 {
						sum, k = sum+v, k+1
					}
				}
				require.Positive(t, k, "worker %d served streams: some router measured its rate", w)
				assert.InDelta(t, sum/float64(k), res.Workers[w].MeasuredPrefill, 1e-6, "worker %d", w)
			}
		}
		assert.Equal(t, len(reqs), dispatched)
		assert.GreaterOrEqual(t, engineTokens, gotTokens, "recompute after preemption may add tokens, never lose them")
		for _, row := range s.eps {
			for _, ep := range row {
				assert.Zero(t, ep.InFlight(), "every Begin has its End")
			}
		}
		assert.Positive(t, res.Elapsed)
	}
}

func TestDeterministic(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,1xl4-llama3-8b")
	reqs := synthetic(t, spec, 300, 0.8, 3)
	run := func() *Result {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 2)}, reqs)
		require.NoError(t, err)
		return res
	}
	a, b := run(), run()
	assert.Equal(t, a.Requests, b.Requests)
	assert.Equal(t, a.Workers, b.Workers)
	assert.Equal(t, a.ITL.Quantile(0.99), b.ITL.Quantile(0.99))
}

// On a heterogeneous fleet, least_request sends less work to the slow
// worker than round_robin's even split, so latency drops.
func TestLeastRequestBeatsRoundRobinOnMixedFleet(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 1500, 0.7, 11)
	run := func(f policies.Factory) (*Result, time.Duration) {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, f, 1)}, reqs)
		require.NoError(t, err)
		var sum time.Duration
		for _, o := range res.Requests {
			require.True(t, o.OK)
			sum += o.E2E
		}
		return res, sum / time.Duration(len(reqs))
	}
	rr, rrE2E := run(roundrobin.New)
	lr, lrE2E := run(leastrequest.New)
	t.Logf("mean E2E: round_robin %v, least_request %v", rrE2E, lrE2E)
	assert.Less(t, lrE2E, rrE2E)
	fast := func(r *Result) int { return r.Workers[0].Requests + r.Workers[1].Requests }
	assert.InDelta(t, len(reqs)/2, fast(rr), 1, "round_robin splits evenly")
	assert.Greater(t, fast(lr), fast(rr), "least_request favours the H100s")
}

func p99TTFT(res *Result) time.Duration {
	ds := make([]time.Duration, 0, len(res.Requests))
	for _, o := range res.Requests {
		if o.OK {
			ds = append(ds, o.TTFT)
		}
	}
	h := new(Histogram)
	for _, d := range ds {
		h.Add(d)
	}
	return h.Quantile(0.99)
}

func TestOracleNoWorseThanLeastRequest(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 1000, 0.8, 5)
	lr, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, reqs)
	require.NoError(t, err)
	or, err := Run(Options{Spec: spec, Oracle: true}, reqs)
	require.NoError(t, err)
	t.Logf("p99 TTFT: least_request %v, oracle %v", p99TTFT(lr), p99TTFT(or))
	assert.LessOrEqual(t, p99TTFT(or), p99TTFT(lr))
}

// A request larger than every worker's KV cache fails cleanly in both modes
// instead of stalling the loop.
func TestTooLongFails(t *testing.T) {
	spec := mustSpec(t, "1xl4-llama3-8b")
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 100, OutputTokens: 5},
		{Arrival: time.Millisecond, PromptTokens: 1 << 20, OutputTokens: 5},
		{Arrival: 2 * time.Millisecond, PromptTokens: 100, OutputTokens: 5},
	}
	for _, oracleMode := range []bool{false, true} {
		res, err := Run(Options{Spec: spec, Oracle: oracleMode, Pickers: pickers(t, roundrobin.New, 1)}, reqs)
		require.NoError(t, err)
		assert.True(t, res.Requests[0].OK)
		assert.False(t, res.Requests[1].OK)
		assert.Equal(t, errTooLong, res.Requests[1].Err)
		assert.True(t, res.Requests[2].OK)
	}
}

func TestPrefixHitsOnMooncake(t *testing.T) {
	f, err := os.Open(mooncakePath)
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	defer f.Close()
	reqs, err := workload.ReadMooncake(f)
	require.NoError(t, err)
	reqs, _ = workload.DropLonger(reqs, 32768)
	reqs = workload.Limit(reqs, 300)
	spec := mustSpec(t, "2xh100-llama3-8b")
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, reqs)
	require.NoError(t, err)
	t.Logf("prefix hit ratio %.4f", res.PrefixHitRatio())
	assert.Positive(t, res.PrefixHitRatio())
	assert.Less(t, res.PrefixHitRatio(), 1.0)
}

func TestEstimateCapacity(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	reqs := synthetic(t, spec, 10, 1, 1)
	one := EstimateCapacity(spec, reqs)
	assert.Greater(t, one, 1.0)
	assert.InDelta(t, 3*one, EstimateCapacity(mustSpec(t, "3xh100-llama3-8b"), reqs), 1e-9)
	assert.Less(t, EstimateCapacity(mustSpec(t, "l4-llama3-8b"), reqs), one, "an L4 is slower than an H100")
	assert.Zero(t, EstimateCapacity(spec, nil))
	assert.True(t, EstimateCapacity(mustSpec(t, "instant"), reqs) > 1e300)

	// Below the estimate the fleet keeps up: it drains soon after the
	// last arrival.
	spec = mustSpec(t, "2xh100-llama3-8b")
	reqs = synthetic(t, spec, 2000, 0.5, 9)
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, reqs)
	require.NoError(t, err)
	last := reqs[len(reqs)-1].Arrival
	assert.Less(t, res.Elapsed, last+last/5)

	// Utilization counts time with a step in flight, which continuous
	// batching keeps near 1 well below capacity; only light load shows
	// idle time.
	reqs = synthetic(t, spec, 200, 0.01, 9)
	res, err = Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, reqs)
	require.NoError(t, err)
	assert.Less(t, res.Workers[0].Utilization, 0.9)
	assert.Positive(t, res.Workers[0].Utilization)
}

func TestHistogram(t *testing.T) {
	h := new(Histogram)
	assert.Zero(t, h.Quantile(0.5))
	assert.Zero(t, h.Mean())
	for i := 1; i <= 100_000; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	assert.EqualValues(t, 100_000, h.Count())
	assert.InDelta(t, 50_000.5, float64(h.Mean())/1e3, 0.01)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := q * 100_000 * 1e3
		assert.InEpsilon(t, want, float64(h.Quantile(q)), 0.01, "q=%v", q)
	}
	small := new(Histogram)
	for i := range 100 {
		small.Add(time.Duration(i))
	}
	assert.Equal(t, time.Duration(49), small.Quantile(0.5), "exact below 128 ns: the value of rank floor(q*(n-1))")
	h.Merge(small)
	assert.EqualValues(t, 100_100, h.Count())
}

func TestHeap(t *testing.T) {
	h := newStepHeap(5)
	h.set(3, 30)
	h.set(1, 10)
	h.set(4, 10)
	h.set(0, 50)
	w, k := h.top()
	assert.Equal(t, 1, w, "ties break by worker index")
	assert.EqualValues(t, 10, k)
	h.set(1, 40)
	w, _ = h.top()
	assert.Equal(t, 4, w)
	h.remove(4)
	h.remove(2) // absent: no-op
	var order []int
	for h.len() > 0 {
		w, _ := h.top()
		order = append(order, w)
		h.remove(w)
	}
	assert.Equal(t, []int{3, 1, 0}, order)
}

func TestOptionsErrors(t *testing.T) {
	spec := mustSpec(t, "h100-llama3-8b")
	_, err := Run(Options{Spec: spec}, nil)
	assert.Error(t, err, "no pickers and no oracle")
	_, err = Run(Options{Pickers: pickers(t, roundrobin.New, 1)}, nil)
	assert.Error(t, err, "no workers")
	unsorted := []workload.Request{{Arrival: time.Second, PromptTokens: 1, OutputTokens: 1}, {PromptTokens: 1, OutputTokens: 1}}
	_, err = Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1)}, unsorted)
	assert.Error(t, err)
}
