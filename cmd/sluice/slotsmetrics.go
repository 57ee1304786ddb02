package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-llm/sluice/policies/admission"
)

// timedSlots is a shared admission store that records how long each call
// takes, by operation, as the limit store's calls are: a slow Redis shows
// on the dashboard before it makes admission fall back to shares.
type timedSlots struct {
	next                                                     admission.Slots
	acquire, release, prefilled, stepped, wait, unwait, beat prometheus.Observer
}

var _ admission.Slots = (*timedSlots)(nil)

// newTimedSlots wraps next and registers its histogram with reg.
func newTimedSlots(next admission.Slots, reg prometheus.Registerer) (*timedSlots, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_admission_store_duration_seconds",
		Help:    "Time spent in shared admission store calls, by operation (acquire, release, prefilled, stepped, wait, unwait, beat).",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
	}, []string{"op"})
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	return &timedSlots{next: next, acquire: h.WithLabelValues("acquire"), release: h.WithLabelValues("release"), prefilled: h.WithLabelValues("prefilled"),
		stepped: h.WithLabelValues("stepped"), wait: h.WithLabelValues("wait"), unwait: h.WithLabelValues("unwait"), beat: h.WithLabelValues("beat")}, nil
}

func since(o prometheus.Observer, start time.Time) { o.Observe(time.Since(start).Seconds()) }

func (s *timedSlots) Acquire(ctx context.Context, l admission.Lease) (admission.Grant, int64, error) {
	defer since(s.acquire, time.Now())
	return s.next.Acquire(ctx, l)
}

func (s *timedSlots) Prefilled(ctx context.Context, pool, backend string, leases ...string) error {
	defer since(s.prefilled, time.Now())
	return s.next.Prefilled(ctx, pool, backend, leases...)
}

func (s *timedSlots) Stepped(ctx context.Context, pool, backend string, leases ...string) error {
	defer since(s.stepped, time.Now())
	return s.next.Stepped(ctx, pool, backend, leases...)
}

func (s *timedSlots) Release(ctx context.Context, pool, backend, lease string) error {
	defer since(s.release, time.Now())
	return s.next.Release(ctx, pool, backend, lease)
}

func (s *timedSlots) Wait(ctx context.Context, pool string, w admission.Waiting) error {
	defer since(s.wait, time.Now())
	return s.next.Wait(ctx, pool, w)
}

func (s *timedSlots) Beat(ctx context.Context, pool, replica string) error {
	defer since(s.beat, time.Now())
	return s.next.Beat(ctx, pool, replica)
}

func (s *timedSlots) Unwait(ctx context.Context, pool string, w admission.Waiting) error {
	defer since(s.unwait, time.Now())
	return s.next.Unwait(ctx, pool, w)
}
