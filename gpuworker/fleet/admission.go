package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// Admission configures the admit stage of a simulated run
// (Options.Admission), through the same admission.Queue the live router
// uses.
//
// A worker has room while it has fewer requests in flight (bound and not
// finished) than its Budget, its prompt tokens bound and not yet prefilled
// would take less than PendingPrefill at the prefill rate measured for it
// (or, with PrefillSteps, are fewer than that many of its steps' token
// budgets) and, unless idle, a scraped KV-cache use below KVMax: the live
// gate's rules and defaults. A request that arrives when some worker has
// room and nobody waits is routed at once by its replica's Picker over the
// workers with room; otherwise it waits in the queue (by class, tier
// priority, tokens served per tenant, arrival). Whenever room frees (a
// request finishes, gets its first token, or is refused by its engine) the
// queue's next requests are bound, at that virtual time and, as the live
// router binds, after the freed engine has planned its next step, each to a
// worker with room chosen by its replica's Picker over those workers (late
// binding). A request waits at most its class's MaxWait, and a full queue
// pushes out flex first; a shed request's Outcome.Err is "shed: CLASS:
// why". The queue is one for all router replicas, as the store shares it
// live. Zero fields mean the router's defaults; SameStep, ReleaseAtStep and
// MaxDetour are what-ifs the router does not do.
//
// The count budget alone, as the issue first framed room, bound requests
// too early on the Azure code trace: a worker at its budget could hold a
// dozen long prompts, and p99 TTFT was 1.21-1.38x the reference
// scheduler's (seeds 0 and 1, loads 0.8 and 0.95). A bound on pending
// prefill (one step's token budget) brought it to 1.11-1.13x. The KV bound
// is for decode-heavy work, where a budget at the KV cache's capacity left
// new prompts waiting in engines for blocks: on Poisson work (512/128
// tokens) at 1.3x, priority p99 TTFT was 2.0 s without it and 0.8-0.9 s
// with it (its p50 0.15 s and 0.29 s; flex took 1.00 and 0.97 of the spare
// capacity).
type Admission struct {
	// Budget holds each worker's budget of requests in flight, in worker
	// order. Nil, or an entry below 1, means that worker's DefaultBudgets
	// entry.
	Budget []int
	// MaxWait is, per class, the longest a request waits in the queue;
	// beyond it the request is shed. Zero means DefaultMaxWait's entry;
	// negative means no limit.
	MaxWait [admission.NumClasses]time.Duration
	// QueueMax bounds the waiting requests; a request arriving at a full
	// queue sheds the newest request of the worst class below its own
	// (flex first), or is shed itself. Zero means DefaultQueueMax.
	QueueMax int
	// Weights gives tenants' weights in the queue's token-fair share, by
	// name (Options.TenantOf); a tenant not listed weighs 1.
	Weights map[string]float64
	// TierPriority gives tenants' tier priorities, by name; a tenant not
	// listed has 0. A higher priority waits less within a class.
	TierPriority map[string]int
	// PrefillSteps bounds, besides the budget, each worker's prompt tokens
	// bound to it and not yet prefilled (no first token) to this many of
	// its steps' token budgets (max_num_batched_tokens): a worker has room
	// only while those are fewer, so a request is bound only to a worker
	// whose next step or so can start its prefill, as the reference
	// scheduler binds. It is the router's max_pending_prompt_tokens set on
	// each backend at that many of its engine's step budgets, and as
	// there, it takes PendingPrefill's default away. Zero or negative: off
	// (the router's default).
	PrefillSteps float64
	// PendingPrefill is the router's admission.max_pending_prefill: a
	// worker with requests in flight has no room while its prompt tokens
	// bound and not yet prefilled would take at least this at the prefill
	// rate the router measured for it (backends.Endpoint's
	// PrefillTokensPerSec, from times to first token: under load below
	// the profile's, since a step's decode work shares it), as the live
	// gate does; one prompt at a time before the first measurement. Zero
	// means the router's default, admission.DefaultMaxPendingPrefill,
	// unless PrefillSteps is on (then none, as the router's default is
	// none where max_pending_prompt_tokens is set); negative turns it off.
	PendingPrefill time.Duration
	// ClassPendingPrefill is the router's
	// admission.max_pending_prefill_by_class: a class's own bound in
	// place of PendingPrefill, zero entries meaning PendingPrefill. A
	// loose bound for priority and a tight one for flex keep engines'
	// prefill backlog short of flex work while priority requests bind
	// at once.
	ClassPendingPrefill [admission.NumClasses]time.Duration
	// BelowSharePrefill is the router's
	// admission.max_pending_prefill_below_share: a request whose tenant
	// holds less than its weighted share of the requests in flight (with
	// another tenant holding some) takes the larger of this and its
	// class's bound, so a light tenant's request binds past a heavy
	// tenant's backlog (a class without a bound stays without). Zero: off.
	BelowSharePrefill time.Duration
	// AboveSharePrefill is the router's
	// admission.max_pending_prefill_above_share: a request whose tenant
	// holds at least its weighted share of the requests in flight, with
	// another tenant holding some, binds only to a worker whose prompts
	// bound since its engine last planned a step (the prompts its engine
	// has not had a step to start) take less than this at the measured
	// prefill rate, besides its class's bound (a class without a bound
	// stays without): a heavy tenant hands each engine about one prompt a
	// step while a lighter one is served. Zero means the router's default
	// (admission.DefaultAboveSharePrefill); negative turns it off.
	AboveSharePrefill time.Duration
	// WorseClassPrefill is the router's
	// admission.max_pending_prefill_worse_class: a request of a class
	// worse than one with requests in flight binds only to a worker whose
	// prompts its engine has not had a step to start take less than this,
	// as AboveSharePrefill (the tighter where both apply): the worse
	// classes hand each engine about one prompt a step while a better
	// class is served. Zero means the router's default
	// (admission.DefaultWorseClassPrefill); negative turns it off.
	WorseClassPrefill time.Duration
	// MaxDetour keeps a prompt off a worker where it would wait much
	// longer for its first token than on another: a worker takes the next
	// request only if the request's estimated time to first token there
	// (the prompts bound to it and not yet prefilled, then its own, at the
	// profile's prefill rate) is within MaxDetour of its best estimate on
	// any worker below its budget, room or not. A request that no worker
	// with room suits is set aside, ahead of the queue, until one does,
	// and the requests behind it may go ahead on the workers it did not
	// want, as in the reference scheduler. The router has no such rule: a
	// what-if. Zero or negative: off.
	MaxDetour time.Duration
	// BelowShareDetour is the router's admission.max_detour_below_share:
	// MaxDetour for the requests of a tenant holding less than its
	// weighted share of the requests in flight (another tenant holding
	// some), and at most admission.DetourFactor times its best estimate,
	// so that a light tenant's prompt waits for a quick worker rather than
	// take a slow one beside a heavy tenant's backlog. Zero
	// means the router's default (admission.DefaultBelowShareDetour);
	// negative turns it off. MaxDetour, where set, applies to every
	// request instead.
	BelowShareDetour time.Duration
	// BetterClassDetour is the router's admission.max_detour_better_class:
	// BelowShareDetour for a request whose class is better than another
	// with requests in flight (priority beside flex). Where both apply,
	// the larger. Zero or negative: off, the router's default.
	BetterClassDetour time.Duration
	// KVMax is the KV-cache use (0..1), as the router last scraped it, at
	// which a worker with requests in flight takes no more: its engine
	// could not admit a new prompt until running requests free blocks, so
	// the request would wait in the engine rather than in the queue. Zero
	// means DefaultKVMax; negative turns it off. Without scraping
	// (Options.ScrapeInterval < 0) there is nothing to read and it is off.
	KVMax float64
	// BatchPrefill keeps the batch's lines (Options.Batch) to what the
	// other requests leave: while a worker has other requests in flight,
	// it takes a batch line only if the prompt tokens bound to it and not
	// yet prefilled, the line's included, would take at most this at its
	// profile's prefill rate; a worker with only batch lines in flight
	// takes more by the other rules. Every engine step then holds about
	// this much batch prefill at most, so the steps other requests share
	// with batch work stay short. A line too long for every worker's
	// bound is set aside (up to maxBatchAside) so later ones may go
	// first. Zero means DefaultBatchPrefill; negative turns it off,
	// leaving batch lines the room rules of their class.
	BatchPrefill time.Duration
	// SameStep binds the requests that a step's end made room for before
	// the engine plans its next step, so that they join it: what a router
	// with no delay between an engine's step and its answers' bytes could
	// do. By default they are bound after, as the live router binds them
	// (it learns of a first token or a finished answer once the engine
	// has started its next step), and they start at the step after.
	SameStep bool
	// ReleaseAtStep, with PendingPrefill, counts a bound prompt toward the
	// bound only until its worker's engine plans a step after it was bound
	// (when its prefill starts, if the step's token budget takes it), not
	// until its first token, so that the next prompt waits in the engine's
	// queue for the step after. A what-if: the router counts prompts until
	// their first token, as it cannot see an engine's steps (a router could
	// read them from the token streams it relays).
	ReleaseAtStep bool
}

// DefaultMaxWait is each class's longest wait by default, the router's
// (admission.DefaultMaxWait).
var DefaultMaxWait = admission.DefaultMaxWait

// DefaultKVMax is the default Admission.KVMax.
const DefaultKVMax = 0.95

// DefaultBatchPrefill is the default Admission.BatchPrefill, the live
// gate's. Tuned on the Azure code trace at 0.6 load (2xH100 + 2xL4, a
// 20,000-line batch drawn from the trace): 50ms, 75ms, 100ms and 150ms
// kept the trace's p50 and p99 time to first token within 4% of their
// values without the batch; the batch took 0.80, 0.88, 0.88 and 1.02 of
// the spare throughput while the trace ran; the trace's goodput was 1.01,
// 0.81, 0.81 and 0.52 of its value. Without the bound the batch took 1.08
// of the spare and goodput fell to 0.01 of its value: batch prompts filled
// every engine step, so hardly an interactive token came within 100ms. On
// decode-heavy work (512/128 tokens) the bound does less: the batch's
// decodes lengthen every step (TestBatchPrefillConfinesTheBatch).
const DefaultBatchPrefill = admission.DefaultBatchPrefill

// PendingPrefillBound is PendingPrefill with its default: the router's
// where no step budget bounds the workers; 0 is off.
func (a *Admission) PendingPrefillBound() time.Duration {
	if a.PendingPrefill == 0 && a.PrefillSteps > 0 {
		return 0
	}
	return orDefault(a.PendingPrefill, admission.DefaultMaxPendingPrefill)
}

// AboveSharePrefillBound is AboveSharePrefill with its default, the
// router's; 0 is off.
func (a *Admission) AboveSharePrefillBound() time.Duration {
	return orDefault(a.AboveSharePrefill, admission.DefaultAboveSharePrefill)
}

// WorseClassPrefillBound is WorseClassPrefill with its default, the
// router's; 0 is off.
func (a *Admission) WorseClassPrefillBound() time.Duration {
	return orDefault(a.WorseClassPrefill, admission.DefaultWorseClassPrefill)
}

// BelowShareDetourBound is BelowShareDetour with its default, the
// router's; 0 is off.
func (a *Admission) BelowShareDetourBound() time.Duration {
	return orDefault(a.BelowShareDetour, admission.DefaultBelowShareDetour)
}

// orDefault is a duration setting as it binds: def when unset (0), off
// (0) when negative, else itself.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d == 0:
		return def
	}
	return d
}

// maxAside bounds the requests set aside for another worker; when it is
// reached, the queue's next request takes whatever worker has room.
const maxAside = 64

// maxBatchAside bounds the batch lines set aside because their prompts
// fit no worker's bound (Admission.BatchPrefill), as the live gate's
// admission.MaxBatchAside.
const maxBatchAside = admission.MaxBatchAside

// DefaultQueueMax is the default bound on waiting requests, the router's
// (admission.DefaultQueueSize).
const DefaultQueueMax = admission.DefaultQueueSize

// AdmissionStats is what admission measured over a run, for capacity
// questions per class: how much each class got while the fleet was
// saturated, that is while some request waited.
type AdmissionStats struct {
	// Saturated is the virtual time during which some request waited in
	// the queue.
	Saturated time.Duration
	// Bound counts, per class, the requests bound while the fleet was
	// saturated: after waiting, or at once while another request waited
	// (a better class's request that binds at once still takes the
	// capacity the worse classes wait for). BoundTokens are their prompt
	// and output tokens.
	Bound       [admission.NumClasses]int
	BoundTokens [admission.NumClasses]int64
}

// errShed prefixes the outcome of a request admission shed; the class
// name and the reason follow.
const errShed = "shed: "

// DefaultBudgets returns each worker's default budget of requests in
// flight for requests shaped like reqs, in worker order: the batch a
// saturated engine of its profile runs, as the capacity model
// (EstimateCapacity) works it out from max_num_seqs, the KV cache, the
// step token budget and the workload's mean prompt and output, plus the
// prompts one step's leftover token budget can start. That is Little's
// law at saturation (requests in flight = the rate a saturated engine
// serves x the time each spends in it): the requests decoding plus those
// whose prefill the next step can begin, so a worker at its budget is as
// busy as it can be and its batch no larger than throughput needs. On the
// Azure code trace (mean prompt 2,048, output 28 tokens) it is 115 for an
// H100 (its 8,192-token steps hold about 110 decodes and 4 prompts) and 14
// for an L4 (its KV cache holds 13 such requests).
//
// Measured (Azure trace, seeds 0 and 1): half these budgets cost 16-25% of
// p99 TTFT against the reference scheduler at 0.8 and 0.95 load, and
// goodput at 0.95; twice them, or none, gained 1-2% there but raised the
// priority class's p99 TTFT at 1.3x load by 7%, their batches of flex
// work being larger. On decode-heavy Poisson work (512/128 tokens) at
// 1.3x, the same trade is steeper: these budgets let flex take 0.97 of the
// spare capacity with priority p99 TTFT 0.81 s; half of them 0.93 and
// 0.41 s; a quarter 0.80 and 0.30 s.
func DefaultBudgets(spec Spec, reqs []workload.Request) []int {
	m := newShape(reqs, 0)
	out := make([]int, 0, spec.Workers())
	for _, g := range spec {
		b := saturatedBatch(g.Profile, m)
		for range g.Count {
			out = append(out, b)
		}
	}
	return out
}

// saturatedBatch is the requests in flight of a saturated engine (see
// DefaultBudgets), at least 1; the regimes are workerCapacity's.
func saturatedBatch(p gpuworker.Profile, m shape) int {
	held := m.held + m.output
	if m.requests == 0 || held <= 0 || m.output <= 0 || p.KVTokens() <= 0 {
		return max(1, p.MaxNumSeqs)
	}
	budget := float64(p.MaxBatchedTokens)
	b := math.Max(1, math.Min(float64(p.MaxNumSeqs), math.Floor(float64(p.KVTokens())/held)))
	chunk := math.Max(budget-b, budget/2)
	decodes := b
	if b/m.output*m.fresh > chunk { // budget-bound: prompts fill every step
		decodes = math.Min(b, budget*m.output/held)
	}
	prompts := math.Ceil(math.Max(budget-decodes, 1) / math.Max(m.fresh, 1))
	return max(1, int(math.Ceil(decodes+prompts)))
}

// gate is the admit stage of one run.
type gate struct {
	// tenants counts each tenant's requests in flight as the live gate
	// does, for Admission.BelowSharePrefill, AboveSharePrefill and
	// BelowShareDetour (nil: off); loose marks the request whose room is being asked as
	// below its share, tight as held to the prompts its worker's engine
	// has not started (at or above its share beside another tenant, or
	// of a class behind a better one in flight), to tightBound seconds;
	// above is AboveSharePrefill and worse WorseClassPrefill with their
	// defaults, in seconds (0: off); classIn counts the requests in
	// flight by class.
	tenants    *admission.TenantShares
	loose      bool
	tight      bool
	tightBound float64
	above      float64
	worse      float64
	classIn    [admission.NumClasses]int
	s          *sim
	opts       *Admission
	q          *admission.Queue
	items      []admission.Item // one per request
	state      []uint8          // per request: notQueued, waiting, leftQueue
	byClass    [admission.NumClasses][]queued
	head       [admission.NumClasses]int
	maxWait    [admission.NumClasses]int64 // ns; < 0 no limit
	budget     []int
	inFlight   []int
	peak       []int
	room       [][]*backends.Endpoint // per replica, scratch
	touched    []int

	// pending holds each worker's prompt tokens bound and not yet
	// prefilled, prefilled marks requests past their first token, and
	// pendingMax is the bound on pending (0: none).
	pending    []int64
	pendingMax []int64
	// pendingPrefill is each class's prefill bound (Admission.PendingPrefill
	// or its ClassPendingPrefill entry) in seconds (0: off).
	pendingPrefill [admission.NumClasses]float64
	// sharesPending: several replicas bound by pendingPrefill, which each
	// learns the others' pending prompts on a worker from when it binds
	// there (backends.Endpoint.StoreOthersPending).
	sharesPending bool
	unfilled      []bool
	// With Admission.ReleaseAtStep or AboveSharePrefill, fresh holds the
	// prompt tokens bound to each worker since its engine last planned a
	// step, all replicas' (as the live routers count them together in the
	// shared store), freshIDs their requests and freshOf marks them; nil
	// otherwise.
	fresh    []int64
	freshIDs [][]int32
	freshOf  []bool

	// rate is each worker's prefill rate in tokens/s, detour the bound on
	// a request's extra estimated wait (s; < 0 off), aside the requests
	// popped and set aside for a worker that suits them, oldest first.
	rate   []float64
	detour float64
	aside  []int
	// belowDetour is BelowShareDetour in seconds (< 0 off): the detour
	// bound of a request whose tenant is below its share (belowShare).
	belowDetour float64
	// betterDetour is BetterClassDetour in seconds (< 0 off): the detour
	// bound of a request whose class is ahead of a worse one in flight
	// (aheadOfWorse).
	betterDetour float64
	kvMax        float64 // < 0: off
	// batchMax is each worker's bound on pending prompt tokens for a
	// batch line to bind (BatchPrefill at its prefill rate), idleMax the
	// bound while it has only batch lines (BatchIdleFactor times that);
	// nil: off.
	batchMax, idleMax []int64
	// others counts each worker's requests in flight that are not batch
	// lines: the batch bound holds only while it is positive.
	others []int

	stats    AdmissionStats
	sat      bool  // some request waits
	satSince int64 // ns, when the current saturation began
}

// queued is a request in its class's FIFO, with the arrival it was queued
// at (a batch line shed and sent again is queued again).
type queued struct {
	id int32
	at int64
}

// budgetShape is the requests DefaultBudgets sizes budgets for: the
// workload's own, or the batch's when there is no workload.
func budgetShape(s *sim) []workload.Request {
	if s.ntrace > 0 {
		return s.reqs[:s.ntrace]
	}
	return s.reqs
}

const (
	notQueued uint8 = iota
	waiting
	leftQueue
)

func newGate(s *sim, a *Admission) (*gate, error) {
	n := len(s.engines)
	if a.Budget != nil && len(a.Budget) != n {
		return nil, fmt.Errorf("fleet: Admission.Budget has %d entries for %d workers", len(a.Budget), n)
	}
	if a.QueueMax < 0 {
		return nil, errors.New("fleet: Admission.QueueMax must not be negative")
	}
	g := &gate{
		s:        s,
		opts:     a,
		items:    make([]admission.Item, len(s.reqs)),
		state:    make([]uint8, len(s.reqs)),
		budget:   DefaultBudgets(s.opts.Spec, budgetShape(s)),
		inFlight: make([]int, n),
		peak:     make([]int, n),
		room:     make([][]*backends.Endpoint, len(s.opts.Pickers)),
	}
	for w, b := range a.Budget {
		if b >= 1 {
			g.budget[w] = b
		}
	}
	g.pending = make([]int64, n)
	g.unfilled = make([]bool, len(s.reqs))
	if steps := a.PrefillSteps; steps > 0 {
		g.pendingMax = make([]int64, n)
		for w, p := range s.profiles {
			g.pendingMax[w] = int64(math.Ceil(steps * float64(p.MaxBatchedTokens)))
		}
	}
	g.detour, g.belowDetour, g.betterDetour = -1, -1, -1
	if a.BetterClassDetour > 0 {
		g.betterDetour = a.BetterClassDetour.Seconds()
	}
	if a.MaxDetour > 0 {
		g.detour = a.MaxDetour.Seconds()
	}
	if d := a.BelowShareDetourBound(); d > 0 {
		g.belowDetour = d.Seconds()
	}
	g.kvMax = cmp.Or(a.KVMax, DefaultKVMax)
	g.rate = make([]float64, n)
	for w, p := range s.profiles {
		g.rate[w] = math.Inf(1)
		if d := p.PrefillTime(p.MaxBatchedTokens, 0); d > 0 {
			g.rate[w] = float64(p.MaxBatchedTokens) / d.Seconds()
		}
	}
	tracks := false
	for c := range g.pendingPrefill {
		g.pendingPrefill[c] = cmp.Or(a.ClassPendingPrefill[c], a.PendingPrefillBound()).Seconds()
		tracks = tracks || g.pendingPrefill[c] > 0
	}
	// As the live gates with Redis, each replica learns every replica's
	// pending prompts on a worker when it binds there
	// (admission.Slots.Acquire).
	g.sharesPending = tracks && len(s.eps) > 1
	if tracks {
		g.above = a.AboveSharePrefillBound().Seconds()
		g.worse = a.WorseClassPrefillBound().Seconds()
	}
	if a.BelowSharePrefill > 0 || g.above > 0 || g.belowDetour >= 0 {
		g.tenants = admission.NewTenantShares()
	}
	if (a.ReleaseAtStep || g.above > 0 || g.worse > 0) && tracks {
		g.freshIDs, g.freshOf = make([][]int32, n), make([]bool, len(s.reqs))
		g.fresh = make([]int64, n)
	}
	if bp := cmp.Or(a.BatchPrefill, DefaultBatchPrefill); bp > 0 && s.batch != nil && s.confined(s.batch.first) {
		g.batchMax, g.idleMax, g.others = make([]int64, n), make([]int64, n), make([]int, n)
		for w := range g.batchMax {
			g.batchMax[w] = int64(math.Min(g.rate[w]*bp.Seconds(), math.MaxInt32))
			g.idleMax[w] = int64(math.Min(g.rate[w]*bp.Seconds()*admission.BatchIdleFactor, math.MaxInt32))
		}
	}
	qmax := a.QueueMax
	if qmax == 0 {
		qmax = DefaultQueueMax
	}
	g.q = admission.NewQueue(qmax)
	for c := range g.maxWait {
		d := a.MaxWait[c]
		if d == 0 {
			d = DefaultMaxWait[c]
		}
		g.maxWait[c] = int64(d)
		if d < 0 {
			g.maxWait[c] = -1
		}
	}
	return g, nil
}

// arrive queues request id at now and binds what can start.
func (g *gate) arrive(id int, now int64) error {
	// The limit stage ran first and named the tenant.
	o, r, it := &g.s.out[id], &g.s.reqs[id], &g.items[id]
	it.Class, it.Tenant, it.Value = o.Class, o.Tenant, id
	it.Weight = 1
	if w, ok := g.opts.Weights[it.Tenant]; ok {
		it.Weight = w
	}
	it.TierPriority = g.opts.TierPriority[it.Tenant]
	it.Tokens = int64(r.PromptTokens + r.OutputTokens)
	g.expire(now)
	shed, err := g.q.Push(it)
	if err != nil {
		g.shed(id, now, "queue full")
		return nil
	}
	g.state[id] = waiting
	g.byClass[it.Class] = append(g.byClass[it.Class], queued{id: int32(id), at: now})
	if shed != nil {
		g.shed(shed.Value.(int), now, "queue full")
	}
	err = g.dispatch(now, -1)
	g.track(now)
	return err
}

// track notes when the queue starts and stops holding waiting requests.
func (g *gate) track(now int64) {
	switch busy := g.waiting() > 0; {
	case busy && !g.sat:
		g.sat, g.satSince = true, now
	case !busy && g.sat:
		g.sat = false
		g.stats.Saturated += time.Duration(now - g.satSince)
	}
}

// dispatch binds waiting requests, in the queue's order, to workers with
// room until either runs out, then starts the idle workers it bound to
// (other than self, whose caller steps it). A request set aside goes first
// once a worker with room suits it, unless the queue's next is of a better
// class.
func (g *gate) dispatch(now int64, self int) error {
	g.expire(now)
	g.touched = g.touched[:0]
	var held []*admission.Item // heads held by AboveSharePrefill alone, passed
	for g.anyRoom(false, anyClass) {
		id := g.nextAside()
		if id < 0 {
			it := g.q.PeekPast(held)
			if it == nil {
				break
			}
			id = it.Value.(int)
			g.markShare(id)
			tight := g.tight
			room := g.anyRoom(g.s.confined(id), g.s.out[id].Class)
			g.loose, g.tight = false, false
			if !room && tight && g.anyRoom(g.s.confined(id), g.s.out[id].Class) {
				// Held by AboveSharePrefill alone, as the live gate's
				// errHeldAbove: the other tenants' requests go meanwhile.
				held = append(held, it)
				continue
			}
			if !room {
				break
			}
			// A batch line no worker has room for (its prompt past every
			// batch bound) is set aside, up to maxBatchAside, for the
			// requests behind it; past that it waits at the head, as the
			// live gate does.
			batchOut := g.s.confined(id) && !g.fitsAny(id)
			if batchOut && len(g.aside) >= maxBatchAside {
				break
			}
			g.q.Take(it)
			if (len(g.aside) < maxAside || batchOut) && !g.suited(id) {
				g.aside = append(g.aside, id)
				continue
			}
		}
		g.state[id] = leftQueue
		w, err := g.bind(id, now)
		if err != nil {
			return err
		}
		if w >= 0 {
			g.touched = append(g.touched, w)
		}
	}
	for _, w := range g.touched {
		if w != self && g.s.heap.pos[w] < 0 {
			if err := g.s.advance(w, now); err != nil {
				return err
			}
			g.stepped(w)
		}
	}
	g.track(now)
	return nil
}

// bind routes request id over the workers with room and hands it to the
// chosen one; it returns the worker, or -1 when the pick failed.
func (g *gate) bind(id int, now int64) (int, error) {
	s := g.s
	replica := id % len(s.opts.Pickers)
	room := g.room[replica][:0]
	for w, ep := range s.eps[replica] {
		if g.fits(id, w) {
			room = append(room, ep)
		}
	}
	if detour := g.detourOf(id); detour >= 0 {
		// Only the workers that suit the request, when any has room.
		limit := g.detourLimit(id, detour)
		k := 0
		for _, ep := range room {
			if g.est(id, s.index[ep]) <= limit {
				room[k] = ep
				k++
			}
		}
		if k > 0 {
			room = room[:k]
		}
	}
	g.room[replica] = room
	s.out[id].Held = time.Duration(now - s.arrival[id])
	w, err := s.pick(id, replica, room, true)
	if err != nil || w < 0 {
		return -1, err
	}
	if c := s.out[id].Class; s.out[id].Held > 0 || g.waiting() > 0 {
		g.stats.Bound[c]++
		g.stats.BoundTokens[c] += int64(s.reqs[id].PromptTokens + s.reqs[id].OutputTokens)
	}
	if g.inFlight[w] >= g.budget[w] {
		return -1, fmt.Errorf("fleet: policy returned worker %d, which has no room", w)
	}
	g.inFlight[w]++
	if c := s.out[id].Class; c < admission.NumClasses {
		g.classIn[c]++
	}
	if g.tenants != nil {
		g.tenants.Add(s.out[id].Tenant, g.weight(id))
	}
	g.peak[w] = max(g.peak[w], g.inFlight[w])
	if g.others != nil && !s.confined(id) {
		g.others[w]++
	}
	ep := s.eps[replica][w]
	if g.sharesPending {
		ep.StoreOthersPending(epoch.Add(time.Duration(now)), g.pending[w])
	}
	g.pending[w] += int64(s.reqs[id].PromptTokens)
	g.unfilled[id] = true
	if g.fresh != nil {
		g.fresh[w] += int64(s.reqs[id].PromptTokens)
		g.freshOf[id] = true
		g.freshIDs[w] = append(g.freshIDs[w], int32(id))
	}
	r := &s.reqs[id]
	s.att[id] = ep.Start(int64(r.PromptTokens), int64(r.PromptTokens+r.OutputTokens))
	s.place(id, w, nil)
	return w, nil
}

// prefilled notes request id's first token: its prompt is no longer
// pending on its worker.
func (g *gate) prefilled(id int) {
	if g.unfilled[id] {
		g.unfilled[id] = false
		g.pending[g.s.out[id].Worker] -= int64(g.s.reqs[id].PromptTokens)
	}
	if g.fresh != nil && g.freshOf[id] {
		g.freshOf[id] = false
		g.fresh[g.s.out[id].Worker] -= int64(g.s.reqs[id].PromptTokens)
	}
}

// release frees request id's slot on its worker.
func (g *gate) release(id int) {
	g.prefilled(id)
	if w := g.s.out[id].Worker; w >= 0 {
		g.inFlight[w]--
		if c := g.s.out[id].Class; c < admission.NumClasses {
			g.classIn[c]--
		}
		if g.tenants != nil {
			g.tenants.Remove(g.s.out[id].Tenant)
		}
		if g.others != nil && !g.s.confined(id) {
			g.others[w]--
		}
	}
}

// nextAside takes out and returns the oldest request set aside that a
// worker with room now suits, or -1; none goes ahead of a queued request
// of a better class. It drops the requests shed while aside.
func (g *gate) nextAside() int {
	if len(g.aside) == 0 {
		return -1
	}
	head := g.q.Peek()
	found, k := -1, 0
	for _, id := range g.aside {
		if g.state[id] != waiting {
			continue
		}
		if found < 0 && (head == nil || g.items[id].Class <= head.Class) && g.suited(id) {
			found = id
			continue
		}
		g.aside[k] = id
		k++
	}
	g.aside = g.aside[:k]
	return found
}

// fits reports whether worker w has room for request id: room, and for a
// batch line its own prompt within the batch bound (or no other request
// on w).
func (g *gate) fits(id, w int) bool {
	batch := g.s.confined(id)
	g.markShare(id)
	room := g.hasRoom(w, batch, g.s.out[id].Class)
	g.loose, g.tight = false, false
	if !room {
		return false
	}
	if !batch || g.batchMax == nil || g.others[w] == 0 && g.pending[w] == 0 {
		return true
	}
	return g.pending[w]+int64(g.s.reqs[id].PromptTokens) <= g.batchBound(w)
}

// batchBound is worker w's bound on pending prompt tokens for a batch
// line: batchMax while other requests are in flight there, else idleMax.
func (g *gate) batchBound(w int) int64 {
	if g.others[w] > 0 {
		return g.batchMax[w]
	}
	return g.idleMax[w]
}

// fitsAny reports whether some worker has room for request id.
func (g *gate) fitsAny(id int) bool {
	for w := range g.inFlight {
		if g.fits(id, w) {
			return true
		}
	}
	return false
}

// suited reports whether a worker with room suits request id: its
// estimated time to first token there is within the detour bound of its
// best estimate (always, without the bound).
func (g *gate) suited(id int) bool {
	detour := g.detourOf(id)
	if detour < 0 {
		return g.fitsAny(id)
	}
	limit := g.detourLimit(id, detour)
	for w := range g.inFlight {
		if g.fits(id, w) && g.est(id, w) <= limit {
			return true
		}
	}
	return false
}

// detourOf is request id's detour bound in seconds, < 0 for none:
// MaxDetour's, else BelowShareDetour's while its tenant is below its
// share and BetterClassDetour's while a worse class has requests in
// flight, the larger where both apply; none while another request of its
// tenant is set aside.
func (g *gate) detourOf(id int) float64 {
	if g.detour >= 0 {
		return g.detour
	}
	d := -1.0
	if g.belowDetour >= 0 && g.belowShare(id) {
		d = g.belowDetour
	}
	if g.betterDetour > d && g.aheadOfWorse(id) {
		d = g.betterDetour
	}
	if d >= 0 && g.tenantAside(id) {
		return -1
	}
	return d
}

// aheadOfWorse reports whether a class worse than request id's has
// requests in flight (Admission.BetterClassDetour).
func (g *gate) aheadOfWorse(id int) bool {
	return g.classesIn(g.s.out[id].Class+1, admission.NumClasses)
}

// detourLimit is the longest estimate, in seconds, at which a worker
// suits request id under the detour bound detour (detourOf's): within it
// of the request's best estimate, and for the router's below-share detour
// also at most admission.DetourFactor times that best, as the router
// bounds it (admission.DetourLimit). MaxDetour, a what-if, has no factor.
func (g *gate) detourLimit(id int, detour float64) float64 {
	best := g.best(id)
	if g.detour >= 0 {
		return best + detour
	}
	return admission.DetourLimit(best, time.Duration(detour*float64(time.Second)))
}

// tenantAside reports whether another request of request id's tenant is
// set aside: a tenant's requests wait aside one at a time, since each
// would bind ahead of the queue (BelowShareDetour).
func (g *gate) tenantAside(id int) bool {
	t := g.s.out[id].Tenant
	for _, j := range g.aside {
		if j != id && g.s.out[j].Tenant == t {
			return true
		}
	}
	return false
}

// est is request id's estimated time to first token on worker w, in
// seconds: w's prompts not yet prefilled, then its own, at w's rate.
func (g *gate) est(id, w int) float64 {
	return float64(g.pending[w]+int64(g.s.reqs[id].PromptTokens)) / g.rate[w]
}

// best is request id's least estimate over the workers below their
// budget of requests, whether or not their prefill bound has room.
func (g *gate) best(id int) float64 {
	b := math.Inf(1)
	for w, n := range g.inFlight {
		if n < g.budget[w] {
			b = min(b, g.est(id, w))
		}
	}
	return b
}

// anyClass asks anyRoom about a request of any class.
const anyClass = admission.NumClasses

// anyRoom reports whether some worker has room for a request of class c
// (a batch line, if batch), or of any class.
func (g *gate) anyRoom(batch bool, c admission.Class) bool {
	for w := range g.inFlight {
		if c != anyClass {
			if g.hasRoom(w, batch, c) {
				return true
			}
			continue
		}
		for k := range admission.NumClasses {
			if g.hasRoom(w, batch, k) {
				return true
			}
		}
	}
	return false
}

// hasRoom reports whether worker w may take another request (a batch
// line, if batch): it is below its budget and its prefill bound (for a
// batch line, the batch bound too) and, unless idle, its last scraped KV
// use is below the bound.
func (g *gate) hasRoom(w int, batch bool, c admission.Class) bool {
	n := g.inFlight[w]
	if n >= g.budget[w] || g.pendingMax != nil && g.pending[w] >= g.pendingMax[w] {
		return false
	}
	if batch && g.batchMax != nil && g.pending[w] > 0 && g.pending[w] >= g.batchBound(w) {
		return false
	}
	bound := g.pendingPrefill[c]
	if g.loose && bound > 0 { // a class without a bound has none to loosen
		bound = max(bound, g.opts.BelowSharePrefill.Seconds())
	}
	if bound > 0 && n > 0 {
		// One prompt at a time before the first measurement, as the live
		// gate (admission.Gate).
		p := float64(g.pending[w])
		if g.opts.ReleaseAtStep {
			p = float64(g.fresh[w])
		}
		if p >= g.s.measuredPrefill(w)*bound && p > 0 {
			return false
		}
		// As the live gate's freshRoom: the prompts its engine has not
		// had a step to start, every replica's (the shared store holds
		// them together).
		if g.tight && g.fresh[w] > 0 && float64(g.fresh[w]) >= g.s.measuredPrefill(w)*g.tightBound {
			return false
		}
	}
	if n == 0 || g.kvMax < 0 {
		return true
	}
	var last *backends.Load
	for r := range g.s.eps {
		if l := g.s.eps[r][w].Load(); l != nil && (last == nil || l.At.After(last.At)) {
			last = l
		}
	}
	return last == nil || last.KVUsage < g.kvMax
}

// measuredPrefill is worker w's prefill rate as the routers measured it
// (the mean over the replicas that have a measurement), or 0 before any.
func (s *sim) measuredPrefill(w int) float64 {
	sum, k := 0.0, 0
	for r := range s.eps {
		if v := s.eps[r][w].PrefillTokensPerSec(); v > 0 {
			sum += v
			k++
		}
	}
	if k == 0 {
		return 0
	}
	return sum / float64(k)
}

// expire sheds every waiting request whose class's maximum wait ended
// before now, as of that deadline. Each class's requests wait with one
// maximum and arrive in order, so a FIFO per class holds them by deadline.
func (g *gate) expire(now int64) {
	for c := range g.byClass {
		limit := g.maxWait[c]
		fifo := g.byClass[c]
		h := g.head[c]
		for h < len(fifo) {
			id := int(fifo[h].id)
			if g.state[id] != waiting || fifo[h].at != g.s.arrival[id] {
				h++ // gone, or an earlier sending of a batch line sent again
				continue
			}
			deadline := g.s.arrival[id] + limit
			if limit < 0 || deadline >= now {
				break
			}
			g.q.Remove(&g.items[id])
			g.shed(id, deadline, "waited "+time.Duration(limit).String())
			h++
		}
		if h == len(fifo) {
			g.byClass[c], h = fifo[:0], 0
		} else if h > 1024 && h > len(fifo)/2 {
			g.byClass[c] = fifo[:copy(fifo, fifo[h:])]
			h = 0
		}
		g.head[c] = h
	}
}

// shed ends request id unserved at t; its tenant's reservation is settled
// as a request with no tokens.
func (g *gate) shed(id int, t int64, why string) {
	s := g.s
	g.state[id] = leftQueue
	o := &s.out[id]
	o.Err = errShed + o.Class.String() + ": " + why
	o.Held = time.Duration(t - s.arrival[id])
	if s.limits != nil {
		s.limits.settle(id, 0, 0)
	}
	if s.isBatch(id) {
		s.batch.ended(id, t)
	}
}

// Shed reports whether an outcome is a request that admission shed.
func (o *Outcome) Shed() bool {
	return len(o.Err) >= len(errShed) && o.Err[:len(errShed)] == errShed
}

// checkRequestOptions checks the per-request options against n requests.
func checkRequestOptions(opts Options, n int) error {
	var errs []error
	if opts.Classes != nil && len(opts.Classes) != n {
		errs = append(errs, fmt.Errorf("fleet: Options.Classes has %d classes for %d requests", len(opts.Classes), n))
	}
	for i, c := range opts.Classes {
		if c >= admission.NumClasses {
			errs = append(errs, fmt.Errorf("fleet: Options.Classes[%d]: unknown class %d", i, c))
			break
		}
	}
	if opts.TenantOf != nil && len(opts.TenantOf) != n {
		errs = append(errs, fmt.Errorf("fleet: Options.TenantOf has %d tenants for %d requests", len(opts.TenantOf), n))
	}
	if opts.TenantOf != nil && len(opts.Tenants) > 0 {
		errs = append(errs, errors.New("fleet: give Options.TenantOf or Options.Tenants, not both"))
	}
	if opts.Admission != nil && opts.Oracle {
		errs = append(errs, errors.New("fleet: Options.Admission needs Pickers; the oracle has its own queue"))
	}
	return errors.Join(errs...)
}

// labelRequests records each request's class and named tenant in its
// outcome, and sets up the per-class and per-tenant ITL histograms.
func (s *sim) labelRequests() {
	if s.opts.Classes != nil {
		for i, c := range s.opts.Classes {
			s.out[i].Class = c
		}
		s.classITL = make([]*Histogram, admission.NumClasses)
		for c := range s.classITL {
			s.classITL[c] = new(Histogram)
		}
	}
	switch {
	case s.opts.TenantOf != nil:
		index := map[string]int32{}
		s.tenantOf = make([]int32, len(s.reqs))
		for i, name := range s.opts.TenantOf {
			t, ok := index[name]
			if !ok {
				t = int32(len(s.tenantNames))
				index[name] = t
				s.tenantNames = append(s.tenantNames, name)
			}
			s.tenantOf[i] = t
			s.out[i].Tenant = name
		}
	case len(s.opts.Tenants) > 0:
		s.tenantOf = make([]int32, len(s.reqs))
		for i := range s.tenantOf {
			s.tenantOf[i] = -1 // until the limit stage deals it
		}
		for _, t := range s.opts.Tenants {
			s.tenantNames = append(s.tenantNames, t.Name)
		}
	}
	if s.tenantNames != nil {
		s.tenantITL = make([]*Histogram, len(s.tenantNames))
		for t := range s.tenantITL {
			s.tenantITL[t] = new(Histogram)
		}
	}
}

// splitITL hands the per-class and per-tenant ITL to res.
func (s *sim) splitITL(res *Result) {
	res.ClassITL = s.classITL
	if s.tenantITL == nil {
		return
	}
	res.TenantITL = make(map[string]*Histogram, len(s.tenantNames))
	for t, name := range s.tenantNames {
		if h := res.TenantITL[name]; h != nil {
			h.Merge(s.tenantITL[t]) // two tenants of one name
			continue
		}
		res.TenantITL[name] = s.tenantITL[t]
	}
}

// waiting counts the requests queued or set aside.
func (g *gate) waiting() int {
	n := g.q.Len()
	for _, id := range g.aside {
		if g.state[id] == waiting {
			n++
		}
	}
	return n
}

// stepped notes that worker w's engine planned a step: with
// Admission.ReleaseAtStep the prompts bound to it before no longer count
// toward its prefill bound.
func (g *gate) stepped(w int) {
	if g.fresh == nil {
		return
	}
	for _, id := range g.freshIDs[w] {
		g.freshOf[id] = false
	}
	g.freshIDs[w] = g.freshIDs[w][:0]
	g.fresh[w] = 0
}

// markShare sets loose and tight for request id (unset them after).
func (g *gate) markShare(id int) {
	g.loose = g.opts.BelowSharePrefill > 0 && g.belowShare(id)
	g.tight, g.tightBound = false, 0
	if g.above > 0 && !g.loose && g.aboveShare(id) {
		g.tight, g.tightBound = true, g.above
	}
	if g.worse > 0 && g.behindBetter(id) && (!g.tight || g.worse < g.tightBound) {
		g.tight, g.tightBound = true, g.worse
	}
}

// behindBetter reports whether a class better than request id's has
// requests in flight (Admission.WorseClassPrefill).
func (g *gate) behindBetter(id int) bool {
	return g.classesIn(0, g.s.out[id].Class)
}

// classesIn reports whether a class in [from, to) has requests in flight.
func (g *gate) classesIn(from, to admission.Class) bool {
	for k := from; k < to && k < admission.NumClasses; k++ {
		if g.classIn[k] > 0 {
			return true
		}
	}
	return false
}

// aboveShare reports whether request id's tenant holds at least its
// weighted share of the requests in flight while another tenant holds
// some.
func (g *gate) aboveShare(id int) bool {
	return g.tenants != nil && g.tenants.Others(g.s.out[id].Tenant) && !g.belowShare(id)
}

// belowShare reports whether request id's tenant holds less than its
// weighted share of the requests in flight, another tenant holding some
// (Admission.BelowSharePrefill, AboveSharePrefill, BelowShareDetour;
// false when all are off).
func (g *gate) belowShare(id int) bool {
	return g.tenants != nil && g.tenants.Below(g.s.out[id].Tenant, g.weight(id))
}

// weight is request id's tenant's weight (Admission.Weights; 1 unlisted).
func (g *gate) weight(id int) float64 {
	if w, ok := g.opts.Weights[g.s.out[id].Tenant]; ok {
		return w
	}
	return 1
}
