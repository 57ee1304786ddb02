package backends

import (
	"sync"
	"time"
)

// stepMarks tells which prompts sent to an endpoint its engine has not yet
// had a step to take up: every stream the endpoint serves gets a token as
// each engine step ends, so the bytes of any relayed stream mark a step
// (StepReader), and a prompt sent after the last mark waits for the engine's
// next step to start its prefill. Prompts sent before it are in the
// engine's hands (in a step, or queued for one that could not take them).
type stepMarks struct {
	mu    sync.Mutex
	steps uint64    // marks so far
	at    uint64    // steps when fresh was last reset
	fresh int64     // prompt tokens sent since mark at and still pending
	last  time.Time // when the last mark was made
}

// StepReader marks an endpoint's steps from the reads of one stream it
// serves. A stream's bytes come a step at a time, but every stream's
// tokens of one step arrive spread over the following milliseconds, so a
// read marks a new step only when its stream has read already since the
// last mark (its previous token was of that step or later); the first read
// of each other stream after a mark is of the same step.
type StepReader struct {
	e    *Endpoint
	seen uint64 // the endpoint's marks at this stream's last read
}

// StepReader returns a StepReader for a stream from e.
func (e *Endpoint) StepReader() *StepReader { return &StepReader{e: e, seen: ^uint64(0)} }

// Read records a read of the stream's bytes. It reports whether it marked
// a step that handed the engine prompts sent since the last mark
// (FreshPromptTokens drops to zero).
func (r *StepReader) Read() bool {
	m := &r.e.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.seen != m.steps {
		r.seen = m.steps // this stream's first read since the last mark: the same step's token
		return false
	}
	handed := m.at == m.steps && m.fresh > 0
	m.steps++
	m.last = time.Now()
	r.seen = m.steps
	return handed
}

// StepMarks is how many steps the endpoint's streams have marked so far
// (StepReader): a prompt sent when it read m was handed to the engine once
// it reads more than m.
func (e *Endpoint) StepMarks() uint64 {
	m := &e.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.steps
}

// LastStepMark is when a stream last marked one of the endpoint's engine
// steps (StepReader), or the zero time if none has.
func (e *Endpoint) LastStepMark() time.Time {
	m := &e.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// FreshPromptTokens is the prompt tokens of the requests this replica sent
// to the endpoint since its last step mark (StepReader) that have not
// produced a first token yet: the prefill its engine has not had a step to
// start. With no stream relayed from the endpoint there are no marks, and
// it is PendingPromptTokens.
func (e *Endpoint) FreshPromptTokens() int64 {
	m := &e.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at != m.steps {
		return 0
	}
	return max(m.fresh, 0)
}

// beginFresh counts a prompt sent now; the mark count it returns is passed
// to endFresh when the prompt stops pending.
func (e *Endpoint) beginFresh(prompt int64) uint64 {
	m := &e.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at != m.steps {
		m.at, m.fresh = m.steps, 0
	}
	m.fresh += prompt
	return m.at
}

// endFresh uncounts a prompt begun at mark count at that stopped pending
// (its first token, or its attempt's end) before a later mark.
func (e *Endpoint) endFresh(prompt int64, at uint64) {
	m := &e.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == at && m.steps == at {
		m.fresh -= prompt
	}
}
