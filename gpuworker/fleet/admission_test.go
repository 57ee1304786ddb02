package fleet

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/roundrobin"
	"github.com/sluice-llm/sluice/policies/scored"
)

// classMix draws n classes, share of them priority and the rest flex.
func classMix(n int, share float64, seed uint64) []admission.Class {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]admission.Class, n)
	for i := range out {
		out[i] = admission.Flex
		if rng.Float64() < share {
			out[i] = admission.Priority
		}
	}
	return out
}

func byClass(res *Result, c admission.Class, f func(o *Outcome) bool) int {
	n := 0
	for i := range res.Requests {
		if o := &res.Requests[i]; o.Class == c && f(o) {
			n++
		}
	}
	return n
}

// quantile is the q-quantile (nearest rank) of the durations f picks from
// the outcomes of class c that completed.
func quantile(res *Result, c admission.Class, q float64, f func(o *Outcome) time.Duration) time.Duration {
	var ds []time.Duration
	for i := range res.Requests {
		if o := &res.Requests[i]; o.OK && o.Class == c {
			ds = append(ds, f(o))
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1))]
}

func ttft(o *Outcome) time.Duration { return o.TTFT }
func held(o *Outcome) time.Duration { return o.Held }

// Every request ends exactly one way: served, shed by admission, or refused
// by its tenant's limits; engines and endpoints drain, and limits are
// settled for all of them.
func TestAdmissionConservation(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 2000, 1.8, 21)
	opts := Options{
		Spec: spec, Pickers: pickers(t, leastrequest.New, 2),
		Classes: classMix(len(reqs), 0.3, 1),
		Tenants: []Tenant{
			{Name: "limited", Share: 1, Limits: quota.Limits{RequestsPerMinute: 600, RequestBurst: 20}},
			{Name: "open", Share: 3},
		},
		Admission: &Admission{MaxWait: [admission.NumClasses]time.Duration{admission.Flex: 500 * time.Millisecond}},
	}
	s, err := newSim(opts, reqs)
	require.NoError(t, err)
	require.NoError(t, s.loop())
	res := s.result()

	var served, shed, limited int
	var tokens int64
	for i, o := range res.Requests {
		switch {
		case o.OK:
			served++
			assert.Equal(t, reqs[i].OutputTokens, o.OutputTokens, "request %d", i)
			assert.GreaterOrEqual(t, o.TTFT, o.Held, "request %d", i)
			tokens += int64(o.OutputTokens)
		case o.Shed():
			shed++
			assert.True(t, strings.HasPrefix(o.Err, "shed: "+o.Class.String()+": "), o.Err)
			assert.Equal(t, -1, o.Worker, "a shed request never reached a worker")
		case strings.HasPrefix(o.Err, errLimited):
			limited++
			assert.Zero(t, o.Held)
		default:
			t.Fatalf("request %d ended otherwise: %q", i, o.Err)
		}
		assert.NotEmpty(t, o.Tenant, "request %d", i)
	}
	t.Logf("served %d, shed %d, limited %d", served, shed, limited)
	assert.Equal(t, len(reqs), served+shed+limited)
	assert.Positive(t, shed)
	assert.Positive(t, limited)
	for w, e := range s.engines {
		l := e.Load()
		assert.Zero(t, l.Running+l.Waiting, "worker %d drained", w)
		assert.Zero(t, s.adm.inFlight[w], "worker %d: every slot freed", w)
		assert.Zero(t, s.adm.pending[w], "worker %d: every prompt prefilled", w)
	}
	for _, row := range s.eps {
		for _, ep := range row {
			assert.Zero(t, ep.InFlight(), "every attempt finished")
		}
	}
	var settled int64
	for _, st := range res.Tenants {
		settled += st.OutputTokens
	}
	assert.Equal(t, tokens, settled, "limits settled with what was served")
	assert.Zero(t, s.adm.waiting())
}

// budgetChecker is a Picker that checks, at every pick, that no endpoint
// is above its worker's budget and that every candidate has room.
type budgetChecker struct {
	t      *testing.T
	inner  policies.Picker
	budget map[*backends.Endpoint]int
	all    []*backends.Endpoint
	picks  int
}

func (b *budgetChecker) Pick(ctx context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	b.picks++
	for _, ep := range b.all {
		if ep.InFlight() > int64(b.budget[ep]) {
			b.t.Errorf("%s has %d in flight, budget %d", ep.Address(), ep.InFlight(), b.budget[ep])
		}
	}
	for _, ep := range eps {
		if ep.InFlight() >= int64(b.budget[ep]) {
			b.t.Errorf("%s offered with %d in flight, budget %d", ep.Address(), ep.InFlight(), b.budget[ep])
		}
	}
	return b.inner.Pick(ctx, r, eps)
}

// No worker ever holds more requests than its budget, counted by the
// endpoints' own in-flight counts, at every pick and at its peak.
func TestAdmissionBudget(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 1500, 1.5, 22)
	budget := []int{6, 5, 2, 3}
	inner, err := roundrobin.New(nil)
	require.NoError(t, err)
	check := &budgetChecker{t: t, inner: inner, budget: map[*backends.Endpoint]int{}}
	noLimit := [admission.NumClasses]time.Duration{-1, -1, -1}
	s, err := newSim(Options{Spec: spec, Pickers: []policies.Picker{check}, Admission: &Admission{Budget: budget, MaxWait: noLimit}}, reqs)
	require.NoError(t, err)
	check.all = s.eps[0]
	for w, ep := range s.eps[0] {
		check.budget[ep] = budget[w]
	}
	require.NoError(t, s.loop())
	res := s.result()
	assert.Equal(t, len(reqs), check.picks)
	for w, ws := range res.Workers {
		assert.Equal(t, budget[w], ws.Budget)
		assert.LessOrEqual(t, ws.PeakInFlight, budget[w], "worker %d", w)
		assert.Positive(t, ws.PeakInFlight)
	}
	for i, o := range res.Requests {
		require.True(t, o.OK, "request %d: %s", i, o.Err)
	}
}

// A freed slot is taken at that virtual time, and the request it takes
// joins the engine's very next step: behind a one-request budget, the
// second request is bound the instant the first finishes and its first
// token comes one prefill later.
func TestAdmissionBindsWhenTheSlotFrees(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 1000, OutputTokens: 20},
		{Arrival: time.Millisecond, PromptTokens: 3000, OutputTokens: 5},
	}
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Admission: &Admission{Budget: []int{1}}}, reqs)
	require.NoError(t, err)
	a, b := res.Requests[0], res.Requests[1]
	require.True(t, a.OK && b.OK)
	assert.Zero(t, a.Held)
	assert.Equal(t, a.E2E-time.Millisecond, b.Held, "bound when the first finished")
	p := spec.Profiles()[0]
	assert.Equal(t, p.PrefillTime(3000, 0), b.TTFT-b.Held, "prefilled in the next step, alone")
}

// A request bound when a step's end freed its slot starts at the step after
// the engine's next one, as the live router's does (it learns of the step's
// answers once the engine has planned its next step); with SameStep it
// joins the next one. Behind a budget of two, C waits for B's slot while A
// keeps the engine decoding: C's first token comes one of A's decode steps
// later than with SameStep, after the same wait in the queue.
func TestAdmissionBindsAfterTheEnginePlannedItsNextStep(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 1000, OutputTokens: 50},
		{Arrival: time.Millisecond, PromptTokens: 1000, OutputTokens: 2},
		{Arrival: 2 * time.Millisecond, PromptTokens: 3000, OutputTokens: 2},
	}
	run := func(same bool) Outcome {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Admission: &Admission{Budget: []int{2}, PendingPrefill: -1, SameStep: same}}, reqs)
		require.NoError(t, err)
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
		}
		return res.Requests[2]
	}
	live, same := run(false), run(true)
	require.Positive(t, live.Held, "C waits for a slot")
	assert.Equal(t, same.Held, live.Held, "bound at the same step's end")
	p := spec.Profiles()[0]
	lag := (live.TTFT - live.Held) - (same.TTFT - same.Held)
	assert.GreaterOrEqual(t, lag, p.StepTime(1, 0), "a decode step of A's more")
	assert.LessOrEqual(t, lag, p.StepTime(1, 1100)+time.Millisecond, "one decode step of A's, no more")
}

// ReleaseAtStep counts a bound prompt toward the prefill bound only until
// its worker plans a step after it was bound: behind B, whose prompt fills
// the bound, C is bound as B's prefill step begins and waits in the engine
// for the next, where by default it is bound only at B's first token.
func TestAdmissionReleaseAtStep(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	burst := 100 * time.Millisecond
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 1000, OutputTokens: 40}, // measures the rate, then keeps the engine decoding
		{Arrival: burst, PromptTokens: 2000, OutputTokens: 2},
		{Arrival: burst, PromptTokens: 2000, OutputTokens: 2},
	}
	bound := spec.Profiles()[0].PrefillTime(1000, 0) // about 1,000 tokens at the measured rate: B alone fills it
	run := func(release bool) (b, c Outcome) {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1),
			Admission: &Admission{PendingPrefill: bound, ReleaseAtStep: release}}, reqs)
		require.NoError(t, err)
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
		}
		return res.Requests[1], res.Requests[2]
	}
	b, c := run(false)
	require.Positive(t, c.Held, "C waits for room")
	assert.GreaterOrEqual(t, c.Held, b.TTFT, "by default C is bound at B's first token")
	b, c = run(true)
	require.Positive(t, c.Held, "C waits for room")
	assert.Less(t, c.Held, b.TTFT, "C is bound once B's prefill step began, before its first token")
	assert.Greater(t, c.TTFT, b.TTFT, "and starts in the step after B's")
}

// The prefill bound: a worker with a step's worth of prompts bound and not
// yet prefilled takes no more until they are, so a burst waits in the
// queue, not in the engine.
func TestAdmissionPrefillBound(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	var reqs []workload.Request
	for range 20 {
		reqs = append(reqs, workload.Request{PromptTokens: 4000, OutputTokens: 4})
	}
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Admission: &Admission{}}, reqs)
	require.NoError(t, err)
	step := spec.Profiles()[0].MaxBatchedTokens
	p := spec.Profiles()[0]
	for i, o := range res.Requests {
		require.True(t, o.OK, o.Err)
		// Bound behind less than one step's budget of other prompts, it
		// starts within about two steps of being bound.
		assert.Less(t, o.TTFT-o.Held, 3*p.PrefillTime(step, 0), "request %d", i)
	}
	assert.Positive(t, res.Requests[len(reqs)-1].Held)
}

// The prefill bound in time (the router's admission.max_pending_prefill),
// at the prefill rate the router measured: a first request alone measures
// the rate at which the worker prefills 1,000 tokens, and a bound of 1,500
// tokens' time at that rate then lets a second prompt of a burst join the
// first and no third, so the burst's steps hold two prompts each where one
// step's budget (the default bound) lets eight in.
func TestAdmissionPendingPrefillBound(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	reqs := []workload.Request{{PromptTokens: 1000, OutputTokens: 2}}
	for range 20 {
		reqs = append(reqs, workload.Request{Arrival: 200 * time.Millisecond, PromptTokens: 1000, OutputTokens: 2})
	}
	p := spec.Profiles()[0]
	one := p.PrefillTime(1000, 0)
	bound := time.Duration(1.5 * float64(one))
	run := func(a *Admission) []Outcome {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Admission: a}, reqs)
		require.NoError(t, err)
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
		}
		return res.Requests[1:] // the burst
	}
	// SameStep: the pairs are bound as the step before them ends and join
	// the next, so that the arithmetic is the bound's alone (in the live
	// order each pair waits a step more, and its TTFTs lower the rate the
	// bound is measured in).
	timed, stepped := run(&Admission{PendingPrefill: bound, SameStep: true}), run(&Admission{SameStep: true})
	// The burst's first starts alone on the idle worker; from then on its
	// prompts are bound two at a time and prefilled two per step.
	two := p.PrefillTime(2000, 0)
	for k := 1; 2*k < len(timed); k++ {
		assert.Equal(t, timed[2*k-1].TTFT, timed[2*k].TTFT, "burst requests %d and %d share a step", 2*k-1, 2*k)
	}
	for i, o := range timed {
		assert.LessOrEqual(t, o.TTFT-o.Held, one+two+two/4, "burst request %d: bound at most a step of one and one of two prompts before its first token", i)
	}
	assert.Positive(t, timed[2].Held, "the third waits in the queue")
	assert.Equal(t, stepped[1].TTFT, stepped[8].TTFT, "one step's budget: eight prompts in the second step")
	assert.Greater(t, stepped[8].TTFT-stepped[8].Held, 3*two)
}

// A class's own prefill bound (ClassPendingPrefill): behind a burst of
// flex prompts that fills flex's bound, a priority request with a looser
// bound is bound on arrival, where with one bound for all it waits for the
// burst's first prompts' tokens (though ahead of flex in the queue).
func TestAdmissionPrefillBoundByClass(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b")
	reqs := []workload.Request{{PromptTokens: 1000, OutputTokens: 2}} // measures the rate
	for range 10 {
		reqs = append(reqs, workload.Request{Arrival: 200 * time.Millisecond, PromptTokens: 1000, OutputTokens: 2})
	}
	reqs = append(reqs, workload.Request{Arrival: 200*time.Millisecond + time.Microsecond, PromptTokens: 1000, OutputTokens: 2})
	classes := make([]admission.Class, len(reqs))
	for i := range classes {
		classes[i] = admission.Flex
	}
	classes[len(reqs)-1] = admission.Priority
	one := spec.Profiles()[0].PrefillTime(1000, 0)
	bound := time.Duration(1.5 * float64(one)) // two of the burst's prompts fill it
	run := func(a *Admission) []Outcome {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Classes: classes, Admission: a}, reqs)
		require.NoError(t, err)
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
		}
		return res.Requests
	}
	same := run(&Admission{PendingPrefill: bound})
	var loose [admission.NumClasses]time.Duration
	loose[admission.Priority] = 4 * one
	split := run(&Admission{PendingPrefill: bound, ClassPendingPrefill: loose})
	last := len(reqs) - 1
	assert.Positive(t, same[last].Held, "one bound: priority waits for room")
	assert.Zero(t, split[last].Held, "its own bound: priority is bound on arrival")
	assert.Less(t, split[last].TTFT, same[last].TTFT)
	for i := 1; i < last; i++ {
		assert.Equal(t, same[i].Held > 0, split[i].Held > 0, "flex request %d waits alike under both", i)
	}
	assert.Positive(t, split[last-1].Held, "the burst's last flex waits")
}

// BelowSharePrefill: beside a tenant sending ten times its requests at
// 1.3x capacity, a light tenant's requests, which hold less than their
// share of those in flight, bind past the heavy tenant's prefill backlog:
// with the default policy its tail is shorter, and the heavy tenant's
// median wait no longer. The p99 is the light tenant's third slowest
// request of about 270 and moves with the seed (0.70-1.01x on seeds
// 20-29), so the test asks it of the mean over five seeds; with
// least_request the rule does about nothing (0.89-1.13x, mean 0.98).
func TestAdmissionBelowSharePrefill(t *testing.T) {
	def := func(map[string]any) (policies.Picker, error) { return scored.New(map[string]any{"seed": uint64(9)}) }
	sum := 0.0
	const seeds = 5
	for seed := uint64(20); seed < 20+seeds; seed++ {
		run, q := twoTenantRunSeed(t, 1, seed, def)
		one := run(&Admission{PendingPrefill: 35 * time.Millisecond, AboveSharePrefill: -1})
		split := run(&Admission{PendingPrefill: 35 * time.Millisecond, BelowSharePrefill: 70 * time.Millisecond, AboveSharePrefill: -1})
		t.Logf("seed %d: light p99 %v -> %v; heavy p50 %v -> %v", seed, q(one, "light", 0.99), q(split, "light", 0.99), q(one, "heavy", 0.5), q(split, "heavy", 0.5))
		sum += q(split, "light", 0.99).Seconds() / q(one, "light", 0.99).Seconds()
		assert.InEpsilon(t, q(one, "heavy", 0.5).Seconds(), q(split, "heavy", 0.5).Seconds(), 0.05, "seed %d", seed)
	}
	assert.Less(t, sum/seeds, 0.95, "the light tenant's p99 with the rule over without, the mean over the seeds")
}

// With the default AboveSharePrefill, at 1.3x capacity the heavy tenant
// hands each engine about one prompt a step while the light tenant has
// requests in flight: the light tenant's p99 TTFT falls to a fraction of
// what it is with the rule off, and every request is still served.
func TestAdmissionAboveSharePrefill(t *testing.T) {
	run, q := twoTenantRun(t, 1)
	off, on := q(run(&Admission{AboveSharePrefill: -1}), "light", 0.99), q(run(&Admission{}), "light", 0.99)
	t.Logf("light p99 %v with the rule off, %v with its default", off, on)
	assert.Less(t, on.Seconds(), off.Seconds()/2)
}

// With three router replicas the prompts each sent that an engine has not
// started count together, as the shared store counts them live, so that
// three replicas hand an engine about one prompt a step as one does, and
// the light tenant's tail is about one replica's. (Each holding its own
// to a third, one prompt always passing, the three handed engines up to
// three prompts a step: light p99 470 and 411 ms on Poisson seeds 2 and 3
// against one replica's 245 and 252 ms; live 423 and 482 against 227.)
//
// The p99 is the light tenant's third slowest request of about 270, which
// moves with the seed either way (0.52-1.61x on seeds 20-29), so the test
// asks it of the mean ratio over five seeds.
func TestAdmissionAboveSharePrefillAcrossReplicas(t *testing.T) {
	sum := 0.0
	const seeds = 5
	for seed := uint64(20); seed < 20+seeds; seed++ {
		run1, q := twoTenantRunSeed(t, 1, seed, leastrequest.New)
		run3, _ := twoTenantRunSeed(t, 3, seed, leastrequest.New)
		one, three := q(run1(&Admission{}), "light", 0.99), q(run3(&Admission{}), "light", 0.99)
		t.Logf("seed %d: light p99 %v behind one replica, %v behind three", seed, one, three)
		sum += three.Seconds() / one.Seconds()
	}
	assert.Less(t, sum/seeds, 1.2, "three replicas' light p99 over one's, the mean over the seeds")
}

// Beside a tenant sending ten times its tokens at 1.3x capacity, the
// below-share detour keeps the light tenant's short prompts off workers
// where they would start more than admission.DetourFactor times later
// than on the quickest, though within the 250 ms detour: with the
// default policy, which would often send them to an L4 at 200-400 ms
// where the H100 starts them in 40-120 ms, the light tenant's p99 falls
// below its run alone (where no tenant is below its share), on three
// seeds 0.55-0.63x; without the factor 1.10-1.26x.
func TestAdmissionDetourKeepsALightTenantOffSlowWorkers(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b,2xl4-llama3-8b")
	for _, seed := range []uint64{20, 22, 27} {
		reqs := synthetic(t, spec, 3000, 1.3, seed)
		tenants := make([]string, len(reqs))
		var alone []workload.Request
		for i := range tenants {
			tenants[i] = "heavy"
			if i%11 == 5 {
				tenants[i] = "light"
				alone = append(alone, reqs[i])
			}
		}
		p99 := func(rs []workload.Request, of []string) time.Duration {
			p, err := scored.New(map[string]any{"seed": uint64(9)})
			require.NoError(t, err)
			res, err := Run(Options{Spec: spec, Pickers: []policies.Picker{p}, TenantOf: of, Admission: &Admission{}}, rs)
			require.NoError(t, err)
			var ds []time.Duration
			for i, o := range res.Requests {
				require.True(t, o.OK, "request %d: %s", i, o.Err)
				if of[i] == "light" {
					ds = append(ds, o.TTFT)
				}
			}
			slices.Sort(ds)
			return ds[int(0.99*float64(len(ds)-1))]
		}
		lights := make([]string, len(alone))
		for i := range lights {
			lights[i] = "light"
		}
		beside, solo := p99(reqs, tenants), p99(alone, lights)
		t.Logf("seed %d: light p99 %v beside heavy, %v alone", seed, beside, solo)
		assert.Less(t, beside, solo, "seed %d", seed)
	}
}

// twoTenantRun returns a run of 3,000 Poisson requests at 1.3x capacity
// over 1 H100 and 2 L4s from that many router replicas, one in eleven
// from tenant light and the rest from heavy, through the given admission,
// and a tenant's TTFT quantile in a result (every request must have been
// served).
func twoTenantRun(t *testing.T, routers int) (run func(*Admission) *Result, q func(*Result, string, float64) time.Duration) {
	return twoTenantRunSeed(t, routers, 26, leastrequest.New)
}

// twoTenantRunSeed is twoTenantRun on the workload of another seed, with
// the policy policy.
func twoTenantRunSeed(t *testing.T, routers int, seed uint64, policy policies.Factory) (run func(*Admission) *Result, q func(*Result, string, float64) time.Duration) {
	spec := mustSpec(t, "1xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 1.3, seed)
	tenants := make([]string, len(reqs))
	for i := range tenants {
		tenants[i] = "heavy"
		if i%11 == 5 {
			tenants[i] = "light"
		}
	}
	q = func(res *Result, tenant string, p float64) time.Duration {
		var ds []time.Duration
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
			if tenants[i] == tenant {
				ds = append(ds, o.TTFT)
			}
		}
		slices.Sort(ds)
		return ds[int(p*float64(len(ds)-1))]
	}
	run = func(a *Admission) *Result {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, policy, routers), TenantOf: tenants, Admission: a}, reqs)
		require.NoError(t, err)
		return res
	}
	return run, q
}

// Under overload priority waits less than flex: it goes first in the queue.
func TestAdmissionPriorityWaitsLess(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 1.3, 23)
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1),
		Classes: classMix(len(reqs), 0.3, 2), Admission: &Admission{}}, reqs)
	require.NoError(t, err)
	for _, q := range []float64{0.5, 0.99} {
		prio, flex := quantile(res, admission.Priority, q, held), quantile(res, admission.Flex, q, held)
		t.Logf("held q%.2f: priority %v, flex %v", q, prio, flex)
		assert.Less(t, prio*5, flex, "q%.2f", q)
		assert.Less(t, quantile(res, admission.Priority, q, ttft), quantile(res, admission.Flex, q, ttft))
	}
	assert.Less(t, quantile(res, admission.Priority, 0.99, ttft), 2*time.Second)
}

// scoredRun runs reqs with classes through the default policy (seed 9)
// with an admission's rules, every request served.
func scoredRun(t *testing.T, spec Spec, reqs []workload.Request, classes []admission.Class) func(*Admission) *Result {
	return func(a *Admission) *Result {
		p, err := scored.New(map[string]any{"seed": uint64(9)})
		require.NoError(t, err)
		res, err := Run(Options{Spec: spec, Pickers: []policies.Picker{p}, Classes: classes, Admission: a}, reqs)
		require.NoError(t, err)
		for i, o := range res.Requests {
			require.True(t, o.OK, "request %d: %s", i, o.Err)
		}
		return res
	}
}

// With WorseClassPrefill (on by default) flex, while priority has requests
// in flight, hands each engine about one prompt a step: at 1.3x capacity,
// 30% priority, over 1 H100 and 2 L4s with the default policy, priority's
// p99 and median TTFT fall (here 0.6x and 0.2x what they are with the rule
// off) while every request is served and the fleet serves as many tokens
// by the last arrival. (The run's end is a long answer decoding on an L4,
// not a measure of throughput.)
func TestAdmissionWorseClassPrefill(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 1.3, 23)
	classes := classMix(len(reqs), 0.3, 2)
	run := scoredRun(t, spec, reqs, classes)
	on, off := run(&Admission{}), run(&Admission{WorseClassPrefill: -1})
	for _, q := range []float64{0.5, 0.99} {
		a, b := quantile(on, admission.Priority, q, ttft), quantile(off, admission.Priority, q, ttft)
		t.Logf("priority q%.2f: %v with the rule, %v without", q, a, b)
		assert.Less(t, a.Seconds(), 0.8*b.Seconds(), "q%.2f", q)
	}
	last := reqs[len(reqs)-1].Arrival
	served := func(res *Result) (n int) {
		for i, o := range res.Requests {
			if reqs[i].Arrival+o.E2E <= last {
				n += o.PromptTokens + o.OutputTokens
			}
		}
		return n
	}
	t.Logf("tokens served by the last arrival: %d with the rule, %d without", served(on), served(off))
	assert.Greater(t, float64(served(on)), 0.95*float64(served(off)))
}

// BetterClassDetour keeps priority off the L4s beside flex: at 1.3x
// capacity on 1 H100 and 2 L4s with 30% priority, priority's p99 TTFT
// falls and fewer of its requests run on an L4.
func TestAdmissionBetterClassDetour(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 1.3, 23)
	classes := classMix(len(reqs), 0.3, 2)
	run := scoredRun(t, spec, reqs, classes)
	on, off := run(&Admission{BetterClassDetour: 100 * time.Millisecond}), run(&Admission{})
	a, b := quantile(on, admission.Priority, 0.99, ttft), quantile(off, admission.Priority, 0.99, ttft)
	t.Logf("priority p99: %v with the detour, %v without", a, b)
	assert.Less(t, a.Seconds(), 0.8*b.Seconds())
	onL4 := func(res *Result) int {
		return byClass(res, admission.Priority, func(o *Outcome) bool { return o.Worker != 0 })
	}
	t.Logf("priority requests on an L4: %d with the detour, %d without", onL4(on), onL4(off))
	assert.Less(t, onL4(on), onL4(off))
}

// With priority 30% of a load of 1.3x capacity, what is shed is flex,
// never priority: by its maximum wait, and by a full queue.
func TestAdmissionShedsOnlyFlex(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 3000, 1.3, 24)
	classes := classMix(len(reqs), 0.3, 3)
	tests := []struct {
		name string
		adm  Admission
	}{
		{"max wait", Admission{MaxWait: [admission.NumClasses]time.Duration{admission.Flex: 5 * time.Second}}},
		{"queue full", Admission{QueueMax: 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), Classes: classes, Admission: &tt.adm}, reqs)
			require.NoError(t, err)
			shed := func(o *Outcome) bool { return o.Shed() }
			t.Logf("shed: priority %d, flex %d", byClass(res, admission.Priority, shed), byClass(res, admission.Flex, shed))
			assert.Zero(t, byClass(res, admission.Priority, shed))
			assert.Positive(t, byClass(res, admission.Flex, shed))
			assert.Equal(t, byClass(res, admission.Priority, func(*Outcome) bool { return true }),
				byClass(res, admission.Priority, func(o *Outcome) bool { return o.OK }), "every priority request served")
		})
	}
}

// A request shed for waiting too long waited exactly its class's maximum.
func TestAdmissionMaxWaitIsExact(t *testing.T) {
	spec := mustSpec(t, "1xl4-llama3-8b")
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 2000, OutputTokens: 400},
		{Arrival: time.Millisecond, PromptTokens: 100, OutputTokens: 4},
	}
	wait := 200 * time.Millisecond
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Classes: []admission.Class{admission.Default, admission.Flex},
		Admission: &Admission{Budget: []int{1}, MaxWait: [admission.NumClasses]time.Duration{admission.Flex: wait}}}, reqs)
	require.NoError(t, err)
	assert.True(t, res.Requests[0].OK)
	o := res.Requests[1]
	assert.Equal(t, "shed: flex: waited 200ms", o.Err)
	assert.Equal(t, wait, o.Held)
}

// Two tenants of one tier at 1.3x capacity, one sending ten times the
// other's tokens: while both wait, the queue serves them equal tokens (equal
// weights). The light tenant sends in bursts of 40 requests, so that it
// waits long enough to compete: a tenant that asks for less than its share
// never waits for more than the next free slot.
func TestAdmissionSharesTokensBetweenTenants(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b")
	reqs := synthetic(t, spec, 6000, 1.3, 25)
	const burst = 40
	tenants := make([]string, len(reqs))
	var sent [2]int64
	for i := range reqs {
		k := 0
		tenants[i] = "heavy"
		if block := i / burst; block%11 == 5 {
			k = 1
			tenants[i] = "light"
			reqs[i].Arrival = reqs[block*burst].Arrival
		}
		sent[k] += int64(reqs[i].PromptTokens + reqs[i].OutputTokens)
	}
	t.Logf("tokens sent: heavy/light %.2f", float64(sent[0])/float64(sent[1]))
	assert.InDelta(t, 10, float64(sent[0])/float64(sent[1]), 1)
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), TenantOf: tenants, Admission: &Admission{}}, reqs)
	require.NoError(t, err)

	// A request waits from its arrival until bound (arrival + Held). At
	// each binding of a request that waited, count its tokens if a request
	// of the other tenant was waiting then too.
	type span struct{ from, to time.Duration }
	var waits [2][]span
	idx := func(name string) int {
		if name == "light" {
			return 1
		}
		return 0
	}
	for i, o := range res.Requests {
		require.True(t, o.OK, o.Err)
		if o.Held > 0 {
			waits[idx(o.Tenant)] = append(waits[idx(o.Tenant)], span{reqs[i].Arrival, reqs[i].Arrival + o.Held})
		}
	}
	waitingAt := func(k int, at time.Duration) bool {
		for _, s := range waits[k] {
			if s.from <= at && at < s.to {
				return true
			}
		}
		return false
	}
	var served [2]int64
	var binds [2]int
	for i, o := range res.Requests {
		if o.Held == 0 {
			continue
		}
		k := idx(o.Tenant)
		if waitingAt(1-k, reqs[i].Arrival+o.Held) {
			served[k] += int64(o.PromptTokens + o.OutputTokens)
			binds[k]++
		}
	}
	t.Logf("while both waited: heavy %d tokens (%d requests), light %d tokens (%d requests)", served[0], binds[0], served[1], binds[1])
	assert.Greater(t, binds[1], 200, "enough contested bindings to judge")
	assert.InDelta(t, 1.0, float64(served[0])/float64(served[1]), 0.1, "equal weights: equal tokens while both wait")
}

// The same options give the same run.
func TestAdmissionDeterministic(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 1500, 1.2, 26)
	classes := classMix(len(reqs), 0.3, 5)
	run := func() *Result {
		p, err := scored.New(map[string]any{"seed": uint64(9)})
		require.NoError(t, err)
		res, err := Run(Options{Spec: spec, Pickers: []policies.Picker{p}, Classes: classes, Admission: &Admission{QueueMax: 100}}, reqs)
		require.NoError(t, err)
		return res
	}
	a, b := run(), run()
	assert.Equal(t, a.Requests, b.Requests)
	assert.Equal(t, a.Workers, b.Workers)
}

// Without Admission the classes only label the outcomes, and a run is the
// run it was before classes existed.
func TestClassesWithoutAdmissionOnlyLabel(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,1xl4-llama3-8b")
	reqs := synthetic(t, spec, 500, 1.1, 27)
	plain, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, reqs)
	require.NoError(t, err)
	classes := classMix(len(reqs), 0.5, 6)
	labelled, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1), Classes: classes}, reqs)
	require.NoError(t, err)
	for i := range reqs {
		a, b := plain.Requests[i], labelled.Requests[i]
		assert.Equal(t, admission.Default, a.Class)
		assert.Equal(t, classes[i], b.Class)
		b.Class = a.Class
		assert.Equal(t, a, b)
	}
	var n uint64
	for _, h := range labelled.ClassITL {
		n += h.Count()
	}
	assert.Equal(t, plain.ITL.Count(), n, "the per-class ITL splits the whole")
}

func TestAdmissionOptionsErrors(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b")
	reqs := synthetic(t, spec, 10, 0.5, 1)
	p := pickers(t, roundrobin.New, 1)
	tests := []struct {
		name string
		opts Options
	}{
		{"budget length", Options{Spec: spec, Pickers: p, Admission: &Admission{Budget: []int{1}}}},
		{"negative queue", Options{Spec: spec, Pickers: p, Admission: &Admission{QueueMax: -1}}},
		{"classes length", Options{Spec: spec, Pickers: p, Classes: []admission.Class{admission.Flex}}},
		{"unknown class", Options{Spec: spec, Pickers: p, Classes: slices.Repeat([]admission.Class{admission.NumClasses}, len(reqs))}},
		{"tenants twice", Options{Spec: spec, Pickers: p, TenantOf: make([]string, len(reqs)), Tenants: []Tenant{{Name: "a", Share: 1}}}},
		{"oracle", Options{Spec: spec, Oracle: true, Admission: &Admission{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(tt.opts, reqs)
			assert.Error(t, err)
		})
	}
}

// The KV bound: with a budget far above what its KV cache holds, a busy
// worker whose scraped KV use is at the bound takes no more, so new prompts
// wait in the queue, not in the engine for blocks. Without scraping the
// bound has nothing to read and the run still completes.
func TestAdmissionKVBound(t *testing.T) {
	spec := mustSpec(t, "1xl4-llama3-8b")
	reqs := synthetic(t, spec, 600, 1.3, 28)
	inEngine := func(kv float64, scrape time.Duration) time.Duration {
		res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), ScrapeInterval: scrape,
			Admission: &Admission{Budget: []int{1000}, KVMax: kv, PrefillSteps: 1,
				MaxWait: [admission.NumClasses]time.Duration{admission.Default: 2 * time.Minute}}}, reqs)
		require.NoError(t, err)
		var ds []time.Duration
		for _, o := range res.Requests {
			require.True(t, o.OK, o.Err)
			ds = append(ds, o.TTFT-o.Held)
		}
		slices.Sort(ds)
		return ds[len(ds)*99/100]
	}
	bounded, unbounded := inEngine(0, 0), inEngine(-1, 0)
	t.Logf("p99 of TTFT after binding: KV bound %v, none %v", bounded, unbounded)
	assert.Less(t, bounded*3, unbounded*2)
	inEngine(0, -1)
}

// What admission measured: the requests bound while some request waited,
// per class (those that waited, and those bound at once meanwhile), and
// the time some request waited.
func TestAdmissionStats(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b,2xl4-llama3-8b")
	reqs := synthetic(t, spec, 2000, 1.3, 29)
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1),
		Classes: classMix(len(reqs), 0.3, 8), Admission: &Admission{}}, reqs)
	require.NoError(t, err)
	st := res.Admission
	require.NotNil(t, st)
	var waited, ok [admission.NumClasses]int
	var waitedTokens, okTokens [admission.NumClasses]int64
	for i, o := range res.Requests {
		n := int64(reqs[i].PromptTokens + reqs[i].OutputTokens)
		if o.OK {
			ok[o.Class]++
			okTokens[o.Class] += n
		}
		if o.OK && o.Held > 0 {
			waited[o.Class]++
			waitedTokens[o.Class] += n
		}
	}
	for c := range admission.NumClasses {
		assert.GreaterOrEqual(t, st.Bound[c], waited[c], "every request that waited was bound while one waited: itself")
		assert.LessOrEqual(t, st.Bound[c], ok[c])
		assert.GreaterOrEqual(t, st.BoundTokens[c], waitedTokens[c])
		assert.LessOrEqual(t, st.BoundTokens[c], okTokens[c])
	}
	t.Logf("priority: %d bound while saturated, %d of them after waiting, %d served", st.Bound[admission.Priority], waited[admission.Priority], ok[admission.Priority])
	assert.Greater(t, st.Bound[admission.Priority], waited[admission.Priority], "priority requests bound at once while flex waited count too")
	assert.Positive(t, st.Saturated)
	assert.Less(t, st.Saturated, res.Elapsed)
	plain, err := Run(Options{Spec: spec, Pickers: pickers(t, leastrequest.New, 1)}, reqs)
	require.NoError(t, err)
	assert.Nil(t, plain.Admission)
}

// classCounter counts the classes the requests it picks for name.
type classCounter struct {
	inner policies.Picker
	seen  map[string]int
}

func (c *classCounter) Pick(ctx context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	c.seen[r.Class]++
	return c.inner.Pick(ctx, r, eps)
}

// The policy hears each request's class, as the router's does (the
// default policy picks the quickest endpoint for priority).
func TestPoliciesSeeTheClass(t *testing.T) {
	spec := mustSpec(t, "1xh100-llama3-8b,1xl4-llama3-8b")
	reqs := synthetic(t, spec, 300, 0.5, 24)
	classes := classMix(len(reqs), 0.3, 9)
	inner, err := roundrobin.New(nil)
	require.NoError(t, err)
	c := &classCounter{inner: inner, seen: map[string]int{}}
	_, err = Run(Options{Spec: spec, Pickers: []policies.Picker{c}, Classes: classes, Admission: &Admission{}}, reqs)
	require.NoError(t, err)
	want := map[string]int{}
	for _, cl := range classes {
		want[cl.String()]++
	}
	assert.Equal(t, want, c.seen)
	assert.Positive(t, want["priority"])
}
