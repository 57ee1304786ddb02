package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/leastrequest"
)

func batchLines(t *testing.T, spec Spec, n int, seed uint64) []workload.Request {
	t.Helper()
	return synthetic(t, spec, n, 1, seed)
}

// A batch alone: every line runs once, never more than Concurrency at a
// time on any worker, and more concurrency finishes it sooner.
func TestBatchRunsEveryLineWithinItsConcurrency(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b")
	lines := batchLines(t, spec, 400, 3)
	run := func(c int) *Result {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), Admission: &Admission{},
			Batch: &Batch{Requests: lines, Concurrency: c}}, nil)
		require.NoError(t, err)
		return res
	}
	small, large := run(8), run(64)
	for _, res := range []*Result{small, large} {
		assert.Empty(t, res.Requests)
		require.NotNil(t, res.Batch)
		require.Len(t, res.Batch.Requests, len(lines))
		for i, o := range res.Batch.Requests {
			require.True(t, o.OK, "line %d: %s", i, o.Err)
			assert.Equal(t, lines[i].OutputTokens, o.OutputTokens)
			assert.Equal(t, admission.Flex, o.Class)
			assert.Equal(t, "batch", o.Tenant)
		}
		assert.Zero(t, res.Batch.Resent)
	}
	for _, w := range small.Workers {
		assert.LessOrEqual(t, w.PeakInFlight, 8)
	}
	assert.Positive(t, small.Batch.Duration())
	assert.Less(t, large.Batch.Duration(), small.Batch.Duration(), "64 lines at once finish sooner than 8")
}

// Beside a workload, a flex batch leaves the workload's figures its own:
// its requests are all there, the batch's are apart, and its time to first
// token suffers less than when the same lines are ordinary traffic.
func TestBatchBesideAWorkload(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 0.6, 5)
	lines := batchLines(t, spec, 3000, 6)
	run := func(b *Batch) *Result {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), Admission: &Admission{}, Batch: b}, reqs)
		require.NoError(t, err)
		return res
	}
	alone := run(nil)
	flex := run(&Batch{Requests: lines, Concurrency: 256})
	ordinary := run(&Batch{Requests: lines, Concurrency: 256, Class: admission.Default})
	for _, res := range []*Result{flex, ordinary} {
		require.Len(t, res.Requests, len(reqs))
		require.Len(t, res.Batch.Requests, len(lines))
		for i := range res.Batch.Requests {
			require.True(t, res.Batch.Requests[i].OK, "line %d", i)
		}
		for i := range res.Requests {
			require.True(t, res.Requests[i].OK, "request %d", i)
			assert.Equal(t, admission.Default, res.Requests[i].Class)
		}
	}
	p99 := func(res *Result) time.Duration { return quantile(res, admission.Default, 0.99, ttft) }
	t.Logf("workload p99 TTFT: alone %v, beside flex %v, beside ordinary %v; batch took %v and %v",
		p99(alone), p99(flex), p99(ordinary), flex.Batch.Duration(), ordinary.Batch.Duration())
	assert.Less(t, p99(flex), p99(ordinary))
	assert.Less(t, flex.Elapsed, flex.Batch.Duration(), "Elapsed is the workload's span, not the batch's")
	assert.GreaterOrEqual(t, flex.Elapsed, alone.Elapsed*9/10)
}

// A line admission sheds is sent again after ShedRetry, and the batch
// still ends with every line answered once.
func TestBatchLinesShedAreSentAgain(t *testing.T) {
	spec := mustSpec(t, "1xl4-llama3-8b")
	reqs := synthetic(t, spec, 400, 1.5, 7)
	lines := batchLines(t, spec, 50, 8)
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1),
		Admission: &Admission{MaxWait: [admission.NumClasses]time.Duration{admission.Flex: 100 * time.Millisecond}},
		Batch:     &Batch{Requests: lines, Concurrency: 16}}, reqs)
	require.NoError(t, err)
	assert.Positive(t, res.Batch.Resent, "an overloaded worker sheds flex lines")
	for i, o := range res.Batch.Requests {
		require.True(t, o.OK, "line %d: %s", i, o.Err)
	}
	assert.GreaterOrEqual(t, res.Batch.End, res.Batch.Start+ShedRetry)
}

func TestBatchOptionsAreChecked(t *testing.T) {
	spec := mustSpec(t, "1xl4-llama3-8b")
	lines := batchLines(t, spec, 3, 1)
	_, err := Run(Options{Spec: spec, Oracle: true, Batch: &Batch{Requests: lines}}, nil)
	assert.ErrorContains(t, err, "not the oracle")
	_, err = Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), Batch: &Batch{Requests: lines, Concurrency: -1}}, nil)
	assert.ErrorContains(t, err, "Concurrency")
}

// BatchPrefill confines the batch to what the workload leaves. On this
// decode-heavy work (512/128 tokens) it keeps the workload's median time
// to first token below the unbounded batch's; goodput it does not keep
// (the batch's decodes lengthen every step, bounded or not), which the
// README reports.
func TestBatchPrefillConfinesTheBatch(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 0.6, 5)
	lines := batchLines(t, spec, 3000, 6)
	run := func(fp time.Duration, b *Batch) *Result {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), Admission: &Admission{BatchPrefill: fp}, Batch: b}, reqs)
		require.NoError(t, err)
		return res
	}
	without := run(0, nil)
	off := run(-1, &Batch{Requests: lines, Concurrency: 256})
	on := run(0, &Batch{Requests: lines, Concurrency: 256})
	p50 := func(res *Result) time.Duration { return quantile(res, admission.Default, 0.5, ttft) }
	good := func(res *Result) float64 { return res.Goodput(time.Second, 100*time.Millisecond) }
	t.Logf("p50 TTFT without %v, flex unbounded %v, bounded %v; goodput %.2f, %.2f, %.2f; batch %v and %v",
		p50(without), p50(off), p50(on), good(without), good(off), good(on), off.Batch.Duration(), on.Batch.Duration())
	assert.Less(t, p50(on), p50(off))
	for i, o := range on.Batch.Requests {
		require.True(t, o.OK, "line %d", i)
	}
}
