// Package random is the random policy: each pick takes an endpoint uniformly
// at random, blind to load. Use it as a baseline, or for many router
// replicas in front of identical workers where no replica should steer by
// stale signals; it spreads evenly in expectation but, unlike p2c, does
// nothing about an endpoint that falls behind. Costs one random draw.
package random

import (
	"context"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "random"

// Params are the policy's config parameters.
type Params struct {
	// Seed makes the draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer picks uniformly at random. Safe for concurrent use.
type Balancer struct {
	rnd rnd
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	var p Params
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	return &Balancer{rnd: policies.NewRand(p.Seed)}, nil
}

// Pick returns a uniformly random endpoint.
func (b *Balancer) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	s := policies.NewStream(b.rnd.Uint64())
	return eps[s.IntN(len(eps))], nil
}
