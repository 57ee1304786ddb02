package admission_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

func newGate(t *testing.T, n, budget, queue int) (*admission.Gate, []*backends.Endpoint) {
	t.Helper()
	var eps []*backends.Endpoint
	for i := range n {
		e, err := backends.NewEndpoint(fmt.Sprintf("http://10.0.0.%d:8000", i+1), 1)
		require.NoError(t, err)
		eps = append(eps, e)
	}
	pool, err := backends.NewPool("m", eps)
	require.NoError(t, err)
	rr, err := roundrobin.New(nil)
	require.NoError(t, err)
	g, err := admission.NewGate(pool, rr, admission.Options{
		Budget:    func(*backends.Endpoint) int { return budget },
		QueueSize: queue,
		MaxWait:   [admission.NumClasses]time.Duration{time.Second, 2 * time.Second, 3 * time.Second},
	})
	require.NoError(t, err)
	return g, eps
}

func req(c admission.Class, tenant string) admission.Request {
	return admission.Request{Class: c, Tenant: tenant, Weight: 1, Tokens: 100, Routing: &policies.Request{Model: "m"}}
}

// queued starts Admit in a goroutine and waits until it is queued.
func queued(t *testing.T, g *admission.Gate, ctx context.Context, r admission.Request) <-chan ticketOrErr {
	t.Helper()
	before := g.Waiting()
	ch := make(chan ticketOrErr, 1)
	go func() {
		tk, err := g.Admit(ctx, r)
		ch <- ticketOrErr{tk, err}
	}()
	require.Eventually(t, func() bool { return g.Waiting() == before+1 }, time.Second, time.Millisecond)
	return ch
}

type ticketOrErr struct {
	t   *admission.Ticket
	err error
}

func TestGateBindsOnlyWithinBudget(t *testing.T) {
	g, eps := newGate(t, 2, 1, 10)
	ctx := context.Background()
	a, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	b, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	assert.ElementsMatch(t, eps, []*backends.Endpoint{a.Endpoint(), b.Endpoint()}, "one each: budget 1")

	c := queued(t, g, ctx, req(admission.Default, "x"))
	b.Release()
	got := <-c
	require.NoError(t, got.err)
	assert.Same(t, b.Endpoint(), got.t.Endpoint(), "bound late, where the slot freed")
	assert.Zero(t, g.Waiting())
	a.Release()
	got.t.Release()
	got.t.Release() // twice is harmless
	// Everything released: two more pass at once.
	for range 2 {
		tk, err := g.Admit(ctx, req(admission.Flex, "x"))
		require.NoError(t, err)
		defer tk.Release()
	}
}

func TestGateServesClassesInOrder(t *testing.T) {
	g, _ := newGate(t, 1, 1, 10)
	ctx := context.Background()
	hold, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	flex := queued(t, g, ctx, req(admission.Flex, "x"))
	def := queued(t, g, ctx, req(admission.Default, "x"))
	prio := queued(t, g, ctx, req(admission.Priority, "x"))

	var order []string
	current := hold
	for range 3 {
		current.Release()
		select {
		case r := <-prio:
			order, current = append(order, "priority"), r.t
		case r := <-def:
			order, current = append(order, "default"), r.t
		case r := <-flex:
			order, current = append(order, "flex"), r.t
		case <-time.After(5 * time.Second):
			t.Fatal("nothing bound after a release")
		}
		require.NotNil(t, current)
	}
	current.Release()
	assert.Equal(t, []string{"priority", "default", "flex"}, order)
}

func TestGateClientThatLeavesIsOutOfTheQueueAtOnce(t *testing.T) {
	g, _ := newGate(t, 1, 1, 10)
	hold, err := g.Admit(context.Background(), req(admission.Default, "x"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch := queued(t, g, ctx, req(admission.Default, "x"))
	cancel()
	r := <-ch
	assert.ErrorIs(t, r.err, context.Canceled)
	assert.Zero(t, g.Waiting())
	hold.Release()
	tk, err := g.Admit(context.Background(), req(admission.Default, "x"))
	require.NoError(t, err, "the slot is free: the leaver took none")
	tk.Release()
}

func TestGateShedsWhenTheWaitRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t, 1, 1, 10)
		hold, err := g.Admit(context.Background(), req(admission.Default, "x"))
		require.NoError(t, err)
		start := time.Now()
		_, err = g.Admit(context.Background(), req(admission.Priority, "x"))
		var shed *admission.ShedError
		require.True(t, errors.As(err, &shed), "got %v", err)
		assert.Equal(t, admission.Priority, shed.Class)
		assert.Equal(t, "waited too long", shed.Reason)
		assert.Equal(t, time.Second, time.Since(start), "priority's MaxWait")
		assert.Zero(t, g.Waiting())
		hold.Release()
	})
}

// When the last endpoint of a pool is drained, the requests waiting for
// its room hear at once that no backend is available, as a request
// arriving then does, rather than waiting out their class's MaxWait.
func TestGateFailsTheQueueWhenNoEndpointIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, eps := newGate(t, 1, 1, 10)
		hold, err := g.Admit(context.Background(), req(admission.Default, "x"))
		require.NoError(t, err)
		start := time.Now()
		var ch []chan error
		for _, c := range []admission.Class{admission.Priority, admission.Default, admission.Flex} {
			done := make(chan error, 1)
			go func() {
				_, err := g.Admit(context.Background(), req(c, "x"))
				done <- err
			}()
			ch = append(ch, done)
		}
		synctest.Wait()
		require.Equal(t, 3, g.Waiting())
		eps[0].SetDrained(true)
		for _, done := range ch {
			assert.ErrorIs(t, <-done, policies.ErrNoEndpoint)
		}
		assert.Less(t, time.Since(start), time.Second, "well within priority's MaxWait (1s)")
		assert.Zero(t, g.Waiting())
		_, err = g.Admit(context.Background(), req(admission.Default, "x"))
		assert.ErrorIs(t, err, policies.ErrNoEndpoint, "a new arrival hears the same")
		hold.Release()
	})
}

func TestGateFullQueueShedsFlexFirst(t *testing.T) {
	g, _ := newGate(t, 1, 1, 2)
	ctx := context.Background()
	hold, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	flex := queued(t, g, ctx, req(admission.Flex, "x"))
	def := queued(t, g, ctx, req(admission.Default, "x"))
	// Full: a priority request pushes the flex one out.
	before := g.Waiting()
	prio := make(chan ticketOrErr, 1)
	go func() {
		tk, err := g.Admit(ctx, req(admission.Priority, "x"))
		prio <- ticketOrErr{tk, err}
	}()
	r := <-flex
	var shed *admission.ShedError
	require.True(t, errors.As(r.err, &shed))
	assert.Equal(t, admission.Flex, shed.Class)
	assert.Equal(t, "queue full", shed.Reason)
	require.Eventually(t, func() bool { return g.Waiting() == before }, time.Second, time.Millisecond)
	// Another flex request finds the queue full of better work.
	_, err = g.Admit(ctx, req(admission.Flex, "x"))
	require.True(t, errors.As(err, &shed))

	hold.Release()
	p := <-prio
	require.NoError(t, p.err)
	p.t.Release()
	d := <-def
	require.NoError(t, d.err)
	d.t.Release()
}

func TestGateRebind(t *testing.T) {
	g, eps := newGate(t, 2, 1, 10)
	ctx := context.Background()
	a, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	first := a.Endpoint()
	require.NoError(t, a.Rebind(ctx, &policies.Request{Model: "m"}, []*backends.Endpoint{first}))
	assert.NotSame(t, first, a.Endpoint())
	assert.ErrorIs(t, a.Rebind(ctx, &policies.Request{Model: "m"}, eps), admission.ErrNoRoom)
	b, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	assert.Same(t, first, b.Endpoint(), "the first endpoint's slot came back")
	a.Release()
	b.Release()
}

// A retry whose other endpoints are full waits for room, ahead of the
// queue, rather than failing at once (a request arriving as its backend
// died got 502 while the survivor was at its budget); it is shed after its
// class's wait, and leaves when its client does.
func TestGateRebindWaitsForRoom(t *testing.T) {
	g, _ := newGate(t, 2, 1, 10) // Default waits at most 2 s
	ctx := context.Background()
	a, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	b, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	dead, other := a.Endpoint(), b.Endpoint()
	rebound := make(chan error, 1)
	go func() { rebound <- a.Rebind(ctx, &policies.Request{Model: "m"}, []*backends.Endpoint{dead}) }()
	require.Eventually(t, func() bool { return g.Waiting() == 1 }, time.Second, time.Millisecond)
	c := queued(t, g, ctx, req(admission.Priority, "y")) // admitted later: waits behind the retry
	b.Release()
	require.NoError(t, <-rebound)
	assert.Same(t, other, a.Endpoint())
	r := <-c
	require.NoError(t, r.err, "the retry gave its first endpoint's slot back")
	assert.Same(t, dead, r.t.Endpoint())

	// Nothing frees: shed after the class's wait, keeping its endpoint.
	err = a.Rebind(ctx, &policies.Request{Model: "m"}, []*backends.Endpoint{other})
	var shed *admission.ShedError
	require.ErrorAs(t, err, &shed)
	assert.Equal(t, "waited too long", shed.Reason)
	assert.Same(t, other, a.Endpoint())

	// A client that leaves stops waiting at once.
	cctx, cancel := context.WithCancel(ctx)
	go func() { rebound <- a.Rebind(cctx, &policies.Request{Model: "m"}, []*backends.Endpoint{other}) }()
	require.Eventually(t, func() bool { return g.Waiting() == 1 }, time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-rebound, context.Canceled)
	assert.Zero(t, g.Waiting())
	a.Release()
	r.t.Release()
}

func TestGateHoldsRequestsFromAFullKVCacheOrALongPrefillBacklog(t *testing.T) {
	g, e := admission.OneEndpointGate(t, admission.Options{
		Budget:           func(*backends.Endpoint) int { return 10 },
		Patience:         10 * time.Millisecond,
		MaxPendingPrompt: func(*backends.Endpoint) int64 { return 1000 },
	})
	ctx := context.Background()
	first, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)

	e.StoreLoad(&backends.Load{At: time.Now(), KVUsage: 0.97})
	second := queued(t, g, ctx, req(admission.Default, "x"))
	e.StoreLoad(&backends.Load{At: time.Now(), KVUsage: 0.5}) // blocks freed: seen at the next look
	r := <-second
	require.NoError(t, r.err)

	att := e.Start(1500, 1600) // a long prompt sent, not yet past its first token
	third := queued(t, g, ctx, req(admission.Default, "x"))
	att.FirstToken(time.Second)
	r3 := <-third
	require.NoError(t, r3.err)
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{first, r.t, r3.t} {
		tk.Release()
	}
}

func TestGateHoldsRequestsFromALongPrefillBacklogInTime(t *testing.T) {
	g, e := admission.OneEndpointGate(t, admission.Options{
		Budget:            func(*backends.Endpoint) int { return 10 },
		Patience:          10 * time.Millisecond,
		KVMax:             -1,
		MaxPendingPrefill: 100 * time.Millisecond,
	})
	ctx := context.Background()

	// Before the endpoint's prefill rate is measured, one prompt at a time.
	first, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	unmeasured := e.Start(5000, 5100)
	waiting := queued(t, g, ctx, req(admission.Default, "x")) // a prompt is pending, of unknown length in time
	unmeasured.FirstToken(5 * time.Second)                    // 1,000 prompt tokens/s: the bound is 100 tokens
	require.InDelta(t, 1000, e.PrefillTokensPerSec(), 1)
	first.Prefilled()
	r2 := <-waiting
	require.NoError(t, r2.err, "nothing pending any more")
	second := r2.t

	small := e.Start(99, 100)
	third, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err, "99 pending tokens take 99 ms, under the bound")
	big := e.Start(50, 60) // 149 pending: 149 ms
	fourth := queued(t, g, ctx, req(admission.Default, "x"))
	select {
	case r := <-fourth:
		t.Fatalf("admitted with 149 ms of prefill pending: %v", r.err)
	case <-time.After(50 * time.Millisecond): // five looks at Patience 10ms
	}
	small.FirstToken(99 * time.Millisecond) // 50 pending: room again
	r := <-fourth
	require.NoError(t, r.err)
	big.FirstToken(149 * time.Millisecond)
	for _, a := range []*backends.Attempt{&unmeasured, &small, &big} {
		a.Finish(backends.Outcome{})
	}
	for _, tk := range []*admission.Ticket{first, second, third, r.t} {
		tk.Release()
	}
}

// With ClassPendingPrefill a class has its own bound: a prefill backlog
// that holds flex back (20 ms here) lets a priority request bind at once
// (100 ms), and flex binds when the backlog clears.
func TestGateBoundsEachClassToItsOwnPrefillBacklog(t *testing.T) {
	g, e := admission.OneEndpointGate(t, admission.Options{
		Budget:              func(*backends.Endpoint) int { return 10 },
		Patience:            time.Hour, // no looks: only Prefilled and Release bind
		KVMax:               -1,
		MaxPendingPrefill:   20 * time.Millisecond,
		ClassPendingPrefill: [admission.NumClasses]time.Duration{admission.Priority: 100 * time.Millisecond},
	})
	e.ObservePrefill(0, 1000, time.Second) // 1,000 tokens/s: 20 tokens for flex, 100 for priority
	ctx := context.Background()
	first, err := g.Admit(ctx, req(admission.Flex, "x"))
	require.NoError(t, err, "an idle endpoint takes any request")
	att := e.Start(50, 60) // 50 ms of prefill pending
	flex := queued(t, g, ctx, req(admission.Flex, "x"))
	prio, err := g.Admit(ctx, req(admission.Priority, "x"))
	require.NoError(t, err, "50 ms pending is within priority's 100 ms")
	assert.Same(t, e, prio.Endpoint())
	assert.Equal(t, 1, g.Waiting(), "flex waits: 50 ms pending is past its 20 ms")
	dflt := queued(t, g, ctx, req(admission.Default, "x")) // default takes max_pending_prefill too
	att2 := e.Start(60, 70)                                // 110 ms pending: past priority's bound as well
	prio2 := queued(t, g, ctx, req(admission.Priority, "x"))
	att.FirstToken(50 * time.Millisecond)
	first.Prefilled() // 60 ms pending: priority's room, nobody else's
	r := <-prio2
	require.NoError(t, r.err)
	assert.Equal(t, 2, g.Waiting())
	att2.FirstToken(60 * time.Millisecond)
	prio.Prefilled() // nothing pending: the default request, then flex
	rd, rf := <-dflt, <-flex
	require.NoError(t, rd.err)
	require.NoError(t, rf.err)
	for _, a := range []*backends.Attempt{&att, &att2} {
		a.Finish(backends.Outcome{})
	}
	for _, tk := range []*admission.Ticket{first, prio, r.t, rd.t, rf.t} {
		tk.Release()
	}
}

// With BelowSharePrefill a request of a tenant holding less than its share
// of the requests in flight takes that bound: past a heavy tenant's
// backlog, which holds the heavy tenant's next request back (20 ms here),
// the light tenant's binds (70 ms); once each holds its share, both wait.
func TestGateLetsATenantBelowItsShareBindPastABacklog(t *testing.T) {
	g, e := measuredGate(t, admission.Options{ // 20 tokens' bound, 70 below the share
		MaxPendingPrefill: 20 * time.Millisecond,
		BelowSharePrefill: 70 * time.Millisecond,
	})
	ctx := context.Background()
	first, err := g.Admit(ctx, req(admission.Default, "heavy"))
	require.NoError(t, err)
	att := e.Start(50, 60) // 50 ms pending from here on
	light, err := g.Admit(ctx, req(admission.Default, "light"))
	require.NoError(t, err, "light holds none of the one in flight: 50 ms is within its 70")
	second := queued(t, g, ctx, req(admission.Default, "heavy")) // 1 of 2: its share, so 20 ms
	light2 := queued(t, g, ctx, req(admission.Default, "light")) // the same
	assert.Equal(t, 2, g.Waiting())
	att.FirstToken(50 * time.Millisecond)
	first.Prefilled() // nothing pending: both bind
	rh, rl := <-second, <-light2
	require.NoError(t, rh.err)
	require.NoError(t, rl.err)
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{first, light, rh.t, rl.t} {
		tk.Release()
	}
}

// With AboveSharePrefill a request of a tenant holding at least its share
// while another tenant holds some binds only where the prompts sent and
// not yet taken into an engine step are under that bound: the heavy
// tenant's second request waits while 30 ms of prompt is unstarted (its
// bound 20 ms, the class's 100 ms), the light tenant's binds, and when a
// stream marks the engine's next step the heavy one binds, though the
// prompt has no first token yet. Alone the heavy tenant takes the class's
// bound, and the gate reads engine steps only while two tenants have
// requests in flight.
func TestGateHoldsATenantAboveItsShareToOnePromptAStep(t *testing.T) {
	g, e := aboveShareGate(t)
	ctx := context.Background()
	heavy, alone, steps, att := heavyWithAPromptNoStepTook(t, g, e)
	assert.False(t, g.MarksSteps(), "one tenant: no steps to read")
	light, err := g.Admit(ctx, req(admission.Default, "light"))
	require.NoError(t, err, "below its share: the class's 100 ms")
	light.Started()
	assert.True(t, g.MarksSteps(), "two tenants: the router reads engine steps")
	second := queued(t, g, ctx, req(admission.Default, "heavy")) // 2 of 3 with light in flight: 20 ms unstarted
	require.True(t, steps.Read(), "the next step hands the engine the 30 tokens")
	g.Stepped(e)
	var got ticketOrErr
	select {
	case got = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the step mark did not bind the heavy tenant's request")
	}
	require.NoError(t, got.err, "bound at the step, before the prompt's first token")
	assert.Equal(t, int64(30), e.PendingPromptTokens(), "still pending until its first token")
	att.FirstToken(30 * time.Millisecond)
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{heavy, alone, light, got.t} {
		tk.Release()
	}
	assert.False(t, g.MarksSteps(), "none in flight")
}

// With WorseClassPrefill a request of a class worse than one with
// requests in flight binds only where the prompts not yet taken into an
// engine step are under that bound: with a priority request in flight, a
// flex request waits while 30 ms of prompt is unstarted (its bound 20 ms,
// the class's 100 ms) and binds when a stream marks the engine's next
// step. With flex alone in flight the class's bound applies, and the gate
// reads engine steps only while two classes have requests in flight.
func TestGateHoldsAWorseClassToOnePromptAStep(t *testing.T) {
	g, e := measuredGate(t, admission.Options{MaxPendingPrefill: 100 * time.Millisecond, WorseClassPrefill: 20 * time.Millisecond})
	ctx := context.Background()
	flex, err := g.Admit(ctx, req(admission.Flex, "t"))
	require.NoError(t, err)
	flex.Started()
	steps := e.StepReader()
	require.False(t, steps.Read(), "a stream's first read is of the step already marked")
	require.False(t, steps.Read(), "its next marks a step, with no prompt to hand the engine")
	att := e.Start(30, 60)
	alone, err := g.Admit(ctx, req(admission.Flex, "t"))
	require.NoError(t, err, "no better class in flight: the class's 100 ms")
	alone.Started()
	assert.False(t, g.MarksSteps(), "one class: no steps to read")
	prio, err := g.Admit(ctx, req(admission.Priority, "t"))
	require.NoError(t, err, "the best class: the class's 100 ms")
	prio.Started()
	assert.True(t, g.MarksSteps(), "two classes: the router reads engine steps")
	held := queued(t, g, ctx, req(admission.Flex, "t"))
	assert.Positive(t, g.Stats()[admission.Flex].HeldAbove, "its looks held by the fresh-prompt bound are counted")
	require.True(t, steps.Read(), "the next step hands the engine the 30 tokens")
	g.Stepped(e)
	var got ticketOrErr
	select {
	case got = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the step mark did not bind the flex request")
	}
	require.NoError(t, got.err, "bound at the step, before the prompt's first token")
	att.FirstToken(30 * time.Millisecond)
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{flex, alone, prio, got.t} {
		tk.Release()
	}
	assert.False(t, g.MarksSteps(), "none in flight")
}

// A request held by AboveSharePrefill alone does not hold up the other
// tenants' requests queued behind it: the light tenant's request, whose
// lane is second (both tenants served alike, the heavy one's request
// queued first), binds at once beside the heavy tenant's held one rather
// than at the engine's next step.
func TestGateLetsOthersPassATenantHeldAboveItsShare(t *testing.T) {
	g, e := aboveShareGate(t)
	ctx := context.Background()
	heavy, alone, steps, att := heavyWithAPromptNoStepTook(t, g, e)
	light, err := g.Admit(ctx, req(admission.Default, "light"))
	require.NoError(t, err)
	light.Started()
	held := queued(t, g, ctx, req(admission.Default, "heavy"))
	next := make(chan ticketOrErr, 1)
	go func() {
		tk, err := g.Admit(ctx, req(admission.Default, "light"))
		next <- ticketOrErr{tk, err}
	}()
	var passed ticketOrErr
	select {
	case passed = <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("the light tenant's request waited behind the heavy tenant's held one")
	}
	require.NoError(t, passed.err)
	assert.Equal(t, 1, g.Waiting(), "the heavy tenant's request still waits for the step")
	assert.Positive(t, g.Stats()[admission.Default].HeldAbove, "its looks held by the rule are counted")
	require.True(t, steps.Read())
	g.Stepped(e)
	got := <-held
	require.NoError(t, got.err, "bound at the step")
	att.FirstToken(30 * time.Millisecond)
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{heavy, alone, light, passed.t, got.t} {
		tk.Release()
	}
}

// Where no stream has marked the endpoint's steps (answers that come
// whole), AboveSharePrefill cannot tell a prompt in a step from a queued
// one and holds nothing back: the heavy tenant's second request binds
// beside 30 ms of unstarted prompt.
func TestGateAboveItsShareWithoutStepsBindsByTheClassBound(t *testing.T) {
	g, e := aboveShareGate(t)
	ctx := context.Background()
	heavy, err := g.Admit(ctx, req(admission.Default, "heavy"))
	require.NoError(t, err)
	heavy.Started()
	att := e.Start(30, 60)
	light, err := g.Admit(ctx, req(admission.Default, "light"))
	require.NoError(t, err)
	light.Started()
	second, err := g.Admit(ctx, req(admission.Default, "heavy"))
	require.NoError(t, err, "no steps seen: the class's 100 ms")
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{heavy, light, second} {
		tk.Release()
	}
}

// heavyWithAPromptNoStepTook admits two requests of tenant heavy through g
// (over its endpoint e), the first's stream marking e's steps, and starts
// a 30-token prompt on e after the last mark (30 ms at aboveShareGate's
// rate, not yet in a step).
func heavyWithAPromptNoStepTook(t *testing.T, g *admission.Gate, e *backends.Endpoint) (heavy, alone *admission.Ticket, steps *backends.StepReader, att backends.Attempt) {
	t.Helper()
	ctx := context.Background()
	heavy, err := g.Admit(ctx, req(admission.Default, "heavy"))
	require.NoError(t, err)
	heavy.Started()
	steps = e.StepReader()
	require.False(t, steps.Read(), "a stream's first read is of the step already marked")
	require.False(t, steps.Read(), "its next marks a step, with no prompt to hand the engine")
	att = e.Start(30, 60)
	alone, err = g.Admit(ctx, req(admission.Default, "heavy"))
	require.NoError(t, err, "alone: the class's 100 ms")
	alone.Started()
	return heavy, alone, steps, att
}

// aboveShareGate is a gate over one endpoint measured at 1,000 prefill
// tokens/s, the class bound 100 ms, AboveSharePrefill 20 ms.
func aboveShareGate(t *testing.T) (*admission.Gate, *backends.Endpoint) {
	t.Helper()
	return measuredGate(t, admission.Options{MaxPendingPrefill: 100 * time.Millisecond, AboveSharePrefill: 20 * time.Millisecond})
}

// measuredGate is a gate with options o over one endpoint measured at
// 1,000 prefill tokens/s, with a budget of 10 and no looks for room
// (Patience an hour) unless o sets them, and no KV bound.
func measuredGate(t *testing.T, o admission.Options) (*admission.Gate, *backends.Endpoint) {
	t.Helper()
	if o.Budget == nil {
		o.Budget = func(*backends.Endpoint) int { return 10 }
	}
	if o.Patience == 0 {
		o.Patience = time.Hour
	}
	o.KVMax = -1
	g, e := admission.OneEndpointGate(t, o)
	e.ObservePrefill(0, 1000, time.Second)
	return g, e
}

// prefillGate is a gate over one endpoint measured at 1,000 prefill
// tokens/s, with a prefill bound of 100 ms (100 tokens) split between
// replicas, a budget of 10 and no looks for room (Patience an hour).
func prefillGate(t *testing.T, replicas int) (*admission.Gate, *backends.Endpoint) {
	t.Helper()
	return measuredGate(t, admission.Options{Replicas: replicas, MaxPendingPrefill: 100 * time.Millisecond})
}

// With Replicas, each replica holds to its share of the time bound: of
// three, 100 ms at 1,000 tokens/s is 33 tokens here.
func TestGatePrefillBoundIsSharedBetweenReplicas(t *testing.T) {
	g, e := prefillGate(t, 3)
	ctx := context.Background()
	first, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	att := e.Start(40, 50) // 40 ms of prefill: under the whole bound, past a third of it
	second := queued(t, g, ctx, req(admission.Default, "x"))
	att.FirstToken(40 * time.Millisecond)
	first.Prefilled()
	r := <-second
	require.NoError(t, r.err)
	att.Finish(backends.Outcome{})
	first.Release()
	r.t.Release()
}

// A ticket's Prefilled binds a request waiting for prefill room at once,
// not at its next look (an hour away here).
func TestGatePrefilledBindsTheNextAtOnce(t *testing.T) {
	g, e := prefillGate(t, 1) // the bound is 100 tokens
	ctx := context.Background()
	first, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	att := e.Start(500, 600)
	second := queued(t, g, ctx, req(admission.Default, "x"))
	att.FirstToken(500 * time.Millisecond)
	var nilTicket *admission.Ticket
	nilTicket.Prefilled() // no admission: nothing to do
	first.Prefilled()
	select {
	case r := <-second:
		require.NoError(t, r.err)
		r.t.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request was not bound at the first token")
	}
	att.Finish(backends.Outcome{})
	first.Release()
}

// Requests bound and not yet started count toward the prefill bound: a
// burst dispatched at once fills it as the prompts are bound, not only as
// their attempts start.
func TestGateCountsBoundPromptsBeforeTheyStart(t *testing.T) {
	g, e := prefillGate(t, 1) // the bound is 100 tokens
	prompt := func(n int) admission.Request {
		r := req(admission.Default, "x")
		r.Routing = &policies.Request{Model: "m", PromptTokens: n}
		return r
	}
	ctx := context.Background()
	first, err := g.Admit(ctx, prompt(60))
	require.NoError(t, err)
	second, err := g.Admit(ctx, prompt(60)) // the first is bound but not started: 60 < 100
	require.NoError(t, err)
	third := queued(t, g, ctx, prompt(60)) // 120 bound, none started
	first.Started()
	att := e.Start(60, 70) // the first's attempt: 60 pending there, the second's 60 bound, not started
	first.Prefilled()      // looks again: still 120 tokens, no room
	select {
	case r := <-third:
		t.Fatalf("bound with 120 tokens pending: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	second.Release() // never started: its 60 tokens leave the count
	r := <-third
	require.NoError(t, r.err)
	att.FirstToken(60 * time.Millisecond)
	att.Finish(backends.Outcome{})
	first.Release()
	r.t.Release()
}

// batchGate is a gate over one endpoint with a budget of 10, whose
// measured prefill rate is 1,000 prompt tokens/s, so that its 100ms batch
// bound is 100 tokens; flex makes a batch line of prompt tokens.
func batchGate(t *testing.T) (*admission.Gate, *backends.Endpoint, func(prompt int) admission.Request) {
	t.Helper()
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	pool, err := backends.NewPool("m", []*backends.Endpoint{e})
	require.NoError(t, err)
	rr, err := roundrobin.New(nil)
	require.NoError(t, err)
	g, err := admission.NewGate(pool, rr, admission.Options{
		Budget: func(*backends.Endpoint) int { return 10 }, KVMax: -1, BatchPrefill: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	e.ObservePrefill(0, 1000, time.Second)
	flex := func(prompt int) admission.Request {
		r := req(admission.Flex, "batch")
		r.Routing = &policies.Request{Model: "m", PromptTokens: prompt}
		r.Batch = true
		return r
	}
	return g, e, flex
}

// While an endpoint has other requests in flight, a batch line binds only
// if the prefill pending there, its own included, takes at most
// BatchPrefill at the endpoint's measured rate; with only batch lines
// there, at most BatchIdleFactor times that, and always one when nothing
// is pending.
func TestBatchLinesKeepToWhatOtherRequestsLeave(t *testing.T) {
	g, e, flex := batchGate(t)
	ctx := context.Background()

	alone, err := g.Admit(ctx, flex(5000))
	require.NoError(t, err, "nothing pending and no other request: one line, however long")
	alone.Started()
	e.BeginPrefill(5000)
	idle := queued(t, g, ctx, flex(50))
	assert.Equal(t, 1, g.Waiting(), "5,000 pending is past 5 x 100 tokens: the next one waits")
	e.EndPrefill(5000)
	got := <-idle
	require.NoError(t, got.err)
	got.t.Release()
	alone.Release()

	interactive, err := g.Admit(ctx, req(admission.Default, "user"))
	require.NoError(t, err)
	small, err := g.Admit(ctx, flex(80))
	require.NoError(t, err, "80 tokens take 80ms: within the bound")
	small.Started()
	e.BeginPrefill(80) // as the router does once it sends it
	big := queued(t, g, ctx, flex(50))
	assert.Equal(t, 1, g.Waiting(), "80 pending plus 50 is past 100 tokens: it waits")

	e.EndPrefill(80) // the small one's first token: 50 now fits, seen at the next look
	got = <-big
	require.NoError(t, got.err)
	got.t.Release()
	small.Release()

	e.BeginPrefill(90)
	waiting := queued(t, g, ctx, flex(50))
	interactive.Release() // only batch lines now: 90 + 50 is within 5 x 100
	got = <-waiting
	require.NoError(t, got.err)
	got.t.Release()
	e.EndPrefill(90)
}

// Batch lines bound and not yet sent count toward the batch bound: a
// second line admitted before the first has started waits as it would
// after (the batch runner sends many lines at once).
func TestBatchLinesBoundBeforeTheyStartCount(t *testing.T) {
	g, e, flex := batchGate(t)
	ctx := context.Background()
	interactive, err := g.Admit(ctx, req(admission.Default, "user"))
	require.NoError(t, err)
	first, err := g.Admit(ctx, flex(60))
	require.NoError(t, err, "60 tokens: within the 100-token bound")
	second := queued(t, g, ctx, flex(60)) // 60 bound and not sent, plus 60: past the bound
	first.Started()
	e.BeginPrefill(60) // sent: the same 60 tokens, now counted by the endpoint
	e.EndPrefill(60)   // its first token
	first.Prefilled()
	got := <-second
	require.NoError(t, got.err)
	got.t.Release()
	first.Release()
	interactive.Release()
}

// A batch line whose prompt fits no endpoint's bound is set aside, so a
// smaller one behind it goes first; it binds once the endpoint takes it,
// leaves at once when its client goes, and counts as waiting.
func TestBatchLineTooLongForNowIsSetAside(t *testing.T) {
	g, _, flex := batchGate(t)
	ctx := context.Background()
	interactive, err := g.Admit(ctx, req(admission.Default, "user"))
	require.NoError(t, err)
	// The budget full, so the flex requests queue before any dispatch.
	holder := make([]*admission.Ticket, 0, 9)
	for range 9 {
		tk, err := g.Admit(ctx, req(admission.Default, "user"))
		require.NoError(t, err)
		holder = append(holder, tk)
	}
	big := queued(t, g, ctx, flex(500))
	gone, cancel := context.WithCancel(ctx)
	bigger := queued(t, g, gone, flex(900))
	small := queued(t, g, ctx, flex(50))
	holder[0].Release() // a slot: the big ones do not fit the flex bound, the small one does
	got := <-small
	require.NoError(t, got.err, "the small one went past the big ones")
	got.t.Started() // sent, and (as far as the gate knows) prefilled
	assert.Equal(t, 2, g.Waiting(), "the big ones wait, set aside")
	assert.Equal(t, 2, g.Stats()[admission.Flex].Waiting)

	cancel()
	require.ErrorIs(t, (<-bigger).err, context.Canceled)
	assert.Equal(t, 1, g.Waiting(), "a client that leaves is out at once")

	interactive.Release()
	for _, tk := range holder[1:] {
		tk.Release()
	}
	got2 := <-big
	require.NoError(t, got2.err, "no other class in flight: it binds")
	got.t.Release()
	got2.t.Release()
	assert.Zero(t, g.Waiting())
}

// behindSlots is a shared store that holds tenant behind's requests back
// (Behind) and grants every other lease.
type behindSlots struct{ behind string }

func (s behindSlots) Acquire(_ context.Context, l admission.Lease) (admission.Grant, int64, error) {
	if l.Tenant == s.behind {
		return admission.Behind, 0, nil
	}
	return admission.Granted, 0, nil
}
func (behindSlots) Release(context.Context, string, string, string) error      { return nil }
func (behindSlots) Prefilled(context.Context, string, string, ...string) error { return nil }
func (behindSlots) Stepped(context.Context, string, string, ...string) error   { return nil }
func (behindSlots) Wait(context.Context, string, admission.Waiting) error      { return nil }
func (behindSlots) Unwait(context.Context, string, admission.Waiting) error    { return nil }
func (behindSlots) Beat(context.Context, string, string) error                 { return nil }

// A request held behind its tenant's earlier ones on other replicas does
// not hold up the other tenants' requests queued behind it here: stopping
// at it let two replicas wait on each other (live, two tenants on three
// replicas stalled until requests were shed: 438 of the heavy tenant's).
func TestGateRequestsBehindOtherReplicasDoNotBlockOtherTenants(t *testing.T) {
	g, e := admission.OneEndpointGate(t, admission.Options{
		Budget: func(*backends.Endpoint) int { return 10 },
		Shared: behindSlots{behind: "light"}, Pool: "m", Patience: time.Hour, KVMax: -1,
	})
	ctx := context.Background()
	hctx, cancel := context.WithCancel(ctx)
	held := queued(t, g, hctx, req(admission.Default, "light"))
	// It arrives behind the light tenant's in the queue, and the dispatch
	// its arrival runs passes over the held one.
	other, err := g.Admit(ctx, req(admission.Default, "heavy"))
	require.NoError(t, err, "the heavy tenant's request waited behind the light tenant's, held for other replicas")
	assert.Same(t, e, other.Endpoint())
	other.Release()
	g.Room(e.Address()) // a release elsewhere: the held one still waits
	assert.Equal(t, 1, g.Waiting(), "the light tenant's request still waits its turn")
	assert.NotZero(t, g.Stats()[admission.Default].Behind, "its looks held behind are counted")
	cancel()
	assert.ErrorIs(t, (<-held).err, context.Canceled, "it was not bound while held behind")
}

// With PendingUntilStep a prompt holds the prefill bound only until its
// endpoint's next step mark: a request waiting behind a prompt that fills
// the bound is bound at the mark (Room), before that prompt's first token.
func TestGatePendingUntilStepFreesTheBoundAtTheNextStep(t *testing.T) {
	// No looks for room: only Room and releases bind; the bound is 100 tokens.
	g, e := measuredGate(t, admission.Options{MaxPendingPrefill: 100 * time.Millisecond, PendingUntilStep: true})
	require.True(t, g.MarksSteps())
	ctx := context.Background()
	first, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	stream := e.StepReader() // another stream from the endpoint
	require.False(t, stream.Read())
	att := e.Start(500, 600) // fills the bound
	second := queued(t, g, ctx, req(admission.Default, "x"))
	select {
	case r := <-second:
		t.Fatalf("admitted with 500 fresh prompt tokens: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	require.True(t, stream.Read(), "the stream's next token marks a step: the prompt is the engine's")
	g.Room(e.Address())
	r := <-second
	require.NoError(t, r.err, "bound before the first prompt's first token")
	assert.EqualValues(t, 500, e.PendingPromptTokens(), "still pending, but in the engine's hands")
	att.FirstToken(500 * time.Millisecond)
	att.Finish(backends.Outcome{})
	first.Release()
	r.t.Release()

	off, e2 := prefillGate(t, 1)
	assert.False(t, off.MarksSteps())
	one, err := off.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err)
	stream2 := e2.StepReader()
	require.False(t, stream2.Read())
	att2 := e2.Start(500, 600)
	held := queued(t, off, ctx, req(admission.Default, "x"))
	require.True(t, stream2.Read())
	off.Room(e2.Address())
	select {
	case r := <-held:
		t.Fatalf("without PendingUntilStep a prompt holds the bound until its first token: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	att2.FirstToken(500 * time.Millisecond)
	one.Prefilled()
	r2 := <-held
	require.NoError(t, r2.err)
	att2.Finish(backends.Outcome{})
	one.Release()
	r2.t.Release()
}

// Batch lines leave BatchReserve of each endpoint's budget to other
// requests: with a budget of 4 and a reserve of 0.25 three lines run, the
// fourth waits, and an interactive request binds at once.
func TestBatchLinesLeaveTheReserveToOthers(t *testing.T) {
	g, _ := admission.OneEndpointGate(t, admission.Options{
		Budget: func(*backends.Endpoint) int { return 4 }, KVMax: -1, BatchPrefill: -1, BatchReserve: 0.25,
	})
	ctx := context.Background()
	line := func() admission.Request {
		r := req(admission.Flex, "batch")
		r.Batch = true
		return r
	}
	var lines []*admission.Ticket
	for range 3 {
		tk, err := g.Admit(ctx, line())
		require.NoError(t, err)
		lines = append(lines, tk)
	}
	fourth := queued(t, g, ctx, line())
	user, err := g.Admit(ctx, req(admission.Priority, "user"))
	require.NoError(t, err, "the reserved slot takes the priority request at once")
	lines[0].Release()
	got := <-fourth
	require.NoError(t, got.err, "a line ended: the next one takes its slot")
	got.t.Release()
	user.Release()
	for _, tk := range lines[1:] {
		tk.Release()
	}
}

// firstPicker picks the first endpoint with room, so that a test decides
// where each request goes by the order of the pool.
type firstPicker struct{}

func (firstPicker) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	return eps[0], nil
}

// twoSpeedGate is a gate over a fast endpoint (10,000 prefill tokens/s)
// and a slow one (1,000), in that order for firstPicker, with budgets of
// 4, a prefill bound of 100 ms, BelowShareDetour 250 ms, the class waits
// maxWait (zero: the defaults) and no looks for room.
func twoSpeedGate(t *testing.T, maxWait [admission.NumClasses]time.Duration) (g *admission.Gate, fast, slow *backends.Endpoint) {
	t.Helper()
	return twoSpeedGateWith(t, admission.Options{MaxWait: maxWait, MaxPendingPrefill: 100 * time.Millisecond, BelowShareDetour: 250 * time.Millisecond})
}

// twoSpeedGateWith is a gate over a fast endpoint (10,000 prefill
// tokens/s) and a slow one (1,000), both measured, with o's rules, a
// budget of 4 each, no KV bound and full marks that last.
func twoSpeedGateWith(t *testing.T, o admission.Options) (g *admission.Gate, fast, slow *backends.Endpoint) {
	t.Helper()
	var eps []*backends.Endpoint
	for i, rate := range []int{10_000, 1_000} {
		e, err := backends.NewEndpoint(fmt.Sprintf("http://10.0.0.%d:8000", i+1), 1)
		require.NoError(t, err)
		e.ObservePrefill(0, rate, time.Second)
		eps = append(eps, e)
	}
	pool, err := backends.NewPool("m", eps)
	require.NoError(t, err)
	o.Budget = func(*backends.Endpoint) int { return 4 }
	o.Patience, o.KVMax = time.Hour, -1
	g, err = admission.NewGate(pool, firstPicker{}, o)
	require.NoError(t, err)
	return g, eps[0], eps[1]
}

// With BelowShareDetour a request of a tenant holding less than its share
// waits set aside for an endpoint where it would start within the detour
// of its quickest start, rather than take a slow one with room at once;
// the requests behind it go meanwhile, and it binds as soon as the quick
// endpoint has room. Here a fast endpoint (10,000 prefill tokens/s) holds
// a heavy tenant's 1,500-token prompt, over its 100 ms bound: a light
// tenant's 2,000-token prompt would start there in 0.35 s and on the idle
// slow one (1,000 tokens/s) in 2 s.
func TestGateLetsATenantBelowItsShareWaitForAQuickEndpoint(t *testing.T) {
	g, fast, slow := twoSpeedGate(t, [admission.NumClasses]time.Duration{})
	prompt := func(c admission.Class, tenant string, tokens int) admission.Request {
		r := req(c, tenant)
		r.Routing = &policies.Request{Model: "m", PromptTokens: tokens}
		return r
	}
	ctx := context.Background()
	h1, err := g.Admit(ctx, prompt(admission.Default, "heavy", 1500))
	require.NoError(t, err)
	require.Same(t, fast, h1.Endpoint())
	h1.Started()
	att := fast.Start(1500, 10)

	light := queued(t, g, ctx, prompt(admission.Default, "light", 2000))
	assert.Equal(t, 1, g.Stats()[admission.Default].Waiting, "set aside, it counts as waiting")
	assert.Equal(t, uint64(1), g.Stats()[admission.Default].Detoured)
	h2, err := g.Admit(ctx, prompt(admission.Default, "heavy", 10))
	require.NoError(t, err, "heavy holds its share: it takes the slow endpoint's room at once, past the light request")
	assert.Same(t, slow, h2.Endpoint())
	select {
	case got := <-light:
		t.Fatalf("the light request bound before the fast endpoint had room: %v", got.err)
	default:
	}
	second, err := g.Admit(ctx, prompt(admission.Default, "light", 2000))
	require.NoError(t, err, "one request of a tenant waits aside at a time: the next binds where there is room")
	assert.Same(t, slow, second.Endpoint())

	att.FirstToken(150 * time.Millisecond)
	h1.Prefilled() // the fast endpoint's backlog is gone: the light request binds there
	got := <-light
	require.NoError(t, got.err)
	assert.Same(t, fast, got.t.Endpoint())
	assert.Zero(t, g.Waiting())
	att.Finish(backends.Outcome{})
	for _, tk := range []*admission.Ticket{h1, h2, second, got.t} {
		tk.Release()
	}

	// Alone, or with the rule off, no tenant is below its share: the
	// light tenant's request takes the slow endpoint's room at once.
	h3, err := g.Admit(ctx, prompt(admission.Default, "heavy", 1500))
	require.NoError(t, err)
	h3.Started()
	att = fast.Start(1500, 10)
	alone, err := g.Admit(ctx, prompt(admission.Default, "heavy", 2000))
	require.NoError(t, err)
	assert.Same(t, slow, alone.Endpoint(), "the tenant holds all the requests in flight")
	att.Finish(backends.Outcome{})
	h3.Release()
	alone.Release()
}

// The detour is bounded relative to the request's best estimate too
// (admission.DetourFactor): a light tenant's short prompt that the fast
// endpoint would start in 45 ms waits for it rather than take the idle
// slow one at 200 ms, though that is within the 250 ms detour; one whose
// slow estimate is within three times its best binds there at once.
// Here the fast endpoint (10,000 prefill tokens/s) holds a heavy tenant's
// 250-token prompt, over its 20 ms bound; the slow one has 1,000.
func TestGateKeepsABelowShareRequestOffAnEndpointThreeTimesSlower(t *testing.T) {
	g, fast, slow := twoSpeedGateWith(t, admission.Options{MaxPendingPrefill: 20 * time.Millisecond, BelowShareDetour: 250 * time.Millisecond})
	prompt := func(tenant string, tokens int) admission.Request {
		r := req(admission.Default, tenant)
		r.Routing = &policies.Request{Model: "m", PromptTokens: tokens}
		return r
	}
	ctx := context.Background()
	heavy, err := g.Admit(ctx, prompt("heavy", 250))
	require.NoError(t, err)
	require.Same(t, fast, heavy.Endpoint())
	heavy.Started()
	att := fast.Start(250, 10)

	// 100 tokens: 35 ms on the fast endpoint, 100 ms on the slow one;
	// 200 tokens: 45 ms and 200 ms.
	detourWaitsForFast(t, g, fast, slow, prompt("light", 100), prompt("light", 200), heavy, &att)
	assert.Equal(t, 0.045, admission.DetourLimit(0.015, 250*time.Millisecond))
	assert.Equal(t, 1.25, admission.DetourLimit(1.0, 250*time.Millisecond))
}

// detourWaitsForFast checks the detour's bound on a gate whose fast
// endpoint holds ahead's prompt (its attempt att) over its bound: near,
// whose slow estimate is within three times its best, takes the slow
// endpoint's room at once; far, beyond that, waits aside (counted in its
// class's Detoured) until ahead's prompt is prefilled and then binds to
// the fast endpoint. It ends ahead, its attempt and far.
func detourWaitsForFast(t *testing.T, g *admission.Gate, fast, slow *backends.Endpoint, near, far admission.Request,
	ahead *admission.Ticket, att *backends.Attempt) {
	t.Helper()
	ctx := context.Background()
	n, err := g.Admit(ctx, near)
	require.NoError(t, err, "within three times its best estimate: it takes the slow endpoint's room at once")
	assert.Same(t, slow, n.Endpoint())
	n.Release()

	waiting := queued(t, g, ctx, far)
	assert.Equal(t, uint64(1), g.Stats()[far.Class].Detoured, "more than three times its best: it waits aside")
	select {
	case got := <-waiting:
		t.Fatalf("the %s request bound before the fast endpoint had room: %v", far.Class, got.err)
	default:
	}
	att.FirstToken(25 * time.Millisecond)
	ahead.Prefilled()
	got := <-waiting
	require.NoError(t, got.err)
	assert.Same(t, fast, got.t.Endpoint())
	att.Finish(backends.Outcome{})
	ahead.Release()
	got.t.Release()
}

// With BetterClassDetour a priority request beside a flex one in flight
// waits for the fast endpoint rather than take a slow one's room, as a
// light tenant's does with BelowShareDetour; flex, with no worse class
// beside it, and priority without the option take the room there is.
func TestGateKeepsAPriorityRequestOffASlowEndpointBesideFlex(t *testing.T) {
	for _, detour := range []time.Duration{250 * time.Millisecond, 0} {
		g, fast, slow := twoSpeedGateWith(t, admission.Options{MaxPendingPrefill: 20 * time.Millisecond, BetterClassDetour: detour})
		prompt := func(c admission.Class, tokens int) admission.Request {
			r := req(c, "t")
			r.Routing = &policies.Request{Model: "m", PromptTokens: tokens}
			return r
		}
		ctx := context.Background()
		flex, err := g.Admit(ctx, prompt(admission.Flex, 250))
		require.NoError(t, err)
		require.Same(t, fast, flex.Endpoint())
		flex.Started()
		att := fast.Start(250, 10)

		// 200 tokens: 45 ms on the fast endpoint (25 ms of flex ahead,
		// past the 20 ms bound), 200 ms on the slow one.
		other, err := g.Admit(ctx, prompt(admission.Flex, 200))
		require.NoError(t, err, "flex has no worse class beside it: it takes the slow endpoint's room")
		assert.Same(t, slow, other.Endpoint())
		other.Release()
		if detour == 0 {
			p, err := g.Admit(ctx, prompt(admission.Priority, 200))
			require.NoError(t, err, "without the option priority takes the room there is")
			assert.Same(t, slow, p.Endpoint())
			p.Release()
			att.Finish(backends.Outcome{})
			flex.Release()
			continue
		}
		// 100 tokens: 35 ms on the fast endpoint, 100 ms on the slow one.
		detourWaitsForFast(t, g, fast, slow, prompt(admission.Priority, 100), prompt(admission.Priority, 200), flex, &att)
	}
}

// A request set aside for a quick endpoint that its client leaves is out
// at once, and one whose wait runs out is shed as any other.
func TestGateRequestWaitingForAQuickEndpointLeavesAndIsShed(t *testing.T) {
	g, _, _ := twoSpeedGate(t, [admission.NumClasses]time.Duration{time.Second, 50 * time.Millisecond, time.Second})
	r := req(admission.Default, "heavy")
	r.Routing = &policies.Request{Model: "m", PromptTokens: 1500}
	h, err := g.Admit(context.Background(), r)
	require.NoError(t, err)
	r.Tenant = "light"
	r.Routing = &policies.Request{Model: "m", PromptTokens: 2000}
	gone, cancel := context.WithCancel(context.Background())
	left := queued(t, g, gone, r)
	cancel()
	require.ErrorIs(t, (<-left).err, context.Canceled)
	assert.Zero(t, g.Waiting(), "a client that leaves is out at once")

	shed := queued(t, g, context.Background(), r)
	got := <-shed
	var se *admission.ShedError
	require.ErrorAs(t, got.err, &se, "its class's wait ran out: shed")
	assert.Zero(t, g.Waiting())
	h.Release()
}

// TestGatePinnedRequestWaitsForItsEndpointAlone: a request pinned to one
// endpoint (it continues a response stored there) binds there only; while
// that endpoint is full it waits aside, and requests behind it bind
// where there is room. A pin to an endpoint out of routing binds as any
// request.
func TestGatePinnedRequestWaitsForItsEndpointAlone(t *testing.T) {
	g, eps := newGate(t, 2, 1, 10)
	ctx := context.Background()
	pinned := func(e *backends.Endpoint) admission.Request {
		r := req(admission.Default, "x")
		r.Routing = &policies.Request{Model: "m", Pin: e}
		return r
	}
	for range 3 { // whatever the picker's turn
		a, err := g.Admit(ctx, pinned(eps[1]))
		require.NoError(t, err)
		assert.Same(t, eps[1], a.Endpoint())
		a.Release()
	}
	hold, err := g.Admit(ctx, pinned(eps[1]))
	require.NoError(t, err)
	b := queued(t, g, ctx, pinned(eps[1]))
	c, err := g.Admit(ctx, req(admission.Default, "x"))
	require.NoError(t, err, "not held behind the pinned request")
	assert.Same(t, eps[0], c.Endpoint())
	select {
	case r := <-b:
		t.Fatalf("the pinned request bound elsewhere: %v %v", r.t.Endpoint(), r.err)
	default:
	}
	hold.Release()
	r := <-b
	require.NoError(t, r.err)
	assert.Same(t, eps[1], r.t.Endpoint())
	r.t.Release()
	c.Release()

	eps[1].SetDrained(true)
	d, err := g.Admit(ctx, pinned(eps[1]))
	require.NoError(t, err)
	assert.Same(t, eps[0], d.Endpoint(), "its endpoint is out of routing: anywhere")
	d.Release()
	assert.Zero(t, g.Waiting())
}

// queuedPicker records whether the requests it is asked to place say
// the admission queue binds them.
type queuedPicker struct{ queued []bool }

func (p *queuedPicker) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	p.queued = append(p.queued, r.Queued)
	return eps[0], nil
}

// TestGateTellsThePickerItBindsTheRequest checks that the request the
// gate gives its picker says the admission queue binds it (the scored
// policy weighs its load-spreading scorers in full then).
func TestGateTellsThePickerItBindsTheRequest(t *testing.T) {
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	pool, err := backends.NewPool("m", []*backends.Endpoint{e})
	require.NoError(t, err)
	picker := &queuedPicker{}
	g, err := admission.NewGate(pool, picker, admission.Options{Budget: func(*backends.Endpoint) int { return 1 }, QueueSize: 4})
	require.NoError(t, err)
	r := req(admission.Default, "a")
	require.False(t, r.Routing.Queued)
	tk, err := g.Admit(context.Background(), r)
	require.NoError(t, err)
	tk.Release()
	assert.Equal(t, []bool{true}, picker.queued)
}
