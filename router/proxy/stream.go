package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// StreamCutError is an event stream that was relayed in part and then
// broke: the backend failed mid-stream, stalled longer than the idle
// timeout, or ended without "data: [DONE]". Forward has relayed every byte
// the backend sent; the caller ends the client's stream with an error event.
type StreamCutError struct {
	// Stalled is true when the backend sent nothing for the idle timeout.
	Stalled bool
	Err     error
}

func (e *StreamCutError) Error() string { return "stream cut: " + e.Err.Error() }
func (e *StreamCutError) Unwrap() error { return e.Err }

// errNoDone is a stream that ended cleanly without its [DONE] event.
var errNoDone = errors.New("the stream ended without [DONE]")

// errStalled is the idle timeout's error.
var errStalled = errors.New("no data from the backend within the idle timeout")

// ErrShuttingDown ends the streams still open when the router's drain time
// is up.
var ErrShuttingDown = errors.New("the router is shutting down")

// streamBody wraps an event stream's upstream body: it ends the copy with
// io.EOF instead of an error (so the response stays open for an error
// event), closes the body when no data arrives for idle, and remembers
// whether the stream ended with [DONE].
type streamBody struct {
	rc    io.ReadCloser
	idle  time.Duration
	timer *time.Timer  // ticks every idle/idleTicks while the stream is open
	read  atomic.Bool  // data arrived since the last tick
	ended atomic.Bool  // Close or cut stopped the timer
	quiet atomic.Int32 // ticks in a row without data
	moved atomic.Bool  // a tick passed since relay last moved the client's write deadline

	mu      sync.Mutex
	err     error
	stalled bool
	aborted error    // why the router ended the stream itself
	tail    [16]byte // the stream's last bytes
	n       int      // bytes in tail
}

// start wraps rc; s must be new (it lives in its attempt, so that a stream
// costs no allocation of its own).
func (s *streamBody) start(rc io.ReadCloser, idle time.Duration) {
	s.rc, s.idle = rc, idle
	if idle > 0 {
		s.timer = time.AfterFunc(idle/idleTicks, s.tick)
	}
}

// idleTicks is how many times per idle timeout the timer looks for data.
// A read only sets a flag, rather than resetting a timer for every chunk
// of the stream (a lock and a clock read each); a stream is cut after
// idleTicks ticks in a row without data, that is, after idle to idle ×
// (1 + 1/idleTicks) of silence, never sooner.
const idleTicks = 4

func (s *streamBody) tick() {
	if s.ended.Load() {
		return
	}
	s.moved.Store(true)
	if s.read.Swap(false) {
		s.quiet.Store(0)
	} else if s.quiet.Add(1) >= idleTicks {
		s.stall()
		return
	}
	s.timer.Reset(s.idle / idleTicks) // racing the stream's end, the next tick sees ended
}

func (s *streamBody) stall() {
	s.mu.Lock()
	s.stalled = true
	s.mu.Unlock()
	_ = s.rc.Close() // unblocks the pending Read with an error
}

// wasAborted reports whether abort ended the stream.
func (s *streamBody) wasAborted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted != nil
}

// abort ends the stream with cause (the router is shutting down).
func (s *streamBody) abort(cause error) {
	s.mu.Lock()
	s.aborted = cause
	s.mu.Unlock()
	_ = s.rc.Close()
}

func (s *streamBody) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	if n > 0 {
		if s.timer != nil && !s.read.Load() {
			s.read.Store(true)
		}
		s.keepTail(p[:n])
	}
	if err != nil && err != io.EOF {
		s.mu.Lock()
		switch {
		case s.aborted != nil:
			err = s.aborted
		case s.stalled:
			err = errStalled
		}
		s.err = err
		s.mu.Unlock()
		return n, io.EOF
	}
	return n, err
}

func (s *streamBody) keepTail(b []byte) {
	if len(b) >= len(s.tail) {
		s.n = copy(s.tail[:], b[len(b)-len(s.tail):])
		return
	}
	keep := min(s.n, len(s.tail)-len(b))
	copy(s.tail[:], s.tail[s.n-keep:s.n])
	s.n = keep + copy(s.tail[keep:], b)
}

func (s *streamBody) Close() error {
	if s.timer != nil {
		s.ended.Store(true)
		s.timer.Stop()
	}
	return s.rc.Close()
}

// cut reports how the stream ended: nil when it ended with [DONE], or
// ended says it ended whole.
func (s *streamBody) cut(ended func() bool) *StreamCutError {
	if s.timer != nil {
		s.ended.Store(true)
		s.timer.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.HasSuffix(bytes.TrimRight(s.tail[:s.n], "\r\n"), []byte("[DONE]")) || ended != nil && ended() {
		// The answer is whole. An error after [DONE] cut nothing: the
		// client leaving as soon as it has read it (the OpenAI SDKs close
		// the stream there), which cancels the read of the backend's end
		// of the body, or the backend closing the connection.
		return nil
	}
	if s.err != nil {
		return &StreamCutError{Stalled: s.stalled, Err: s.err}
	}
	return &StreamCutError{Err: errNoDone}
}

// ErrorEvent is the server-sent event that ends a cut stream, in the shape
// OpenAI's SDKs read as a stream error.
func ErrorEvent(e *StreamCutError) []byte {
	msg, code := "The backend failed in the middle of the answer.", "upstream_error"
	if e.Stalled {
		msg, code = "The backend stopped sending in the middle of the answer.", "upstream_timeout"
	} else if errors.Is(e.Err, errNoDone) {
		msg = "The backend ended the answer early."
	} else if errors.Is(e.Err, ErrTotalTimeout) {
		msg, code = "The answer took longer than the request's time limit.", "request_timeout"
	} else if errors.Is(e.Err, ErrShuttingDown) {
		msg, code = "The server is shutting down; retry the request.", "server_shutting_down"
	}
	return fmt.Appendf(nil, "data: {\"error\":{\"message\":%q,\"type\":\"server_error\",\"param\":null,\"code\":%q}}\n\n", msg, code)
}
