package measure

import (
	"cmp"
	"io"
	"net/http"
	"strings"
	"time"
)

// Result is what a Writer measured. Zero fields mean "not measured".
type Result struct {
	// Status is the response status written, 0 if none was.
	Status int
	// Stream is true for a text/event-stream answer.
	Stream bool
	// TTFT is, for a stream, the time from the attempt's start to the first
	// body byte relayed.
	TTFT time.Duration
	// Tokens and Decode describe the decode phase. For a stream, Tokens is
	// the number of token-carrying events after the first and Decode the
	// time from the first to the last of them (counting events undercounts
	// when a server packs several tokens in one event). For a whole JSON
	// answer, Tokens is usage.completion_tokens and Decode the time from the
	// attempt's start to the last byte: an approximation that includes
	// queueing and prefill, so it reads lower than the engine's real rate.
	Tokens int
	Decode time.Duration

	// PromptTokens and CompletionTokens are the usage the backend reported:
	// for a whole JSON answer its top-level usage object, for a stream the
	// last non-null usage object of any chunk, which is the final usage
	// chunk's (stream_options.include_usage) or, for a stream cut short,
	// the running usage vLLM puts in every chunk with
	// stream_options.continuous_usage_stats. UsageExact is true when such an
	// object was seen; otherwise both are zero.
	PromptTokens     int
	CompletionTokens int
	UsageExact       bool
	// Relayed is, for a stream, how many token-carrying events (counted as
	// for Tokens, including the first) were written to the client whole:
	// the charge for output when a stream ended without reporting usage.
	// It counts events, not tokens: it is exact for servers that send one
	// token per event, as gpuworker does and vLLM does without speculative
	// decoding (vLLM's final event carries the end-of-sequence token, which
	// usage counts too); it undercounts when events carry several tokens,
	// and an OpenAI-style finish chunk with an empty delta adds one.
	Relayed int
	// ClientFailed is true when a write or flush to the client failed: it
	// left, or stopped reading past the server's write deadline.
	ClientFailed bool
	// ResponseID is, for a Responses API answer (Writer.Responses), the
	// response's id: a stream's from the event ending it, a whole
	// answer's from its first member (vLLM, SGLang and OpenAI write "id"
	// first); empty when neither holds one.
	ResponseID string
}

// maxHold bounds the bytes of one event a Writer holds back while stripping;
// a usage chunk is a few hundred bytes, so a longer event is relayed.
const maxHold = 16 << 10

// Writer is an http.ResponseWriter that relays to the one it wraps and
// measures the answer on the way. It must not be copied.
type Writer struct {
	http.ResponseWriter
	now   func() time.Time
	start time.Time

	status int
	stream bool
	json   bool
	strip  bool      // stripping the usage chunk from this answer
	first  time.Time // first body byte relayed
	last   time.Time // last body byte relayed

	sse     sseScanner
	resp    *respScanner // a Responses API stream's
	head    []byte       // a whole Responses API answer's first bytes, for its id
	body    jsonScanner
	relayed int

	failed  bool   // a write or flush to the client failed
	holding bool   // inside an event that may be the usage chunk, not yet relayed
	held    []byte // the bytes of that event from earlier Writes
	dropLF  bool   // a dropped event ended with CR: drop an LF that follows

	// OnFirstByte, when set, is called once, when the first body byte of a
	// successful answer has been relayed.
	OnFirstByte func()
	// AfterFirstFlush, when set, is called once, after the first flush
	// that follows the first body byte: for work that should not delay
	// the client's first token (a store round trip).
	AfterFirstFlush func()
	flushed         bool // AfterFirstFlush was called
	// StripUsageChunk, set before the answer starts, removes the usage
	// chunk from a successful stream: the data event whose "choices" is
	// empty and whose "usage" is an object, which the router asks for on
	// the client's behalf (see package usage). Every other byte reaches the
	// client unchanged. An event is held back from its first byte only until
	// it is known not to be that chunk (a token event: once its "choices" is
	// seen not to be empty) or until it ends, so when every Write carries
	// whole events, as servers write them, each is relayed within the Write
	// that carries it, before the caller flushes. An event split across
	// Writes waits for its next part; one longer than 16 KiB is relayed as
	// it is. Call Finish once the upstream answer has ended, or the start of
	// an event the stream ended inside is lost. A stripped stream's
	// Content-Length header is removed; an encoded (compressed) stream is
	// not stripped.
	StripUsageChunk bool
	// OnResponseID, when set with Responses, is called once with the
	// response's id as soon as it is known, before the client can use the
	// response: a stream's from its response.created event, which comes
	// before any token (else from the event ending it, before that is
	// relayed), a whole answer's from its first member, before the bytes
	// that hold it are relayed. Only for a 2xx answer. It runs on the
	// relaying goroutine: a store round trip there delays the stream's
	// first event after response.created, while the backend prefills.
	OnResponseID func(id string)
	idCalled     bool
	// Responses, set before the answer starts, says the answer is OpenAI's
	// Responses API's. Its stream's first token is its first delta event,
	// not its first byte (the stream opens before the prefill: see
	// respScanner): TTFT, OnFirstByte and AfterFirstFlush wait for it, or
	// for the event ending the response when no delta came. Its usage is
	// input_tokens and output_tokens: the response object's in that event,
	// the top-level usage of a whole answer.
	Responses bool
}

// NewWriter wraps w for an attempt that started at start; now is the clock
// (nil: start plus the monotonic time since, as time.Now would give but
// with one clock read rather than two on every Write).
func NewWriter(w http.ResponseWriter, start time.Time, now func() time.Time) *Writer {
	return &Writer{ResponseWriter: w, now: now, start: start}
}

func (w *Writer) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return w.start.Add(time.Since(w.start))
}

// WriteHeader records the status and the kind of answer, then relays it.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		h := w.Header()
		ct := h.Get("Content-Type")
		w.stream = strings.HasPrefix(ct, "text/event-stream")
		w.json = strings.HasPrefix(ct, "application/json")
		if w.Responses && w.stream {
			w.resp = &respScanner{}
		}
		// An encoded body cannot be read, so it is relayed as it is.
		w.strip = w.StripUsageChunk && w.stream && code/100 == 2 && h.Get("Content-Encoding") == ""
		if w.strip {
			h.Del("Content-Length")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write relays p and scans it. While stripping, it reports all of p written
// once it has relayed or held back every byte.
func (w *Writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.strip {
		return w.writeStripping(p)
	}
	if w.Responses && w.json && w.status/100 == 2 && len(w.head) < maxHead {
		w.head = append(w.head, p[:min(len(p), maxHead-len(w.head))]...) // its id, before it is relayed
	}
	if w.OnResponseID != nil && !w.idCalled && w.Responses && w.status/100 == 2 {
		w.announceID(p)
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.failed = true
	}
	if n > 0 && w.status/100 == 2 {
		now := w.clock()
		if w.resp != nil {
			w.relayResponse(p[:n], now)
			return n, err
		}
		w.relayedAt(now)
		switch {
		case w.stream:
			for q := p[:n]; len(q) > 0; {
				k, sig := w.sse.next(q, now)
				q = q[k:]
				if sig == sigTokenEnd {
					w.relayed++
				}
			}
		case w.json:
			w.body.feed(p[:n])
		}
	}
	return n, err
}

// writeStripping relays p less the usage chunk. p[run:] is what is left to
// relay; hold, when not -1, is where the event being held began in p (-1
// while holding means it began in an earlier Write, and its bytes so far are
// in w.held).
func (w *Writer) writeStripping(p []byte) (int, error) {
	now := w.clock()
	run, hold := 0, -1
	tokens := 0 // token events ended in p[:i], not yet counted as relayed
	for i := 0; i < len(p); {
		if w.dropLF {
			w.dropLF = false
			if p[i] == '\n' {
				run = i + 1
			}
		}
		n, sig := w.sse.next(p[i:], now)
		i += n
		switch sig {
		case sigStart:
			w.holding, hold = true, i
		case sigPlain, sigEnd, sigTokenEnd:
			if sig == sigTokenEnd {
				tokens++
			}
			if !w.holding {
				break
			}
			if hold < 0 { // the event began in an earlier Write: its bytes go first
				if err := w.emit(w.held, now); err != nil {
					return 0, err
				}
				w.held = w.held[:0]
			}
			w.holding, hold = false, -1 // the rest of the event is part of the run
		case sigUsageEnd:
			if !w.holding {
				break // too long to hold, so it was relayed
			}
			if hold > run {
				if err := w.emit(p[run:hold], now); err != nil {
					return run, err
				}
				w.relayed, tokens = w.relayed+tokens, 0
			}
			w.held = w.held[:0]
			w.holding, hold = false, -1
			run, w.dropLF = i, p[i-1] == '\r'
		}
	}
	if w.holding {
		if hold < 0 {
			hold = 0
		}
		if len(w.held)+len(p)-hold > maxHold {
			if err := w.emit(w.held, now); err != nil {
				return 0, err
			}
			w.held = w.held[:0]
			w.holding, hold = false, -1
		}
	}
	end := len(p)
	if w.holding {
		end = hold
	}
	if err := w.emit(p[run:end], now); err != nil {
		return run, err
	}
	w.relayed += tokens
	if w.holding {
		w.held = append(w.held, p[hold:]...)
	}
	return len(p), nil
}

// emit writes b to the client.
func (w *Writer) emit(b []byte, now time.Time) error {
	if len(b) == 0 {
		return nil
	}
	n, err := w.ResponseWriter.Write(b)
	if err != nil {
		w.failed = true
	}
	if n > 0 {
		w.relayedAt(now)
	}
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// relayResponse scans p, a part of a Responses API stream relayed at now:
// the answer begins at its first delta event, or at the event ending it.
func (w *Writer) relayResponse(p []byte, now time.Time) {
	w.relayed += w.resp.feed(p, now)
	if w.OnResponseID != nil && !w.idCalled && w.resp.createdID != "" {
		w.idCalled = true
		w.OnResponseID(w.resp.createdID)
	}
	if w.first.IsZero() && (w.resp.events > 0 || w.resp.ended) {
		w.relayedAt(now)
	}
	w.last = now
}

// announceID calls OnResponseID before p is relayed when the id is known
// with p: a whole answer's first member, or the id of the event ending a
// stream that p completes (a stream whose response.created had none).
func (w *Writer) announceID(p []byte) {
	id := ""
	switch {
	case w.resp != nil:
		id = w.resp.endingID(p)
	case w.json:
		id = leadingID(w.head)
	}
	if id != "" {
		w.idCalled = true
		w.OnResponseID(id)
	}
}

// ResponseEnded reports whether a Responses API stream's ending event
// (response.completed, response.incomplete or response.failed) was
// relayed: such a stream ends there, with no [DONE].
func (w *Writer) ResponseEnded() bool { return w.resp != nil && w.resp.ended }

// relayedAt notes that body bytes reached the client at now.
func (w *Writer) relayedAt(now time.Time) {
	if w.first.IsZero() {
		w.first = now
		if w.OnFirstByte != nil {
			w.OnFirstByte()
		}
	}
	w.last = now
}

// Finish relays, and flushes, what stripping still holds back: the start of
// an event the stream ended inside, which the client should still get. Call
// it once the upstream answer has ended, before Result; it does nothing when
// nothing is held.
func (w *Writer) Finish() error {
	if !w.holding {
		return nil
	}
	w.holding = false
	err := w.emit(w.held, w.clock())
	w.held = w.held[:0]
	if err != nil {
		return err
	}
	return w.FlushError()
}

// FlushError flushes the wrapped writer, as http.ResponseController does.
func (w *Writer) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err != nil {
		w.failed = true
	}
	if !w.flushed && !w.first.IsZero() {
		w.flushed = true
		if w.AfterFirstFlush != nil {
			w.AfterFirstFlush()
		}
	}
	return err
}

// Flush implements http.Flusher.
func (w *Writer) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the wrapped writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Result reports what was measured so far; call it once the answer is done.
func (w *Writer) Result() Result {
	r := Result{Status: w.status, Stream: w.stream, ClientFailed: w.failed}
	if w.status/100 != 2 || w.first.IsZero() {
		return r
	}
	if w.stream {
		r.TTFT = w.first.Sub(w.start)
		if w.sse.events >= 2 {
			r.Tokens = w.sse.events - 1
			r.Decode = w.sse.last.Sub(w.sse.first)
		}
		r.Relayed = w.relayed
		r.PromptTokens, r.CompletionTokens, r.UsageExact = w.sse.doc.prompt, w.sse.doc.completion, w.sse.doc.usage
		if s := w.resp; s != nil {
			r.Tokens, r.Decode = 0, 0
			if s.events >= 2 {
				r.Tokens, r.Decode = s.events-1, s.last.Sub(s.first)
			}
			r.PromptTokens, r.CompletionTokens, r.UsageExact = s.prompt, s.completion, s.usage
			r.ResponseID = cmp.Or(s.id, s.createdID)
		}
		return r
	}
	r.PromptTokens, r.CompletionTokens, r.UsageExact = w.body.prompt, w.body.completion, w.body.usage
	if w.Responses {
		r.ResponseID = leadingID(w.head)
	}
	if w.body.completion > 0 {
		r.Tokens = w.body.completion
		r.Decode = w.last.Sub(w.start)
	}
	return r
}

var (
	_ http.ResponseWriter = (*Writer)(nil)
	_ http.Flusher        = (*Writer)(nil)
)
