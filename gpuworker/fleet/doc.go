// Package fleet simulates a whole fleet of gpuworker engines behind Sluice's
// real routing policies, in virtual time.
//
// A Simulation owns one gpuworker.Engine and, per router replica, one
// *backends.Endpoint per worker. Each arrival is routed by the replica's
// policies.Picker over that replica's endpoints (Begin on dispatch, End when
// the request finishes), so a policy sees exactly the in-flight counts it
// would see in production. It also feeds the other production signals: every
// Options.ScrapeInterval of virtual time each replica stores each worker's
// engine load (waiting, running, KV use) with StoreLoad, at a phase of its
// own; each completed answer's TTFT and decode rate are observed on the
// routing replica's endpoint; and Request.PrefixHashes carries the chained
// hashes the live router would compute for the prompt sluice-bench load
// builds from the request (see PrefixHashes). The event loop is a min-heap of each busy
// engine's next step end plus the next arrival: no goroutines, no wall clock,
// and no allocation per step in the steady state.
//
// Contracts:
//   - Run is deterministic: the same spec, workload and pickers give the same
//     Result.
//   - Every request of the workload appears exactly once in Result.Requests,
//     completed or failed; a completed request produced exactly its
//     OutputTokens.
//   - Memory is O(requests + workers): per-token data is folded into a
//     streaming Histogram of inter-token latency, never stored per request.
//
// The package may import gpuworker, gpuworker/workload, policies and
// backends; it must not import the router, configs or anything under cmd.
package fleet
