package gpuworker

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Engine.Submit.
var (
	ErrDuplicateID    = errors.New("gpuworker: request id already in the engine")
	ErrInvalidRequest = errors.New("gpuworker: prompt and output tokens must be positive")
	ErrTooLong        = errors.New("gpuworker: request does not fit in the KV cache")
)

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateGone
)

// seq is the engine's view of one request. Its known tokens are
// prompt+generated; computed of them have KV in the cache.
type seq struct {
	id        uint64
	prompt    int
	output    int
	generated int
	computed  int
	blocks    []int32  // KV blocks, in prompt order
	hashes    []uint64 // chained hashes of the prompt's full blocks
	hashed    int      // leading blocks whose hash is registered
	scheduled int      // tokens in the step in flight
	state     seqState
}

func (s *seq) known() int { return s.prompt + s.generated }

func blocksFor(tokens int) int { return (tokens + BlockSize - 1) / BlockSize }

// Engine simulates one inference engine doing continuous batching with
// chunked prefill and a paged KV cache. It is a pure state machine: it never
// reads the clock or starts goroutines, and it is not safe for concurrent
// use. A driver submits requests, calls Step at the times Next reports, and
// receives the events of each step that ended.
//
// Each step schedules running requests first, in admission order (one token
// for a decoding request, the next prompt chunk for a prefilling one), then
// admits waiting requests in FIFO order while the token budget, MaxNumSeqs
// and free KV blocks allow. A waiting request is admitted only when blocks for
// all its known tokens are free. When a running request needs a new block and
// none is free, the newest running request is preempted: its blocks are freed
// and it goes back to the front of the queue, to be prefilled again later
// (vLLM's recompute preemption). No request is admitted in a step that
// preempted. With Profile.WholePrefill the head of the queue is admitted
// only when its whole uncached prompt fits in the remaining budget, so
// prompts are never split across steps.
//
// Prefix caching follows vLLM's automatic prefix caching. A request's
// BlockHashes name its full prompt blocks; when it is admitted, the longest
// run of leading blocks already in the cache is shared (reference-counted)
// instead of allocated, and prefill starts at the first uncached token
// (always leaving at least one token to compute). A block's hash is
// registered once its tokens have been computed. Blocks of finished,
// cancelled and preempted requests stay cached while free and are evicted
// least recently freed first when their space is needed. Cached tokens cost
// no prefill time but are read as context.
type Engine struct {
	prof Profile
	kv   *blockPool

	running []*seq
	waiting queue
	byID    map[uint64]*seq
	batch   []*seq

	busy    bool
	stepEnd time.Time
	now     time.Time

	promptTokens int64
	genTokens    int64
	preemptions  int64
	cacheQueries int64
	cacheHits    int64
}

// NewEngine returns an idle engine for the profile.
func NewEngine(p Profile) (*Engine, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("gpuworker: new engine: %w", err)
	}
	return &Engine{
		prof: p,
		kv:   newBlockPool(p.KVBlocks()),
		byID: make(map[uint64]*seq),
	}, nil
}

// Profile returns the profile the engine was built with.
func (e *Engine) Profile() Profile { return e.prof }

// Submit queues a request. It starts no work by itself: call Step (or wait
// for the time Next reports) to schedule it.
func (e *Engine) Submit(r Request) error {
	if r.PromptTokens < 1 || r.OutputTokens < 1 {
		return fmt.Errorf("request %d: %w", r.ID, ErrInvalidRequest)
	}
	if _, ok := e.byID[r.ID]; ok {
		return fmt.Errorf("request %d: %w", r.ID, ErrDuplicateID)
	}
	if need := blocksFor(r.PromptTokens + r.OutputTokens); need > e.kv.total {
		return fmt.Errorf("request %d needs %d blocks of %d: %w", r.ID, need, e.kv.total, ErrTooLong)
	}
	hashes := r.BlockHashes
	if full := r.PromptTokens / BlockSize; len(hashes) > full {
		hashes = hashes[:full]
	}
	s := &seq{id: r.ID, prompt: r.PromptTokens, output: r.OutputTokens, hashes: hashes, state: stateWaiting}
	e.byID[r.ID] = s
	e.waiting.pushBack(s)
	return nil
}

// Cancel removes a request at once and frees its KV blocks. If it is part of
// the step in flight, that step still takes its planned time but emits
// nothing for it. Cancel reports whether the engine held the request.
func (e *Engine) Cancel(id uint64) bool {
	s, ok := e.byID[id]
	if !ok {
		return false
	}
	delete(e.byID, id)
	switch s.state {
	case stateWaiting:
		e.waiting.remove(s)
	case stateRunning:
		for i, r := range e.running {
			if r == s {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
	}
	e.release(s)
	s.state = stateGone
	return true
}

// Next reports when Step should next be called: the end of the step in
// flight, or, if the engine is idle with queued work, the latest time it has
// seen (that is, as soon as possible). It returns false when there is nothing
// to do.
func (e *Engine) Next() (time.Time, bool) {
	if e.busy {
		return e.stepEnd, true
	}
	if e.waiting.len() > 0 || len(e.running) > 0 {
		return e.now, true
	}
	return time.Time{}, false
}

// Load reports the engine's queue, batch and cache use.
func (e *Engine) Load() Load {
	used := e.kv.used()
	var usage float64
	if e.kv.total > 0 {
		usage = float64(used) / float64(e.kv.total)
	}
	return Load{
		Waiting:            e.waiting.len(),
		Running:            len(e.running),
		KVUsage:            usage,
		KVBlocksUsed:       used,
		KVBlocksTotal:      e.kv.total,
		KVBlocksCached:     e.kv.cachedBlocks(),
		PromptTokens:       e.promptTokens,
		GenerationTokens:   e.genTokens,
		Preemptions:        e.preemptions,
		PrefixCacheQueries: e.cacheQueries,
		PrefixCacheHits:    e.cacheHits,
	}
}

// Step advances the engine to now. It completes every step that has ended by
// now, appending their events to dst, and starts the next step when there is
// work: a step that follows another begins at the previous step's end, and
// one that follows idleness begins at now. It returns dst extended; passing
// a reused slice makes a step allocation-free in the steady state.
func (e *Engine) Step(now time.Time, dst []Event) []Event {
	if now.After(e.now) {
		e.now = now
	}
	start := now
	for {
		if e.busy {
			if e.stepEnd.After(now) {
				return dst
			}
			dst = e.complete(dst)
			start = e.stepEnd
		}
		if !e.schedule(start) {
			return dst
		}
	}
}

// complete applies the results of the step in flight.
func (e *Engine) complete(dst []Event) []Event {
	e.busy = false
	finished := false
	for _, s := range e.batch {
		n := s.scheduled
		s.scheduled = 0
		if s.state != stateRunning {
			continue // cancelled while the step ran
		}
		s.computed += n
		e.registerBlocks(s)
		if s.computed < s.known() {
			continue // prefill chunk, more to come
		}
		s.generated++
		e.genTokens++
		kind := EventToken
		if s.generated == 1 {
			kind = EventFirstToken
			e.promptTokens += int64(s.prompt)
		}
		dst = append(dst, Event{Time: e.stepEnd, ID: s.id, Kind: kind, Tokens: s.generated})
		if s.generated >= s.output {
			dst = append(dst, Event{Time: e.stepEnd, ID: s.id, Kind: EventFinished, Tokens: s.generated})
			delete(e.byID, s.id)
			e.release(s)
			s.state = stateGone
			finished = true
		}
	}
	clear(e.batch)
	e.batch = e.batch[:0]
	if finished {
		kept := e.running[:0]
		for _, s := range e.running {
			if s.state == stateRunning {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
	return dst
}

// schedule plans a step starting at start and reports whether it did.
func (e *Engine) schedule(start time.Time) bool {
	budget := e.prof.MaxBatchedTokens
	var w StepWork
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.known()-s.computed, budget)
		need := blocksFor(s.computed+n) - len(s.blocks)
		for need > e.kv.free() && s.state == stateRunning {
			e.preemptNewest()
			preempted = true
		}
		if s.state != stateRunning {
			break // s preempted itself; everything after it is gone too
		}
		for range need {
			s.blocks = append(s.blocks, e.kv.alloc())
		}
		e.plan(&w, s, n)
		budget -= n
	}
	for !preempted && budget > 0 && len(e.running) < e.prof.MaxNumSeqs && e.waiting.len() > 0 {
		s := e.waiting.front()
		hit, revive := e.cacheHit(s)
		if blocksFor(s.known())-hit+revive > e.kv.free() {
			break
		}
		if e.prof.WholePrefill {
			rest := s.known() - hit*BlockSize
			if rest > budget && rest <= e.prof.MaxBatchedTokens {
				break // the prompt waits for a step with room for all of it
			}
		}
		e.waiting.popFront()
		e.admit(s, hit)
		e.plan(&w, s, min(s.known()-s.computed, budget))
		budget -= s.scheduled
		e.running = append(e.running, s)
	}
	if len(e.batch) == 0 {
		return false
	}
	e.busy = true
	e.stepEnd = start.Add(e.prof.StepDuration(w))
	return true
}

// plan adds n tokens of s to the step in flight.
func (e *Engine) plan(w *StepWork, s *seq, n int) {
	s.scheduled = n
	w.add(n, s.computed)
	e.batch = append(e.batch, s)
}

// preemptNewest sends the most recently admitted running request back to the
// front of the queue and frees its blocks.
func (e *Engine) preemptNewest() {
	last := len(e.running) - 1
	s := e.running[last]
	e.running[last] = nil
	e.running = e.running[:last]
	e.release(s)
	s.computed = 0
	s.state = stateWaiting
	e.waiting.pushFront(s)
	e.preemptions++
}
