package policies

import (
	"fmt"

	"github.com/sluice-llm/sluice/backends"
)

// BoundedParams are the parameters the affinity policies share: how a key's
// owner on the consistent-hash ring is bounded by load. Embed them in a
// policy's Params with `yaml:",inline"`.
type BoundedParams struct {
	// LoadFactor is how far above the mean queue an endpoint may be and
	// still take its keys: it takes them while its queue is under
	// (1+LoadFactor) × (mean+1). Must be >= 0.
	LoadFactor float64 `yaml:"load_factor"`
	// Probes is how many distinct endpoints along the ring a pick considers
	// before spreading the request by two random choices over the whole
	// pool, 1..16. Default 4.
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

// DefaultBoundedParams returns the shared defaults with the given load
// factor (the one default the affinity policies disagree on).
func DefaultBoundedParams(loadFactor float64) BoundedParams {
	return BoundedParams{LoadFactor: loadFactor, Probes: 4, Sample: 16, Vnodes: 32}
}

// Validate names the first out-of-range field.
func (p BoundedParams) Validate() error {
	switch {
	case !(p.LoadFactor >= 0):
		return fmt.Errorf("params: load_factor: want >= 0, got %v", p.LoadFactor)
	case p.Probes < 1 || p.Probes > 16:
		return fmt.Errorf("params: probes: want 1..16, got %d", p.Probes)
	case p.Sample < 1 || p.Sample > 64:
		return fmt.Errorf("params: sample: want 1..64, got %d", p.Sample)
	case p.Vnodes < 1 || p.Vnodes > 256:
		return fmt.Errorf("params: vnodes: want 1..256, got %d", p.Vnodes)
	}
	return nil
}

// Bounded routes keys to their owners on a consistent-hash ring of the pool,
// bounded by load (consistent hashing with bounded loads), and requests
// without a key, or whose first Probes owners are all over the bound, by two
// random choices over the whole pool. Safe for concurrent use.
type Bounded struct {
	rnd    interface{ Uint64() uint64 }
	aff    *Affinity
	factor float64
	probes int
	sample int
}

// NewBounded validates p and returns the router it describes.
func NewBounded(p BoundedParams) (*Bounded, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Bounded{rnd: NewRand(p.Seed), aff: NewAffinity(p.Vnodes), factor: p.LoadFactor,
		probes: p.Probes, sample: p.Sample}, nil
}

// Pick returns key's endpoint within the load bound when ok, else the
// p2c choice over eps. It draws one random number and allocates nothing.
func (b *Bounded) Pick(eps []*backends.Endpoint, key uint64, ok bool) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, ErrNoEndpoint
	}
	seed := b.rnd.Uint64()
	if !ok {
		return TwoChoices(seed, eps)
	}
	if len(eps) == 1 {
		return eps[0], nil
	}
	limit := (1 + b.factor) * (MeanDepth(seed, eps, b.sample) + 1)
	if e := b.aff.Pick(eps, key, limit, b.probes); e != nil {
		return e, nil
	}
	return TwoChoices(^seed, eps)
}
