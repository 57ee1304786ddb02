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
// call done with the attempt's class when it ends. It refuses while the
// breaker is open, and beyond the probes while it is half-open.
func (b *Breaker) Allow() (done func(ErrorClass), ok bool) {
	d, err := b.cb.Allow()
	if err != nil {
		return nil, false
	}
	return func(c ErrorClass) {
		switch {
		case c == ClassOK:
			d(nil)
		case c.BackendFault():
			d(errFault)
		default:
			d(errIgnored)
		}
	}, true
}

// State is "closed", "open" or "half-open".
func (b *Breaker) State() string { return b.cb.State().String() }
