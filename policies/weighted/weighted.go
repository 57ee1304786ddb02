// Package weighted is the weighted policy: each pick takes an endpoint at
// random with probability proportional to its configured weight
// (backends.Endpoint.Weight), blind to load. Use it when the operator knows
// the workers' relative capacity (an H100 next to L4s, weight 4 and 1) and
// wants a fixed split, or to send a canary a small share; to follow measured
// speed instead, use tokens_per_sec.
//
// A pick costs one random draw and a binary search of the pool's cumulative
// weights. That table is built once per pool membership and cached (see
// policies.Memo); building it allocates, picking does not.
package weighted

import (
	"context"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "weighted"

// Params are the policy's config parameters.
type Params struct {
	// Seed makes the draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer picks in proportion to weight. Safe for concurrent use.
type Balancer struct {
	rnd  rnd
	memo policies.Memo[[]uint64]
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

// cumulative returns each endpoint's running total of weight.
func cumulative(eps []*backends.Endpoint) []uint64 {
	c := make([]uint64, len(eps))
	var sum uint64
	for i, e := range eps {
		sum += uint64(e.Weight())
		c[i] = sum
	}
	return c
}

// Pick returns an endpoint drawn in proportion to weight.
func (b *Balancer) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	if len(eps) == 1 {
		return eps[0], nil
	}
	s := policies.NewStream(b.rnd.Uint64())
	m := b.memo.Load(eps, cumulative)
	x := uint64(s.IntN(int(m.Val[len(m.Val)-1])))
	i := search(m.Val, x)
	if !m.Fresh(eps, i) {
		m = b.memo.Rebuild(eps, cumulative)
		i = search(m.Val, uint64(s.IntN(int(m.Val[len(m.Val)-1]))))
	}
	return eps[i], nil
}

// search returns the first index whose running total exceeds x.
func search(c []uint64, x uint64) int {
	lo, hi := 0, len(c)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c[m] <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
