// Package quota holds the tenant limit contract: the Limits a tier grants,
// the Store that checks and charges them atomically (shared across router
// replicas when it is Redis), and the Limiter stage of the request
// pipeline that reserves a request's estimate before routing and settles
// its real usage after.
//
// Contracts: a Store makes each decision in one step (one Lua script in
// Redis), never blocks longer than its context allows, and returns an
// error rather than a guess when it cannot decide; the Limiter turns that
// error into fail-open or fail-closed as configured. Implementations live
// in subpackages (quota/memstore, quota/redisstore); quota/quotatest is
// the contract suite every Store must pass.
//
// This package must not import the router or any HTTP type.
package quota
