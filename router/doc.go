// Package router is Sluice's HTTP surface: the OpenAI-compatible routes
// (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models),
// /healthz, /readyz and /metrics, and the order of a request's life: parse,
// pick, proxy, record.
//
// Contracts: the request body is parsed once for the few fields routing
// needs and forwarded as received; every error a client sees is
// OpenAI-shaped JSON written by one function (writeError); the routing
// table is an immutable snapshot read without locks.
//
// This package may import backends and the policies contract, never a policy
// implementation or configs; cmd/sluice wires concrete objects in.
package router
