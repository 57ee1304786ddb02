// Package redisstore is the quota.Store in Redis, shared by every router
// replica, after envoy ratelimit's Redis side but with GCRA state instead
// of fixed windows.
//
// Contracts: each Reserve and each Settle is exactly one Lua script call
// (EVALSHA, falling back once to EVAL when Redis lost the script), so a
// decision is atomic across replicas; SettleBatch pipelines many settles in
// one round trip. The scripts decide exactly as quota/memstore does (both
// mirror quota/internal/gcra). now always comes from the caller; the
// scripts never read Redis TIME. A tenant's keys share the hash tag
// {tenant}, so Redis Cluster keeps them on one slot:
//
//	<prefix>:{<tenant>}:rl            hash r, i, o: TATs in Unix ns
//	<prefix>:{<tenant>}:lease         sorted set: lease IDs by expiry, Unix ms
//	<prefix>:{<tenant>}:day:YYYYMMDD  integer: tokens charged that UTC day
//
// Every key expires on its own (the rate hash when fully replenished, the
// lease set after its longest lease, a day total 24h after its day ends,
// each with jitter), so idle tenants leave nothing behind. Correctness
// never depends on those expiries, only memory does.
//
// Renew writes every lease it is given, re-creating those Redis lost (a
// restart without persistence, a failover to an empty replica), since the
// Limiter passes only the leases of requests still running: the
// concurrency caps hold again from the first renewal after Redis returns.
// The rate hashes and day totals lost with it are not rebuilt.
//
// A Redis failure is returned as an error (wrapped with %w) for the
// Limiter to fail open or closed; nothing here retries or panics. Give the
// client tight timeouts and ContextTimeoutEnabled so a call's ctx bounds
// it, and consider MaxRetries -1: go-redis retries a command after some
// network errors, and a retried Reserve that had already run charges
// twice.
//
// This package must not read a clock for decisions, hold per-tenant state
// in process, or start goroutines.
package redisstore
