package fleet

import (
	"math"

	"github.com/sluice-llm/sluice/gpuworker"
)

// oracle is the ideal central scheduler behind Options.Oracle, a reference
// row for the policies: it reads every engine's true state at no cost and
// binds a request to a worker only when that worker can admit it at once
// (late binding), holding the rest in one FIFO queue. On arrival, among the
// workers that can admit the request, it picks the one with the least
// estimated completion time (remaining step + prefill steps + output tokens
// at the worker's current batch, from the profile's roofline). When a step
// ends and the queue is not empty, that worker takes queued requests while
// it can admit them.
//
// "Can admit" means: the batch plus its queue is below MaxNumSeqs, and the
// free KV blocks, less those promised to dispatched requests still waiting
// for their first token and one growth block per running sequence, hold the
// prompt. It is not a proven lower bound (a request bound at a step end joins
// the step after the one just planned, and it ignores prefix-cache
// affinity), but it has information no router has. Arrival costs O(workers).
type oracle struct {
	s       *sim
	queue   []int
	head    int
	pending []int // per worker: blocks of dispatched prompts without a first token
	inside  bool  // guards stepped against re-entry through submit
	maxKV   int   // the largest worker's KV blocks
}

func newOracle(s *sim) *oracle {
	o := &oracle{s: s, pending: make([]int, len(s.engines))}
	for _, p := range s.profiles {
		o.maxKV = max(o.maxKV, p.KVBlocks())
	}
	return o
}

func (o *oracle) queued() int { return len(o.queue) - o.head }

func blocks(tokens int) int { return (tokens + gpuworker.BlockSize - 1) / gpuworker.BlockSize }

// arrive binds request id to the best worker that can admit it now, or
// queues it.
func (o *oracle) arrive(id int, now int64) error {
	r := &o.s.reqs[id]
	if blocks(r.PromptTokens+r.OutputTokens) > o.maxKV {
		o.s.out[id].Err = errTooLong
		return nil
	}
	if o.queued() > 0 {
		o.queue = append(o.queue, id)
		return nil
	}
	best, bestEst := -1, math.Inf(1)
	for w := range o.s.engines {
		if est, ok := o.estimate(w, id, now); ok && est < bestEst {
			best, bestEst = w, est
		}
	}
	if best < 0 {
		o.queue = append(o.queue, id)
		return nil
	}
	return o.bind(id, best, now)
}

// stepped lets worker w, whose step just ended at now, take queued requests.
func (o *oracle) stepped(w int, now int64) error {
	if o.inside || o.queued() == 0 {
		return nil
	}
	o.inside = true
	defer func() { o.inside = false }()
	for o.queued() > 0 {
		id := o.queue[o.head]
		if _, ok := o.estimate(w, id, now); !ok {
			break
		}
		o.head++
		if o.head == len(o.queue) {
			o.queue, o.head = o.queue[:0], 0
		}
		if err := o.bind(id, w, now); err != nil {
			return err
		}
	}
	return nil
}

// started is called at request id's first token on worker w.
func (o *oracle) started(w, id int) {
	o.pending[w] -= blocks(o.s.reqs[id].PromptTokens)
}

func (o *oracle) bind(id, w int, now int64) error {
	o.pending[w] += blocks(o.s.reqs[id].PromptTokens)
	if err := o.s.submit(id, w, now); err != nil {
		return err
	}
	if !o.s.out[id].OK && o.s.out[id].Err != "" {
		o.pending[w] -= blocks(o.s.reqs[id].PromptTokens) // refused
	}
	return nil
}

// estimate reports whether worker w can admit request id at now and, if so,
// the estimated time to its last token in ns.
func (o *oracle) estimate(w, id int, now int64) (float64, bool) {
	s := o.s
	r := &s.reqs[id]
	p := s.profiles[w]
	l := s.engines[w].Load()
	if l.Running+l.Waiting >= p.MaxNumSeqs {
		return 0, false
	}
	free := l.KVBlocksTotal - l.KVBlocksUsed - o.pending[w] - l.Running
	if blocks(r.PromptTokens+1) > free {
		return 0, false
	}
	var rem float64
	if s.heap.pos[w] >= 0 {
		rem = float64(s.heap.key[w] - now)
	}
	ctx := l.KVBlocksUsed*gpuworker.BlockSize + r.PromptTokens
	chunk := min(r.PromptTokens, p.MaxBatchedTokens)
	chunks := (r.PromptTokens + p.MaxBatchedTokens - 1) / p.MaxBatchedTokens
	prefill := float64(p.StepTime(chunk+l.Running, ctx)) * float64(chunks)
	decode := float64(p.StepTime(l.Running+1, ctx)) * float64(r.OutputTokens-1)
	return rem + prefill + decode, true
}
