package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// The reference binds late: once handed to its worker, a request's prefill
// starts in that worker's next step, so its TTFT after being handed over is
// its own prefill plus at most about one step already in flight and one
// being planned. Every wait happens in the reference's queue (Held), none in
// an engine's, even at twice the fleet's capacity.
func TestOracleBindsLate(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 1500, 2, 9)
	res, err := Run(Options{Spec: spec, Oracle: true}, reqs)
	require.NoError(t, err)
	held := 0
	for i, o := range res.Requests {
		require.True(t, o.OK, "request %d: %s", i, o.Err)
		p := spec.Profiles()[o.Worker]
		chunks := (o.PromptTokens + p.MaxBatchedTokens - 1) / p.MaxBatchedTokens
		budget := p.MaxBatchedTokens
		fullStep := p.StepDuration(gpuworker.StepWork{ // a full step, its attention as for one fresh prompt
			Tokens: budget, ContextTokens: p.KVTokens(), AttnWork: float64(budget) * float64(budget), Seqs: p.MaxNumSeqs,
		})
		limit := time.Duration(chunks+2) * fullStep
		assert.LessOrEqual(t, o.TTFT-o.Held, limit, "request %d (%d prompt tokens on %s) waited in its engine", i, o.PromptTokens, p.Name)
		if o.Held > 0 {
			held++
		}
	}
	assert.Greater(t, held, len(reqs)/2, "at twice capacity most requests wait in the reference's queue")
}

// A request whose prompt is cached on one worker goes there, and its
// cached blocks skip prefill.
func TestOracleFollowsThePrefixCache(t *testing.T) {
	spec := mustSpec(t, "4xh100-llama3-8b")
	ids := []int{11, 12, 13, 14, 15, 16}
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 3000, OutputTokens: 4, HashIDs: ids},
		{Arrival: time.Second, PromptTokens: 3000, OutputTokens: 4, HashIDs: ids},
		{Arrival: 2 * time.Second, PromptTokens: 3000, OutputTokens: 4, HashIDs: ids},
	}
	res, err := Run(Options{Spec: spec, Oracle: true}, reqs)
	require.NoError(t, err)
	first := res.Requests[0].Worker
	for i, o := range res.Requests {
		require.True(t, o.OK, o.Err)
		assert.Equal(t, first, o.Worker, "request %d", i)
	}
	assert.Less(t, res.Requests[1].TTFT, res.Requests[0].TTFT/2, "the second prompt is mostly cached")
	assert.InDelta(t, 2.0/3, res.PrefixHitRatio(), 0.05)
}

// No head-of-line blocking: while prompts too long for the L4's KV cache
// queue for the busy H100, a short one that arrives behind them starts at
// once on the idle L4.
func TestOracleLetsShortPromptsPass(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b,1xl4-llama3-8b")
	var reqs []workload.Request
	for range 40 {
		reqs = append(reqs, workload.Request{PromptTokens: 30_000, OutputTokens: 8})
	}
	reqs = append(reqs, workload.Request{Arrival: 100 * time.Millisecond, PromptTokens: 100, OutputTokens: 8})
	res, err := Run(Options{Spec: spec, Oracle: true}, reqs)
	require.NoError(t, err)
	short := res.Requests[len(reqs)-1]
	require.True(t, short.OK, short.Err)
	last := res.Requests[len(reqs)-2]
	t.Logf("short prompt: worker %d, TTFT %v; last long prompt: worker %d, TTFT %v", short.Worker, short.TTFT, last.Worker, last.TTFT)
	assert.Equal(t, 1, short.Worker, "the short prompt runs on the L4")
	assert.Less(t, short.TTFT, 300*time.Millisecond)
	assert.Greater(t, last.TTFT, time.Second, "the long prompts queue")
}

// With aging, the reference serves a burst's short prompts before the long
// ones that arrived with them; first come, first served it does not.
func TestOracleAging(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	var reqs []workload.Request
	for i := range 60 {
		p := 8000
		if i%2 == 1 {
			p = 200
		}
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * time.Millisecond, PromptTokens: p, OutputTokens: 4})
	}
	meanShort := func(aging time.Duration) time.Duration {
		res, err := Run(Options{Spec: spec, Oracle: true, OracleAging: aging}, reqs)
		require.NoError(t, err)
		var sum time.Duration
		for i, o := range res.Requests {
			require.True(t, o.OK, o.Err)
			if i%2 == 1 {
				sum += o.TTFT
			}
		}
		return sum / 30
	}
	fifo, aged := meanShort(0), meanShort(time.Millisecond)
	t.Logf("short prompts' mean TTFT: first come first served %v, aged %v", fifo, aged)
	assert.Less(t, aged, fifo/3)
}

// By class, the reference serves a burst's priority requests before the
// flex requests that arrived ahead of them; first come, first served it
// does not, and without classes on the requests the option changes nothing.
func TestOracleClasses(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	var reqs []workload.Request
	classes := make([]admission.Class, 0, 120)
	for i := range 120 {
		c := admission.Flex
		if i >= 90 {
			c = admission.Priority // the burst's last quarter
		}
		classes = append(classes, c)
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 6000, OutputTokens: 4})
	}
	run := func(o Options) (priority, flex time.Duration) {
		o.Spec, o.Oracle = spec, true
		res, err := Run(o, reqs)
		require.NoError(t, err)
		for i, r := range res.Requests {
			require.True(t, r.OK, r.Err)
			if i >= 90 {
				priority += r.TTFT / 30
			} else {
				flex += r.TTFT / 90
			}
		}
		return priority, flex
	}
	fifoP, fifoF := run(Options{Classes: classes})
	byP, byF := run(Options{Classes: classes, OracleClasses: true})
	t.Logf("mean TTFT priority / flex: first come first served %v / %v, by class %v / %v", fifoP, fifoF, byP, byF)
	assert.Greater(t, fifoP, fifoF, "first come, first served: the last to arrive wait longest")
	assert.Less(t, byP, fifoP/3, "by class: priority goes ahead of the flex queued before it")
	assert.Less(t, byP, byF)
	noP, noF := run(Options{OracleClasses: true})
	assert.Equal(t, [2]time.Duration{fifoP, fifoF}, [2]time.Duration{noP, noF}, "without classes the order is arrival")
}

// With OracleFirst the reference serves that tenant's requests ahead of
// the others queued before them.
func TestOracleFirst(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	var reqs []workload.Request
	var tenants []string
	for i := range 120 {
		tenants = append(tenants, map[bool]string{false: "heavy", true: "light"}[i%10 == 9])
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 6000, OutputTokens: 4})
	}
	meanLight := func(first string) time.Duration {
		res, err := Run(Options{Spec: spec, Oracle: true, TenantOf: tenants, OracleFirst: first}, reqs)
		require.NoError(t, err)
		var sum time.Duration
		for i, r := range res.Requests {
			require.True(t, r.OK, r.Err)
			if tenants[i] == "light" {
				sum += r.TTFT / 12
			}
		}
		return sum
	}
	fifo, first := meanLight(""), meanLight("light")
	t.Logf("the light tenant's mean TTFT: first come first served %v, served first %v", fifo, first)
	assert.Less(t, first, fifo/3)
}
