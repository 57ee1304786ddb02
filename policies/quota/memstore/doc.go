// Package memstore is the in-process quota.Store: one router replica's
// limits, for a single replica, tests and the simulator.
//
// Contracts: every Reserve and Settle of one tenant is atomic (a mutex per
// shard of tenants), never blocks on anything but that mutex, and decides
// exactly as quota/redisstore does for the same calls (both use
// quota/internal/gcra). Leases stop counting TTL after the Reserve, to the
// millisecond; expired ones are purged on each Reserve of their tenant.
// Daily totals are kept for their UTC day and the next. Memory stays
// bounded: a tenant that is fully replenished, holds no lease and has no
// kept daily total is forgotten by a periodic sweep of its shard.
//
// This package must not read a clock, start goroutines or share state
// between Stores.
package memstore
