// Package router is Sluice's HTTP surface: the OpenAI-compatible routes
// (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, and
// /v1/files and /v1/batches when Options.Batch serves them), /healthz,
// /readyz and /metrics, and the request pipeline, one stage after
// the other: authenticate (router/auth), parse, limit (policies/quota),
// admit (policies/admission), pick (the model's policies.Picker), proxy
// (router/proxy), settle. A Batch API line is admitted before it is
// limited, and takes no concurrency slot, so that one waiting in the
// queue holds none of its tenant's limits.
//
// Contracts: the request body is parsed once for the few fields routing
// needs and forwarded as received (the one edit: asking a stream for its
// usage); every stage returns an error and one function (errorFor) turns it
// into the client's status and OpenAI-shaped body; no transport error text
// reaches a client; every attempt ends in one backends.Outcome that
// settlement, endpoint statistics and metrics read; the routing table and
// the tenant directory are immutable snapshots read without locks.
//
// This package may import backends and the policies contracts and stages
// (policies, policies/quota, policies/admission), never a routing policy,
// a store implementation or configs; cmd/sluice wires concrete objects in.
package router
