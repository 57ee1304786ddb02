// Package sessionaffinity is the session_affinity policy: it keeps each
// conversation (policies.Request.SessionKey: the configured session header,
// else the OpenAI user field) on one worker, so the worker's prefix cache
// holds the growing history and each turn prefills only its new tokens.
//
// The session key is hashed onto a consistent-hash ring of the pool's
// endpoint addresses, so every router replica sends a session to the same
// worker and a worker leaving moves only its own sessions. Stickiness is
// bounded by load (consistent hashing with bounded loads, Mirrokni, Thorup
// and Zadimoghaddam, SODA 2018): while the session's worker has a queue
// (policies.QueueDepth) of (1+LoadFactor) × (mean queue + 1) or more, the
// session's requests go to the next endpoints along the ring, always the
// same ones, and the least loaded of the first Probes when all are over.
// The default LoadFactor is looser than prefix_affinity's, because a
// session's cache is worth more than a shared prefix's; set it high to
// make stickiness all but absolute. The mean queue is estimated from Sample
// random endpoints, so a pick costs one hash of the key, a binary search of
// the ring and Sample+Probes endpoint reads whatever the pool size.
//
// A request without a session key is routed as p2c would. Use it for
// multi-turn chat and agents when clients send a session header; use
// prefix_affinity when they do not but prompts share prefixes.
package sessionaffinity

import (
	"context"
	"fmt"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "session_affinity"

// Params are the policy's config parameters.
type Params struct {
	// LoadFactor is how far above the mean queue a session's worker may be
	// and still take it: while its queue is under (1+LoadFactor) ×
	// (mean+1). Must be >= 0. Default 1.
	LoadFactor float64 `yaml:"load_factor"`
	// Probes is how many distinct endpoints along the ring a pick considers
	// before taking the least loaded of them, 1..16. Default 4.
	Probes int `yaml:"probes"`
	// Sample is how many random endpoints estimate the mean queue, 1..64.
	// Default 16.
	Sample int `yaml:"sample"`
	// Vnodes is the ring points per endpoint per unit of weight, 1..256.
	// Default 32.
	Vnodes int `yaml:"vnodes"`
	// Seed makes the random draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// Defaults for Params.
const (
	DefaultLoadFactor = 1
	DefaultProbes     = 4
	DefaultSample     = 16
	DefaultVnodes     = 32
)

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer routes by session with a load bound. Safe for concurrent use.
type Balancer struct {
	rnd    rnd
	aff    *policies.Affinity
	factor float64
	probes int
	sample int
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{LoadFactor: DefaultLoadFactor, Probes: DefaultProbes, Sample: DefaultSample, Vnodes: DefaultVnodes}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	switch {
	case !(p.LoadFactor >= 0):
		return nil, fmt.Errorf("params: load_factor: want >= 0, got %v", p.LoadFactor)
	case p.Probes < 1 || p.Probes > 16:
		return nil, fmt.Errorf("params: probes: want 1..16, got %d", p.Probes)
	case p.Sample < 1 || p.Sample > 64:
		return nil, fmt.Errorf("params: sample: want 1..64, got %d", p.Sample)
	case p.Vnodes < 1 || p.Vnodes > 256:
		return nil, fmt.Errorf("params: vnodes: want 1..256, got %d", p.Vnodes)
	}
	return &Balancer{
		rnd:    policies.NewRand(p.Seed),
		aff:    policies.NewAffinity(p.Vnodes),
		factor: p.LoadFactor,
		probes: p.Probes,
		sample: p.Sample,
	}, nil
}

// Pick returns the session's endpoint, or the p2c choice when the request
// has no session key.
func (b *Balancer) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	seed := b.rnd.Uint64()
	if r.SessionKey == "" {
		return policies.TwoChoices(seed, eps)
	}
	if len(eps) == 1 {
		return eps[0], nil
	}
	limit := (1 + b.factor) * (policies.MeanDepth(seed, eps, b.sample) + 1)
	return b.aff.Pick(eps, policies.HashString(r.SessionKey), limit, b.probes), nil
}
