package backends

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Endpoint is one backend server as this router replica sees it. It must not
// be copied: every field that changes is an atomic read on the hot path.
type Endpoint struct {
	url  *url.URL
	addr string
	// weight is the relative share for weighted policies; a reload may
	// change it (the endpoint, its counters, health and drain stay).
	weight atomic.Int64

	inFlight atomic.Int64
	requests atomic.Uint64
	failures atomic.Uint64
	// downUntil is the Unix-nanosecond time until which the endpoint is held
	// out of routing after a failure to connect; 0 means available.
	downUntil atomic.Int64
	// authorization is the Authorization header value sent to the backend
	// (its own API key), empty for none; a reload may change it.
	authorization atomic.Pointer[string]
	// breaker, when set, trips on backend faults; breakerOpenUntil is the
	// Unix-nanosecond time until which an open breaker keeps the endpoint
	// out of routing (0: not open).
	breaker          atomic.Pointer[Breaker]
	breakerOpenUntil atomic.Int64
	// drained keeps the endpoint out of routing (an operator's drain);
	// its requests in flight finish.
	drained atomic.Bool
	// answered is the Unix-nanosecond time an answer from the endpoint
	// last began (its first byte); 0 before any.
	answered atomic.Int64

	sig   signals
	marks stepMarks
}

// NewEndpoint parses rawURL (an http or https base URL, no query) and returns
// an endpoint with the given relative weight (values below 1 become 1).
func NewEndpoint(rawURL string, weight int) (*Endpoint, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backend url %q: %w", rawURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("backend url %q: want http(s)://host[:port][/path]", rawURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if weight < 1 {
		weight = 1
	}
	e := &Endpoint{url: u, addr: u.String()}
	e.weight.Store(int64(weight))
	return e, nil
}

// SetAPIKey sets the key the router presents to the backend as a bearer
// token; empty means none.
func (e *Endpoint) SetAPIKey(key string) {
	v := ""
	if key != "" {
		v = "Bearer " + key
	}
	e.authorization.Store(&v)
}

// Authorization is the Authorization header value for the backend, empty
// when it has no key.
func (e *Endpoint) Authorization() string {
	if p := e.authorization.Load(); p != nil {
		return *p
	}
	return ""
}

// URL is the endpoint's base URL. Callers must not modify it.
func (e *Endpoint) URL() *url.URL { return e.url }

// Address is the base URL as a string; it identifies the endpoint in logs,
// metrics and across reloads.
func (e *Endpoint) Address() string { return e.addr }

// Weight is the endpoint's relative share for weighted policies.
func (e *Endpoint) Weight() int { return int(e.weight.Load()) }

// SetWeight changes the endpoint's weight (values below 1 become 1).
func (e *Endpoint) SetWeight(w int) { e.weight.Store(int64(max(w, 1))) }

// InFlight is the number of requests this replica has open to the endpoint.
func (e *Endpoint) InFlight() int64 { return e.inFlight.Load() }

// Requests is the number of attempts this replica has sent to the endpoint.
func (e *Endpoint) Requests() uint64 { return e.requests.Load() }

// Failures is the number of attempts that ended in a backend fault
// (ErrorClass.BackendFault): unreachable, timed out, a 5xx, broken off.
func (e *Endpoint) Failures() uint64 { return e.failures.Load() }

// Begin records the start of an attempt expected to cost tokens (prompt
// plus expected output). Every Begin is paired with one End with the same
// tokens, usually deferred.
func (e *Endpoint) Begin(tokens int64) {
	e.inFlight.Add(1)
	e.requests.Add(1)
	e.sig.inFlightTokens.Add(tokens)
}

// End records the end of an attempt begun with Begin(tokens).
func (e *Endpoint) End(tokens int64) {
	e.inFlight.Add(-1)
	e.sig.inFlightTokens.Add(-tokens)
}

// Available reports whether the endpoint may be routed to at now: not held
// out after a failure to connect, and its breaker not open. Once an open
// breaker's time is up the endpoint is available again, and the breaker
// lets its probes through.
func (e *Endpoint) Available(now time.Time) bool {
	n := now.UnixNano()
	d := e.downUntil.Load()
	b := e.breakerOpenUntil.Load()
	return (d == 0 || n >= d) && (b == 0 || n >= b) && !e.drained.Load()
}

// SetDrained takes the endpoint out of routing (its requests in flight
// finish) or puts it back.
func (e *Endpoint) SetDrained(on bool) { e.drained.Store(on) }

// Drained reports whether an operator drained the endpoint.
func (e *Endpoint) Drained() bool { return e.drained.Load() }

// Breaker is the endpoint's circuit breaker, nil when it has none.
func (e *Endpoint) Breaker() *Breaker { return e.breaker.Load() }

// SetBreaker gives the endpoint a circuit breaker with s (replacing any it
// had: counts start afresh).
func (e *Endpoint) SetBreaker(s BreakerSettings) {
	e.breakerOpenUntil.Store(0)
	e.breaker.Store(newBreaker(e, s))
}

// AvailableAt is when a held-out endpoint returns to routing (zero if it is
// available now).
func (e *Endpoint) AvailableAt() time.Time {
	d := max(e.downUntil.Load(), e.breakerOpenUntil.Load())
	if d == 0 {
		return time.Time{}
	}
	return time.Unix(0, d)
}

// MarkFailed holds the endpoint, which could not be reached, out of
// routing until now+cooldown (its attempt counts in Failures as it
// finishes). It reports whether this call took the endpoint out (so a log
// line or metric fires once per transition).
func (e *Endpoint) MarkFailed(now time.Time, cooldown time.Duration) bool {
	return e.HoldOut(now, cooldown)
}

// HoldOut holds the endpoint out of routing until now+cooldown, as a
// health check that found it down does, without counting a failed attempt
// (Failures). It reports whether this call took the endpoint out.
func (e *Endpoint) HoldOut(now time.Time, cooldown time.Duration) bool {
	until := now.Add(cooldown).UnixNano()
	for {
		old := e.downUntil.Load()
		if old >= until {
			return false
		}
		if e.downUntil.CompareAndSwap(old, until) {
			return old == 0 || now.UnixNano() >= old
		}
	}
}

// MarkAnswered records that an answer from the endpoint began at now (its
// first byte arrived): it is alive, whatever its scrapes say.
func (e *Endpoint) MarkAnswered(now time.Time) { e.answered.Store(now.UnixNano()) }

// AnsweredSince reports whether an answer from the endpoint began at t or
// later.
func (e *Endpoint) AnsweredSince(t time.Time) bool { return e.answered.Load() >= t.UnixNano() }

// MarkHealthy returns the endpoint to routing. It reports whether the
// endpoint was held out before.
func (e *Endpoint) MarkHealthy() bool {
	return e.downUntil.Swap(0) != 0
}
