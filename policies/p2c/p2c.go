// Package p2c is the p2c policy, the power of two random choices
// (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing",
// 2001): each pick draws two distinct endpoints at random and takes the one
// with the shorter queue (policies.QueueDepth: scraped waiting plus running
// plus this replica's requests since the scrape, or the in-flight count
// without a fresh scrape). Ties go to the first draw, itself random.
//
// Use it as the default for a fleet of similar workers behind several router
// replicas. Comparing two random endpoints keeps the maximum queue within
// log log n of the mean while the randomness stops replicas that share the
// same scraped view from herding onto the one endpoint that looks idlest, a
// risk a full scan for the minimum runs. It ignores weights and speeds: use
// tokens_per_sec for mixed GPUs. A pick costs two endpoint reads whatever the
// pool size.
package p2c

import (
	"context"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "p2c"

// Params are the policy's config parameters.
type Params struct {
	// Seed makes the random draws reproducible (the fleet simulator sets
	// it). Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer picks the less loaded of two random endpoints. Safe for
// concurrent use.
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

// Pick returns the less loaded of two distinct random endpoints.
func (b *Balancer) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	return policies.TwoChoices(b.rnd.Uint64(), eps)
}
