package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
)

// ErrStalled is returned when an engine reports work but makes no progress,
// which would otherwise spin the event loop forever.
var ErrStalled = errors.New("fleet: engine stalled")

// errTooLong is the failure text of a request larger than its worker's KV
// cache; one shared string keeps the report's error kinds few.
const errTooLong = "request does not fit in the worker's KV cache"

// Options configures Run. Zero fields mean the documented defaults.
type Options struct {
	// Spec is the fleet; required.
	Spec Spec
	// Pickers holds one routing policy per router replica. Arrival i is
	// routed by replica i % len(Pickers), over that replica's own
	// endpoints, so each replica sees only its own in-flight counts.
	// Required unless Oracle is set; pass distinct Picker values, since a
	// replica's policy state (a rotation, say) is its own.
	Pickers []policies.Picker
	// Oracle replaces routing by the reference central scheduler (see
	// oracle.go); Pickers is then ignored.
	Oracle bool
	// OracleAging, when positive, orders the reference's queue shortest
	// job first with aging instead of first come, first served: by
	// arrival + OracleAging x prompt tokens, so a prompt 1,000 tokens
	// longer waits up to 1,000 x OracleAging more. It shows what a queue
	// that may reorder requests (admission control) can reach beyond any
	// router that binds on arrival.
	OracleAging time.Duration
	// OracleClasses orders the reference's queue by service class first
	// (Classes: priority, then default, then flex), then as it would
	// without it: the reference of a scheduler that serves classes in
	// order and sees every engine's state.
	OracleClasses bool
	// OracleFirst names a tenant (TenantOf) whose requests the reference
	// serves ahead of every other's, before classes: what the tenant gets
	// from a scheduler that sees every engine and always puts it first.
	OracleFirst string
	// Model fills policies.Request.Model; default "sim".
	Model string
	// Weights holds each worker's relative weight (Endpoint.Weight), in
	// worker order, as an operator would write them in the config; the
	// weighted policy and the hash rings of the affinity policies read it.
	// Nil means 1 for every worker; CapacityWeights gives weights in
	// proportion to each worker's capacity.
	Weights []int
	// ScrapeInterval is how often, in virtual time, each router replica
	// stores every worker's engine load (waiting, running, KV use) into its
	// endpoint, as the live scraper does. Replicas scrape at staggered
	// phases, as independent processes would. Zero means
	// DefaultScrapeInterval; negative turns scraping off, so policies see no
	// Load at all.
	ScrapeInterval time.Duration
	// Tenants, when set, runs the live pipeline's limit stage: each
	// request belongs to one tenant (by Share) and is reserved against its
	// limits on arrival, refused when they say so (Outcome.Err starts
	// "rate limited: "), and settled with its real usage when it ends.
	Tenants []Tenant
	// Classes holds each request's service class (OpenAI's service_tier),
	// in workload order; nil means admission.Default for every request.
	// Admission orders and sheds by it; without Admission it only labels
	// Outcome.Class.
	Classes []admission.Class
	// TenantOf names each request's tenant, in workload order, for
	// admission's token-fair share and Outcome.Tenant. Nil means the
	// tenant the limit stage deals (Tenants), else one unnamed tenant; it
	// cannot be given with Tenants, which deals its own.
	TenantOf []string
	// Admission, when set, runs the admit stage (see Admission) after the
	// limit stage; it needs Pickers, not Oracle.
	Admission *Admission
	// Batch, when set, runs a Batch API batch beside the workload (see
	// Batch); Result.Requests then holds the workload's requests only and
	// Result.Batch the batch's lines.
	Batch *Batch
	// Estimates, when set, records in each Outcome what the router
	// expected when it bound the request (Outcome.ExpectedTTFT and
	// QuickestTTFT), at the cost of a pass over the candidates per pick.
	Estimates bool
}

// DefaultScrapeInterval is the live scraper's default period.
const DefaultScrapeInterval = 100 * time.Millisecond

// epoch is the virtual time of offset zero. Any fixed instant works; the
// engines only compare and subtract times.
var epoch = time.Unix(1_700_000_000, 0)

// sim is the state of one Run.
type sim struct {
	opts     Options
	reqs     []workload.Request
	engines  []*gpuworker.Engine
	profiles []gpuworker.Profile
	eps      [][]*backends.Endpoint // [replica][worker]
	index    map[*backends.Endpoint]int
	heap     *stepHeap
	events   []gpuworker.Event
	preq     policies.Request
	ctx      context.Context

	busySince []int64 // ns; valid while the worker is in the heap
	busyTotal []int64
	dispatch  []int

	out      []Outcome
	arrival  []int64            // ns
	lastTok  []int64            // ns of the latest token, per request
	att      []backends.Attempt // each request's attempt in its router replica
	itl      *Histogram
	finished int64 // ns of the latest completion

	oracle *oracle
	limits *limits // nil without Options.Tenants
	adm    *gate   // nil without Options.Admission
	clock  int64   // virtual now, ns, for the limits
	// batch runs Options.Batch's lines, requests ntrace onwards; nil
	// without one. finishedTrace is the latest completion of the
	// workload's own requests.
	batch         *runner
	ntrace        int
	finishedTrace int64

	// Scraping: scrapeEvery is the period in ns (0 = off), nextScrape the
	// next tick of each replica. version counts the changes of each
	// worker's engine; stored[replica*workers+w] is the version the
	// replica last stored, so an unchanged engine is not stored again.
	scrapeEvery int64
	nextScrape  []int64
	version     []uint64
	stored      []uint64
	prefix      []uint64 // scratch for policies.Request.PrefixHashes

	// Per-class and per-tenant inter-token latency, when requests have
	// classes (Options.Classes) or named tenants; tenantOf indexes
	// tenantNames per request (-1: none).
	classITL    []*Histogram
	tenantNames []string
	tenantOf    []int32
	tenantITL   []*Histogram
}

// Run simulates the fleet serving reqs (sorted by Arrival, as workload
// returns them) and returns what every request experienced.
func Run(opts Options, reqs []workload.Request) (*Result, error) {
	s, err := newSim(opts, reqs)
	if err != nil {
		return nil, err
	}
	if err := s.loop(); err != nil {
		return nil, err
	}
	return s.result(), nil
}

func newSim(opts Options, reqs []workload.Request) (*sim, error) {
	n := opts.Spec.Workers()
	if n == 0 {
		return nil, errors.New("fleet: the fleet has no workers")
	}
	if opts.Weights != nil && len(opts.Weights) != n {
		return nil, fmt.Errorf("fleet: Options.Weights has %d weights for %d workers", len(opts.Weights), n)
	}
	if !opts.Oracle && len(opts.Pickers) == 0 {
		return nil, errors.New("fleet: Options.Pickers is empty and Oracle is not set")
	}
	if err := checkRequestOptions(opts, len(reqs)); err != nil {
		return nil, err
	}
	if err := checkBatch(opts); err != nil {
		return nil, err
	}
	ntrace := len(reqs)
	opts, reqs = withBatch(opts, reqs)
	if opts.Model == "" {
		opts.Model = "sim"
	}
	s := &sim{
		opts:      opts,
		reqs:      reqs,
		ntrace:    ntrace,
		profiles:  opts.Spec.Profiles(),
		heap:      newStepHeap(n),
		ctx:       context.Background(),
		busySince: make([]int64, n),
		busyTotal: make([]int64, n),
		dispatch:  make([]int, n),
		out:       make([]Outcome, len(reqs)),
		arrival:   make([]int64, len(reqs)),
		lastTok:   make([]int64, len(reqs)),
		att:       make([]backends.Attempt, len(reqs)),
		itl:       new(Histogram),
		preq:      policies.Request{Model: opts.Model, Stream: true, PrefixChunkTokens: ChunkTokens},
	}
	for _, p := range s.profiles {
		e, err := gpuworker.NewEngine(p)
		if err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		s.engines = append(s.engines, e)
	}
	for i, r := range reqs[:ntrace] {
		if i > 0 && r.Arrival < reqs[i-1].Arrival {
			return nil, fmt.Errorf("fleet: request %d arrives before request %d; sort the workload", i, i-1)
		}
		s.arrival[i] = int64(r.Arrival)
	}
	for i, r := range reqs {
		s.out[i] = Outcome{Worker: -1, PromptTokens: r.PromptTokens, Class: admission.Default}
	}
	s.labelRequests()
	if len(opts.Tenants) > 0 {
		l, err := newLimits(opts.Tenants, len(reqs), &s.clock)
		if err != nil {
			return nil, err
		}
		s.limits = l
	}
	if opts.Oracle {
		s.oracle = newOracle(s)
		return s, nil
	}
	s.initScrape()
	s.index = make(map[*backends.Endpoint]int, n)
	for range opts.Pickers {
		row := make([]*backends.Endpoint, n)
		for w := range row {
			weight := 1
			if opts.Weights != nil {
				weight = opts.Weights[w]
			}
			ep, err := backends.NewEndpoint(fmt.Sprintf("http://worker-%d.sim", w), weight)
			if err != nil {
				return nil, fmt.Errorf("fleet: %w", err)
			}
			row[w] = ep
			s.index[ep] = w
		}
		s.eps = append(s.eps, row)
	}
	if len(reqs) > ntrace {
		s.batch = newRunner(s, ntrace)
	}
	if opts.Admission != nil {
		g, err := newGate(s, opts.Admission)
		if err != nil {
			return nil, err
		}
		s.adm = g
	}
	return s, nil
}

// loop runs events in time order until every request has finished. At equal
// times an arrival goes first, so a step ending at that instant admits it.
func (s *sim) loop() error {
	next := 0
	for {
		// The next arrival: the workload's, or a batch line's sending
		// (the workload's first at equal times).
		at, fromBatch, have := int64(0), false, next < s.ntrace
		if have {
			at = s.arrival[next]
		}
		if s.batch != nil {
			if d, ok := s.batch.next(); ok && (!have || d.t < at) {
				at, fromBatch, have = d.t, true, true
			}
		}
		if !have && s.heap.len() == 0 {
			break
		}
		if have && (s.heap.len() == 0 || at <= s.heap.key[s.heap.items[0]]) {
			if s.scrapeEvery > 0 {
				s.scrapeUntil(at)
			}
			s.clock = max(s.clock, at)
			id := next
			if fromBatch {
				id = s.batch.pop()
			} else {
				next++
			}
			if err := s.arrive(id); err != nil {
				return err
			}
			continue
		}
		w, t := s.heap.top()
		if s.scrapeEvery > 0 {
			s.scrapeUntil(t)
		}
		s.clock = max(s.clock, t)
		if err := s.step(w, t); err != nil {
			return err
		}
	}
	if s.oracle != nil && s.oracle.queued() > 0 {
		return fmt.Errorf("%w: %d requests left in the oracle's queue", ErrStalled, s.oracle.queued())
	}
	if s.adm != nil && s.adm.waiting() > 0 {
		return fmt.Errorf("%w: %d requests left in the admission queue", ErrStalled, s.adm.waiting())
	}
	return nil
}

// arrive routes request id at its arrival time.
func (s *sim) arrive(id int) error {
	now := s.arrival[id]
	if s.limits != nil {
		s.clock = now
		r := &s.reqs[id]
		refused, err := s.limits.reserve(id, r.Session, r.PromptTokens, r.OutputTokens)
		if err != nil {
			return err
		}
		if s.opts.TenantOf == nil {
			s.out[id].Tenant = s.limits.tenants[s.limits.of[id]].Name
			s.tenantOf[id] = int32(s.limits.of[id])
		}
		if refused != "" {
			s.out[id].Err = refused
			return nil
		}
	}
	if s.oracle != nil {
		return s.oracle.arrive(id, now)
	}
	if s.adm != nil {
		return s.adm.arrive(id, now)
	}
	replica := id % len(s.opts.Pickers)
	w, err := s.pick(id, replica, s.eps[replica], false)
	if err != nil || w < 0 {
		return err
	}
	r := &s.reqs[id]
	s.att[id] = s.eps[replica][w].Start(int64(r.PromptTokens), int64(r.PromptTokens+r.OutputTokens))
	return s.submit(id, w, now)
}

// pick routes request id with replica's Picker over eps (that replica's
// endpoints, or some of them) and returns the worker; -1 when the policy
// found none, which is the request's outcome. queued says the admission
// queue binds it (policies.Request.Queued), as the router's gate does.
func (s *sim) pick(id, replica int, eps []*backends.Endpoint, queued bool) (int, error) {
	r := &s.reqs[id]
	s.preq.Queued = queued
	s.preq.PromptTokens = r.PromptTokens
	s.preq.MaxTokens = r.OutputTokens
	s.prefix = PrefixHashes(s.prefix[:0], r.HashIDs, r.PromptTokens, uint64(id))
	s.preq.PrefixHashes = s.prefix
	if len(s.prefix) == 0 {
		s.preq.PrefixHashes = nil
	}
	s.preq.Class = s.out[id].Class.String() // as the router's request says it, for the policies that read it
	s.preq.SessionKey = ""
	if r.Session != 0 {
		s.preq.SessionKey = strconv.FormatUint(r.Session, 10) // allocates; the live router has a string already
	}
	ep, err := s.opts.Pickers[replica].Pick(s.ctx, &s.preq, eps)
	if err != nil {
		s.out[id].Err = fmt.Sprintf("pick: %v", err)
		return -1, nil
	}
	w, ok := s.index[ep]
	if !ok || s.eps[replica][w] != ep {
		return -1, fmt.Errorf("fleet: policy returned an endpoint it was not given: %s", ep.Address())
	}
	if s.opts.Estimates {
		s.out[id].ExpectedTTFT, s.out[id].QuickestTTFT = expectedTTFT(ep, eps, r.PromptTokens)
	}
	return w, nil
}

// expectedTTFT is a prompt's expected time to first token on chosen, and the
// least over eps, by the prefill backlog over the measured prefill rate
// (policies.PrefillBacklog, backends.Endpoint.PrefillTokensPerSec); zero
// where no rate is measured yet.
func expectedTTFT(chosen *backends.Endpoint, eps []*backends.Endpoint, prompt int) (est, quickest time.Duration) {
	at := func(e *backends.Endpoint) time.Duration {
		rate := e.PrefillTokensPerSec()
		if rate <= 0 {
			return 0
		}
		return time.Duration(policies.PrefillBacklog(e, int64(prompt)) / rate * float64(time.Second))
	}
	for _, e := range eps {
		if v := at(e); v > 0 && (quickest == 0 || v < quickest) {
			quickest = v
		}
	}
	return at(chosen), quickest
}

// submit hands request id to worker w at now, and starts the engine if it
// was idle.
func (s *sim) submit(id, w int, now int64) error {
	if !s.place(id, w, nil) || s.heap.pos[w] >= 0 {
		return nil
	}
	return s.step(w, now)
}

// place hands request id to worker w's engine and reports whether the
// engine took it; a refusal is recorded as the request's outcome. hashes
// are the prompt's engine block hashes when the caller has them already,
// else nil.
func (s *sim) place(id, w int, hashes []uint64) bool {
	r := &s.reqs[id]
	s.out[id].Worker = w
	s.dispatch[w]++
	s.changed(w)
	req := gpuworker.Request{ID: uint64(id), PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens}
	req.BlockHashes = hashes
	if hashes == nil && r.HashIDs != nil {
		req.BlockHashes = gpuworker.HashIDBlocks(r.HashIDs, r.PromptTokens)
	}
	if err := s.engines[w].Submit(req); err != nil {
		if errors.Is(err, gpuworker.ErrTooLong) {
			s.out[id].Err = errTooLong
		} else {
			s.out[id].Err = err.Error()
		}
		s.release(id)
		return false
	}
	return true
}

// release ends request id's attempt in its router replica: with the
// answer's measurements when it finished, as a failure when the engine
// refused it.
func (s *sim) release(id int) {
	o := &s.out[id]
	if s.limits != nil {
		s.limits.settle(id, s.reqs[id].PromptTokens, o.OutputTokens)
	}
	if s.adm != nil {
		s.adm.release(id)
	}
	if s.isBatch(id) {
		s.batch.ended(id, s.clock)
	}
	if s.eps == nil {
		return
	}
	if !o.OK {
		s.att[id].Finish(backends.Outcome{Class: backends.ClassFailed})
		return
	}
	r := &s.reqs[id]
	// The attempt began when the request was bound, after any wait.
	out := backends.Outcome{Class: backends.ClassOK, Status: 200, PromptTokens: r.PromptTokens,
		CompletionTokens: o.OutputTokens, UsageExact: true, TTFT: o.TTFT - o.Held}
	if o.OutputTokens > 1 {
		out.DecodeTokens, out.Decode = o.OutputTokens-1, o.E2E-o.TTFT
	}
	s.att[id].Finish(out)
}

// prefilled feeds request id's first token to its attempt, as the live
// router does when the first byte of the answer arrives.
func (s *sim) prefilled(id int) {
	if s.adm != nil {
		s.adm.prefilled(id)
	}
	if s.eps != nil {
		s.att[id].FirstToken(s.out[id].TTFT - s.out[id].Held)
	}
}

// step advances worker w to now, records its events and reschedules it.
// With the oracle or admission, the step that ended is completed first
// (freeing the finished requests' slots). The oracle then binds queued
// requests before the engine plans its next step, so they join it; the
// admission gate binds them after, as the live router does: it learns of
// a step's first tokens and finished answers only once the engine has
// started its next step, so what it binds then waits for the step after
// (Admission.SameStep binds before, as the oracle).
func (s *sim) step(w int, now int64) error {
	if s.oracle == nil && s.adm == nil {
		return s.advance(w, now)
	}
	s.events = s.engines[w].Finish(epoch.Add(time.Duration(now)), s.events[:0])
	for i := range s.events {
		s.record(w, &s.events[i])
	}
	switch {
	case s.oracle != nil:
		if err := s.oracle.plan(now, w); err != nil {
			return err
		}
	case s.adm.opts.SameStep:
		if err := s.adm.dispatch(now, w); err != nil {
			return err
		}
	default:
		if err := s.advance(w, now); err != nil {
			return err
		}
		s.adm.stepped(w)
		return s.adm.dispatch(now, -1)
	}
	if err := s.advance(w, now); err != nil {
		return err
	}
	if s.adm != nil {
		s.adm.stepped(w)
	}
	return nil
}

// advance runs worker w's engine up to now, records its events and puts it
// in (or takes it out of) the step heap.
func (s *sim) advance(w int, now int64) error {
	wasBusy := s.heap.pos[w] >= 0
	s.changed(w)
	s.events = s.engines[w].Step(epoch.Add(time.Duration(now)), s.events[:0])
	for i := range s.events {
		s.record(w, &s.events[i])
	}
	next, ok := s.engines[w].Next()
	switch {
	case ok:
		t := int64(next.Sub(epoch))
		if t <= now {
			return fmt.Errorf("%w: worker %d at %v", ErrStalled, w, time.Duration(now))
		}
		if !wasBusy {
			s.busySince[w] = now
		}
		s.heap.set(w, t)
	case wasBusy:
		s.busyTotal[w] += now - s.busySince[w]
		s.heap.remove(w)
	}
	return nil
}

// record applies one engine event to its request.
func (s *sim) record(w int, ev *gpuworker.Event) {
	id := int(ev.ID)
	t := int64(ev.Time.Sub(epoch))
	s.clock = max(s.clock, t)
	o := &s.out[id]
	switch ev.Kind {
	case gpuworker.EventFirstToken:
		o.TTFT = time.Duration(t - s.arrival[id])
		s.lastTok[id] = t
		s.prefilled(id)
	case gpuworker.EventToken:
		gap := time.Duration(t - s.lastTok[id])
		s.lastTok[id] = t
		if s.isBatch(id) {
			return // the workload's figures are its own requests'
		}
		s.itl.Add(gap)
		if s.classITL != nil {
			s.classITL[o.Class].Add(gap)
		}
		if s.tenantITL != nil && s.tenantOf[id] >= 0 {
			s.tenantITL[s.tenantOf[id]].Add(gap)
		}
	case gpuworker.EventFinished:
		o.OK = true
		o.OutputTokens = ev.Tokens
		o.E2E = time.Duration(t - s.arrival[id])
		s.finished = max(s.finished, t)
		if !s.isBatch(id) {
			s.finishedTrace = max(s.finishedTrace, t)
		}
		s.release(id)
	}
}

// result assembles the Result after the loop.
func (s *sim) result() *Result {
	end := s.finishedTrace
	var start int64
	if n := s.ntrace; n > 0 {
		end = max(end, s.arrival[n-1])
		start = s.arrival[0]
	}
	elapsed := time.Duration(end - start)
	// Utilization is over the whole run, the batch's lines included.
	span := elapsed
	res := &Result{Requests: s.out[:s.ntrace], ITL: s.itl, Elapsed: elapsed, Workers: make([]WorkerStats, len(s.engines))}
	if s.batch != nil {
		res.Batch = s.batch.result()
		if s.ntrace == 0 {
			start = int64(res.Batch.Start)
		}
		span = time.Duration(max(end, int64(res.Batch.End)) - start)
	}
	if s.limits != nil {
		res.Tenants = s.limits.stats
	}
	s.splitITL(res)
	if s.adm != nil {
		st := s.adm.stats
		res.Admission = &st
	}
	for w, e := range s.engines {
		l := e.Load()
		ws := WorkerStats{
			Profile:     s.profiles[w].Name,
			Requests:    s.dispatch[w],
			Busy:        time.Duration(s.busyTotal[w]),
			Preemptions: l.Preemptions,
		}
		ws.PrefixQueries, ws.PrefixHits = prefixStats(l)
		ws.MeasuredPrefill = s.measuredPrefill(w)
		if s.adm != nil {
			ws.Budget, ws.PeakInFlight = s.adm.budget[w], s.adm.peak[w]
		}
		if span > 0 {
			ws.Utilization = float64(ws.Busy) / float64(span)
		}
		res.Workers[w] = ws
	}
	return res
}
