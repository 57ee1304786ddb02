// Package leastrequest is the least_request policy: each pick takes the
// endpoint with the fewest requests in flight from this replica, scanning from
// a rotating start so ties spread evenly. Use it when backends differ in speed
// or requests differ in length; it adapts to a slow backend because that
// backend's requests stay in flight longer.
package leastrequest

import (
	"context"
	"sync/atomic"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "least_request"

// Balancer picks the least-loaded endpoint. Safe for concurrent use.
type Balancer struct {
	start atomic.Uint64
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

// Pick returns the endpoint with the fewest in-flight requests.
func (b *Balancer) Pick(_ context.Context, _ *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	n := len(eps)
	if n == 0 {
		return nil, policies.ErrNoEndpoint
	}
	s := int((b.start.Add(1) - 1) % uint64(n))
	best := eps[s]
	low := best.InFlight()
	for i := 1; i < n && low > 0; i++ {
		e := eps[(s+i)%n]
		if f := e.InFlight(); f < low {
			best, low = e, f
		}
	}
	return best, nil
}
