package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Outcome classifies a failed attempt.
type Outcome int

// Outcomes of a failed attempt, from the caller's point of view.
const (
	// Unreachable: the backend could not be connected to; nothing was sent,
	// so another endpoint may be tried and this one held out.
	Unreachable Outcome = iota + 1
	// Timeout: no response headers arrived in time. The backend may still be
	// working on the request, so it is not retried.
	Timeout
	// Failed: the backend failed after the request was sent.
	Failed
	// ClientGone: the client cancelled (perhaps mid-stream); nothing more
	// should be written.
	ClientGone
	// TurnedBack: the backend answered 502, 503 or 429 and the answer was
	// not relayed (see Forward's turnBack).
	TurnedBack
	// LocalLimit: the router ran out of a resource of its own (file
	// descriptors) before the request left; not the backend's fault, and
	// another backend would fare no better.
	LocalLimit
)

// turnedBack is a 502, 503 or 429 answer Forward did not relay, with the
// wait its Retry-After asked for (0: none, or not in seconds).
type turnedBack struct {
	status     int
	retryAfter time.Duration
}

func (e *turnedBack) Error() string { return "backend answered " + strconv.Itoa(e.status) }

// AttemptError is a failed attempt about which nothing has been written to
// the client.
type AttemptError struct {
	Outcome Outcome
	// Status is the backend's status for TurnedBack, else 0, and
	// RetryAfter the wait its Retry-After header asked for.
	Status     int
	RetryAfter time.Duration
	Err        error
}

func (e *AttemptError) Error() string { return fmt.Sprintf("upstream attempt: %v", e.Err) }
func (e *AttemptError) Unwrap() error { return e.Err }

// Options configures a Proxy.
type Options struct {
	// Transport carries upstream requests. Required. Like http.Transport,
	// it must set each Response's Request: the proxy finds the attempt a
	// response belongs to through it.
	Transport http.RoundTripper
	// Logger receives copy errors. Nil means slog.Default().
	Logger *slog.Logger
	// Inject, if set, adds headers to each upstream request from its
	// context (trace propagation).
	Inject func(ctx context.Context, h http.Header)
	// StreamIdleTimeout ends an event stream whose backend sends nothing
	// for this long, noticed within a quarter of it more (an error event
	// tells the client), and one whose client takes nothing written to it
	// for this long (as a client that left). Zero means none.
	StreamIdleTimeout time.Duration
}

// Proxy forwards requests to a given base URL.
type Proxy struct {
	// rp is built once and shared by every attempt: its hooks are methods
	// that find the attempt's state in the request's context, so that an
	// attempt allocates no ReverseProxy and no closures (issue 12).
	rp      httputil.ReverseProxy
	inject  func(context.Context, http.Header)
	idle    time.Duration
	buffers bufferPool
	scratch scratchPool // for ReadBody

	mu      sync.Mutex
	streams map[*streamBody]struct{} // open event streams, for Abort
	aborted error                    // Abort's cause, for streams that start after it
}

// Abort ends every event stream still being relayed with cause: each ends
// with an error event to its client (see ErrorEvent). A stream that starts
// after it ends so at once.
func (p *Proxy) Abort(cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.aborted = cause
	for s := range p.streams {
		s.abort(cause)
	}
}

// New returns a Proxy.
func New(o Options) (*Proxy, error) {
	if o.Transport == nil {
		return nil, errors.New("proxy: nil Transport")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &Proxy{
		idle:    o.StreamIdleTimeout,
		streams: map[*streamBody]struct{}{},
		inject:  o.Inject,
		buffers: bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}},
	}
	p.rp = httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      o.Transport,
		BufferPool:     &p.buffers,
		ErrorLog:       slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
	}
	return p, nil
}

// Attempt is one try of a request at one backend.
type Attempt struct {
	// Target is the backend's base URL; its path prefixes the request's.
	Target *url.URL
	// Authorization, when not empty, is sent as the backend's own
	// Authorization.
	Authorization string
	// Body is the request's payload.
	Body []byte
	// TurnBack: a 502, 503 or 429 answer is not relayed (see Forward).
	TurnBack bool
	// FirstByteTimeout bounds the wait for the backend's response headers;
	// past it the attempt's outcome is Timeout, with ErrFirstByteTimeout
	// as its context's cause. Zero or less means no limit beyond the
	// transport's own.
	FirstByteTimeout time.Duration
	// OnRead, when set, is called after each read of a streamed answer's
	// bytes from the backend (each ends an engine step there), once those
	// bytes are relayed to the client.
	OnRead func()
	// Ended, when set, reports whether an event stream that did not end
	// with [DONE] ended whole all the same: the Responses API's streams
	// end with their response.completed event (measure.Writer's
	// ResponseEnded), and send no [DONE].
	Ended func() bool
}

// attempt is one Forward call's state. It is reached from the shared
// ReverseProxy's hooks through the request's context (attemptOf).
type attempt struct {
	Attempt
	body      bytes.Reader // the request body, sent as io.NopCloser(&body)
	fb        firstByteTimer
	stream    streamBody // the answer's, when streaming
	streaming bool       // the answer is an event stream
	err       error      // the ReverseProxy's, from errorHandler
	w         http.ResponseWriter
	writeErr  error // writing a relayed stream to the client failed
}

// errRelayed is what modifyResponse returns once it has relayed an event
// stream itself, so that the ReverseProxy writes nothing more.
var errRelayed = errors.New("proxy: stream relayed")

type attemptKey struct{}

func attemptOf(ctx context.Context) *attempt { return ctx.Value(attemptKey{}).(*attempt) }

// getBody gives the transport a fresh copy of the body when it resends the
// request on another connection.
func (a *attempt) getBody() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(a.Body)), nil
}

// Forward sends r, with a.Body as its payload, to a.Target and copies the
// response to w, flushing every event of a stream as it arrives (a
// stream's headers go out with its first event) and a whole answer once it
// is copied, so that what the caller does next does not delay it. It returns
// nil when a response was relayed (whatever its status), a
// *StreamCutError when an event stream was relayed in part and then broke,
// stalled past the idle timeout or ended neither with [DONE] nor as
// at.Ended says (the caller ends it with ErrorEvent), or an *AttemptError
// when nothing was written to w.
// A whole (non-stream) answer that fails after it started panics with
// http.ErrAbortHandler, as httputil.ReverseProxy does, so the server
// aborts the client connection: a cut JSON body must not look complete.
//
// The client's credentials (Authorization, Api-Key, cookies) and its
// OpenAI-Organization and OpenAI-Project never reach the backend;
// a.Authorization, when not empty, is sent as the backend's own
// Authorization. The backend's Set-Cookie, Server and rate-limit headers
// never reach the client.
//
// With a.TurnBack, a 502, 503 or 429 answer is not relayed: Forward returns
// an *AttemptError (Outcome TurnedBack, Status set) so that the caller can
// try another backend.
func (p *Proxy) Forward(w http.ResponseWriter, r *http.Request, at Attempt) error {
	a := &attempt{Attempt: at, w: w}
	a.body.Reset(at.Body)
	ctx := a.fb.start(r.Context(), at.FirstByteTimeout)
	defer a.fb.stop()
	defer p.forget(a) // deferred: a copy that fails mid-answer panics (http.ErrAbortHandler)
	r = r.WithContext(context.WithValue(ctx, attemptKey{}, a))
	p.rp.ServeHTTP(w, r)
	var stream *streamBody
	if a.streaming {
		stream = &a.stream
	}
	if errors.Is(a.err, errRelayed) {
		a.err = nil
		if a.writeErr != nil {
			// The client connection failed mid-stream: abort it, as the
			// ReverseProxy does when a copy fails.
			panic(http.ErrAbortHandler)
		}
	}
	if a.err == nil {
		if stream == nil {
			// The whole answer is written: send it now, not when the
			// handler returns after the router's accounting for it.
			_ = http.NewResponseController(w).Flush()
			return nil
		}
		if cut := stream.cut(a.Ended); cut != nil {
			if errors.Is(context.Cause(r.Context()), ErrTotalTimeout) {
				return &StreamCutError{Err: ErrTotalTimeout}
			}
			if err := r.Context().Err(); err != nil && !stream.wasAborted() {
				// The client left before [DONE]; one that left after it
				// got the whole answer. (A stream Abort ended is cut so,
				// whatever ended the request's context after it: the
				// server's drain deadline ends both.)
				return &AttemptError{Outcome: ClientGone, Err: err}
			}
			return cut
		}
		return nil
	}
	var tb *turnedBack
	if errors.As(a.err, &tb) {
		return &AttemptError{Outcome: TurnedBack, Status: tb.status, RetryAfter: tb.retryAfter, Err: a.err}
	}
	return &AttemptError{Outcome: classify(r.Context(), a.err), Err: a.err}
}

// rewrite is the ReverseProxy's Rewrite.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	a := attemptOf(pr.In.Context())
	pr.SetURL(a.Target)
	pr.Out.Host = a.Target.Host
	// io.NopCloser over a *bytes.Reader is a body the transport knows to be
	// in memory, so it writes the request line, headers and body in one
	// write. Any other type (this was one with its own Close) makes it
	// flush the headers first, in case the body is slow: two writes and
	// two segments per request, and the backend reads twice.
	if a.Body == nil && pr.In.ContentLength == 0 {
		// A call with no body (GET or DELETE of a stored response): none
		// is sent, not an empty one of unknown length (chunked).
		pr.Out.Body, pr.Out.ContentLength, pr.Out.GetBody = http.NoBody, 0, nil
	} else {
		pr.Out.Body = io.NopCloser(&a.body)
		pr.Out.ContentLength = int64(len(a.Body)) // the transport writes Content-Length from this, never from the header
		pr.Out.GetBody = a.getBody
	}
	h := pr.Out.Header
	// The client's identity to Sluice, never the backend's business.
	// Accept-Encoding goes too: the router reads answers' usage, and
	// the transport asks for (and undoes) compression on its own.
	// The keys are canonical already, so a map delete does (h.Del
	// canonicalizes each again).
	// Expect too: Sluice has the whole body; a backend asked to confirm
	// it first answers 100 Continue, which the ReverseProxy relays with
	// the headers set so far and then clears them (the final answer lost
	// its X-Request-Id and x-ratelimit-* headers).
	// Origin too: CORS is answered here, not by the backend.
	for _, k := range [...]string{"Authorization", "Api-Key", "Cookie", "Openai-Organization", "Openai-Project", "Accept-Encoding", "Expect", "Origin", "X-Api-Key",
		"Access-Control-Request-Method", "Access-Control-Request-Headers"} {
		delete(h, k)
	}
	if a.Authorization != "" {
		h["Authorization"] = []string{a.Authorization}
	}
	setXForwarded(pr)
	if p.inject != nil {
		p.inject(pr.Out.Context(), pr.Out.Header)
	}
}

// setXForwarded is httputil.ProxyRequest.SetXForwarded (the ReverseProxy
// has dropped the client's own X-Forwarded-* and Forwarded headers by now)
// with the three values in one allocation rather than one each.
func setXForwarded(pr *httputil.ProxyRequest) {
	v := make([]string, 3)
	h := pr.Out.Header
	if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		v[0] = ip
		h["X-Forwarded-For"] = v[0:1:1]
	}
	v[1] = pr.In.Host
	h["X-Forwarded-Host"] = v[1:2:2]
	v[2] = "http"
	if pr.In.TLS != nil {
		v[2] = "https"
	}
	h["X-Forwarded-Proto"] = v[2:3:3]
}

// modifyResponse is the ReverseProxy's ModifyResponse.
func (p *Proxy) modifyResponse(res *http.Response) error {
	a := attemptOf(res.Request.Context())
	a.fb.headers()
	if a.TurnBack && (res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusServiceUnavailable ||
		res.StatusCode == http.StatusTooManyRequests) {
		tb := &turnedBack{status: res.StatusCode}
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
			tb.retryAfter = time.Duration(min(s, 3600)) * time.Second
		}
		return tb
	}
	for k := range res.Header {
		// The router owns the request ID; a backend's own must not duplicate it.
		// CORS is the router's too (cors.allowed_origins): a backend's
		// Access-Control-* (vLLM allows "*" by default) made two
		// Access-Control-Allow-Origin values, which browsers refuse, and
		// allowed every origin with the router's CORS off.
		if k == "X-Request-Id" || k == "Set-Cookie" || k == "Server" || strings.HasPrefix(k, "X-Ratelimit-") ||
			strings.HasPrefix(k, "Access-Control-") {
			delete(res.Header, k) // the transport's keys are canonical
		}
	}
	if res.StatusCode >= 400 {
		normalizeError(res)
		return nil
	}
	if res.StatusCode/100 == 2 && strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		a.stream.start(res.Body, p.idle)
		a.streaming = true
		p.mu.Lock()
		p.streams[&a.stream] = struct{}{}
		if p.aborted != nil {
			a.stream.abort(p.aborted)
		}
		p.mu.Unlock()
		if len(res.Trailer) > 0 {
			res.Body = &a.stream // rare: the ReverseProxy relays trailers
			return nil
		}
		a.writeErr = p.relay(a.w, res, &a.stream, a.OnRead)
		return errRelayed
	}
	return nil
}

// relay writes an event stream's headers and events to w, flushing after
// each read from the backend. It does what the ReverseProxy would, without
// the timer and goroutine the ReverseProxy starts per stream to flush the
// headers at once: here they go out with the first event, in one write.
// It returns the error of writing to the client, if any; the backend's
// errors end the stream quietly (streamBody records them for cut).
func (p *Proxy) relay(w http.ResponseWriter, res *http.Response, body *streamBody, onRead func()) error {
	h := w.Header()
	for k, vv := range res.Header {
		h[k] = append(h[k], vv...)
	}
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-cache") // an event stream is never cached, whatever the backend says
	}
	w.WriteHeader(res.StatusCode)
	rc := http.NewResponseController(w)
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	defer body.Close() // stops the idle timer; the ReverseProxy closes the body again, which is harmless
	// A client that stops reading (its connection open, its window full)
	// must not hold the stream, the backend's work and its slots forever:
	// a write that cannot go for the idle timeout fails, as a client that
	// left. The deadline moves with the first event after each of the
	// stream's idle ticks (every quarter of the timeout), so a write always
	// has at least three quarters of it; an event costs a flag's load, not
	// a clock read (issue 12). It is cleared for the connection's next
	// request.
	first := true
	if p.idle > 0 {
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if p.idle > 0 && (first || body.moved.Load()) {
				first = false
				body.moved.Store(false)
				_ = rc.SetWriteDeadline(time.Now().Add(p.idle))
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			_ = rc.Flush() // as the ReverseProxy: a failed connection fails the next Write
			if onRead != nil {
				onRead() // after the bytes went: it may make a round trip to the shared store
			}
		}
		if err != nil {
			return nil // io.EOF: streamBody turns every error into it
		}
	}
}

// forget drops a's stream, if any, from the streams Abort ends.
func (p *Proxy) forget(a *attempt) {
	if !a.streaming {
		return
	}
	p.mu.Lock()
	delete(p.streams, &a.stream)
	p.mu.Unlock()
}

// errorHandler is the ReverseProxy's ErrorHandler: Forward reports the
// error, nothing is written here.
func (p *Proxy) errorHandler(_ http.ResponseWriter, r *http.Request, err error) {
	attemptOf(r.Context()).err = err
}

func classify(ctx context.Context, err error) Outcome {
	if errors.Is(context.Cause(ctx), ErrFirstByteTimeout) {
		return Timeout
	}
	if ctx.Err() != nil {
		return ClientGone // the client left, or the request's total time is up
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return LocalLimit
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return Unreachable
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return Timeout
	}
	return Failed
}

// copyBuffer is the size of the buffer each relayed answer holds while it
// is copied: 8 KiB holds many stream events and most whole answers, and an
// open stream keeps it, so at 10,000 streams it is 80 MB where 32 KiB was
// 320 MB.
const copyBuffer = 8 << 10

// bufferPool shares copy buffers between attempts.
type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.pool.Get().(*[]byte)) }
func (b *bufferPool) Put(v []byte) { b.pool.Put(&v) }
