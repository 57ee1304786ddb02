package redisslots_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// replicaGate is one router replica's gate over the backend at addr, sharing
// store, with a prefill bound of 100 ms at a measured 1,000 tokens/s (100
// tokens) and the budgets of three replicas.
func replicaGate(t *testing.T, store admission.Slots, addr string) *admission.Gate {
	t.Helper()
	return sharedGate(t, store, addr, 10, 10*time.Millisecond, 100*time.Millisecond)
}

// sharedGate is one replica's gate over the backend at addr (measured at
// 1,000 prefill tokens/s) in pool m of store, with a budget, a patience
// and a prefill bound (0: none), for three replicas; more changes the
// options further.
func sharedGate(t *testing.T, store admission.Slots, addr string, budget int, patience, prefill time.Duration, more ...func(*admission.Options)) *admission.Gate {
	t.Helper()
	e, err := backends.NewEndpoint(addr, 1)
	require.NoError(t, err)
	e.ObservePrefill(0, 1000, time.Second)
	pool, err := backends.NewPool("m", []*backends.Endpoint{e})
	require.NoError(t, err)
	rr, err := roundrobin.New(nil)
	require.NoError(t, err)
	o := admission.Options{
		Budget: func(*backends.Endpoint) int { return budget },
		Shared: store, Pool: "m", Replicas: 3, LeaseTTL: time.Hour,
		Patience: patience, KVMax: -1, MaxPendingPrefill: prefill,
	}
	for _, f := range more {
		f(&o)
	}
	g, err := admission.NewGate(pool, rr, o)
	require.NoError(t, err)
	return g
}

type admitted struct {
	t   *admission.Ticket
	err error
}

// admitLater admits r through g in a goroutine, once it waits there.
func admitLater(t *testing.T, g *admission.Gate, r admission.Request) <-chan admitted {
	t.Helper()
	before := g.Waiting()
	ch := make(chan admitted, 1)
	go func() {
		tk, err := g.Admit(context.Background(), r)
		ch <- admitted{tk, err}
	}()
	require.Eventually(t, func() bool { return g.Waiting() == before+1 }, 5*time.Second, time.Millisecond)
	return ch
}

// recorded waits until store holds n requests of tenant waiting in the
// default class (a gate counts a request as waiting before its Wait
// reaches the store).
func recorded(t *testing.T, store *redisslots.Slots, tenant string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := store.Waiting(context.Background(), "m", admission.Default, tenant)
		require.NoError(t, err)
		return got == n
	}, 5*time.Second, time.Millisecond)
}

// boundFirst is the binding want brings within 5 s; the test fails if
// other, the request waiting on the replica where the slot freed, is bound
// first.
func boundFirst(t *testing.T, want, other <-chan admitted, what string) admitted {
	t.Helper()
	select {
	case a := <-want:
		require.NoError(t, a.err)
		return a
	case r := <-other:
		t.Fatalf("the request on the releasing replica took the slot before %s (err %v)", what, r.err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not bound", what)
	}
	return admitted{}
}

// boundSoon is the ticket ch brings within 5 s.
func boundSoon(t *testing.T, ch <-chan admitted, when string) *admission.Ticket {
	t.Helper()
	select {
	case a := <-ch:
		require.NoError(t, a.err)
		return a.t
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting request was not bound " + when)
	}
	return nil
}

// heldOnOthers sends a stream of prompt tokens to each gate but the first,
// and checks that each still waits after ten of its looks for room (the
// first gate's prompts fill the bound).
func heldOnOthers(t *testing.T, gates []*admission.Gate, prompt int) []<-chan admitted {
	t.Helper()
	var waits []<-chan admitted
	for _, g := range gates[1:] {
		waits = append(waits, admitLater(t, g, stream(prompt)))
	}
	time.Sleep(100 * time.Millisecond)
	for i, g := range gates[1:] {
		assert.Equal(t, 1, g.Waiting(), "replica %d bound a prompt while another's filled the bound", i+1)
	}
	return waits
}

func stream(prompt int) admission.Request {
	return admission.Request{Class: admission.Default, Weight: 1, Routing: &policies.Request{Model: "m", PromptTokens: prompt, Stream: true}}
}

// Three replicas hold one backend's prefill bound together: a prompt one
// replica sent keeps the others' requests waiting until its first token,
// where each replica counting only its own prompts would let every one of
// them send one (three prompts pending where the bound fits one).
func TestReplicasHoldThePrefillBoundTogether(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.1:8000"
	gates := []*admission.Gate{replicaGate(t, store, addr), replicaGate(t, store, addr), replicaGate(t, store, addr)}
	ctx := context.Background()
	first, err := gates[0].Admit(ctx, stream(500))
	require.NoError(t, err, "an idle backend takes a prompt longer than the bound")
	waits := heldOnOthers(t, gates, 50)
	pending, err := store.PendingPrompt(ctx, "m", addr)
	require.NoError(t, err)
	assert.EqualValues(t, 500, pending)

	first.Prefilled() // its first token: 100 tokens of room over the replicas
	var tickets []*admission.Ticket
	for _, ch := range waits {
		tickets = append(tickets, boundSoon(t, ch, "after the first token"))
	}
	pending, err = store.PendingPrompt(ctx, "m", addr)
	require.NoError(t, err)
	assert.EqualValues(t, 100, pending, "both 50-token prompts fit under the bound")
	first.Release()
	for _, tk := range tickets {
		tk.Release()
	}
	pending, err = store.PendingPrompt(ctx, "m", addr)
	require.NoError(t, err)
	assert.Zero(t, pending)
	n, err := store.Leases(ctx, "m", addr, time.Now())
	require.NoError(t, err)
	assert.Zero(t, n)
}

// A replica counts the other replicas' prompts ahead of its own: each
// binding tells it, from the store, what all of them have pending on the
// backend, which a scrape would show only an interval later. Its picker
// reads them in a backend's expected TTFT, and the prefill rate it
// measures from its first token divides them too.
func TestReplicasCountEachOthersPromptsAhead(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.2:8000"
	gates := []*admission.Gate{
		sharedGate(t, store, addr, 10, 10*time.Millisecond, time.Second), // a bound of 1,000 tokens
		sharedGate(t, store, addr, 10, 10*time.Millisecond, time.Second),
	}
	ctx := context.Background()
	first, err := gates[0].Admit(ctx, stream(600))
	require.NoError(t, err)
	defer first.Release()
	assert.EqualValues(t, 0, first.Endpoint().PrefillAhead(300), "nothing was pending on the backend before it")

	second, err := gates[1].Admit(ctx, stream(300))
	require.NoError(t, err)
	defer second.Release()
	ep := second.Endpoint()
	assert.Nil(t, ep.Load(), "never scraped")
	assert.EqualValues(t, 600, ep.PrefillAhead(300), "the first replica's prompt, from the store")
	a := ep.Start(300, 310)
	a.FirstToken(900 * time.Millisecond)
	a.Finish(backends.Outcome{Status: 200, TTFT: 900 * time.Millisecond})
	// 600 + 300 tokens in 0.9 s keeps the measured 1,000 tokens/s; its own
	// 300 alone would have read 333/s and pulled the average to 867.
	assert.InDelta(t, 1000, ep.PrefillTokensPerSec(), 1)
}

// With pending_until_step the replicas' common prefill bound frees at the
// engine's next step, as each replica's own count does: a stream relayed
// from the backend marks the step that takes the first prompt up, and the
// replica that sent it tells the store then, in one call for all its
// prompts sent before the mark, not at their first tokens. A prompt sent
// after the mark still counts, and a first token after the mark makes no
// second call.
func TestReplicasFreeThePrefillBoundAtTheNextStep(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.9:8000"
	untilStep := func(o *admission.Options) { o.PendingUntilStep = true }
	gates := make([]*admission.Gate, 3)
	for i := range gates {
		gates[i] = sharedGate(t, store, addr, 10, 10*time.Millisecond, 100*time.Millisecond, untilStep)
		require.True(t, gates[i].MarksSteps())
	}
	ctx := context.Background()
	pending := func() int64 {
		n, err := store.PendingPrompt(ctx, "m", addr)
		require.NoError(t, err)
		return n
	}
	// Replica 0 has a stream running on the backend, and sends it two
	// prompts that fill the bound.
	running, err := gates[0].Admit(ctx, stream(1))
	require.NoError(t, err)
	e := running.Endpoint()
	runAtt := e.Start(1, 2)
	running.Started()
	runAtt.FirstToken(time.Millisecond)
	running.Prefilled()
	steps := e.StepReader()
	require.False(t, steps.Read(), "the stream's first read is of the step already marked")
	var sent []*admission.Ticket
	var atts []backends.Attempt
	for range 2 {
		tk, err := gates[0].Admit(ctx, stream(60))
		require.NoError(t, err)
		atts = append(atts, e.Start(60, 70))
		tk.Started()
		sent = append(sent, tk)
	}
	require.EqualValues(t, 120, pending())
	waits := heldOnOthers(t, gates, 40)

	// The stream's next token marks the step that took both prompts up.
	require.True(t, steps.Read())
	gates[0].Stepped(e)
	// The held replicas may bind as soon as the store frees the room, so
	// the store is read once they have: 80 tokens is their two prompts
	// alone (the two sent before the step would make it 200).
	var late []*admission.Ticket
	for _, ch := range waits {
		late = append(late, boundSoon(t, ch, "after the step"))
	}
	assert.EqualValues(t, 80, pending(), "both earlier prompts are the engine's: the store holds only the two sent after the step")

	// A prompt replica 0 sends now is after the mark: the same mark again
	// does not hand it over.
	after, err := gates[0].Admit(ctx, stream(5))
	require.NoError(t, err, "85 of 100 tokens")
	afterAtt := e.Start(5, 6)
	after.Started()
	gates[0].Stepped(e)
	assert.EqualValues(t, 85, pending(), "a prompt sent after the mark still counts")
	afterAtt.Finish(backends.Outcome{})
	after.Release()
	for i, tk := range sent {
		atts[i].FirstToken(time.Millisecond)
		tk.Prefilled() // no second call: the lease's prompt is gone already
		atts[i].Finish(backends.Outcome{})
		tk.Release()
	}
	assert.EqualValues(t, 80, pending())
	for _, tk := range late {
		tk.Release()
	}
	runAtt.Finish(backends.Outcome{})
	running.Release()
	assert.Zero(t, pending())
	n, err := store.Leases(ctx, "m", addr, time.Now())
	require.NoError(t, err)
	assert.Zero(t, n)
}

// While the store fails, each replica holds to its share of the prefill
// bound (a third here: 33 tokens), as without a store.
func TestReplicasHoldTheirShareOfThePrefillBoundWhileTheStoreFails(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisslots.New(client, "down")
	require.NoError(t, err)
	g := replicaGate(t, store, "http://10.0.0.1:8000")
	ctx := context.Background()
	first, err := g.Admit(ctx, stream(50))
	require.NoError(t, err, "a failed store call admits within this replica's share")
	second := admitLater(t, g, stream(10)) // 50 pending tokens: under the bound (100), over this replica's share
	first.Release()
	boundSoon(t, second, "after the release").Release()
}

// While the store fails, each replica holds the above-share bound on its
// own prompts to its third (20 ms at 1,000 tokens/s: 6.7 tokens here), as
// without a store: the heavy tenant's request waits beside 10 tokens no
// engine step has taken, which the class's third (33 tokens) would let by,
// and the light tenant's request goes meanwhile (the backend is not marked
// full to its class).
func TestReplicasHoldTheirShareOfTheAboveShareBoundWhileTheStoreFails(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisslots.New(client, "down")
	require.NoError(t, err)
	g := sharedGate(t, store, "http://10.0.0.13:8000", 20, 10*time.Millisecond, 100*time.Millisecond,
		func(o *admission.Options) { o.AboveSharePrefill = 20 * time.Millisecond })
	ctx := context.Background()
	of := func(tenant string, tokens int64) admission.Request {
		r := stream(1)
		r.Tenant, r.Tokens = tenant, tokens
		return r
	}
	var held []*admission.Ticket
	var e *backends.Endpoint
	for _, r := range []admission.Request{of("heavy", 1000), of("heavy", 1000), of("light", 100)} {
		tk, err := g.Admit(ctx, r)
		require.NoError(t, err, "a failed store call admits within this replica's share")
		e = tk.Endpoint()
		tk.Started()
		held = append(held, tk)
	}
	steps := e.StepReader()
	steps.Read()
	steps.Read() // a step marked: the rule reads steps
	att := e.Start(10, 20)
	waiting := admitLater(t, g, of("heavy", 1000))
	time.Sleep(50 * time.Millisecond) // five looks for room
	assert.Equal(t, 1, g.Waiting(), "10 fresh tokens, over this replica's third of the bound")
	// The backend is full to that request alone: the light tenant's goes.
	light, err := g.Admit(ctx, of("light", 100))
	require.NoError(t, err, "bound beside the held one")
	require.True(t, steps.Read())
	g.Stepped(e)
	tk := boundSoon(t, waiting, "after the step")
	att.Finish(backends.Outcome{})
	for _, h := range append(held, light, tk) {
		h.Release()
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// A release on one replica goes to the request that has waited longest
// over the replicas, not to the one that arrived later where the slot
// freed: each replica binding its own next request at its releases let a
// replica keep a backend to itself while requests on the others starved
// (three replicas: flex p99 time to first token 20-25 s live against 14 s
// on one).
func TestAReleaseGoesToTheRequestWaitingLongestOnAnyReplica(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.2:8000"
	a, b := sharedGate(t, store, addr, 1, 10*time.Millisecond, 0), sharedGate(t, store, addr, 1, 10*time.Millisecond, 0)
	ctx := context.Background()
	held, err := a.Admit(ctx, stream(10))
	require.NoError(t, err)
	early := admitLater(t, b, stream(10))
	recorded(t, store, "", 1)
	time.Sleep(50 * time.Millisecond) // five patiences
	late := admitLater(t, a, stream(10))
	held.Release() // a binds its own next request at once, unless told to wait its turn
	first := boundFirst(t, early, late, "the earlier request")
	assert.Equal(t, 1, a.Waiting(), "the later request waits its turn")
	first.t.Release()
	boundSoon(t, late, "after the earlier one's release").Release()
}

// A release on one replica wakes the requests waiting on the others at
// once (through Watch and Gate.Room), not at their next look, an hour away
// here.
func TestAReleaseWakesTheOtherReplicasAtOnce(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.3:8000"
	a, b := sharedGate(t, store, addr, 1, time.Hour, 0), sharedGate(t, store, addr, 1, time.Hour, 0)
	ctx, cancel := context.WithCancel(context.Background())
	probed := make(chan struct{}, 1)
	var watching sync.WaitGroup
	watching.Go(func() {
		assert.NoError(t, store.Watch(ctx, func(pool, backend string) {
			switch pool {
			case "m":
				b.Room(backend)
			case "probe":
				select {
				case probed <- struct{}{}:
				default:
				}
			}
		}))
	})
	defer func() { cancel(); watching.Wait() }()
	// Once a probe's release is heard, the subscription is live.
	require.Eventually(t, func() bool {
		l := admission.Lease{Pool: "probe", Backend: "x", ID: "p", Budget: 1, Now: time.Now(), TTL: time.Minute}
		_, _, err := store.Acquire(ctx, l)
		require.NoError(t, err)
		require.NoError(t, store.Release(ctx, "probe", "x", "p"))
		select {
		case <-probed:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	}, 5*time.Second, time.Millisecond)

	held, err := a.Admit(ctx, stream(10))
	require.NoError(t, err)
	woken := admitLater(t, b, stream(10))
	held.Release()
	boundSoon(t, woken, "by the release on the other replica").Release()
}

// A release goes to the waiting request of the tenant served least, on
// whichever replica it waits, not to the heavy tenant's request waiting
// longer where the slot freed: each replica's fair queue saw only its own
// requests, so on three replicas the light tenant's next request raced the
// heavy tenant's (live at 1.3 load, its p50 TTFT twice one replica's).
func TestAReleaseGoesToTheLeastServedTenantOnAnyReplica(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.4:8000"
	a, b := sharedGate(t, store, addr, 1, 10*time.Millisecond, 0), sharedGate(t, store, addr, 1, 10*time.Millisecond, 0)
	of := func(tenant string, tokens int64) admission.Request {
		r := stream(10)
		r.Tenant, r.Tokens = tenant, tokens
		return r
	}
	ctx := context.Background()
	held, err := a.Admit(ctx, of("heavy", 1000))
	require.NoError(t, err)
	heavy := admitLater(t, a, of("heavy", 1000))
	time.Sleep(50 * time.Millisecond) // five patiences: the heavy tenant's request waited longer
	light := admitLater(t, b, of("light", 100))
	recorded(t, store, "light", 1)
	held.Release() // a binds its own next request at once, unless told the light tenant goes first
	first := boundFirst(t, light, heavy, "the light tenant's request")
	assert.Equal(t, 1, a.Waiting(), "the heavy tenant's request waits its turn")
	first.t.Release()
	boundSoon(t, heavy, "after the light tenant's release").Release()
}

// Over replicas, two tenants of one tier whose requests all wait are served
// tokens in the shares of their weights (2:1 here), though one sends
// requests five times the other's size and each waits on a replica of its
// own, where that replica's fair queue sees no other tenant: the order
// between tenants is one over the replicas. (Without it the replica where
// the slot freed bound its own tenant's next request: big's share 1.0.)
func TestReplicasShareTokensBetweenTenantsByWeight(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.5:8000"
	gates := []*admission.Gate{sharedGate(t, store, addr, 1, 5*time.Millisecond, 0), sharedGate(t, store, addr, 1, 5*time.Millisecond, 0)}
	ctx := context.Background()
	held, err := gates[0].Admit(ctx, stream(10))
	require.NoError(t, err)
	type served struct {
		tenant string
		tokens int64
	}
	var (
		mu    sync.Mutex
		order []served
		all   sync.WaitGroup
	)
	admit := func(g *admission.Gate, tenant string, weight float64, tokens int64) {
		r := stream(10)
		r.Tenant, r.Weight, r.Tokens = tenant, weight, tokens
		before := g.Waiting()
		all.Go(func() {
			tk, err := g.Admit(ctx, r)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, served{tenant, tokens})
			mu.Unlock()
			tk.Release()
		})
		require.Eventually(t, func() bool { return g.Waiting() == before+1 }, 5*time.Second, time.Millisecond)
	}
	// big (weight 2) sends 500-token requests to replica 0, small
	// (weight 1) 100-token ones to replica 1.
	for range 30 {
		admit(gates[0], "big", 2, 500)
	}
	for range 100 {
		admit(gates[1], "small", 1, 100)
	}
	recorded(t, store, "big", 30)
	recorded(t, store, "small", 100)
	held.Release()
	all.Wait()
	// While both still waited: until either tenant's last request was served.
	var big, small int64
	nBig, nSmall := 0, 0
	for _, s := range order {
		if nBig == 30 || nSmall == 100 {
			break
		}
		if s.tenant == "big" {
			big += s.tokens
			nBig++
		} else {
			small += s.tokens
			nSmall++
		}
	}
	share := float64(big) / float64(big+small)
	t.Logf("while both waited: big %d tokens, small %d: big's share %.3f (weights: 0.667)", big, small, share)
	assert.InDelta(t, 2.0/3, share, 0.0667, "tokens served split by weight within ±10%")
}

// unwaitFails is a store whose first n Unwait calls fail (a Redis stall
// past the call's deadline), as the gate sees them; the rest go to Slots.
type unwaitFails struct {
	admission.Slots
	n int
}

func (s *unwaitFails) Unwait(ctx context.Context, pool string, w admission.Waiting) error {
	if s.n > 0 {
		s.n--
		return errors.New("redisslots: unwait: i/o timeout")
	}
	return s.Slots.Unwait(ctx, pool, w)
}

// A waiting request's record that a failed Unwait left in the store is
// taken back with the gate's next release that reaches it: left there it
// held the tenant's later requests back on every replica (live, one Redis
// stall shed 177 of a tenant's requests after their 30 s wait).
func TestAFailedUnwaitIsTakenBackWithTheNextRelease(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.6:8000"
	g := sharedGate(t, &unwaitFails{Slots: store, n: 1}, addr, 1, 10*time.Millisecond, 0)
	ctx := context.Background()
	r := stream(10)
	r.Tenant = "acme"
	held, err := g.Admit(ctx, r)
	require.NoError(t, err)
	waited := admitLater(t, g, r)
	recorded(t, store, "acme", 1)
	time.Sleep(20 * time.Millisecond) // past the patience: a later request of acme is behind it while its record stays
	held.Release()
	tk := boundSoon(t, waited, "after the release") // its Unwait failed
	later := func(id string) admission.Grant {
		now := time.Now()
		l := admission.Lease{Pool: "m", Backend: "b9", ID: id, Budget: 10, Class: admission.Default, Tenant: "acme",
			Since: now, Now: now, TTL: time.Minute, Patience: 10 * time.Millisecond}
		grant, _, err := store.Acquire(ctx, l)
		require.NoError(t, err)
		if grant == admission.Granted {
			require.NoError(t, store.Release(ctx, "m", "b9", id))
		}
		return grant
	}
	require.Equal(t, admission.Behind, later("x1"), "the record the failed Unwait left holds acme's later requests back")
	tk.Release()
	assert.Equal(t, admission.Granted, later("x2"), "the release took the record back")
}

// A replica keeps its waiting requests counted past the store's AliveTTL
// by beating while they wait: the request still holds its tenant's later
// ones back on other replicas.
func TestAWaitingReplicaBeats(t *testing.T) {
	store := newSlots(t)
	store.AliveTTL = 1500 * time.Millisecond
	const addr = "http://10.0.0.7:8000"
	g := sharedGate(t, store, addr, 1, 10*time.Millisecond, 0)
	ctx := context.Background()
	r := stream(10)
	r.Tenant = "acme"
	held, err := g.Admit(ctx, r)
	require.NoError(t, err)
	waiting := admitLater(t, g, r)
	recorded(t, store, "acme", 1)
	time.Sleep(2 * time.Second) // past AliveTTL
	now := time.Now()
	l := admission.Lease{Pool: "m", Backend: "b9", ID: "x", Budget: 10, Class: admission.Default, Tenant: "acme",
		Since: now, Now: now, TTL: time.Minute, Patience: 10 * time.Millisecond}
	grant, _, err := store.Acquire(ctx, l)
	require.NoError(t, err)
	assert.Equal(t, admission.Behind, grant, "the request waiting on the live replica still goes first")
	held.Release()
	boundSoon(t, waiting, "after the release").Release()
}

// With a prefill bound per class the store holds each lease to its own
// class's: where the backlog one replica sent holds flex back on another
// replica, a priority request there binds at once (the flex refusal marks
// the backend full to flex only), and flex binds once the backlog clears.
func TestReplicasHoldEachClassToItsOwnPrefillBound(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.1:8000"
	byClass := func(o *admission.Options) {
		o.ClassPendingPrefill[admission.Priority] = 100 * time.Millisecond
	}
	a := sharedGate(t, store, addr, 10, 10*time.Millisecond, 20*time.Millisecond, byClass)
	b := sharedGate(t, store, addr, 10, time.Hour, 20*time.Millisecond, byClass) // no looks: a mark of full lasts
	ctx := context.Background()
	classed := func(c admission.Class, prompt int) admission.Request {
		r := stream(prompt)
		r.Class = c
		return r
	}
	first, err := a.Admit(ctx, classed(admission.Flex, 50))
	require.NoError(t, err, "an idle backend takes any request")
	flex := admitLater(t, b, classed(admission.Flex, 10)) // 50 ms pending: past flex's 20 ms
	time.Sleep(20 * time.Millisecond)                     // refused by the store, and marked full to flex
	prio, err := b.Admit(ctx, classed(admission.Priority, 10))
	require.NoError(t, err, "50 ms pending is within priority's 100 ms")
	assert.Equal(t, 1, b.Waiting(), "flex still waits")
	pending, err := store.PendingPrompt(ctx, "m", addr)
	require.NoError(t, err)
	assert.EqualValues(t, 60, pending)

	first.Prefilled()
	prio.Prefilled() // nothing pending: flex's room
	f := boundSoon(t, flex, "after the backlog cleared")
	for _, tk := range []*admission.Ticket{first, prio, f} {
		tk.Release()
	}
}

// A class with no bound of its own where only another class has one binds
// whatever prefill waits, and its prompt still counts toward the others'.
func TestAClassWithoutAPrefillBoundIsNotHeldByTheStore(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.1:8000"
	flexOnly := func(o *admission.Options) {
		o.ClassPendingPrefill[admission.Flex] = 20 * time.Millisecond
	}
	a := sharedGate(t, store, addr, 10, time.Hour, 0, flexOnly)
	b := sharedGate(t, store, addr, 10, time.Hour, 0, flexOnly)
	ctx := context.Background()
	first, err := a.Admit(ctx, stream(50))
	require.NoError(t, err)
	second, err := b.Admit(ctx, stream(50))
	require.NoError(t, err, "the default class has no bound: 50 ms pending does not hold it")
	second.Started() // its attempt went out: its prompt is the store's to count
	pending, err := store.PendingPrompt(ctx, "m", addr)
	require.NoError(t, err)
	assert.EqualValues(t, 100, pending, "both prompts count toward flex's bound")
	flex := stream(10)
	flex.Class = admission.Flex
	waits := admitLater(t, b, flex)
	first.Prefilled()
	second.Prefilled()
	b.Room(addr) // as the store's wake-up would tell it
	f := boundSoon(t, waits, "after the backlog cleared")
	for _, tk := range []*admission.Ticket{first, second, f} {
		tk.Release()
	}
}

// Three replicas hold AboveSharePrefill together: a tenant over its share
// beside another binds only while the prompts all replicas sent the
// backend that its engine has not yet taken into a step are under the
// bound (20 ms, 20 tokens, here). Each holding its own to a third, one
// prompt always passing, every replica would send one: three prompts
// queued a step where the bound fits one. A step mark the sending replica
// sees frees the room for the others, though the prompt stays pending
// until its first token.
func TestReplicasHoldTheAboveShareBoundTogether(t *testing.T) {
	store := newSlots(t)
	const addr = "http://10.0.0.12:8000"
	above := func(o *admission.Options) { o.AboveSharePrefill = 20 * time.Millisecond }
	ctx := context.Background()
	type replica struct {
		g     *admission.Gate
		e     *backends.Endpoint
		steps *backends.StepReader
		held  []*admission.Ticket
		atts  []backends.Attempt
	}
	of := func(tenant string, prompt int) admission.Request {
		r := stream(prompt)
		r.Tenant, r.Tokens = tenant, int64(prompt)
		return r
	}
	rs := make([]*replica, 3)
	for i := range rs {
		r := &replica{g: sharedGate(t, store, addr, 20, 10*time.Millisecond, 100*time.Millisecond, above)}
		// Each replica relays a stream from the backend, which marks its
		// engine's steps, and has the heavy tenant over its share: two of
		// its requests in flight beside one of the light tenant's.
		for _, tenant := range []string{"heavy", "heavy", "light"} {
			req := of(tenant, 1)
			if tenant == "heavy" {
				req.Tokens = 1000 // served ten times the light tenant's tokens and more
			} else {
				req.Tokens = 100
			}
			tk, err := r.g.Admit(ctx, req)
			require.NoError(t, err, "replica %d: %s", i, tenant)
			r.e = tk.Endpoint()
			att := r.e.Start(1, 2)
			tk.Started()
			att.FirstToken(time.Millisecond)
			tk.Prefilled()
			r.held, r.atts = append(r.held, tk), append(r.atts, att)
		}
		require.True(t, r.g.MarksSteps(), "replica %d: two tenants in flight", i)
		r.steps = r.e.StepReader()
		require.False(t, r.steps.Read(), "the stream's first read is of the step already marked")
		require.False(t, r.steps.Read(), "its next marks a step, with no prompt to hand the engine")
		rs[i] = r
	}
	fresh := func() int64 {
		n, err := store.FreshPrompt(ctx, "m", addr)
		require.NoError(t, err)
		return n
	}
	// Replica 0 sends the heavy tenant's 30-token prompt.
	first, err := rs[0].g.Admit(ctx, of("heavy", 30))
	require.NoError(t, err, "no fresh prompt: one passes")
	firstAtt := rs[0].e.Start(30, 31)
	first.Started()
	require.EqualValues(t, 30, fresh())
	// The other two replicas' heavy requests wait, though neither sent a
	// fresh prompt itself.
	waits := []<-chan admitted{admitLater(t, rs[1].g, of("heavy", 30)), admitLater(t, rs[2].g, of("heavy", 30))}
	time.Sleep(100 * time.Millisecond) // ten looks for room each
	for i, r := range rs[1:] {
		assert.Equal(t, 1, r.g.Waiting(), "replica %d sent a prompt while replica 0's filled the bound", i+1)
	}
	// The light tenant's request, served less, goes first in the queue
	// and is not held to that bound.
	light, err := rs[1].g.Admit(ctx, of("light", 30))
	require.NoError(t, err, "under its share: the class's 100 ms")
	light.Release()
	// The engine's next step takes replica 0's prompt up: one of the two
	// waiting binds, and its prompt fills the bound again.
	require.True(t, rs[0].steps.Read())
	rs[0].g.Stepped(rs[0].e)
	var next *admission.Ticket
	var still <-chan admitted
	select {
	case a := <-waits[0]:
		require.NoError(t, a.err)
		next, still = a.t, waits[1]
	case a := <-waits[1]:
		require.NoError(t, a.err)
		next, still = a.t, waits[0]
	case <-time.After(5 * time.Second):
		t.Fatal("the step did not free the bound for the other replicas")
	}
	assert.EqualValues(t, 30, fresh(), "the bound one's prompt alone is fresh")
	pending, err := store.PendingPrompt(ctx, "m", addr)
	require.NoError(t, err)
	assert.EqualValues(t, 60, pending, "replica 0's prompt stays pending until its first token")
	time.Sleep(50 * time.Millisecond)
	select {
	case <-still:
		t.Fatal("two prompts bound in one step")
	default:
	}
	next.Release() // its prompt leaves: the last one binds
	last := boundSoon(t, still, "after a release")
	last.Release()
	firstAtt.FirstToken(time.Millisecond)
	first.Prefilled()
	firstAtt.Finish(backends.Outcome{})
	first.Release()
	assert.Zero(t, fresh())
	for _, r := range rs {
		for i, tk := range r.held {
			r.atts[i].Finish(backends.Outcome{})
			tk.Release()
		}
	}
	n, err := store.Leases(ctx, "m", addr, time.Now())
	require.NoError(t, err)
	assert.Zero(t, n)
}
