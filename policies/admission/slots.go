package admission

import (
	"context"
	"time"
)

// Slots shares admission across router replicas: one budget of requests in
// flight per backend, one order (between classes; between the tenants of a
// class and tier priority, by the weighted tokens each was served; by
// arrival within a tenant) and, when a lease carries a prompt, one bound
// on the prompt tokens waiting for prefill there. A Gate without Slots
// admits on its own counts (one replica).
type Slots interface {
	// Acquire takes the lease l describes, in one round trip: a slot on
	// l.Backend when fewer than l.Budget live leases hold it and (with
	// l.MaxPrompt) the backend's pending prompts are under the bound
	// (else Full), and no request waits (Wait) on any replica that is of a
	// better class and has waited longer than l.Patience, or of the same
	// class and tenant and arrived more than l.Patience before l.Since, or
	// (with l.Cost) of the same class and tier priority and a tenant
	// served fewer weighted tokens there than l.Tenant (else Behind). A
	// waiting request whose replica has stopped beating (Beat) counts for
	// nothing. A granted lease counts l.Cost as served to l.Tenant.
	// Granted, it also reports the prompt tokens pending on l.Backend
	// before this lease, every replica's (0 otherwise), so that the
	// replica can count the others' prompts ahead of its own
	// (backends.Endpoint.StoreOthersPending).
	Acquire(ctx context.Context, l Lease) (g Grant, pending int64, err error)
	// Release frees a lease (and its pending prompt).
	Release(ctx context.Context, pool, backend, lease string) error
	// Prefilled ends the pending prompts of leases on backend (fresh or
	// not), in one round trip: each request has its first token, or its
	// backend's engine has taken its prompt up (Options.PendingUntilStep).
	Prefilled(ctx context.Context, pool, backend string, leases ...string) error
	// Stepped ends the fresh prompts (Lease.Fresh) of leases on backend,
	// in one round trip: its engine has taken them into a step, and they
	// stay pending until Prefilled.
	Stepped(ctx context.Context, pool, backend string, leases ...string) error
	// Wait records that w waits on pool; Unwait removes it.
	Wait(ctx context.Context, pool string, w Waiting) error
	Unwait(ctx context.Context, pool string, w Waiting) error
	// Beat says that replica (its waiting requests' IDs are "replica-...")
	// is alive; the gate beats every second while requests wait there. A
	// store counts a replica's waiting requests only for a few seconds
	// past its last Wait or Beat, so that the waits of a replica that died
	// without taking them back hold no one back.
	Beat(ctx context.Context, pool, replica string) error
}

// Waiting is a request waiting on a replica, as Slots.Wait records it.
type Waiting struct {
	Class        Class
	TierPriority int
	Tenant, ID   string
	// Since is when the request arrived; the record lasts at most TTL.
	Since time.Time
	TTL   time.Duration
}

// Grant is Acquire's answer.
type Grant int8

const (
	// Full: the backend has no room (its budget or its prefill bound).
	Full Grant = iota
	// Granted: the lease is taken.
	Granted
	// Behind: requests that came first wait on other replicas; this one
	// waits its turn, whatever the backend.
	Behind
	// FreshFull: the backend's fresh prompts are at the lease's MaxFresh;
	// it has room for requests not held to that bound.
	FreshFull
)

// Lease is one Slots.Acquire.
type Lease struct {
	Pool, Backend, ID string
	Budget            int
	Class             Class
	// Tenant and Since (when the request arrived; zero: Now) place the
	// request in its class and tenant's order across replicas.
	Tenant string
	Since  time.Time
	// TierPriority and Cost (the request's tokens over its tenant's
	// weight, as the Queue counts them) place the tenant in the fair order
	// between the tenants of its class and tier priority across replicas:
	// the least served waiting tenant goes first, one back from idle
	// starting level with where service had got to, as in the Queue. A
	// lease without a Cost (a retry's, admitted already) is not compared.
	TierPriority int
	Cost         float64
	// MaxWait is each class's longest wait: a waiting request older than
	// its class's MaxWait and Patience is gone (its Unwait was lost), and
	// holds nothing back.
	MaxWait [NumClasses]time.Duration
	// The lease lives until Now+TTL unless released. Patience is how long
	// a better class may have waited elsewhere before this one is refused.
	Now           time.Time
	TTL, Patience time.Duration
	// MaxPrompt, when positive, bounds the backend's pending prefill over
	// all replicas: the lease is refused while the backend has live leases
	// whose pending prompts add up to at least MaxPrompt tokens. Prompt,
	// the request's own, when positive counts there (bound or not, so that
	// a class without a bound of its own still counts toward the others')
	// until Prefilled, Release or PromptUntil (for an answer that comes
	// whole, which has no first token to wait for), whichever is first.
	MaxPrompt, Prompt int64
	PromptUntil       time.Time
	// Fresh counts Prompt as fresh too, not yet taken into an engine
	// step, until Stepped (or whatever ends it as pending). MaxFresh, when
	// positive, refuses the lease (FreshFull) while the backend has live
	// leases whose fresh prompts add up to at least MaxFresh tokens
	// (Options.AboveSharePrefill over all replicas).
	Fresh    bool
	MaxFresh int64
}
