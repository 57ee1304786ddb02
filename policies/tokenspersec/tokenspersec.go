// Package tokenspersec is the tokens_per_sec policy: least expected
// completion time. For each endpoint of a bounded sample it estimates how
// long this request would take there: the tokens queued ahead of it plus its
// own (policies.Request.ExpectedTokens), over the endpoint's measured decode
// throughput (backends.Endpoint.TokensPerSec). A fast GPU therefore takes
// more work than a slow one, in proportion to its speed, instead of the
// equal share a queue-length policy gives each.
//
// Queued tokens are this replica's in-flight tokens plus, when a fresh
// scrape shows more requests than this replica has sent (other replicas'
// work), that surplus at this replica's average tokens per request on the
// endpoint (or this request's size when it has none in flight).
//
// Missing signals degrade, never herd: an endpoint with no throughput
// measured yet is assumed as fast as Params.FallbackTokensPerSec, or by
// default as the mean of the measured endpoints in the same sample; when
// none in the sample is measured every endpoint gets the same speed and the
// policy ranks by in-flight tokens. The estimate is relative: the
// throughput is one stream's decode rate, not the engine's batch rate, so it
// orders endpoints but is not a time in seconds.
//
// To avoid herding, a pick chooses at random among the sampled endpoints
// whose estimate is within Params.Tolerance of the best. Pools up to
// Params.Sample endpoints are compared in full; larger pools are sampled
// with uniform draws, which bounds a pick's cost and spreads replicas that
// share the same view, at the price of missing the global best now and then.
//
// Use it for fleets that mix GPU types or models of different speeds, and
// for workloads whose request sizes vary widely.
package tokenspersec

import (
	"context"
	"fmt"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "tokens_per_sec"

// Params are the policy's config parameters.
type Params struct {
	// Sample is how many endpoints a pick compares, 1..64; a pool no larger
	// is compared in full. Default 16.
	Sample int `yaml:"sample"`
	// Tolerance is how far above the best estimate, as a fraction of it, an
	// endpoint may be and still be chosen, 0..1. Default 0.1.
	Tolerance float64 `yaml:"tolerance"`
	// FallbackTokensPerSec is the throughput assumed for an endpoint not
	// measured yet. Default 0: the mean of the measured endpoints sampled.
	FallbackTokensPerSec float64 `yaml:"fallback_tokens_per_sec"`
	// Seed makes the random draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// Defaults for Params.
const (
	DefaultSample    = 16
	DefaultTolerance = 0.1
	maxSample        = 64
)

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer picks the endpoint expected to finish the request first. Safe
// for concurrent use.
type Balancer struct {
	rnd      rnd
	sample   int
	tol      float64
	fallback float64
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{Sample: DefaultSample, Tolerance: DefaultTolerance}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	switch {
	case p.Sample < 1 || p.Sample > maxSample:
		return nil, fmt.Errorf("params: sample: want 1..%d, got %d", maxSample, p.Sample)
	case !(p.Tolerance >= 0 && p.Tolerance <= 1):
		return nil, fmt.Errorf("params: tolerance: want 0..1, got %v", p.Tolerance)
	case !(p.FallbackTokensPerSec >= 0):
		return nil, fmt.Errorf("params: fallback_tokens_per_sec: want >= 0, got %v", p.FallbackTokensPerSec)
	}
	return &Balancer{rnd: policies.NewRand(p.Seed), sample: p.Sample, tol: p.Tolerance, fallback: p.FallbackTokensPerSec}, nil
}

// Pick returns an endpoint among those of the sample expected to finish the
// request soonest.
func (b *Balancer) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	if len(eps) == 1 {
		return eps[0], nil
	}
	seed := b.rnd.Uint64()
	s := policies.NewSample(seed, len(eps), b.sample)
	own := float64(r.ExpectedTokens())

	var (
		idx        [maxSample]int32
		queued     [maxSample]float64
		speed      [maxSample]float64
		n          int
		known, sum float64
	)
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		e := eps[i]
		idx[n], queued[n] = int32(i), queuedTokens(e, own)
		if v := e.TokensPerSec(); v > 0 {
			speed[n] = v
			known++
			sum += v
		}
		n++
	}
	fallback := b.fallback
	if fallback == 0 {
		fallback = 1 // nothing measured: rank by queued tokens alone
		if known > 0 {
			fallback = sum / known
		}
	}
	best := 0.0
	for k := range n {
		if speed[k] == 0 {
			speed[k] = fallback
		}
		c := (queued[k] + own) / speed[k]
		queued[k] = c // reuse as the estimate
		if k == 0 || c < best {
			best = c
		}
	}
	// Choose uniformly among the estimates within tolerance of the best
	// (reservoir sampling, one pass).
	st := policies.NewStream(^seed)
	limit := best * (1 + b.tol)
	chosen, seen := int32(0), 0
	for k := range n {
		if queued[k] <= limit {
			seen++
			if seen == 1 || st.IntN(seen) == 0 {
				chosen = idx[k]
			}
		}
	}
	return eps[chosen], nil
}

// queuedTokens is the work ahead of a new request on e, in tokens.
func queuedTokens(e *backends.Endpoint, own float64) float64 {
	t := float64(e.InFlightTokens())
	in := e.InFlight()
	if others := policies.QueueDepth(e) - in; others > 0 {
		per := own
		if in > 0 {
			per = float64(e.InFlightTokens()) / float64(in)
		}
		t += float64(others) * per
	}
	return t
}
