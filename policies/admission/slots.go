package admission

import (
	"context"
	"time"
)

// Slots shares admission across router replicas: one budget of requests in
// flight per backend, and one order between classes. A Gate without Slots
// admits on its own counts (one replica).
type Slots interface {
	// Acquire takes a slot on backend (of pool) for a request of class
	// when fewer than budget live leases hold it and no request of a
	// better class has waited (Wait) longer than patience on any replica;
	// it records lease until now+ttl. One round trip.
	Acquire(ctx context.Context, pool, backend string, budget int, class Class, lease string, ttl, patience time.Duration, now time.Time) (bool, error)
	// Release frees a lease.
	Release(ctx context.Context, pool, backend, lease string) error
	// Wait records that request id of class waits on pool since now (kept
	// at most ttl); Unwait removes it.
	Wait(ctx context.Context, pool string, class Class, id string, ttl time.Duration, now time.Time) error
	Unwait(ctx context.Context, pool string, class Class, id string) error
}
