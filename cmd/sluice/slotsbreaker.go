package main

import (
	"context"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluice-llm/sluice/policies/admission"
)

// breakerSlots fails a shared admission store's calls at once while the
// store fails, letting one call through every breakerProbe to see whether
// it answers again; the gates then admit within their replica's share
// without waiting. A gate binds under its lock, so before this (2026-12-02)
// a Redis that hung (SIGSTOP, a stalled failover) held every dispatch for
// the call's 50 ms timeout, per candidate backend, for the whole outage,
// where the limit store answered at once. A release while the breaker is
// open fails at once too, after forget tells the store to renew the lease
// no more (the gate releases it again once the store answers).
type breakerSlots struct {
	next   admission.Slots
	forget func(lease string)
	cb     *gobreaker.CircuitBreaker[acquired]
}

// acquired is what Acquire answers, as the breaker passes it on.
type acquired struct {
	grant   admission.Grant
	pending int64
}

// breakerProbe is how often a failing store is asked again.
const breakerProbe = 250 * time.Millisecond

var _ admission.Slots = (*breakerSlots)(nil)

// newBreakerSlots puts a breaker in front of next; closed, when not nil,
// is called each time a probe finds the store answering again.
func newBreakerSlots(next admission.Slots, forget func(lease string), closed func()) *breakerSlots {
	return &breakerSlots{next: next, forget: forget, cb: gobreaker.NewCircuitBreaker[acquired](gobreaker.Settings{
		Name:        "admission store",
		MaxRequests: 1,
		Timeout:     breakerProbe,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateClosed && closed != nil {
				closed()
			}
		},
	})}
}

// call runs f through the breaker.
func (s *breakerSlots) call(f func() error) error {
	_, err := s.cb.Execute(func() (acquired, error) { return acquired{}, f() })
	return err
}

func (s *breakerSlots) Acquire(ctx context.Context, l admission.Lease) (admission.Grant, int64, error) {
	a, err := s.cb.Execute(func() (acquired, error) {
		g, pending, err := s.next.Acquire(ctx, l)
		return acquired{g, pending}, err
	})
	return a.grant, a.pending, err
}

func (s *breakerSlots) Release(ctx context.Context, pool, backend, lease string) error {
	if s.cb.State() == gobreaker.StateOpen {
		s.forget(lease)
		return gobreaker.ErrOpenState
	}
	return s.next.Release(ctx, pool, backend, lease)
}

func (s *breakerSlots) Prefilled(ctx context.Context, pool, backend string, leases ...string) error {
	return s.call(func() error { return s.next.Prefilled(ctx, pool, backend, leases...) })
}

func (s *breakerSlots) Stepped(ctx context.Context, pool, backend string, leases ...string) error {
	return s.call(func() error { return s.next.Stepped(ctx, pool, backend, leases...) })
}

func (s *breakerSlots) Wait(ctx context.Context, pool string, w admission.Waiting) error {
	return s.call(func() error { return s.next.Wait(ctx, pool, w) })
}

func (s *breakerSlots) Unwait(ctx context.Context, pool string, w admission.Waiting) error {
	return s.call(func() error { return s.next.Unwait(ctx, pool, w) })
}

func (s *breakerSlots) Beat(ctx context.Context, pool, replica string) error {
	return s.call(func() error { return s.next.Beat(ctx, pool, replica) })
}
