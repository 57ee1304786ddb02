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
	// BoundedParams bound each prefix's owner by load; load_factor
	// defaults to 0.25.
	policies.BoundedParams `yaml:",inline"`
}

// Defaults for Params.
const (
	DefaultDepth      = 8
	DefaultLoadFactor = 0.25
)

// Balancer routes by prefix with a load bound. Safe for concurrent use.
type Balancer struct {
	depth   int
	bounded *policies.Bounded
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{Depth: DefaultDepth, BoundedParams: policies.DefaultBoundedParams(DefaultLoadFactor)}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.Depth < 1 {
		return nil, fmt.Errorf("params: depth: want >= 1, got %d", p.Depth)
	}
	b, err := policies.NewBounded(p.BoundedParams)
	if err != nil {
		return nil, err
	}
	return &Balancer{depth: p.Depth, bounded: b}, nil
}

// Pick returns the endpoint for the request's prefix, or the p2c choice
// when the request has no prefix hashes.
func (b *Balancer) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if len(r.PrefixHashes) == 0 {
		return b.bounded.Pick(eps, 0, false)
	}
	return b.bounded.Pick(eps, r.PrefixHashes[min(b.depth, len(r.PrefixHashes))-1], true)
}
