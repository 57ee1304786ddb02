package backends

import (
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerSettings configure the circuit breaker each endpoint gets. Zero
// fields mean the documented defaults.
type BreakerSettings struct {
	// ConsecutiveFailures trips the breaker after this many backend faults
	// in a row. Default 5.
	ConsecutiveFailures uint32
	// FailureRatio trips it when, within Window, at least MinRequests
	// attempts ended and this share of them were backend faults. Defaults
	// 0.5, 20 and 10s.
	FailureRatio float64
	MinRequests  uint32
	Window       time.Duration
	// OpenFor is how long a tripped breaker keeps the endpoint out of
	// routing before it lets Probes attempts through to test it (half-
	// open): a success closes it, a fault opens it again. Defaults 5s, 1.
	OpenFor time.Duration
	Probes  uint32
	// OnChange, if set, is called on every state change with the
	// endpoint's address and the states' names ("closed", "open",
	// "half-open"). It runs under the breaker's lock: record, never block.
	OnChange func(addr, from, to string)
}

// errFault and errIgnored are what a finished attempt reports to
// gobreaker: a backend fault counts as a failure, a client's cancel or a
// 4xx as nothing.
var (
	errFault   = errors.New("backend fault")
	errIgnored = errors.New("not the backend's doing")
)

// Breaker is one endpoint's circuit breaker: backend faults (5xx, refused
// connections, timeouts, broken answers) trip it; client cancels and 4xx
// answers do not count. It wraps gobreaker's two-step breaker, so no
// gobreaker type leaks out.
type Breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// newBreaker returns the breaker for e.
func newBreaker(e *Endpoint, s BreakerSettings) *Breaker {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = 5
	}
	if s.FailureRatio <= 0 {
		s.FailureRatio = 0.5
	}
	if s.MinRequests == 0 {
		s.MinRequests = 20
	}
	if s.Window <= 0 {
		s.Window = 10 * time.Second
	}
	if s.OpenFor <= 0 {
		s.OpenFor = 5 * time.Second
	}
	if s.Probes == 0 {
		s.Probes = 1
	}
	b := &Breaker{}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        e.Address(),
		MaxRequests: s.Probes,
		Interval:    s.Window,
		Timeout:     s.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= s.ConsecutiveFailures ||
				(c.Requests >= s.MinRequests && float64(c.TotalFailures) >= s.FailureRatio*float64(c.Requests))
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errIgnored) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				e.breakerOpenUntil.Store(time.Now().Add(s.OpenFor).UnixNano())
			} else {
				e.breakerOpenUntil.Store(0)
			}
			if s.OnChange != nil {
				s.OnChange(name, from.String(), to.String())
			}
		},
	})
	return b
}

// Allow asks whether an attempt may go to the endpoint now; when it may,
// tell the Pass when the answer starts and how the attempt ended. It
// refuses while the breaker is open, and beyond the probes while it is
// half-open.
func (b *Breaker) Allow() (*Pass, bool) {
	if b.cb.State() == gobreaker.StateClosed {
		// Closed: the result is counted when it is known. Taken at the
		// start, gobreaker drops the result of an attempt that outlives
		// its window: twelve 12 s first-byte timeouts under the 10 s
		// window never tripped it.
		return &Pass{b: b}, true
	}
	d, err := b.cb.Allow()
	if err != nil {
		return nil, false
	}
	return &Pass{b: b, probe: d}, true
}

// Pass is one attempt's leave from the breaker.
type Pass struct {
	b     *Breaker
	probe func(error) // a half-open probe's result, until it is given
}

// Answered: the attempt's answer has begun (its success status came). A
// probe has shown the backend serves, and the breaker may close now rather
// than when the answer ends (a 20 s stream held a recovered backend to
// one request in flight that long).
func (p *Pass) Answered() {
	if p.probe != nil {
		p.probe(nil)
		p.probe = nil
	}
}

// Done records how the attempt ended (a probe not yet answered, its
// result).
func (p *Pass) Done(c ErrorClass) {
	if p.probe != nil {
		p.probe(breakerErr(c))
		p.probe = nil
		return
	}
	if c == ClassOK && p.b.cb.State() != gobreaker.StateClosed {
		return // an answer that began while the breaker was not closed counted already
	}
	d, err := p.b.cb.Allow() // counted now, in the breaker's present window
	if err != nil {
		return // open (or probing) meanwhile: nothing to add
	}
	d(breakerErr(c))
}

// breakerErr is what gobreaker is told of an attempt of class c.
func breakerErr(c ErrorClass) error {
	switch {
	case c == ClassOK:
		return nil
	case c.BackendFault():
		return errFault
	default:
		return errIgnored
	}
}

// State is "closed", "open" or "half-open".
func (b *Breaker) State() string { return b.cb.State().String() }
