// Package roundrobin is the round_robin policy: each pick takes the next
// endpoint in turn, blind to load. Use it for identical backends under even
// load, or as the baseline other policies are measured against.
package roundrobin

import (
	"context"
	"sync/atomic"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "round_robin"

// Balancer picks endpoints in rotation. Safe for concurrent use.
type Balancer struct {
	next atomic.Uint64
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy; it takes no parameters.
func New(params map[string]any) (policies.Picker, error) {
	var p struct{}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	return &Balancer{}, nil
}

// Pick returns the next endpoint in rotation.
func (b *Balancer) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(eps) == 0 {
		return nil, policies.ErrNoEndpoint
	}
	n := b.next.Add(1) - 1
	return eps[n%uint64(len(eps))], nil
}
