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

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Name is the policy's config name.
const Name = "session_affinity"

// Params are the policy's config parameters: the bounded-load ring's, with
// load_factor defaulting to 1 so sessions stick harder than prefixes.
type Params struct {
	policies.BoundedParams `yaml:",inline"`
}

// DefaultLoadFactor is load_factor's default.
const DefaultLoadFactor = 1

// Balancer routes by session with a load bound. Safe for concurrent use.
type Balancer struct {
	bounded *policies.Bounded
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{BoundedParams: policies.DefaultBoundedParams(DefaultLoadFactor)}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	b, err := policies.NewBounded(p.BoundedParams)
	if err != nil {
		return nil, err
	}
	return &Balancer{bounded: b}, nil
}

// Pick returns the session's endpoint, or the p2c choice when the request
// has no session key.
func (b *Balancer) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	if r.SessionKey == "" {
		return b.bounded.Pick(eps, 0, false)
	}
	return b.bounded.Pick(eps, policies.HashString(r.SessionKey), true)
}
