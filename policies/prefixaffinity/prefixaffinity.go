// Package prefixaffinity is the prefix_affinity policy: it sends a prompt to
// the worker most likely to hold its prefix in KV cache, bounded by load, so
// requests that share a long system prompt or document reuse the cached
// blocks instead of prefilling them again on every worker.
//
// The key is one of the request's chained prefix hashes
// (policies.Request.PrefixHashes): the one at Params.Depth blocks, or the
// deepest there is for a shorter prompt. Equal keys mean an equal prefix up
// to that depth. The key is placed on a consistent-hash ring of the pool's
// endpoint addresses (so every router replica agrees, and an endpoint
// joining or leaving moves only its own keys), and the pick is the first
// endpoint clockwise whose queue (policies.QueueDepth) is under
// (1+LoadFactor) × (mean queue + 1): consistent hashing with bounded loads
// (Mirrokni, Thorup and Zadimoghaddam, SODA 2018). A hot prefix overflows to
// the next endpoints on the ring, always the same ones, so they warm the
// same prefix; when the first Probes endpoints are all over the limit the
// least loaded of them is taken. The mean queue is estimated from Sample
// random endpoints, so a pick costs a binary search of the ring plus
// Sample+Probes endpoint reads whatever the pool size. The ring is built
// once per pool membership and cached (it allocates then, never per pick).
//
// A request without prefix hashes is routed as p2c would. Use it for
// workloads with shared prefixes (chat with long system prompts, RAG over a
// common corpus, agents replaying a history) on engines with prefix caching.
// Depth trades hit rate against spread: a shallow key groups more requests
// (a common system prompt) but concentrates them; a deep key spreads them
// but groups only requests sharing longer prefixes.
package prefixaffinity

import (
	"context"
	"fmt"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "prefix_affinity"

// Params are the policy's config parameters.
type Params struct {
	// Depth is which prefix hash keys a request, in blocks from the start
	// (1 = the first block); shorter prompts use their deepest. Default 8.
	Depth int `yaml:"depth"`
	// LoadFactor is how far above the mean queue an endpoint may be and
	// still take its keys: it takes them while its queue is under
	// (1+LoadFactor) × (mean+1). Must be >= 0. Default 0.25.
	LoadFactor float64 `yaml:"load_factor"`
	// Probes is how many distinct endpoints along the ring a pick considers
	// before taking the least loaded of them, 1..16. Default 4.
	Probes int `yaml:"probes"`
	// Sample is how many random endpoints estimate the mean queue, 1..64.
	// Default 16.
	Sample int `yaml:"sample"`
	// Vnodes is the ring points per endpoint per unit of weight, 1..256:
	// more points even out the share of keys each endpoint owns. Default 32.
	Vnodes int `yaml:"vnodes"`
	// Seed makes the random draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// Defaults for Params.
const (
	DefaultDepth      = 8
	DefaultLoadFactor = 0.25
	DefaultProbes     = 4
	DefaultSample     = 16
	DefaultVnodes     = 32
)

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer routes by prefix with a load bound. Safe for concurrent use.
type Balancer struct {
	rnd    rnd
	aff    *policies.Affinity
	depth  int
	factor float64
	probes int
	sample int
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{Depth: DefaultDepth, LoadFactor: DefaultLoadFactor, Probes: DefaultProbes, Sample: DefaultSample, Vnodes: DefaultVnodes}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	switch {
	case p.Depth < 1:
		return nil, fmt.Errorf("params: depth: want >= 1, got %d", p.Depth)
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
		depth:  p.Depth,
		factor: p.LoadFactor,
		probes: p.Probes,
		sample: p.Sample,
	}, nil
}

// Pick returns the endpoint for the request's prefix, or the p2c choice
// when the request has no prefix hashes.
func (b *Balancer) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	seed := b.rnd.Uint64()
	if len(r.PrefixHashes) == 0 {
		return policies.TwoChoices(seed, eps)
	}
	if len(eps) == 1 {
		return eps[0], nil
	}
	key := r.PrefixHashes[min(b.depth, len(r.PrefixHashes))-1]
	limit := (1 + b.factor) * (policies.MeanDepth(seed, eps, b.sample) + 1)
	return b.aff.Pick(eps, key, limit, b.probes), nil
}
