package gpuworker

import "time"

// Backlog is the work an engine holds beyond the step in flight: what its
// next steps must do before they can start anything new. A central
// scheduler with perfect knowledge (the simulator's reference row) reads it;
// a router never can.
type Backlog struct {
	// PrefillTokens counts the tokens still to prefill, not counting those
	// in the step in flight: the rest of every running request's prompt
	// (and of a preempted request's whole known sequence) plus every
	// waiting request's uncached known tokens.
	PrefillTokens int
	// Decoding counts running requests past their prefill: each takes one
	// token of every step's budget.
	Decoding int
	// WaitingBlocks counts the KV blocks the waiting requests will allocate
	// when admitted (less the cached prefix blocks they will share).
	WaitingBlocks int
	// Seqs counts running and waiting requests (what MaxNumSeqs bounds, with
	// the waiting ones about to join).
	Seqs int
	// StepEnd is when the step in flight ends; the zero time when idle.
	StepEnd time.Time
}

// Backlog reports the engine's queued work. It is linear in the running
// and waiting requests and allocates nothing.
func (e *Engine) Backlog() Backlog {
	b := Backlog{Seqs: len(e.running) + e.waiting.len()}
	if e.busy {
		b.StepEnd = e.stepEnd
	}
	for _, s := range e.running {
		rest := s.known() - s.computed - s.scheduled
		if rest <= 0 || s.generated > 0 && s.known()-s.computed <= 1 {
			b.Decoding++ // decoding, or its last prompt chunk is in flight
			continue
		}
		b.PrefillTokens += rest
	}
	for i := range e.waiting.len() {
		s := e.waiting.at(i)
		hit, _ := e.cacheHit(s)
		b.PrefillTokens += s.known() - hit*BlockSize
		b.WaitingBlocks += blocksFor(s.known()) - hit
	}
	return b
}

// FreeBlocks returns the KV blocks a new request could take now, counting
// free blocks that hold an evictable cached prefix.
func (e *Engine) FreeBlocks() int { return e.kv.free() }

// CachedPrefix returns how many of a prompt's leading blocks, named by its
// chained block hashes, the prefix cache holds now (in use or free), at
// most the blocks before the prompt's last token, as admission would share
// them. It changes nothing.
func (e *Engine) CachedPrefix(hashes []uint64, promptTokens int) int {
	limit := min(len(hashes), (promptTokens-1)/BlockSize)
	hit := 0
	for hit < limit {
		if _, ok := e.kv.lookup(hashes[hit]); !ok {
			break
		}
		hit++
	}
	return hit
}

// Finish completes the step in flight if it has ended by now, appending its
// events to dst, and starts nothing: a driver that wants to hand the engine
// more work before its next step is planned calls Finish, submits, then
// Step at the same time. Step alone completes and starts in one call.
func (e *Engine) Finish(now time.Time, dst []Event) []Event {
	if now.After(e.now) {
		e.now = now
	}
	if e.busy && !e.stepEnd.After(now) {
		dst = e.complete(dst)
	}
	return dst
}
