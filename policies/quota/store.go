package quota

import (
	"context"
	"time"
)

// Limits are one tenant's limits, as its tier (and overrides) set them. A
// zero rate or cap means that dimension is not limited.
type Limits struct {
	// RequestsPerMinute is the sustained request rate; RequestBurst how
	// many requests may arrive at once after an idle spell (at least 1
	// when RequestsPerMinute is set; the Stores read a burst of 0 as one
	// minute's worth, for this and the token bursts).
	RequestsPerMinute int64
	RequestBurst      int64
	// InputTokensPerMinute and InputBurst limit prompt tokens the same way.
	InputTokensPerMinute int64
	InputBurst           int64
	// OutputTokensPerMinute and OutputBurst limit completion tokens.
	OutputTokensPerMinute int64
	OutputBurst           int64
	// Concurrency caps requests in flight (reserved and not yet settled).
	Concurrency int64
	// TokensPerDay caps input plus output tokens per UTC day.
	TokensPerDay int64
}

// Amount is what one request costs in each rate dimension.
type Amount struct {
	Requests int64
	Input    int64
	Output   int64
}

// Tokens is Input + Output.
func (a Amount) Tokens() int64 { return a.Input + a.Output }

// Dimension names a limit; it appears in 429 messages and metric labels.
type Dimension string

// The limited dimensions.
const (
	DimRequests     Dimension = "requests"
	DimInputTokens  Dimension = "input_tokens"
	DimOutputTokens Dimension = "output_tokens"
	DimConcurrency  Dimension = "concurrency"
	DimTokensPerDay Dimension = "tokens_per_day"
)

// Window is the state of one rate limit after a decision, as OpenAI's
// x-ratelimit-* headers report it. Limit is 0 when the dimension is not
// limited.
type Window struct {
	// Limit is the per-minute limit.
	Limit int64
	// Remaining is how much could be taken right now without waiting.
	Remaining int64
	// Reset is how long until the limit is fully replenished.
	Reset time.Duration
}

// Decision is a Store's answer to a Reserve.
type Decision struct {
	// Allowed is true when every dimension allowed the amount; the amount
	// was then charged and the lease recorded. When false nothing was
	// charged.
	Allowed bool
	// Denied names the first dimension that refused, checked in the order
	// tokens_per_day, concurrency, requests, input_tokens, output_tokens;
	// but when the amount exceeds some dimension's burst (or the daily
	// cap), it names the first such dimension, since no wait helps.
	Denied Dimension
	// RetryAfter is, when denied, how long until the same request could be
	// allowed: the longest wait among the refusing dimensions (for
	// tokens_per_day: until the next UTC midnight; for concurrency: a
	// short fixed hint, since it depends on other requests ending). Zero
	// when allowed, and zero when the amount can never be allowed.
	RetryAfter time.Duration
	// Requests is the requests-per-minute window after the decision.
	Requests Window
	// Tokens is the token window after the decision: of the limited input
	// and output windows, the one with the smaller Remaining/Limit share.
	Tokens Window
}

// Lease identifies one reservation's concurrency slot. A lease that is
// never settled (its replica died) stops counting after TTL.
type Lease struct {
	ID  string
	TTL time.Duration
}

// Held is one tenant's leases that a Limiter still holds (reserved and
// not settled), for Renew.
type Held struct {
	Key string
	IDs []string
}

// Settlement replaces a reservation's estimate by the real usage.
type Settlement struct {
	// Reserved is the Amount the Reserve charged.
	Reserved Amount
	// Used is what the request really cost. Used above Reserved charges
	// the difference (the next requests wait for it); below, refunds it.
	Used Amount
	// LeaseID is the Reserve's lease, released here.
	LeaseID string
	// ReservedAt is the now passed to Reserve: it names the UTC day whose
	// daily total is adjusted.
	ReservedAt time.Time
	// IfReserved settles a Reserve whose call failed (a timeout: the
	// store may have run it all the same): it applies only if the store
	// still holds LeaseID from that Reserve, and changes nothing
	// otherwise. A shared store records every allowed Reserve's lease for
	// its TTL for this; an in-process one, whose calls do not fail that
	// way, may settle it as any other.
	IfReserved bool
}

// Store checks and charges tenants' limits. key identifies the tenant (a
// config name; implementations may assume [A-Za-z0-9._-]+). now is the
// caller's clock: implementations never read their own, so tests and
// the simulator control time.
//
// Rate dimensions follow GCRA (the generic cell rate algorithm, a token
// bucket in one timestamp): a dimension with rate R per minute and burst B
// has emission interval T = 1m/R and allows an amount n at now when
// max(TAT, now) + n*T - now <= B*T, then sets TAT to max(TAT, now) + n*T.
// An idle tenant banks at most B (TAT never goes below now in effect). An
// amount larger than the burst is never allowed; RetryAfter is then zero
// and the caller must say the request is too large.
type Store interface {
	// Reserve atomically checks every limited dimension for amt and, when
	// all allow it, charges all of them and records lease (for the
	// concurrency cap and the daily total). Nothing is charged on a
	// denial.
	Reserve(ctx context.Context, key string, lim Limits, amt Amount, lease Lease, now time.Time) (Decision, error)
	// Settle applies s: each rate dimension's TAT moves by
	// (Used - Reserved) x T (a refund never takes it below now), the daily
	// total of s.ReservedAt's day by the token difference, and the lease
	// is released. Settling an unknown or expired lease still adjusts the
	// counters.
	Settle(ctx context.Context, key string, lim Limits, s Settlement, now time.Time) error
	// Renew moves the expiry of every lease of held to now+ttl, for all
	// tenants in one call. The Limiter renews the leases of its requests
	// while they run, so that a short TTL frees a dead replica's slots
	// soon without freeing those of a long request. A Store that may lose
	// leases under running requests (quota/redisstore: Redis restarted
	// empty) re-creates those it lacks, so that the limits hold again at
	// the first renewal; one that cannot (quota/memstore) may renew only
	// those it holds. So the caller passes only leases it holds, and
	// settles again one it settled while Renew ran (the Limiter does).
	Renew(ctx context.Context, held []Held, ttl time.Duration, now time.Time) error
}
