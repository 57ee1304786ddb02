package backends

import (
	"sync/atomic"
	"time"
)

// ErrorClass says how an attempt ended. Settlement, endpoint statistics,
// breakers, metrics and logs all read it from the attempt's Outcome.
type ErrorClass uint8

// The classes of an attempt's end.
const (
	// ClassOK: the answer was relayed to its end with a 2xx status.
	ClassOK ErrorClass = iota
	// ClassClientGone: the client left before the answer ended; the
	// backend did nothing wrong.
	ClassClientGone
	// ClassUnreachable: the backend could not be connected to; nothing was
	// sent, so another endpoint may be tried.
	ClassUnreachable
	// ClassTimeout: no response headers (or no next chunk) in time.
	ClassTimeout
	// ClassUpstream5xx: the backend answered with a 5xx status.
	ClassUpstream5xx
	// ClassUpstream4xx: the backend answered with a 4xx status: the
	// request's fault, not the backend's.
	ClassUpstream4xx
	// ClassFailed: the answer broke after it started, or the backend
	// refused the request for a reason of its own.
	ClassFailed
	// ClassLocal: the router could not make the attempt for a reason of
	// its own (out of file descriptors); the backend did nothing wrong.
	ClassLocal
	// ClassRequestTimeout: the request's own total time ran out while the
	// answer streamed; the backend did nothing wrong.
	ClassRequestTimeout
)

var classNames = [...]string{
	ClassOK:          "ok",
	ClassClientGone:  "client_gone",
	ClassUnreachable: "unreachable",
	ClassTimeout:     "timeout",
	ClassUpstream5xx: "upstream_5xx",
	ClassUpstream4xx: "upstream_4xx",
	ClassFailed:      "failed",
	ClassLocal:       "local_error",

	ClassRequestTimeout: "request_timeout",
}

// String is the class's metric label.
func (c ErrorClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// BackendFault reports whether the class counts against the backend (for
// breakers and health): unreachable, timeouts, 5xx and broken answers do;
// success, client cancels and 4xx do not.
func (c ErrorClass) BackendFault() bool {
	switch c {
	case ClassUnreachable, ClassTimeout, ClassUpstream5xx, ClassFailed:
		return true
	}
	return false
}

// Measured reports whether an answer that ended so measured its backend's
// decode speed: it ran unhindered until it ended or the router stopped it
// (the client left, the request's time ran out).
func (c ErrorClass) Measured() bool {
	return c == ClassOK || c == ClassClientGone || c == ClassRequestTimeout
}

// Outcome is what one attempt came to: the one value that settlement,
// endpoint statistics, breakers, metrics and logs read.
type Outcome struct {
	// Class says how the attempt ended.
	Class ErrorClass
	// Status is the HTTP status relayed to the client, 0 when none was.
	Status int
	// PromptTokens and CompletionTokens are the answer's usage: from its
	// usage object when UsageExact, else what was counted on the way.
	PromptTokens     int
	CompletionTokens int
	UsageExact       bool
	// TTFT is the time from the attempt's start to its first token, 0 when
	// none came.
	TTFT time.Duration
	// DecodeTokens and Decode measure the decode phase: tokens generated
	// after the first, and the time they took. Zero when not measured.
	DecodeTokens int
	Decode       time.Duration
	// ResponseID is the id of the Responses API response the answer
	// carried, empty for any other answer.
	ResponseID string
}

// Attempt is one request sent to one endpoint. It keeps the endpoint's
// in-flight counts and pending prefill for the attempt's life and feeds its
// measurements to the endpoint's averages, the same way for the live
// router and the fleet simulator. Start it with Endpoint.Start, call
// FirstToken when the first token arrives, and Finish exactly once.
type Attempt struct {
	ep         *Endpoint
	prompt     int64
	tokens     int64
	ahead      int64
	mark       uint64 // the endpoint's step marks when the prompt was sent (FreshPromptTokens)
	prefilling bool
	finished   bool
	whole      *wholePrefill // StartWhole's; nil for Start's
}

// Start begins an attempt on e for a request with prompt tokens (the
// router's estimate) and expected tokens in all (prompt plus expected
// output). It counts the request in flight, records the prefill queued
// ahead of it (PrefillAhead) and adds its prompt to the pending prefill.
func (e *Endpoint) Start(prompt, expected int64) Attempt {
	a := Attempt{ep: e, prompt: prompt, tokens: expected, prefilling: true}
	e.Begin(expected)
	a.ahead = e.PrefillAhead(prompt)
	e.BeginPrefill(prompt)
	a.mark = e.beginFresh(prompt)
	return a
}

// StartWhole begins an attempt, as Start, for a request whose answer comes
// whole (not streamed). The router sees no first token that would end its
// pending prefill, so the prompt is pending only for as long as its
// prefill is expected to take: the prefill queued ahead and its own at the
// endpoint's measured rate. Before the endpoint has a measured rate (a
// stream's first token, or an earlier whole answer, WholeAnswer) the
// prompt is not pending at all: a guessed second per prompt held whole
// answers, under the admission gate's prefill bound, to one request at a
// time per backend until its first answers came back.
// Pending until the answer, as it was, a live run of a 20,000-line batch
// (whole answers) beside streamed traffic showed the harm: each line's
// prompt stayed pending for seconds, the default policy's TTFT estimate
// steered streamed requests off the backends running batch lines, and
// the rates learnt from those answers were off.
func (e *Endpoint) StartWhole(prompt, expected int64) Attempt {
	a := Attempt{ep: e, prompt: prompt, tokens: expected}
	e.Begin(expected)
	a.ahead = e.PrefillAhead(prompt)
	rate := e.PrefillTokensPerSec()
	if rate <= 0 {
		return a
	}
	e.BeginPrefill(prompt)
	a.mark = e.beginFresh(prompt)
	guess := time.Duration(float64(a.ahead+prompt) / rate * float64(time.Second))
	w := &wholePrefill{mark: a.mark}
	w.timer = time.AfterFunc(guess, func() { w.end(e, prompt) })
	a.whole = w
	return a
}

// wholePrefill ends a whole answer's pending prefill once: at its expected
// time (a timer) or when the attempt finishes, whichever comes first.
type wholePrefill struct {
	done  atomic.Bool
	timer *time.Timer
	mark  uint64
}

func (w *wholePrefill) end(e *Endpoint, prompt int64) {
	if w.done.CompareAndSwap(false, true) {
		e.EndPrefill(prompt)
		e.endFresh(prompt, w.mark)
	}
}

// Endpoint is the attempt's endpoint.
func (a *Attempt) Endpoint() *Endpoint { return a.ep }

// Ahead is the prompt tokens queued on the endpoint before this attempt
// when it started.
func (a *Attempt) Ahead() int64 { return a.ahead }

// FirstToken records the first token, ttft after the start: the prompt is
// no longer pending, and ttft is a time-to-first-token and prefill-rate
// measurement of the endpoint. Later calls do nothing.
func (a *Attempt) FirstToken(ttft time.Duration) {
	if !a.prefilling {
		return
	}
	a.prefilling = false
	a.ep.EndPrefill(a.prompt)
	a.ep.endFresh(a.prompt, a.mark)
	if ttft > 0 && a.prompt > 0 {
		a.ep.sig.streamTimed.Store(true)
	}
	a.ep.ObserveTTFT(ttft)
	a.ep.ObservePrefill(a.ahead, int(a.prompt), ttft)
}

// WholeAnswer learns from a non-streamed answer that arrived whole, d
// after the start, with tokens completion tokens: such an answer has no
// first token to time, but d less its decode time at the endpoint's
// measured decode rate (TokensPerSec, from streams) estimates one, and it
// is folded in as FirstToken folds a measured one. Without a measured
// decode rate, or when the estimate is not positive, nothing is learnt.
// The attempt is one begun with StartWhole.
//
// Once the endpoint has timed a streamed first token, whole answers teach
// it nothing more: their estimate is the difference of two larger times
// and swings far either way when the decode rate of the moment differs from
// the measured one (beside a batch of whole answers, a live run's prefill
// rate for an H100 gpuworker read from 4,700 to 4.6 million tokens/s), and
// streams time the same first tokens exactly.
func (a *Attempt) WholeAnswer(d time.Duration, tokens int64) {
	rate := a.ep.TokensPerSec()
	if rate <= 0 || tokens <= 0 || d <= 0 || a.ep.sig.streamTimed.Load() {
		return
	}
	ttft := d - time.Duration(float64(tokens-1)/rate*float64(time.Second))
	if ttft <= 0 {
		return
	}
	a.ep.ObserveTTFT(ttft)
	a.ep.ObservePrefill(a.ahead, int(a.prompt), ttft)
}

// Finish ends the attempt with o: a relayed answer (also one whose client
// left after it began) feeds its decode rate to the endpoint; the pending
// prefill and in-flight counts are released, last, so that once in-flight
// drops the attempt is fully recorded. Later calls do nothing.
func (a *Attempt) Finish(o Outcome) {
	if a.finished {
		return
	}
	a.finished = true
	if o.Class.BackendFault() {
		a.ep.failures.Add(1)
	}
	if o.Class.Measured() {
		a.ep.ObserveDecode(o.DecodeTokens, o.Decode)
	}
	if a.prefilling {
		a.prefilling = false
		a.ep.EndPrefill(a.prompt)
		a.ep.endFresh(a.prompt, a.mark)
	}
	if a.whole != nil {
		a.whole.timer.Stop()
		a.whole.end(a.ep, a.prompt)
	}
	a.ep.End(a.tokens)
}

// PrefillAhead is the prompt tokens e must prefill before it can start on a
// new request with prompt tokens: the prompts this replica has sent there
// without a first token yet (PendingPromptTokens) and the other replicas'.
// Those are what the shared admission store last reported
// (StoreOthersPending) when that is newer than the last scrape; else, when
// the scrape shows more requests waiting in the engine than this replica
// has pending there, that surplus at the mean size of the prompts this
// replica has sent there (this prompt's size before the first). Running
// requests are not counted: they are past their prefill or in it, and the
// measured prefill rate already reflects the decode work they add to each
// step. An Attempt records it when it starts and passes it to
// ObservePrefill, so that the measured rate and the backlog it divides
// count the same tokens: a replica that counted only its own prompts and a
// scrape up to an interval old read an H100's prefill rate 17% low through
// the Azure trace's bursts beside two other replicas (simulated), and so
// turned requests away from it.
func (e *Endpoint) PrefillAhead(prompt int64) int64 {
	own := e.PendingPromptTokens()
	l := e.Load()
	if o := e.sig.othersPending.Load(); o != nil && (l == nil || o.at.After(l.At)) {
		return own + o.tokens
	}
	if l == nil {
		return own
	}
	others := int64(l.Waiting) - e.PendingRequests()
	if others <= 0 {
		return own
	}
	mean := e.MeanPrompt()
	if mean == 0 {
		mean = float64(prompt)
	}
	return own + int64(float64(others)*mean)
}
