// Package queuedepth is the queue_depth policy: each pick takes the endpoint
// with the shortest engine queue among a bounded sample of the pool. The
// queue is policies.QueueDepth: the scraped waiting plus running requests,
// plus the requests this replica has sent since that scrape, so a burst of
// picks between two scrapes spreads instead of all landing on the endpoint
// that looked idlest; an endpoint with no fresh scrape counts its in-flight
// requests from this replica, never zero.
//
// Use it when the scraped queue is the best signal of load, as when several
// router replicas or other clients share the workers (this replica's own
// in-flight counts see only its share). Pools up to Params.Sample endpoints
// are scanned in full, from a random start so ties spread; larger pools are
// sampled (Sample uniform draws), which bounds the cost of a pick and keeps
// replicas that share the same scrape from all choosing the same endpoint,
// at the price of sometimes missing the global minimum: the chosen queue is
// shorter than all but about 1/(Sample+1) of the pool on average. For
// heterogeneous GPUs, where equal queues drain at different speeds, prefer
// tokens_per_sec.
package queuedepth

import (
	"context"
	"fmt"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "queue_depth"

// Params are the policy's config parameters.
type Params struct {
	// Sample is how many endpoints a pick compares, 1..256; a pool no larger
	// is scanned in full. Default 16.
	Sample int `yaml:"sample"`
	// Seed makes the random draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
}

// DefaultSample is Params.Sample's default.
const DefaultSample = 16

// maxSample bounds Params.Sample, so a pick stays well under a microsecond.
const maxSample = 256

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer picks the shortest queue of a sample. Safe for concurrent use.
type Balancer struct {
	rnd    rnd
	sample int
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{Sample: DefaultSample}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.Sample < 1 || p.Sample > maxSample {
		return nil, fmt.Errorf("params: sample: want 1..%d, got %d", maxSample, p.Sample)
	}
	return &Balancer{rnd: policies.NewRand(p.Seed), sample: p.Sample}, nil
}

// Pick returns the sampled endpoint with the shortest queue.
func (b *Balancer) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	s := policies.NewSample(b.rnd.Uint64(), len(eps), b.sample)
	var best *backends.Endpoint
	low := int64(0)
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		if d := policies.QueueDepth(eps[i]); best == nil || d < low {
			best, low = eps[i], d
		}
	}
	return best, nil
}
