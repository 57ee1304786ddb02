package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// ShedError is a request admission refused: the queue was full of better
// work, or it waited its class's whole MaxWait. The router answers 503
// with Retry-After, or 429 resource_unavailable for flex.
type ShedError struct {
	Class      Class
	Reason     string // "queue full" or "waited too long"
	RetryAfter time.Duration
}

func (e *ShedError) Error() string {
	return fmt.Sprintf("admission: %s request shed: %s", e.Class, e.Reason)
}

// ErrNoRoom is Rebind's answer when no other endpoint has room.
var ErrNoRoom = errors.New("admission: no other endpoint has room")

// errBehind is bindLocked's answer when the shared store holds the request
// back behind requests of its class and tenant that came first and wait on
// other replicas (Behind): not the endpoints' doing.
var errBehind = fmt.Errorf("%w: requests that came first wait on other replicas", ErrNoRoom)

// Options configures a Gate. Zero fields mean the documented defaults.
type Options struct {
	// Budget is how many requests an endpoint may have in flight through
	// this gate; 0 or less means no limit for it. Required.
	Budget func(*backends.Endpoint) int
	// QueueSize bounds the waiting requests. Default DefaultQueueSize.
	QueueSize int
	// MaxWait is each class's longest wait before it is shed. Zero
	// entries default to DefaultMaxWait's.
	MaxWait [NumClasses]time.Duration
	// OnShed, if set, is called (outside the lock) for every shed request.
	OnShed func(Class, string)
	// KVMax: an endpoint with requests in flight whose last scraped
	// KV-cache use is at least this has no room (it would queue the
	// request inside the engine, waiting for blocks). 0 means 0.95;
	// negative turns it off.
	KVMax float64
	// MaxPendingPrompt: an endpoint with at least this many prompt tokens
	// sent and not yet past their first token (its prefill backlog, as this
	// replica knows it) has no room; about one engine step's token budget
	// binds a request only when its prefill can start soon. 0 turns it off.
	MaxPendingPrompt func(*backends.Endpoint) int64
	// MaxPendingPrefill is MaxPendingPrompt in time: an endpoint with
	// requests in flight through this gate has no room while its prompt
	// tokens not yet past their first token would take at least this at
	// its measured prefill rate (PrefillTokensPerSec; before the first
	// measurement, while any prompt is pending there: one at a time).
	// With Shared the replicas hold it together: each lease carries its
	// prompt until the first token (Ticket.Prefilled),
	// and the store refuses a lease while the backend's add up to the
	// bound. Without Shared, or while the store fails, each of Replicas
	// replicas counts only its own prompts and holds to its share, the
	// bound divided by Replicas. 0 turns it off.
	MaxPendingPrefill time.Duration
	// ClassPendingPrefill gives a class its own MaxPendingPrefill; a zero
	// entry means MaxPendingPrefill. A loose bound for priority and a tight
	// one for flex keep the engines' prefill backlog of flex work short
	// while priority requests bind at once (see Gate.prefillBound).
	ClassPendingPrefill [NumClasses]time.Duration
	// BelowSharePrefill: a request whose tenant holds less than its
	// weighted share (Request.Weight) of the requests in flight through
	// this gate, while another tenant holds some, takes the larger of
	// this and its class's prefill bound, so that a light tenant's request
	// binds past a heavy tenant's backlog. A class without a bound stays
	// without. Off with Shared: three replicas sharing Redis failed 590 of
	// 1,802 requests (median TTFT 30 s, max_wait) in one of two live runs
	// (2026-12-06), not reproduced in four more, none of which lowered the
	// light tenant's p99 (README). 0: off.
	BelowSharePrefill time.Duration
	// BelowShareDetour: a request whose tenant holds less than its
	// weighted share of the requests in flight through this gate, while
	// another tenant holds some, binds only where its expected time to
	// first token (the prompt tokens ahead of it there, by this replica's
	// count and the last scrape, then its own, at the endpoint's measured
	// prefill rate) is within this of its shortest over the endpoints
	// under their budgets, room or not, and at most DetourFactor times
	// that shortest (DetourLimit). While no endpoint with room is,
	// it waits set aside and the requests behind it go first; it binds as
	// soon as one is, before the queue's requests of its class and worse.
	// A light tenant's long prompt then waits a moment for a quick GPU
	// rather than take a slow one at once beside a heavy tenant's
	// backlog. Until every available endpoint's prefill rate is measured
	// the rule does not apply. 0: off.
	BelowShareDetour time.Duration
	// BetterClassDetour is BelowShareDetour for a request whose class is
	// better than another with requests in flight through this gate
	// (priority beside flex or default, default beside flex): it binds
	// only where its expected time to first token is within this of its
	// shortest and at most DetourFactor times it, or waits set aside. A
	// priority request then takes a fast GPU rather than a slow one that
	// has room beside the worse classes' backlog. The estimate counts no
	// cached prefix, so on one GPU type with long cached prompts it moves
	// requests off the backend holding their prefix (simulated at 100ms:
	// prefix hit ratio 0.46 to 0.37 on the long-document workload over 8
	// H100s at 0.6 load, goodput -9%). Where both apply, the larger bound.
	// 0: off.
	BetterClassDetour time.Duration
	// AboveSharePrefill: a request whose tenant holds at least its
	// weighted share of the requests in flight through this gate, while
	// another tenant holds some, binds only where this replica's prompts
	// not yet taken into an engine step (sent since the endpoint's last
	// step mark, backends.Endpoint.FreshPromptTokens, or bound and not
	// yet sent) are under this at the measured prefill rate, besides its
	// class's bound. With Shared (and a class's MaxPendingPrefill) the
	// replicas hold it together: each lease's prompt counts in the store as
	// fresh until its replica sees the step that takes it up (Stepped),
	// and a lease held to the bound is refused (FreshFull) while the
	// backend's fresh prompts, all replicas', are at it; each holding its
	// own to a part (as it does while the store fails), three replicas
	// handed an engine up to three prompts a step, and a light tenant's
	// p99 TTFT was twice one replica's. A heavy tenant then
	// keeps each engine's queue of prompts it has not started to about
	// one prompt a step, so that a lighter tenant's request, which the
	// queue's fair order binds first, starts within a step or two rather
	// than behind the heavy tenant's backlog. The engine stays as busy (it
	// takes a new prompt every step), so the heavy tenant keeps its
	// throughput and waits longer in this queue. Step marks come from the
	// streams the router relays while two tenants have requests in flight
	// (MarksSteps); where no stream has marked a step for a while (answers
	// that come whole) the rule holds nothing back. 0: off.
	AboveSharePrefill time.Duration
	// WorseClassPrefill: a request of a class worse than one with requests
	// in flight through this gate (flex or default while priority has
	// some; flex while default has) binds only where the prompts not yet
	// taken into an engine step are under this at the measured prefill
	// rate, counted and shared as for AboveSharePrefill (the tighter of
	// the two where both apply). The worse classes then hand each engine
	// about one prompt a step, and a better class's request, which the
	// queue binds first, starts within a step or two rather than behind
	// their backlog of prompts (up to MaxPendingPrefill). The engines stay
	// as busy, so the worse classes keep their throughput and wait longer
	// in this queue. Simulated on Poisson load over 1 H100 and 2 L4s at
	// 1.3x capacity, 30% priority and 70% flex (seeds 0 and 1), it took
	// priority's p99 TTFT from 791 and 820 ms to 485 and 499 ms, its median
	// from 368 and 437 to 84 ms, with flex's requests/s while requests
	// waited within 3% (README). 0: off.
	WorseClassPrefill time.Duration
	// PendingUntilStep counts a prompt toward MaxPendingPrefill only until
	// its endpoint's next step mark (backends.Endpoint.FreshPromptTokens;
	// the router marks steps from the streams it relays from the endpoint,
	// backends.StepReader), not until its first token, so that the next
	// prompt waits in the engine's queue for the step after; the router
	// wakes the queue at such a mark (Stepped). With Shared the leases of
	// the prompts this replica sent there before the mark stop carrying
	// them at the mark too, in one call to the store.
	PendingUntilStep bool
	// BatchPrefill keeps batch requests (Request.Batch) to what other
	// work leaves: while an endpoint has other requests in flight through
	// this gate, it takes a batch request only if the prompt tokens
	// queued on it (PrefillAhead) plus the request's own would
	// take at most this at its measured prefill rate
	// (PrefillTokensPerSec; none before the first measurement). Engine
	// steps shared with other requests then hold little batch prefill.
	// An endpoint with only batch requests in flight takes them up to
	// BatchIdleFactor times this, and always one when nothing is pending
	// there. Zero means DefaultBatchPrefill; negative turns it off.
	BatchPrefill time.Duration
	// BatchReserve is the share of each endpoint's budget that Batch API
	// lines leave to other requests: a line binds only while lines hold
	// fewer than budget - ceil(budget x BatchReserve) slots there (at
	// least one). Without it a batch filled every slot whenever one freed,
	// and an interactive request, priority too, waited for a line to end:
	// live, with 64 lines over a budget of 2 x 16, priority's median time
	// to first token went from 11 ms to 103-109 ms and its worst to
	// 1.9-2.7 s. Zero (the default here; the router's config sets 0.125)
	// reserves nothing.
	BatchReserve float64

	// Shared, when set, shares the budgets and the order between classes
	// with the other replicas that use the same store and Pool name: an
	// endpoint has room when fewer than its budget hold leases on it in
	// all, and a request does not start while one of a better class has
	// waited longer than Patience on any replica.
	Shared Slots
	// Pool names the pool in the shared store (the model name).
	Pool string
	// Patience is the dispatch interval: how often a waiting request
	// looks again for room that other replicas freed, and how long a
	// better class may wait elsewhere before this replica holds back.
	// Default 50ms.
	Patience time.Duration
	// LeaseTTL bounds how long a replica that died keeps its slots.
	// Default 10m.
	LeaseTTL time.Duration
	// Replicas is how many replicas share the budgets: while the shared
	// store fails, each admits up to its share, budget / Replicas
	// (rounded up). Default 1.
	Replicas int
	// OnSharedError, if set, is called for every failed shared-store call
	// (for a log line and a metric); admission goes on with the share.
	OnSharedError func(error)
}

// Request is what admission knows of a request.
type Request struct {
	Class        Class
	TierPriority int
	Tenant       string
	Weight       float64
	// Tokens is the request's estimated cost (prompt plus expected output).
	Tokens int64
	// Routing is what the pool's Picker gets when the request is bound.
	Routing *policies.Request
	// Batch marks a Batch API line: it runs only in what other work
	// leaves (Options.BatchPrefill). The router sets it from the
	// request's context (WithBatch).
	Batch bool
}

type batchKey struct{}

// batchMark is WithBatch's value: stop, when not nil, closes when the
// line should give up waiting.
type batchMark struct{ stop <-chan struct{} }

// WithBatch marks ctx's request as a Batch API line (Request.Batch). A
// line still waiting in the queue when stop closes (its runner is shutting
// down) leaves it, shed ("shutting down"), so that it is given back rather
// than started in the drain and cut; a nil stop never closes.
func WithBatch(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, batchKey{}, batchMark{stop: stop})
}

// IsBatch reports whether WithBatch marked ctx.
func IsBatch(ctx context.Context) bool { _, ok := ctx.Value(batchKey{}).(batchMark); return ok }

// batchStop is WithBatch's stop for ctx (nil when none).
func batchStop(ctx context.Context) <-chan struct{} {
	m, _ := ctx.Value(batchKey{}).(batchMark)
	return m.stop
}

// Gate is one pool's admission queue with late binding: a request is bound
// to an endpoint (by the pool's Picker, over the endpoints with room) only
// when one has room, in the queue's order. It is safe for concurrent use.
type Gate struct {
	pool   *backends.Pool
	picker policies.Picker
	o      Options

	mu sync.Mutex
	q  *Queue
	// aside holds waiters taken off the queue, oldest first, at most
	// MaxBatchAside, so the requests behind them may go first: batch
	// waiters whose prompts fit no endpoint's BatchPrefill bound, and
	// requests no endpoint with room suits (BelowShareDetour, BetterClassDetour).
	aside []*waiter
	// rebinds are retries waiting for room (Ticket.Rebind), oldest first;
	// they go before the queue.
	rebinds []*rebinder
	granted map[*backends.Endpoint]int
	others  map[*backends.Endpoint]int // granted, less batch requests
	// unstarted is, per endpoint, the prompt tokens of requests bound
	// there whose attempt has not started yet (Ticket.Started), so not yet
	// in the endpoint's PendingPromptTokens; the prefill bounds count them
	// too, else one dispatch could bind a burst where one prompt fits.
	// Kept only with those bounds (tracksPending).
	unstarted map[*backends.Endpoint]int64
	full      map[*backends.Endpoint][NumClasses]time.Time // shared store said full to a class, until
	// freshFull holds the endpoints whose fresh prompts the shared store
	// said were at AboveSharePrefill, with their step marks then: until
	// their next mark, a word that they have room (Room) or Patience,
	// requests held to that bound do not ask them again.
	freshFull map[*backends.Endpoint]freshMark
	// handing holds, per endpoint, the started tickets whose leases carry
	// their prompts in the shared store, with the endpoint's step marks
	// when each started: a later mark hands the prompt to the engine
	// (Stepped). Kept only when handsSteps.
	handing map[*backends.Endpoint]map[*Ticket]uint64
	scratch []*backends.Endpoint
	// orphans are leases whose Acquire failed (a deadline, say) after the
	// store may have granted them; each is released with the next release
	// that reaches the store, so a slow store does not strand slots until
	// LeaseTTL. Bounded by maxOrphans.
	orphans []orphan
	unwaits []Waiting // waits whose Unwait failed, to take back (unwait)
	now     func() time.Time
	seq     atomic.Uint64
	prefix  string
	counts  *[NumClasses]classCounters // shared with the gate it replaced (CountWith)
	binds   bindRate                   // how fast requests leave the queue bound, for Retry-After
	// tenants counts each tenant's requests in flight through this gate
	// (BelowSharePrefill, BelowShareDetour, AboveSharePrefill); nil when
	// all are off. classIn counts the requests in flight through this
	// gate by class (WorseClassPrefill). fresh is whether a bound on the
	// prompts not yet in an engine step may apply now, two tenants
	// (AboveSharePrefill) or two classes (WorseClassPrefill) having
	// requests in flight, for MarksSteps without the lock.
	tenants *TenantShares
	classIn [NumClasses]int
	fresh   atomic.Bool
	prev    atomic.Pointer[Gate] // that gate while requests wait there, for Stats
	// lastPoll is when a waiter's poll last dispatched (UnixNano): one
	// poll per Patience dispatches, however many wait (pollDue).
	lastPoll atomic.Int64
	lastBeat atomic.Int64 // when poll last called Slots.Beat (UnixNano)
	polls    atomic.Int64 // dispatches by polls, for tests
}

// NewGate returns a gate for pool, binding with picker.
func NewGate(pool *backends.Pool, picker policies.Picker, o Options) (*Gate, error) {
	if pool == nil || picker == nil || o.Budget == nil {
		return nil, errors.New("admission: a gate needs a pool, a picker and a budget")
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.KVMax == 0 {
		o.KVMax = 0.95
	}
	for c := range o.MaxWait {
		if o.MaxWait[c] <= 0 {
			o.MaxWait[c] = DefaultMaxWait[c]
		}
	}
	if o.Patience <= 0 {
		o.Patience = 50 * time.Millisecond
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Minute
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.BatchPrefill == 0 {
		o.BatchPrefill = DefaultBatchPrefill
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("admission: lease prefix: %w", err)
	}
	g := &Gate{pool: pool, picker: picker, o: o, q: NewQueue(o.QueueSize), prefix: hex.EncodeToString(b[:]) + "-",
		granted: map[*backends.Endpoint]int{}, others: map[*backends.Endpoint]int{}, unstarted: map[*backends.Endpoint]int64{}, full: map[*backends.Endpoint][NumClasses]time.Time{},
		handing: map[*backends.Endpoint]map[*Ticket]uint64{}, freshFull: map[*backends.Endpoint]freshMark{}, now: time.Now, counts: new([NumClasses]classCounters)}
	if o.BelowSharePrefill > 0 && o.Shared == nil || o.BelowShareDetour > 0 || o.AboveSharePrefill > 0 { // BelowSharePrefill is one replica's: see configs.Admission
		g.tenants = NewTenantShares()
	}
	return g, nil
}

// Ticket is an admitted request's hold on its endpoint; Release it once
// when the request ends.
type Ticket struct {
	g        *Gate
	ep       *backends.Endpoint
	lease    string // in the shared store; "" when none was taken
	class    Class
	tenant   string
	since    time.Time // when the request arrived
	batch    bool
	waited   time.Duration
	released bool
	prompt   int64 // the request's prompt tokens, in Gate.unstarted until started
	started  bool  // the attempt on ep has started (or nothing is tracked)
	// prefilled: the shared store was told, or is being told, that the
	// lease's prompt is past its first token or in its engine's hands
	// (Stepped, on another stream's goroutine).
	prefilled atomic.Bool
}

// Endpoint is where the request is bound.
func (t *Ticket) Endpoint() *backends.Endpoint { return t.ep }

// Waited is how long the request waited in the queue.
func (t *Ticket) Waited() time.Duration { return t.waited }

// waiter is a queued request's live side.
type waiter struct {
	r     Request
	since time.Time // when it arrived
	item  Item
	ready chan result // buffered 1: the binding or the shedding, sent once
	aside bool        // in Gate.aside, guarded by the Gate's lock
}

type result struct {
	ep    *backends.Endpoint
	lease string
	err   error
}

// Admit waits until the request may run and returns its ticket, bound to
// an endpoint. It returns a *ShedError when the request is shed, the
// context's error when the client left (the request leaves the queue at
// once), or the picker's error (policies.ErrNoEndpoint when no endpoint
// is available at all).
func (g *Gate) Admit(ctx context.Context, r Request) (*Ticket, error) {
	start := g.now()
	g.mu.Lock()
	if g.q.Len() == 0 {
		ep, lease, err := g.bindLocked(ctx, &r, start, nil, true)
		if ep != nil || !errors.Is(err, ErrNoRoom) && !errors.Is(err, errDetour) {
			g.mu.Unlock()
			if err != nil {
				return nil, err
			}
			g.admitted(r.Class, 0, start)
			return &Ticket{g: g, ep: ep, lease: lease, class: r.Class, tenant: r.Tenant, since: start, batch: r.Batch, prompt: promptOf(r.Routing), started: !g.tracksPending()}, nil
		}
	}
	w := &waiter{r: r, since: start, ready: make(chan result, 1)}
	w.item = Item{Class: r.Class, TierPriority: r.TierPriority, Tenant: r.Tenant, Weight: r.Weight, Tokens: r.Tokens, Value: w}
	shed, err := g.q.Push(&w.item)
	if err == nil {
		// Those waiting may wait for room this request does not need
		// (batch lines over their share, BatchReserve): it goes now, in
		// the queue's order, rather than at the next release or look.
		g.dispatchLocked()
	}
	g.mu.Unlock()
	if shed != nil {
		sw := shed.Value.(*waiter)
		sw.ready <- result{err: g.shedError(sw.r.Class, "queue full")}
	}
	if err != nil {
		return nil, g.shedError(r.Class, "queue full")
	}
	var res result
	select {
	case res = <-w.ready:
		return g.ticket(&r, start, res)
	default:
	}
	if g.o.Shared != nil {
		id := g.prefix + strconv.FormatUint(g.seq.Add(1), 36)
		wt := Waiting{Class: r.Class, TierPriority: r.TierPriority, Tenant: r.Tenant, ID: id, Since: start, TTL: g.o.MaxWait[r.Class] + g.o.Patience}
		g.shared(func(ctx context.Context) error { return g.o.Shared.Wait(ctx, g.o.Pool, wt) })
		defer g.unwait(wt)
	}
	timer := time.NewTimer(g.o.MaxWait[r.Class])
	defer timer.Stop()
	// Room that frees without a release here (another replica's, a KV cache
	// draining, a prefill done), and a pool left with no endpoint (all
	// drained or down: failAllLocked), are seen by looking again every
	// Patience.
	tick := time.NewTicker(g.o.Patience)
	defer tick.Stop()
	poll := tick.C
	stop := batchStop(ctx)
	for waiting := true; waiting; {
		select {
		case res = <-w.ready:
			waiting = false
		case <-poll:
			g.poll()
		case <-ctx.Done():
			if res, ok := g.leave(w); ok && res.ep != nil {
				g.unbind(res, &r) // bound as the client left: give the slot back
			}
			return nil, ctx.Err()
		case <-stop:
			if res, ok := g.leave(w); ok && res.ep != nil {
				g.unbind(res, &r)
			}
			return nil, g.shedError(r.Class, "shutting down")
		case <-timer.C:
			var ok bool
			if res, ok = g.leave(w); !ok {
				return nil, g.shedError(r.Class, "waited too long")
			}
			waiting = false
		}
	}
	return g.ticket(&r, start, res)
}

// ticket is the Ticket of r, which arrived at start and waited for res.
func (g *Gate) ticket(r *Request, start time.Time, res result) (*Ticket, error) {
	if res.err != nil {
		return nil, res.err
	}
	now := g.now()
	waited := now.Sub(start)
	g.admitted(r.Class, waited, now)
	return &Ticket{g: g, ep: res.ep, lease: res.lease, class: r.Class, tenant: r.Tenant, since: start, batch: r.Batch, waited: waited,
		prompt: promptOf(r.Routing), started: !g.tracksPending()}, nil
}

// poll is a waiter's look for room: a dispatch, when one is due (and,
// with a shared store, a Beat every beatEvery).
func (g *Gate) poll() {
	if g.pollDue() {
		if now := g.now().UnixNano(); g.o.Shared != nil && now-g.lastBeat.Load() >= int64(beatEvery) {
			g.lastBeat.Store(now)
			replica := strings.TrimSuffix(g.prefix, "-")
			g.shared(func(ctx context.Context) error { return g.o.Shared.Beat(ctx, g.o.Pool, replica) })
		}
		g.mu.Lock()
		g.dispatchLocked()
		g.mu.Unlock()
	}
}

// unbind gives back res, a binding of r that will not run.
func (g *Gate) unbind(res result, r *Request) {
	g.mu.Lock()
	g.startedLocked(res.ep, promptOf(r.Routing))
	g.mu.Unlock()
	g.release(res.ep, res.lease, r.Batch, r.Tenant, r.Class)
}

// beatEvery is how often a gate with waiting requests tells the shared
// store that it is alive (Slots.Beat).
const beatEvery = time.Second

// pollDue reports whether a waiter's poll should dispatch: at most one
// poll per Patience does, whichever waiter's ticker fires first. Every
// waiter polls (so room is seen while any waits), but dispatching once per
// poll made the work grow with the queue: 50 waiters ran it 5,000 times a
// second under the gate's lock (TestPollsDispatchOncePerPatience), and the
// live batch bench, with up to 512 batch lines and 600 interactive
// requests waiting, up to about 20,000 (1,100 x 20 polls a second).
func (g *Gate) pollDue() bool {
	now := g.now().UnixNano()
	last := g.lastPoll.Load()
	if now-last < int64(g.o.Patience) || !g.lastPoll.CompareAndSwap(last, now) {
		return false
	}
	g.polls.Add(1)
	return true
}

// shared runs one shared-store call with a short deadline, reporting a
// failure.
func (g *Gate) shared(call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	err := call(ctx)
	if err != nil && g.o.OnSharedError != nil {
		g.o.OnSharedError(err)
	}
	return err
}

// sharedTimeout bounds each shared-store call.
const sharedTimeout = 50 * time.Millisecond

// leave takes w out of the queue and reports false; when w had already
// left it (bound or shed) it returns the result sent to it and true.
func (g *Gate) leave(w *waiter) (result, bool) {
	g.mu.Lock()
	if w.item.lane != nil {
		g.q.Remove(&w.item)
		g.mu.Unlock()
		return result{}, false
	}
	if w.aside { // set aside (dispatchLocked)
		g.aside = slices.DeleteFunc(g.aside, func(x *waiter) bool { return x == w })
		w.aside = false
		g.mu.Unlock()
		return result{}, false
	}
	g.mu.Unlock()
	return <-w.ready, true
}

func (g *Gate) shedError(c Class, reason string) *ShedError {
	if c < NumClasses {
		g.counts[c].shed.Add(1)
	}
	if g.o.OnShed != nil {
		g.o.OnShed(c, reason)
	}
	return &ShedError{Class: c, Reason: reason, RetryAfter: g.retryAfter(c)}
}

// Retry-After bounds for a shed request: at least minRetry (flex
// minFlexRetry, as its clients back off longer), at most maxRetry, the
// longest the OpenAI SDKs honour (they fall back to their own backoff
// beyond a minute).
const (
	minRetry     = time.Second
	minFlexRetry = 5 * time.Second
	maxRetry     = time.Minute
)

// retryAfter is how long a request of class c shed now should wait before
// it tries again: the time the requests waiting ahead of it (its class
// and better ones, itself included) take to be bound at the rate requests
// have been bound lately, within minRetry (minFlexRetry) and maxRetry; the
// least when none was bound lately. A fixed 5 s told flex clients to come
// back while minutes of work still waited ahead of them.
func (g *Gate) retryAfter(c Class) time.Duration {
	least := minRetry
	if c == Flex {
		least = minFlexRetry
	}
	rate := g.binds.perSecond(g.now().UnixNano())
	if rate <= 0 {
		return least
	}
	ahead := 1
	g.mu.Lock()
	for k := Class(0); k <= c && k < NumClasses; k++ {
		ahead += g.q.ClassLen(k)
	}
	for _, w := range g.aside {
		if w.r.Class <= c {
			ahead++
		}
	}
	g.mu.Unlock()
	d := time.Duration(float64(ahead) / rate * float64(time.Second))
	return min(max(d, least), maxRetry)
}

// bindRate measures how many requests a gate binds per second, over
// windows of bindWindow; lock-free, as every admitted request counts.
type bindRate struct {
	start atomic.Int64  // the window's start, UnixNano (0: none yet)
	n     atomic.Int64  // binds in the window
	last  atomic.Uint64 // the last whole window's rate, float64 bits
}

const bindWindow = 5 * time.Second

func (b *bindRate) add(now int64) {
	n := b.n.Add(1)
	s := b.start.Load()
	if s == 0 {
		b.start.CompareAndSwap(0, now)
		return
	}
	if el := now - s; el >= int64(bindWindow) && b.start.CompareAndSwap(s, now) {
		b.last.Store(math.Float64bits(float64(n) / (float64(el) / 1e9)))
		b.n.Add(-n)
	}
}

// perSecond is the last whole window's rate, or, once the window in
// progress is longer than one (nothing bound to close it), that window's
// rate so far, which falls as the gate stays idle; 0 before any bind.
func (b *bindRate) perSecond(now int64) float64 {
	s := b.start.Load()
	if s == 0 {
		return 0
	}
	if el := now - s; el >= int64(bindWindow) {
		return float64(b.n.Load()) / (float64(el) / 1e9)
	}
	return math.Float64frombits(b.last.Load())
}

// pinOf is routing's Pin, nil for none.
func pinOf(routing *policies.Request) *backends.Endpoint {
	if routing == nil {
		return nil
	}
	return routing.Pin
}

// bindLocked picks an endpoint with room (not in exclude) for r, which
// arrived at since, takes its slot (in the shared store too, when there is
// one) and returns it with the lease; ErrNoRoom when none has room,
// errBehind when the shared store holds r back behind requests that
// waited longer on other replicas, and, with detour, errDetour when some
// have room but none suits r (BelowShareDetour, BetterClassDetour).
func (g *Gate) bindLocked(ctx context.Context, r *Request, since time.Time, exclude []*backends.Endpoint, detour bool) (*backends.Endpoint, string, error) {
	routing, batch := r.Routing, r.Batch
	now := g.now()
	// Available may return the pool's own slice: never write into it.
	avail := g.pool.Available(nil, now)
	if len(avail) == 0 {
		return nil, "", policies.ErrNoEndpoint
	}
	room := g.scratch[:0]
	bound := g.requestBound(r)
	loose := bound != g.prefillBound(r.Class) // the full marks are its class's: neither read nor set for another bound
	freshBound := g.freshBoundLocked(r)
	above := freshBound > 0
	heldAbove := false // some endpoint has room for r but for AboveSharePrefill or WorseClassPrefill
	for _, e := range avail {
		if !loose && g.isFull(e, r.Class, now) {
			continue
		}
		if !g.hasRoom(e, bound) || !g.batchFits(e, batch, routing) || contains(exclude, e) {
			continue
		}
		if above && (g.isFreshFull(e, now) || !g.freshRoom(e, freshBound)) {
			heldAbove = true
			continue
		}
		room = append(room, e)
	}
	if pin := pinOf(routing); pin != nil && slices.Contains(avail, pin) {
		// Only the pinned endpoint will do: with room elsewhere and none
		// there, the request is set aside as a detour is, so that those
		// behind it go meanwhile.
		had := len(room) > 0
		room = slices.DeleteFunc(room, func(e *backends.Endpoint) bool { return e != pin })
		if len(room) == 0 && had && detour {
			g.scratch = room
			return nil, "", errPinned
		}
	} else if len(room) > 0 && detour && !batch {
		if d := g.detourLocked(r); d > 0 && !g.tenantAsideLocked(r) {
			room = g.suitedLocked(room, avail, routing, exclude, d)
			if len(room) == 0 {
				g.scratch = room
				return nil, "", errDetour
			}
		}
	}
	g.scratch = room
	if len(room) == 0 {
		if heldAbove {
			g.heldAboveLocked(r)
			return nil, "", errHeldAbove
		}
		return nil, "", ErrNoRoom
	}
	var ep *backends.Endpoint
	lease := ""
	if routing != nil {
		routing.Queued = true
	}
	for {
		var err error
		if ep, err = g.picker.Pick(ctx, routing, room); err != nil {
			return nil, "", err
		}
		b := g.o.Budget(ep)
		if g.o.Shared == nil || (b <= 0 && !g.sharesPrefill()) {
			break
		}
		l := g.lease(ep, b, r, bound, since, now)
		if above && g.stepsSeen(ep) {
			l.MaxFresh = max(int64(ep.PrefillTokensPerSec()*freshBound.Seconds()), 1) // one at a time before a measurement
		}
		lease = l.ID
		var grant Grant
		var pending int64
		err = g.shared(func(sctx context.Context) (err error) {
			grant, pending, err = g.o.Shared.Acquire(sctx, l)
			return err
		})
		if err == nil && grant == Granted && g.sharesPrefill() {
			// The store counts every replica's prompts: the others' are
			// ahead of this one, which the picker and the prefill rate
			// measured from its first token must count (the scrape
			// shows them an interval late).
			ep.StoreOthersPending(now, pending)
		}
		switch {
		case err != nil: // the store failed: admit within this replica's share
			g.orphanLocked(ep, lease) // the store may have granted it all the same
			lease = ""
			if (b > 0 && g.granted[ep] >= (b+g.o.Replicas-1)/g.o.Replicas) || !g.prefillRoom(ep, g.o.Replicas, bound) {
				if !loose {
					g.markFull(ep, r.Class, now.Add(g.o.Patience))
				}
				return nil, "", ErrNoRoom
			}
			if above && !g.freshRoomOf(ep, g.o.Replicas, freshBound) { // full to this request alone
				g.heldAboveLocked(r)
				return nil, "", errHeldAbove
			}
		case grant == Behind: // not the endpoint's doing: this request waits its turn
			if r.Class < NumClasses {
				g.counts[r.Class].behind.Add(1)
			}
			return nil, "", errBehind
		case grant == FreshFull: // full to this request alone: ask the others with room
			g.freshFull[ep] = freshMark{steps: ep.StepMarks(), until: now.Add(g.o.Patience)}
			lease = ""
			if room = slices.DeleteFunc(room, func(e *backends.Endpoint) bool { return e == ep }); len(room) == 0 {
				g.heldAboveLocked(r)
				return nil, "", errHeldAbove
			}
			continue
		case grant != Granted:
			if !loose {
				g.markFull(ep, r.Class, now.Add(g.o.Patience))
			}
			return nil, "", ErrNoRoom
		}
		break
	}
	g.granted[ep]++
	if g.tenants != nil {
		g.tenants.Add(r.Tenant, r.Weight)
	}
	if r.Class < NumClasses {
		g.classIn[r.Class]++
	}
	g.fresh.Store(g.freshAppliesLocked())
	if !batch {
		g.others[ep]++
	}
	if g.tracksPending() {
		g.unstarted[ep] += promptOf(routing)
	}
	return ep, lease, nil
}

// lease is the shared store's lease for r, which arrived at since, bound
// to ep, whose budget is b: with MaxPendingPrefill it carries the prompt
// and r's bound (requestBound) in tokens at ep's measured prefill rate (one prompt before
// the first measurement). An answer that comes whole has no first token to end its
// prompt's count, which then lasts as long as its prefill is expected to
// take there, as backends.Endpoint.StartWhole's does.
func (g *Gate) lease(ep *backends.Endpoint, b int, r *Request, bound time.Duration, since, now time.Time) Lease {
	routing := r.Routing
	l := Lease{Pool: g.o.Pool, Backend: ep.Address(), ID: g.prefix + strconv.FormatUint(g.seq.Add(1), 36),
		Budget: b, Class: r.Class, Tenant: r.Tenant, Since: since, TierPriority: r.TierPriority, Cost: weighted(r.Tokens, r.Weight),
		Now: now, TTL: g.o.LeaseTTL, Patience: g.o.Patience, MaxWait: g.o.MaxWait}
	if l.Budget <= 0 {
		l.Budget = math.MaxInt32
	}
	if !g.sharesPrefill() {
		return l
	}
	rate := ep.PrefillTokensPerSec()
	if bound > 0 { // else its prompt counts for others, bounding nothing itself
		l.MaxPrompt = max(int64(rate*bound.Seconds()), 1) // one at a time before a measurement
	}
	l.Prompt = max(promptOf(routing), 1)
	// While this replica reads steps (MarksSteps) its prompts count as
	// fresh until the step that takes them up (Stepped).
	l.Fresh = g.fresh.Load()
	if routing != nil && !routing.Stream {
		if rate <= 0 {
			// As backends.Endpoint.StartWhole: with no measured rate yet an
			// answer that comes whole carries no prompt, so that whole
			// answers are not held to one at a time until a backend's
			// first answers have measured one.
			l.Prompt = 0
			return l
		}
		d := time.Duration(float64(ep.PrefillAhead(l.Prompt)+l.Prompt) / rate * float64(time.Second))
		l.PromptUntil = now.Add(d)
	}
	return l
}

// sharesPrefill reports whether the replicas hold MaxPendingPrefill
// together, through the shared store.
func (g *Gate) sharesPrefill() bool { return g.o.Shared != nil && g.boundsPrefill() }

// boundsPrefill reports whether some class has a MaxPendingPrefill
// (ClassPendingPrefill) bound.
func (g *Gate) boundsPrefill() bool {
	for c := range NumClasses {
		if g.prefillBound(c) > 0 {
			return true
		}
	}
	return false
}

// prefillBound is class c's MaxPendingPrefill: its ClassPendingPrefill
// entry, or MaxPendingPrefill; 0 is none.
//
// Bounds by class were measured in simulation on Poisson load, 30%
// priority and 70% flex, tuned on seeds 0, 1, 4 and 5 and reported on 2
// and 3: 35ms for flex with 140ms for priority took priority's p99 time
// to first token at 1.3x capacity from 380 and 364 ms (35ms for both) to
// 270 and 247 ms, at 0.5x from 295 and 303 to 176 and 170 ms, and flex's
// median from 25.7 and 27.6 s to 15.6 and 17.2 s (docs/benchmarks.md).
func (g *Gate) prefillBound(c Class) time.Duration {
	if c < NumClasses && g.o.ClassPendingPrefill[c] > 0 {
		return g.o.ClassPendingPrefill[c]
	}
	return g.o.MaxPendingPrefill
}

// requestBound is r's prefill bound: its class's, or, where larger, with
// BelowSharePrefill (one replica's), that for a request whose tenant holds
// less than its weighted share of the requests in flight here while
// another tenant holds some. Call it with g.mu held.
func (g *Gate) requestBound(r *Request) time.Duration {
	d := g.prefillBound(r.Class)
	if d <= 0 || g.tenants == nil {
		return d
	}
	if g.o.Shared == nil && g.o.BelowSharePrefill > d && g.tenants.Below(r.Tenant, r.Weight) {
		return g.o.BelowSharePrefill
	}
	return d
}

// stepsUnseen is how long after an endpoint's last step mark its steps
// count as unseen (freshRoom): a few of a saturated engine's longest
// steps (about 0.6 s, a full prefill step on an L4).
const stepsUnseen = 2 * time.Second

// aboveShareLocked reports whether r's tenant holds at least its weighted
// share of the requests in flight here while another tenant holds some
// (AboveSharePrefill applies to it).
func (g *Gate) aboveShareLocked(r *Request) bool {
	return g.o.AboveSharePrefill > 0 && g.tenants != nil && g.prefillBound(r.Class) > 0 &&
		g.tenants.Others(r.Tenant) && !g.tenants.Below(r.Tenant, r.Weight)
}

// behindBetterLocked reports whether a class better than r's has requests
// in flight here (WorseClassPrefill applies to r).
func (g *Gate) behindBetterLocked(r *Request) bool {
	if g.o.WorseClassPrefill <= 0 || r.Class >= NumClasses || g.prefillBound(r.Class) <= 0 {
		return false
	}
	return g.inFlightLocked(0, r.Class)
}

// inFlightLocked reports whether a class in [from, to) has requests in
// flight here.
func (g *Gate) inFlightLocked(from, to Class) bool {
	for c := from; c < to && c < NumClasses; c++ {
		if g.classIn[c] > 0 {
			return true
		}
	}
	return false
}

// freshBoundLocked is the bound on the prompts not yet in an engine step
// that applies to r: AboveSharePrefill while its tenant is at or over its
// share beside another, WorseClassPrefill while a better class has
// requests in flight, the tighter where both do; 0 where neither does.
func (g *Gate) freshBoundLocked(r *Request) time.Duration {
	var b time.Duration
	if g.aboveShareLocked(r) {
		b = g.o.AboveSharePrefill
	}
	if g.behindBetterLocked(r) && (b == 0 || g.o.WorseClassPrefill < b) {
		b = g.o.WorseClassPrefill
	}
	return b
}

// freshAppliesLocked reports whether a bound on the prompts not yet in an
// engine step may apply to some request now: two tenants have requests in
// flight here (AboveSharePrefill), or two classes (WorseClassPrefill).
func (g *Gate) freshAppliesLocked() bool {
	if g.o.AboveSharePrefill > 0 && g.tenants != nil && g.tenants.Tenants() > 1 {
		return true
	}
	if g.o.WorseClassPrefill > 0 {
		n := 0
		for _, k := range g.classIn {
			if k > 0 {
				n++
			}
		}
		return n > 1
	}
	return false
}

// freshRoom reports whether e takes a request bound to fresh prompts
// (AboveSharePrefill, WorseClassPrefill: bound) to: this replica's
// prompts there not yet in an engine step under its part of the bound
// (one prompt at a time before a measured rate). Where
// no stream has marked a step lately (answers that come whole, or streams
// begun while one tenant was in flight) the rule cannot tell a prompt in
// a step from one queued, and does not hold the request back.
// With the shared store the replicas hold the bound together there (this
// replica's own prompts alone filling it is a short cut).
func (g *Gate) freshRoom(e *backends.Endpoint, bound time.Duration) bool {
	share := g.o.Replicas
	if g.sharesPrefill() {
		share = 1
	}
	return g.freshRoomOf(e, share, bound)
}

// freshRoomOf is freshRoom with this replica holding to 1/share of the
// bound.
func (g *Gate) freshRoomOf(e *backends.Endpoint, share int, bound time.Duration) bool {
	return !g.stepsSeen(e) || g.underBound(e, e.FreshPromptTokens(), share, bound)
}

// stepsSeen reports whether a stream marked one of e's engine steps
// lately (stepsUnseen).
func (g *Gate) stepsSeen(e *backends.Endpoint) bool {
	return g.now().Sub(e.LastStepMark()) <= stepsUnseen
}

// freshMark is when the shared store said an endpoint's fresh prompts
// were at AboveSharePrefill: its step marks then, and until when to
// believe it without a word of room (Patience).
type freshMark struct {
	steps uint64
	until time.Time
}

// isFreshFull reports whether the shared store said e's fresh prompts were
// at AboveSharePrefill since its last step mark and word of room, less than
// Patience before now.
func (g *Gate) isFreshFull(e *backends.Endpoint, now time.Time) bool {
	m, ok := g.freshFull[e]
	if ok && (m.steps != e.StepMarks() || !now.Before(m.until)) {
		delete(g.freshFull, e)
		return false
	}
	return ok
}

// errHeldAbove is bindLocked's answer when endpoints have room for r but
// for AboveSharePrefill: the requests of other tenants behind it go
// meanwhile (dispatchLocked), each while its tenant is served less than
// r's would be with r (Queue.PeekPast). Stopping there, as at a full
// endpoint, held a lighter tenant's request back behind the heavy one's
// whenever the heavy tenant's lane was first (a tenant back from idle
// starts level with it) until the engine's next step: in simulation on
// the Azure trace, seed 2, the light tenant's p99 beside a heavy one was
// 1.28x its run alone, 1.15x passing. It is an ErrNoRoom to every other
// caller.
var errHeldAbove = fmt.Errorf("%w for a tenant above its share", ErrNoRoom)

// heldAboveLocked counts a look for room at which r was held by
// AboveSharePrefill (errHeldAbove).
func (g *Gate) heldAboveLocked(r *Request) {
	if r.Class < NumClasses {
		g.counts[r.Class].heldAbove.Add(1)
	}
}

// errDetour is bindLocked's answer when endpoints have room for r but
// none suits it (BelowShareDetour, BetterClassDetour): r waits set aside.
var errDetour = errors.New("admission: no endpoint with room suits the request")

// errPinned is bindLocked's answer when endpoints have room but not the
// one the request is pinned to (policies.Request.Pin): it waits aside as a
// detour does, and is not counted as one.
var errPinned = fmt.Errorf("%w: not the endpoint it is pinned to", errDetour)

// detourLocked is the detour that applies to r (0: none): BelowShareDetour
// while its tenant is below its share, BetterClassDetour while a worse
// class has requests in flight, the larger where both do.
func (g *Gate) detourLocked(r *Request) time.Duration {
	var d time.Duration
	if g.o.BelowShareDetour > 0 && g.belowShareLocked(r) {
		d = g.o.BelowShareDetour
	}
	if g.o.BetterClassDetour > d && g.aheadOfWorseLocked(r) {
		d = g.o.BetterClassDetour
	}
	return d
}

// aheadOfWorseLocked reports whether a class worse than r's has requests
// in flight here.
func (g *Gate) aheadOfWorseLocked(r *Request) bool {
	return g.inFlightLocked(r.Class+1, NumClasses)
}

// suitedLocked is room less the endpoints where r's expected time to first
// token is past DetourLimit of its shortest over avail's endpoints under
// their budgets (less exclude), under the detour d; room itself while any
// of avail has no measured prefill rate. It reuses room's array.
func (g *Gate) suitedLocked(room, avail []*backends.Endpoint, routing *policies.Request, exclude []*backends.Endpoint, d time.Duration) []*backends.Endpoint {
	prompt := int64(0)
	if routing != nil {
		prompt = max(int64(routing.PromptTokens), 0)
	}
	est := func(e *backends.Endpoint) float64 {
		return float64(e.PrefillAhead(prompt)+g.unstarted[e]+prompt) / e.PrefillTokensPerSec()
	}
	best := math.Inf(1)
	for _, e := range avail {
		if e.PrefillTokensPerSec() <= 0 {
			return room // unmeasured: no estimate to compare
		}
		if b := g.o.Budget(e); (b > 0 && g.granted[e] >= b) || contains(exclude, e) {
			continue
		}
		best = min(best, est(e))
	}
	limit := DetourLimit(best, d)
	return slices.DeleteFunc(room, func(e *backends.Endpoint) bool { return est(e) > limit })
}

// DetourFactor bounds BelowShareDetour relative to a request's best
// estimate: an endpoint suits it only where its expected time to first
// token is at most this many times its best. A short prompt that an H100
// would start in 60 ms is then not sent to an L4 at 300 ms beside a heavy
// tenant's backlog, though that is within the 250 ms default; a long one
// (best in seconds) is bound by BelowShareDetour alone. Simulated at 1.3x
// capacity with two tenants sending tokens 10:1, tuned on seeds 0, 1, 4
// and 5 of Poisson load over 1 H100 and 2 L4s and of the Azure code trace
// over 4 H100s and 8 L4s (factors 2, 3, 4, 5 and none: the light tenant's
// worst p99 over its run alone in those eight runs 0.88x, 0.81x, 1.02x,
// 1.02x and 1.16x), reported on seeds 2 and 3: Poisson 0.59x and 0.69x,
// the trace 1.15x and 0.70x, against 0.60x, 1.28x, 1.15x and 0.72x
// without it (docs/benchmarks.md).
const DetourFactor = 3

// DetourLimit is the longest expected time to first token, in seconds, at
// which an endpoint suits a request whose best over the endpoints is best
// seconds, under the detour d: within d of best and at most DetourFactor
// times it.
func DetourLimit(best float64, d time.Duration) float64 {
	return min(best+d.Seconds(), DetourFactor*best)
}

// tenantAsideLocked reports whether a request of r's tenant other than r
// waits set aside for a quick endpoint: a tenant's requests wait aside one
// at a time, since each binds ahead of the queue once one suits it (with
// several aside, in simulation, the light tenant of two with equal
// weights was served 1.13x the other's tokens while both waited, against
// 1.07x without BelowShareDetour and 1.10x with one aside per tenant).
func (g *Gate) tenantAsideLocked(r *Request) bool {
	for _, w := range g.aside {
		if &w.r != r && !w.r.Batch && w.r.Tenant == r.Tenant {
			return true
		}
	}
	return false
}

// belowShareLocked reports whether r's tenant holds less than its weighted
// share of the requests in flight through this gate while another tenant
// holds some (false while no option counts them). Call it with g.mu held.
func (g *Gate) belowShareLocked(r *Request) bool {
	return g.tenants != nil && g.tenants.Below(r.Tenant, r.Weight)
}

// perClassPrefill reports whether the classes' prefill bounds differ, so
// that room refused to one class may be there for another.
func (g *Gate) perClassPrefill() bool {
	for c := range NumClasses {
		if g.prefillBound(c) != g.o.MaxPendingPrefill {
			return true
		}
	}
	return false
}

// markFull notes that the shared store refused class c room on e, so that
// requests of that class (of every class, where the classes' bounds are
// the same) do not ask it again before until.
func (g *Gate) markFull(e *backends.Endpoint, c Class, until time.Time) {
	f := g.full[e]
	if !g.perClassPrefill() || c >= NumClasses {
		for k := range f {
			f[k] = until
		}
	} else {
		f[c] = until
	}
	g.full[e] = f
}

// isFull reports whether e was marked full to class c until after now.
func (g *Gate) isFull(e *backends.Endpoint, c Class, now time.Time) bool {
	f, ok := g.full[e]
	if !ok {
		return false
	}
	if c >= NumClasses {
		c = Flex
	}
	if !now.Before(f[c]) {
		for _, t := range f {
			if now.Before(t) {
				return false
			}
		}
		delete(g.full, e)
		return false
	}
	return true
}

// tracksPending reports whether the gate bounds endpoints' pending prompt
// tokens (MaxPendingPrompt, MaxPendingPrefill, BatchPrefill) and so keeps
// unstarted.
func (g *Gate) tracksPending() bool {
	return g.o.MaxPendingPrompt != nil || g.boundsPrefill() || g.o.BatchPrefill > 0
}

// startedLocked takes a bound request's prompt out of ep's unstarted
// tokens: its attempt started, or it will not run there.
func (g *Gate) startedLocked(ep *backends.Endpoint, prompt int64) {
	if !g.tracksPending() || ep == nil {
		return
	}
	if n := g.unstarted[ep] - prompt; n > 0 {
		g.unstarted[ep] = n
	} else {
		delete(g.unstarted, ep)
	}
}

func promptOf(r *policies.Request) int64 {
	if r == nil {
		return 0
	}
	return int64(r.PromptTokens)
}

// DefaultQueueSize is Options.QueueSize's default. At 1,024, on the Azure
// code trace over 4 H100s and 8 L4s at 0.95 of capacity (seeds 2 and 3,
// simulated), bursts filled the queue and 488 and 509 requests were shed
// below the fleet's capacity; at 10,000 none were.
const DefaultQueueSize = 10_000

// DefaultMaxWait is each class's longest wait by default: priority 5s (an
// interactive user would rather be told), default 30s, flex 10m
// (throughput work that does not mind waiting; OpenAI tells flex clients
// to allow 15 minutes).
var DefaultMaxWait = [NumClasses]time.Duration{
	Priority: 5 * time.Second,
	Default:  30 * time.Second,
	Flex:     10 * time.Minute,
}

// DefaultMaxPendingPrefill is the router's default Options.MaxPendingPrefill
// (admission.max_pending_prefill when no max_pending_prompt_tokens is
// set). Simulated on the Azure code trace over 4 H100s and 8 L4s, tuned on
// seeds 0 and 1 (200ms missed the reference's p99, 300ms its goodput at
// 0.95 load, 1s gave priority's p99 a larger growth under overload) and
// reported on seeds 2 and 3: p50 and p99 TTFT within 1.11x of the
// reference scheduler's and goodput 0.95-1.17x of it at 0.8 and 0.95 load,
// priority's p99 1.09-1.15x at 1.3x capacity its value at 0.5x, where
// with no bound it was 8-10x on Poisson load and 10-13 s on the trace
// (docs/benchmarks.md).
const DefaultMaxPendingPrefill = 500 * time.Millisecond

// DefaultBelowShareDetour is the router's default Options.BelowShareDetour
// (admission.max_detour_below_share). Simulated on the Azure code trace
// over 4 H100s and 8 L4s at 1.3x capacity, two tenants of one tier, one
// sending 10x the other's tokens: tuned on seeds 0 and 1 (1ns, 100ms,
// 250ms, 500ms and 1s took the light tenant's p99 TTFT over its run alone
// from 1.62x and 1.14x to 1.12/0.72, 0.89/0.66, 0.92/0.67, 0.98/0.77 and
// 1.20/0.76; 100ms made it 2-9% worse on Poisson load over 1 H100 and 2
// L4s, where 250ms left it within 1%), reported on seeds 2 and 3: from
// 2.27x and 1.44x to 1.61x and 0.86x (docs/benchmarks.md). Without it the
// light tenant's long prompts took the L4s that had room, 2-3 s of
// prefill, while an H100 would have started them within a few hundred ms.
const DefaultBelowShareDetour = 250 * time.Millisecond

// DefaultWorseClassPrefill is the router's default
// Options.WorseClassPrefill (admission.max_pending_prefill_worse_class):
// the bound DefaultAboveSharePrefill puts on a tenant over its share, here
// on the classes behind a better one, for the same reason (one prompt a
// step for the engines' queues). Its figures are at
// Options.WorseClassPrefill.
const DefaultWorseClassPrefill = 10 * time.Millisecond

// DefaultAboveSharePrefill is the router's default Options.AboveSharePrefill
// (admission.max_pending_prefill_above_share). Simulated at 1.3x capacity,
// two tenants of one tier, one sending 10x the other's tokens, on Poisson
// load over 1 H100 and 2 L4s and on the Azure code trace over 4 H100s and
// 8 L4s: tuned on seeds 0 and 1, where 1ns, 5ms, 10ms, 20ms and 35ms took
// the light tenant's p99 TTFT over its run alone from 3.05x and 4.56x
// (Poisson) and 0.92x and 0.67x (trace) to 0.64/1.11 and 0.83/0.57,
// 0.65/1.20 and 0.79/0.49, 0.90/1.08 and 0.80/0.56, 1.05/1.36 and
// 0.90/0.53, 1.10/1.73 and 0.88/0.53: 10ms met the 1.2x target on all four
// with the most to spare. The heavy tenant's median TTFT on Poisson load
// went from 8.0 s to 9.9-10.3 s at 1ns-10ms, its requests all served and
// the fleet's tokens/s within 5%. Reported on seeds 2 and 3
// (docs/benchmarks.md).
const DefaultAboveSharePrefill = 10 * time.Millisecond

// DefaultBatchPrefill is Options.BatchPrefill's default; the simulator's
// sweep behind it is fleet.DefaultBatchPrefill's comment.
const DefaultBatchPrefill = 50 * time.Millisecond

// MaxBatchAside bounds the batch requests a Gate sets aside because their
// prompts fit no endpoint's BatchPrefill bound, so the requests behind
// them may go first; beyond it the queue's next batch request waits at
// the head. They count toward no QueueSize.
const MaxBatchAside = 256

// batchFits reports whether e may take a request by the BatchPrefill rule
// (always for a request that is not a batch request).
func (g *Gate) batchFits(e *backends.Endpoint, batch bool, routing *policies.Request) bool {
	if !batch {
		return true
	}
	if r := g.o.BatchReserve; r > 0 {
		if b := g.o.Budget(e); b > 0 && g.granted[e]-g.others[e] >= max(b-int(math.Ceil(float64(b)*r)), 1) {
			return false
		}
	}
	if g.o.BatchPrefill < 0 {
		return true
	}
	prompt := int64(0)
	if routing != nil {
		prompt = int64(routing.PromptTokens)
	}
	// What waits for prefill there: this replica's prompts (a whole
	// answer's for its expected prefill time, backends.Endpoint.StartWhole),
	// those bound here and not yet sent, and what the engine's last scrape
	// shows waiting besides.
	pending, alone := e.PrefillAhead(prompt)+g.unstarted[e], g.others[e] == 0
	if alone && pending == 0 {
		return true // nothing queued and no other request: one line, however long
	}
	bound := g.o.BatchPrefill
	if alone {
		bound *= BatchIdleFactor
	}
	return float64(pending+prompt) <= e.PrefillTokensPerSec()*bound.Seconds()
}

// BatchIdleFactor widens BatchPrefill on an endpoint with only batch
// requests in flight: their queued prefill may take this many times
// BatchPrefill (250ms at the default), enough to fill its steps, and an
// interactive request that arrives waits behind no more. Without a bound
// there (the first live run, with max_pending_prompt_tokens off), batch
// lines filled a backend's budget whenever it was free of interactive
// requests, and the next interactive request waited behind all their
// prompts: interactive p50 time to first token went from 3.0 s to 7.4 s.
const BatchIdleFactor = 5

// hasRoom reports whether e may take one more request whose prefill bound
// is bound (requestBound) now: under its budget, its KV cache not full
// while it works, its prefill backlog short.
func (g *Gate) hasRoom(e *backends.Endpoint, bound time.Duration) bool {
	if b := g.o.Budget(e); b > 0 && g.granted[e] >= b {
		return false
	}
	if g.o.KVMax > 0 && g.granted[e] > 0 {
		if l := e.Load(); l != nil && l.KVUsage >= g.o.KVMax {
			return false
		}
	}
	if g.o.MaxPendingPrompt != nil {
		if m := g.o.MaxPendingPrompt(e); m > 0 && g.granted[e] > 0 && e.PendingPromptTokens()+g.unstarted[e] >= m {
			return false
		}
	}
	// With the shared store the replicas hold the prefill bound there;
	// this replica's own prompts alone filling it is a short cut.
	share := g.o.Replicas
	if g.sharesPrefill() {
		share = 1
	}
	return g.prefillRoom(e, share, bound)
}

// prefillRoom reports whether e is under 1/share of a prefill bound d by
// the prompts this replica sent it: each of share replicas counts only its
// own and holds to its part, so the backend holds about the whole.
func (g *Gate) prefillRoom(e *backends.Endpoint, share int, d time.Duration) bool {
	sent := e.PendingPromptTokens()
	if g.o.PendingUntilStep {
		sent = e.FreshPromptTokens()
	}
	return g.underBound(e, sent, share, d)
}

// underBound reports whether e, holding sent prompt tokens from this
// replica besides those bound and not yet sent, is under 1/share of a
// prefill bound d at its measured rate (no bound: d <= 0 or nothing in
// flight here).
func (g *Gate) underBound(e *backends.Endpoint, sent int64, share int, d time.Duration) bool {
	if d > 0 && g.granted[e] > 0 {
		// Before the first measurement one prompt at a time: with no bound
		// then, a run's first burst went wherever budgets allowed, and
		// three replicas' priority p99 TTFT live was their first second's
		// (1.2-2.2 s on L4s, against 0.4 s after).
		bound := e.PrefillTokensPerSec() * d.Seconds() / float64(share)
		if pending := float64(sent + g.unstarted[e]); pending >= bound && pending > 0 {
			return false
		}
	}
	return true
}

// dispatchLocked binds waiting requests, in order, while endpoints have
// room: the retries waiting to rebind first, then the queue. The requests
// set aside go before the queue's of their class and worse.
func (g *Gate) dispatchLocked() {
	if len(g.rebinds) > 0 {
		g.bindRebindsLocked()
	}
	// Tenants whose next request waits its turn behind theirs on other
	// replicas (errBehind): the requests of other tenants go meanwhile.
	// Stopping there, as at a full endpoint, let two replicas wait on each
	// other (one's next request behind the other's, and the other's behind
	// the first's): with two tenants on three replicas the queues stalled
	// until requests were shed.
	var behind map[*lane]bool
	// Requests held by AboveSharePrefill where others have room
	// (errHeldAbove): the other tenants' requests go meanwhile, each while
	// its tenant has been served less than the held one's would be with
	// it (Queue.PeekPast).
	var held []*Item
	for {
		var w, head *waiter
		if it := g.q.peekPast(behind, held); it != nil {
			w, head = it.Value.(*waiter), it.Value.(*waiter)
		} else if len(held) > 0 {
			head = held[0].Value.(*waiter) // the set-aside go before it as before
		}
		if len(g.aside) > 0 && g.bindAsideLocked(head) {
			continue
		}
		if w == nil || w.item.lane == nil { // none waits, or all failed (bindAsideLocked found no endpoint)
			return
		}
		ep, lease, err := g.bindLocked(context.Background(), &w.r, w.since, nil, len(g.aside) < MaxBatchAside)
		if errors.Is(err, errHeldAbove) {
			held = append(held, &w.item)
			continue
		}
		if errors.Is(err, errBehind) {
			if behind == nil {
				behind = map[*lane]bool{}
			}
			behind[w.item.lane] = true
			continue
		}
		if errors.Is(err, errDetour) && !errors.Is(err, errPinned) && w.r.Class < NumClasses {
			g.counts[w.r.Class].detoured.Add(1)
		}
		if errors.Is(err, errDetour) || errors.Is(err, ErrNoRoom) && w.r.Batch && len(g.aside) < MaxBatchAside && g.batchRoomLocked() {
			// Endpoints have room, not for this request (no endpoint
			// with room suits it, or some takes batch requests, not this
			// prompt): let the requests behind it try.
			g.q.take(&w.item)
			w.aside = true
			g.aside = append(g.aside, w)
			continue
		}
		if errors.Is(err, policies.ErrNoEndpoint) {
			g.failAllLocked(err)
			return
		}
		if errors.Is(err, ErrNoRoom) {
			return // wait for the next release (or the waiter's own deadline)
		}
		g.q.take(&w.item)
		w.ready <- result{ep: ep, lease: lease, err: err}
	}
}

// failAllLocked answers every waiting request err: no endpoint of the
// pool is available (all drained, removed or down), and none will free
// room. Waiting out MaxWait then made the clients of a drained model hang
// for the class's whole wait (30s by default) to hear "waited too long";
// they hear now what a request that finds no queue hears, 503
// no_backend_available with the soonest endpoint's Retry-After.
func (g *Gate) failAllLocked(err error) {
	for it := g.q.Peek(); it != nil; it = g.q.Peek() {
		g.q.Remove(it)
		it.Value.(*waiter).ready <- result{err: err}
	}
	for _, w := range g.aside {
		w.aside = false
		w.ready <- result{err: err}
	}
	g.aside = g.aside[:0]
}

// bindAsideLocked binds the oldest waiter set aside that an endpoint now
// takes, of head's class or better (any, when head is nil), and reports
// whether there was one. When no endpoint is available at all it fails
// every waiter (failAllLocked).
func (g *Gate) bindAsideLocked(head *waiter) bool {
	for i, w := range g.aside {
		if head != nil && w.r.Class > head.r.Class {
			continue
		}
		ep, lease, err := g.bindLocked(context.Background(), &w.r, w.since, nil, true)
		if errors.Is(err, ErrNoRoom) || errors.Is(err, errDetour) || errors.Is(err, errBehind) {
			continue
		}
		if errors.Is(err, policies.ErrNoEndpoint) {
			g.failAllLocked(err)
			return false
		}
		g.aside = slices.Delete(g.aside, i, i+1)
		w.aside = false
		w.ready <- result{ep: ep, lease: lease, err: err}
		return true
	}
	return false
}

// batchRoomLocked reports whether some available endpoint would take a
// batch request with no prompt.
func (g *Gate) batchRoomLocked() bool {
	now := g.now()
	for _, e := range g.pool.Available(nil, now) {
		if g.isFull(e, Flex, now) {
			continue
		}
		if g.hasRoom(e, g.prefillBound(Flex)) && g.batchFits(e, true, nil) {
			return true
		}
	}
	return false
}

func (g *Gate) release(ep *backends.Endpoint, lease string, batch bool, tenant string, class Class) {
	if lease != "" {
		err := g.shared(func(ctx context.Context) error { return g.o.Shared.Release(ctx, g.o.Pool, ep.Address(), lease) })
		if err == nil {
			g.releaseOrphans()
		} else {
			// Released again with the next release that reaches the
			// store, rather than holding its slot on every replica for
			// the rest of LeaseTTL.
			g.mu.Lock()
			g.orphanLocked(ep, lease)
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	delete(g.full, ep) // a slot freed there
	if g.tenants != nil {
		g.tenants.Remove(tenant)
	}
	if class < NumClasses {
		g.classIn[class]--
	}
	g.fresh.Store(g.freshAppliesLocked())
	if g.granted[ep]--; g.granted[ep] <= 0 {
		delete(g.granted, ep)
	}
	if !batch {
		if g.others[ep]--; g.others[ep] <= 0 {
			delete(g.others, ep)
		}
	}
	g.dispatchLocked()
	g.mu.Unlock()
}

// orphan is a lease an Acquire may have left in the shared store, or
// whose Release failed.
type orphan struct{ backend, lease string }

// orphanLocked keeps lease on ep for release with the next release that
// reaches the store (at most maxOrphans). The caller holds g.mu.
func (g *Gate) orphanLocked(ep *backends.Endpoint, lease string) {
	if len(g.orphans) < maxOrphans {
		g.orphans = append(g.orphans, orphan{backend: ep.Address(), lease: lease})
	}
}

// maxOrphans bounds the leases kept for release, and the waits kept to be
// taken back; beyond it LeaseTTL frees the leases and the store passes
// over the waits in time.
const maxOrphans = 1024

// unwait takes w's record of waiting back from the shared store; when the
// call fails it is kept and tried again with the next release that
// reaches the store. A record left there holds its tenant's later
// requests, and other tenants', back on every replica: live, one Redis
// stall past the call's deadline shed 177 requests of the heavy tenant
// after their 30 s wait.
func (g *Gate) unwait(w Waiting) {
	if g.shared(func(ctx context.Context) error { return g.o.Shared.Unwait(ctx, g.o.Pool, w) }) != nil {
		g.mu.Lock()
		if len(g.unwaits) < maxOrphans {
			g.unwaits = append(g.unwaits, w)
		}
		g.mu.Unlock()
	}
}

// releaseOrphans releases the orphaned leases and takes back the waits
// whose Unwait failed, while the store answers (releasing a lease the
// store never granted, or taking back a wait it no longer holds, does
// nothing).
func (g *Gate) releaseOrphans() {
	g.mu.Lock()
	leases, waits := g.orphans, g.unwaits
	g.orphans, g.unwaits = nil, nil
	g.mu.Unlock()
	leases = untilFailure(leases, func(o orphan) error {
		return g.shared(func(ctx context.Context) error { return g.o.Shared.Release(ctx, g.o.Pool, o.backend, o.lease) })
	})
	if len(leases) == 0 { // the store answers: the waits too
		waits = untilFailure(waits, func(w Waiting) error {
			return g.shared(func(ctx context.Context) error { return g.o.Shared.Unwait(ctx, g.o.Pool, w) })
		})
	}
	if len(leases)+len(waits) > 0 {
		g.mu.Lock()
		g.orphans = append(g.orphans, leases...)
		g.unwaits = append(g.unwaits, waits...)
		g.mu.Unlock()
	}
}

// untilFailure makes call for each of items in turn and returns those
// from the first whose call failed on (none when all succeeded).
func untilFailure[T any](items []T, call func(T) error) []T {
	for i, it := range items {
		if call(it) != nil {
			return items[i:]
		}
	}
	return nil
}

// Release gives the ticket's slot back, and binds the next waiting
// request if one waits. Later calls do nothing.
func (t *Ticket) Release() {
	if t == nil || t.released {
		return
	}
	t.released = true
	t.Started() // if it never started, its prompt leaves the count
	if t.g.handsSteps() {
		t.g.mu.Lock()
		t.g.unhandLocked(t)
		t.g.mu.Unlock()
	}
	t.g.release(t.ep, t.lease, t.batch, t.tenant, t.class)
}

// Started tells the gate that the request's attempt on the ticket's
// endpoint has started, so its prompt now counts in the endpoint's own
// PendingPromptTokens. Nil-safe; later calls do nothing until a Rebind.
func (t *Ticket) Started() {
	if t == nil || t.started {
		return
	}
	t.started = true
	g := t.g
	g.mu.Lock()
	g.startedLocked(t.ep, t.prompt)
	if g.handsSteps() && !t.released && t.lease != "" && !t.prefilled.Load() {
		h := g.handing[t.ep]
		if h == nil {
			h = map[*Ticket]uint64{}
			g.handing[t.ep] = h
		}
		h[t] = t.ep.StepMarks()
	}
	g.mu.Unlock()
}

// handsShared reports whether a step mark ends the prompts' count in the
// shared store (PendingUntilStep with Shared).
func (g *Gate) handsShared() bool { return g.untilStep() && g.o.Shared != nil }

// handsFresh reports whether a step mark ends the prompts' fresh count in
// the shared store, where the replicas hold AboveSharePrefill together
// (their pending count ends at the first token).
func (g *Gate) handsFresh() bool {
	return (g.o.AboveSharePrefill > 0 || g.o.WorseClassPrefill > 0) && g.sharesPrefill() && !g.o.PendingUntilStep
}

// handsSteps reports whether the gate tells the shared store of the
// prompts each step mark hands an engine (handsShared or handsFresh).
func (g *Gate) handsSteps() bool { return g.handsShared() || g.handsFresh() }

// unhandLocked forgets t's place in handing.
func (g *Gate) unhandLocked(t *Ticket) {
	if h := g.handing[t.ep]; h != nil {
		delete(h, t)
		if len(h) == 0 {
			delete(g.handing, t.ep)
		}
	}
}

// Prefilled tells the gate that the ticket's request has its first token,
// so its prompt no longer counts toward its endpoint's prefill bounds
// (MaxPendingPrompt, MaxPendingPrefill, BatchPrefill): a request waiting
// for that room binds now rather than at its next look, as the simulator's
// gate binds at the first token. Nil-safe; without those bounds it does
// nothing.
func (t *Ticket) Prefilled() {
	if t == nil {
		return
	}
	g := t.g
	if !g.tracksPending() {
		return
	}
	if g.sharesPrefill() && t.lease != "" && t.prefilled.CompareAndSwap(false, true) {
		_ = g.shared(func(ctx context.Context) error { return g.o.Shared.Prefilled(ctx, g.o.Pool, t.ep.Address(), t.lease) })
	}
	g.mu.Lock()
	g.unhandLocked(t)
	delete(g.full, t.ep) // its prefill room grew
	if g.q.Len()+len(g.aside)+len(g.rebinds) > 0 {
		g.dispatchLocked()
	}
	g.mu.Unlock()
}

// Rebind moves the ticket to another endpoint with room that is not in
// exclude (a retry after the first could not be reached). When none has
// room now the request waits for one ahead of the queue, as it was
// admitted already: until a release, a first token or a look every
// Patience finds room, at most its class's MaxWait (then a *ShedError), or
// until ctx ends (its error). ErrNoRoom when no available endpoint is
// outside exclude. On an error the ticket keeps its old endpoint.
func (t *Ticket) Rebind(ctx context.Context, routing *policies.Request, exclude []*backends.Endpoint) error {
	g := t.g
	g.mu.Lock()
	// Its place in its tenant's order across replicas is its arrival's.
	rb := &rebinder{r: Request{Class: t.class, Tenant: t.tenant, Batch: t.batch, Routing: routing}, since: t.since, exclude: exclude}
	ep, lease, err := g.bindLocked(ctx, &rb.r, rb.since, exclude, false)
	if errors.Is(err, ErrNoRoom) && g.outsideLocked(exclude) {
		rb.ready = make(chan result, 1)
		g.rebinds = append(g.rebinds, rb)
		g.mu.Unlock()
		var res result
		res, err = g.awaitRebind(ctx, rb)
		ep, lease = res.ep, res.lease
		g.mu.Lock()
	}
	if err != nil {
		g.mu.Unlock()
		return err
	}
	old, oldLease := t.ep, t.lease
	if !t.started {
		g.startedLocked(old, t.prompt)
	}
	g.unhandLocked(t)
	t.ep, t.lease = ep, lease
	t.prefilled.Store(false)
	t.prompt, t.started = promptOf(routing), !g.tracksPending()
	g.mu.Unlock()
	g.release(old, oldLease, t.batch, t.tenant, t.class)
	return nil
}

// rebinder is a Rebind waiting for room.
type rebinder struct {
	r       Request
	since   time.Time
	exclude []*backends.Endpoint
	ready   chan result // buffered 1: the binding, sent once
}

// awaitRebind waits for dispatchLocked to bind rb, its class's MaxWait or
// ctx, whichever is first.
func (g *Gate) awaitRebind(ctx context.Context, rb *rebinder) (result, error) {
	timer := time.NewTimer(g.o.MaxWait[rb.r.Class])
	defer timer.Stop()
	tick := time.NewTicker(g.o.Patience)
	defer tick.Stop()
	for {
		select {
		case res := <-rb.ready:
			return res, res.err
		case <-tick.C:
			g.poll()
		case <-ctx.Done():
			if res, ok := g.leaveRebind(rb); ok && res.ep != nil {
				g.unbind(res, &rb.r)
			}
			return result{}, ctx.Err()
		case <-timer.C:
			if res, ok := g.leaveRebind(rb); ok {
				return res, res.err // bound as the wait ran out
			}
			return result{}, g.shedError(rb.r.Class, "waited too long")
		}
	}
}

// leaveRebind takes rb out of the rebinds and reports false; when it was
// bound already it returns the binding and true.
func (g *Gate) leaveRebind(rb *rebinder) (result, bool) {
	g.mu.Lock()
	if i := slices.Index(g.rebinds, rb); i >= 0 {
		g.rebinds = slices.Delete(g.rebinds, i, i+1)
		g.mu.Unlock()
		return result{}, false
	}
	g.mu.Unlock()
	return <-rb.ready, true
}

// outsideLocked reports whether an available endpoint is not in exclude.
func (g *Gate) outsideLocked(exclude []*backends.Endpoint) bool {
	for _, e := range g.pool.Available(nil, g.now()) {
		if !contains(exclude, e) {
			return true
		}
	}
	return false
}

// bindRebindsLocked binds the waiting rebinds that now have room, oldest
// first.
func (g *Gate) bindRebindsLocked() {
	for i := 0; i < len(g.rebinds); {
		rb := g.rebinds[i]
		ep, lease, err := g.bindLocked(context.Background(), &rb.r, rb.since, rb.exclude, false)
		if errors.Is(err, ErrNoRoom) {
			i++
			continue
		}
		g.rebinds = slices.Delete(g.rebinds, i, i+1)
		rb.ready <- result{ep: ep, lease: lease, err: err}
	}
}

// Room tells the gate that the backend at address has more room than it
// may know: another replica's request there ended or got its first token
// (heard through the shared store). Requests waiting here look for it at
// once rather than at their next look.
func (g *Gate) Room(address string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for e := range g.full {
		if e.Address() == address {
			delete(g.full, e)
		}
	}
	for e := range g.freshFull {
		if e.Address() == address {
			delete(g.freshFull, e)
		}
	}
	if g.q.Len()+len(g.aside)+len(g.rebinds) > 0 {
		g.dispatchLocked()
	}
}

// Stepped tells the gate that a stream relayed from ep marked an engine
// step that handed the engine the prompts sent there before it
// (backends.StepReader.Read reported so). With a shared store the leases
// of this replica's prompts sent before the mark stop carrying them (as
// pending with PendingUntilStep, else as fresh, for AboveSharePrefill),
// in one call, so the replicas' common bound frees at the step as this
// replica's own count does; then the requests waiting here look for the
// room at once (Room). The call is made on the goroutine of the stream
// that marked the step, after its bytes were relayed; when it fails, each
// prompt's count in the store ends at its first token instead (or with
// its lease).
func (g *Gate) Stepped(ep *backends.Endpoint) {
	if g.handsSteps() {
		pending := g.handsShared() // else the prompts stay pending, no longer fresh
		g.mu.Lock()
		mark := ep.StepMarks()
		var handed []*Ticket
		leases := make([]string, 0, len(g.handing[ep]))
		for t, at := range g.handing[ep] {
			if at >= mark {
				continue // sent after the mark: the engine's next step takes it up
			}
			g.unhandLocked(t)
			if !pending {
				leases = append(leases, t.lease)
			} else if t.prefilled.CompareAndSwap(false, true) {
				handed, leases = append(handed, t), append(leases, t.lease)
			}
		}
		g.mu.Unlock()
		if len(leases) > 0 && !pending {
			// When it fails, the fresh count ends at the first token.
			_ = g.shared(func(ctx context.Context) error { return g.o.Shared.Stepped(ctx, g.o.Pool, ep.Address(), leases...) })
		} else if len(leases) > 0 {
			err := g.shared(func(ctx context.Context) error { return g.o.Shared.Prefilled(ctx, g.o.Pool, ep.Address(), leases...) })
			if err != nil {
				for _, t := range handed {
					t.prefilled.Store(false) // told at the first token, or freed at the end, then
				}
			}
		}
	}
	g.Room(ep.Address())
}

// MarksSteps reports whether the gate reads engine steps now: it counts
// prompts until their endpoint's next step mark (Options.PendingUntilStep
// with MaxPendingPrefill), or AboveSharePrefill applies, two tenants having
// requests in flight. The router then marks steps from the streams it
// relays and calls Stepped when a mark hands prompts to an engine.
func (g *Gate) MarksSteps() bool {
	return g.untilStep() || g.fresh.Load() && g.boundsPrefill()
}

// untilStep reports whether prompts count toward MaxPendingPrefill only
// until their endpoint's next step mark.
func (g *Gate) untilStep() bool { return g.o.PendingUntilStep && g.boundsPrefill() }

// Waiting is how many requests wait (retries waiting to rebind included).
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.Len() + len(g.aside) + len(g.rebinds)
}

func contains(eps []*backends.Endpoint, e *backends.Endpoint) bool {
	for _, x := range eps {
		if x == e {
			return true
		}
	}
	return false
}
