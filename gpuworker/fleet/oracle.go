package fleet

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/sluice-llm/sluice/gpuworker"
)

// oracle is the reference row (Options.Oracle): an ideal central scheduler
// that no router can be, built to be hard to beat so that the policies'
// figures mean something. It holds every request in one queue in arrival
// order and knows every engine's exact state at no cost:
//
//   - Late binding. A request is bound to a worker only when that worker's
//     next step can start its prefill: the worker's queued prefill is less
//     than one step's token budget (less its decoding sequences), it runs
//     fewer than MaxNumSeqs sequences, and its free KV blocks hold the
//     request's uncached prompt. Until then the request waits in the
//     oracle, not in an engine queue, so no request is ever committed to a
//     worker that turns out slow. The simulator lets it bind between a
//     step's end and the planning of the next one, so a bound request joins
//     the very next step.
//   - Backlog-aware estimates. A request's expected time to first token on
//     a worker is the rest of the step in flight, plus the worker's true
//     queued prefill (running prompts' remaining chunks and waiting
//     requests) and the request's own uncached prompt, timed with the
//     worker's roofline at its current batch.
//   - Prefix-cache aware. The uncached prompt is what the worker's prefix
//     cache does not hold right now, block by block.
//   - No head-of-line blocking. At every arrival and step end it plans the
//     queue in arrival order: each request goes, in the plan, to the worker
//     where it would get its first token soonest, given the requests
//     planned before it; if that worker can start it now it is bound,
//     otherwise it stays queued and its planned prefill is reserved on that
//     worker, so a later request may go ahead on another worker that has
//     room (a short prompt to a slow GPU, say) but never takes the place a
//     request ahead of it was planned for.
//
// It is not a proven optimum: it is greedy in arrival order (no shortest
// job first, which would trade p99 for the median), does not plan for
// prefixes that future requests will reuse, and ignores how a prefill slows
// the running decodes (TPOT). A plan stops when no worker has room, or after
// scanLimit queued requests. Arrival and step-end planning cost O(workers)
// per request scanned.
type oracle struct {
	s       *sim
	queue   []int // request ids in arrival order; -1 marks a bound one
	head    int
	waiting int
	hashes  map[int][]uint64 // engine block hashes of queued requests
	maxKV   int              // the largest worker's KV blocks
	touched []int            // workers bound to in the current plan
	scratch []int            // queue indices in planning order
	now     int64            // ns, the time of the current plan

	// Per-worker plan state, rebuilt at every plan.
	avail  []float64 // ns from now until a new prefill could start, as planned
	room   []int     // prefill tokens the next step can still take
	free   []int     // KV blocks a new request may take
	seqs   []int
	perTok []float64 // ns per queued prefill token at the current batch
	dec    []int
	ctx    []int
}

// scanLimit bounds how many queued requests one plan looks at.
const scanLimit = 4096

func newOracle(s *sim) *oracle {
	n := len(s.engines)
	o := &oracle{
		s:      s,
		hashes: make(map[int][]uint64),
		avail:  make([]float64, n),
		room:   make([]int, n),
		free:   make([]int, n),
		seqs:   make([]int, n),
		perTok: make([]float64, n),
		dec:    make([]int, n),
		ctx:    make([]int, n),
	}
	for _, p := range s.profiles {
		o.maxKV = max(o.maxKV, p.KVBlocks())
	}
	return o
}

func (o *oracle) queued() int { return o.waiting }

func blocks(tokens int) int { return (tokens + gpuworker.BlockSize - 1) / gpuworker.BlockSize }

// arrive queues request id and plans.
func (o *oracle) arrive(id int, now int64) error {
	r := &o.s.reqs[id]
	if blocks(r.PromptTokens+r.OutputTokens) > o.maxKV {
		o.s.out[id].Err = errTooLong
		return nil
	}
	if r.HashIDs != nil {
		o.hashes[id] = gpuworker.HashIDBlocks(r.HashIDs, r.PromptTokens)
	}
	o.queue = append(o.queue, id)
	o.waiting++
	return o.plan(now, -1)
}

// plan binds what can start now, then starts the idle workers it bound to
// (other than self, whose caller starts it).
func (o *oracle) plan(now int64, self int) error {
	if o.waiting == 0 {
		return nil
	}
	o.touched = o.touched[:0]
	o.now = now
	if o.prepare(now) {
		o.scan()
	}
	for _, w := range o.touched {
		if w != self && o.s.heap.pos[w] < 0 {
			if err := o.s.advance(w, now); err != nil {
				return err
			}
		}
	}
	o.compact()
	return nil
}

// prepare reads every engine and reports whether any worker has room.
func (o *oracle) prepare(now int64) bool {
	any := false
	for w, e := range o.s.engines {
		p := &o.s.profiles[w]
		b := e.Backlog()
		l := e.Load()
		chunk := max(p.MaxBatchedTokens-b.Decoding, 1)
		o.dec[w] = b.Decoding
		o.ctx[w] = l.KVBlocksUsed * gpuworker.BlockSize
		full := p.StepDuration(gpuworker.StepWork{
			Tokens:        chunk + b.Decoding,
			ContextTokens: o.ctx[w] + chunk,
			Seqs:          b.Decoding + 1,
		})
		o.perTok[w] = float64(full) / float64(chunk)
		var rest float64
		if !b.StepEnd.IsZero() {
			rest = math.Max(float64(b.StepEnd.Sub(epoch))-float64(now), 0)
		}
		o.avail[w] = rest + float64(b.PrefillTokens)*o.perTok[w]
		o.room[w] = chunk - b.PrefillTokens
		o.seqs[w] = b.Seqs
		o.free[w] = e.FreeBlocks() - b.WaitingBlocks - l.Running
		if o.startable(w) {
			any = true
		}
	}
	return any
}

func (o *oracle) startable(w int) bool {
	return o.room[w] > 0 && o.seqs[w] < o.s.profiles[w].MaxNumSeqs && o.free[w] > 0
}

// scan plans the queue in arrival order (or by aged size, with
// OracleAging) until no worker has room.
func (o *oracle) scan() {
	order := o.order()
	n := len(o.queue) - o.head
	if order != nil {
		n = len(order)
	}
	scanned := 0
	for k := 0; k < n && scanned < scanLimit; k++ {
		i := o.head + k
		if order != nil {
			i = order[k]
		}
		id := o.queue[i]
		if id < 0 {
			continue
		}
		scanned++
		w, n, need, t := o.best(id)
		if w < 0 {
			continue // fits no worker's cache at all; refused at arrival
		}
		if o.startable(w) && need <= o.free[w] {
			o.bind(i, id, w, n, need)
		} else {
			o.room[w] = 0 // held for w: nothing behind it starts on w in this plan
		}
		o.avail[w] = t
		if !o.anyStartable() {
			return
		}
	}
}

// order returns the queue indices to plan with OracleFirst's tenant
// first, then by class (OracleClasses), then by arrival + OracleAging x
// prompt, or nil for arrival order (the queue's own).
func (o *oracle) order() []int {
	byClass := o.s.opts.OracleClasses && o.s.opts.Classes != nil
	first := o.s.opts.OracleFirst != "" && o.s.opts.TenantOf != nil
	if o.s.opts.OracleAging <= 0 && !byClass && !first {
		return nil
	}
	o.scratch = o.scratch[:0]
	for i := o.head; i < len(o.queue); i++ {
		if o.queue[i] >= 0 {
			o.scratch = append(o.scratch, i)
		}
	}
	aging := float64(o.s.opts.OracleAging)
	key := func(i int) float64 {
		id := o.queue[i]
		return float64(o.s.arrival[id]) + aging*float64(o.s.reqs[id].PromptTokens)
	}
	slices.SortStableFunc(o.scratch, func(a, b int) int {
		if first {
			fa, fb := o.s.opts.TenantOf[o.queue[a]] == o.s.opts.OracleFirst, o.s.opts.TenantOf[o.queue[b]] == o.s.opts.OracleFirst
			if fa != fb {
				if fa {
					return -1
				}
				return 1
			}
		}
		if byClass {
			if c := cmp.Compare(o.s.opts.Classes[o.queue[a]], o.s.opts.Classes[o.queue[b]]); c != 0 {
				return c
			}
		}
		return cmp.Compare(key(a), key(b))
	})
	return o.scratch
}

func (o *oracle) anyStartable() bool {
	for w := range o.room {
		if o.startable(w) {
			return true
		}
	}
	return false
}

// best returns the worker where request id would get its first token
// soonest under the plan so far, its uncached prompt tokens and KV blocks
// there, and the planned time its prefill ends (ns from now).
func (o *oracle) best(id int) (worker, uncached, need int, end float64) {
	r := &o.s.reqs[id]
	hs := o.hashes[id]
	worker, end = -1, math.Inf(1)
	for w, e := range o.s.engines {
		p := &o.s.profiles[w]
		if blocks(r.PromptTokens+r.OutputTokens) > p.KVBlocks() {
			continue
		}
		hit := 0
		if hs != nil {
			hit = e.CachedPrefix(hs, r.PromptTokens)
		}
		n := r.PromptTokens - hit*gpuworker.BlockSize
		t := o.avail[w] + o.prefill(w, n, hit*gpuworker.BlockSize)
		if t < end {
			worker, uncached, need, end = w, n, blocks(r.PromptTokens)-hit+1, t
		}
	}
	return worker, uncached, need, end
}

// prefill estimates, in ns, how long worker w takes to prefill n tokens
// after h cached ones, in chunks sharing each step with its decoders.
func (o *oracle) prefill(w, n, h int) float64 {
	p := &o.s.profiles[w]
	chunk := max(p.MaxBatchedTokens-o.dec[w], 1)
	k := (n + chunk - 1) / chunk
	per := (n + k - 1) / k
	step := p.StepDuration(gpuworker.StepWork{
		Tokens:        per + o.dec[w],
		ContextTokens: o.ctx[w] + h + n/2,
		AttnWork:      float64(n) * float64(n+2*h) / float64(k),
		Seqs:          o.dec[w] + 1,
	})
	return float64(k) * float64(step)
}

// bind hands queued request id (at queue index i) to worker w.
func (o *oracle) bind(i, id, w, n, need int) {
	o.queue[i] = -1
	o.waiting--
	o.room[w] -= n
	o.free[w] -= need
	o.seqs[w]++
	o.touched = append(o.touched, w)
	o.s.out[id].Held = time.Duration(o.now - o.s.arrival[id])
	o.s.place(id, w, o.hashes[id])
	delete(o.hashes, id)
}

// compact drops bound entries from the front of the queue, and rebuilds it
// when most of it is bound.
func (o *oracle) compact() {
	for o.head < len(o.queue) && o.queue[o.head] < 0 {
		o.head++
	}
	if o.head == len(o.queue) {
		o.queue, o.head = o.queue[:0], 0
		return
	}
	if live := o.waiting; o.head > 1024 || len(o.queue)-o.head > 4*live+1024 {
		kept := o.queue[:0]
		for _, id := range o.queue[o.head:] {
			if id >= 0 {
				kept = append(kept, id)
			}
		}
		o.queue, o.head = kept, 0
	}
}
