package measure

import (
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
	// body byte.
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
}

// Writer is an http.ResponseWriter that relays to the one it wraps and
// measures the answer on the way. It must not be copied.
type Writer struct {
	http.ResponseWriter
	now   func() time.Time
	start time.Time

	status int
	stream bool
	json   bool
	first  time.Time // first body byte
	last   time.Time // last body byte

	sse   sseScanner
	usage usageScanner

	// OnFirstByte, when set, is called once, when the first body byte of a
	// successful answer has been relayed.
	OnFirstByte func()
}

// NewWriter wraps w for an attempt that started at start; now is the clock
// (nil means time.Now).
func NewWriter(w http.ResponseWriter, start time.Time, now func() time.Time) *Writer {
	if now == nil {
		now = time.Now
	}
	return &Writer{ResponseWriter: w, now: now, start: start}
}

// WriteHeader records the status and the kind of answer, then relays it.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		ct := w.Header().Get("Content-Type")
		w.stream = strings.HasPrefix(ct, "text/event-stream")
		w.json = strings.HasPrefix(ct, "application/json")
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write relays p and scans it.
func (w *Writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if n > 0 && w.status/100 == 2 {
		now := w.now()
		if w.first.IsZero() {
			w.first = now
			if w.OnFirstByte != nil {
				w.OnFirstByte()
			}
		}
		w.last = now
		switch {
		case w.stream:
			w.sse.scan(p[:n], now)
		case w.json:
			w.usage.scan(p[:n])
		}
	}
	return n, err
}

// FlushError flushes the wrapped writer, as http.ResponseController does.
func (w *Writer) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (w *Writer) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the wrapped writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Result reports what was measured so far; call it once the answer is done.
func (w *Writer) Result() Result {
	r := Result{Status: w.status, Stream: w.stream}
	if w.status/100 != 2 || w.first.IsZero() {
		return r
	}
	if w.stream {
		r.TTFT = w.first.Sub(w.start)
		if w.sse.events >= 2 {
			r.Tokens = w.sse.events - 1
			r.Decode = w.sse.last.Sub(w.sse.first)
		}
		return r
	}
	if w.usage.tokens > 0 {
		r.Tokens = w.usage.tokens
		r.Decode = w.last.Sub(w.start)
	}
	return r
}

var (
	_ http.ResponseWriter = (*Writer)(nil)
	_ http.Flusher        = (*Writer)(nil)
)
