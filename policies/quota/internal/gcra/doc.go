// Package gcra is the arithmetic both quota stores share, so that
// quota/memstore and the Lua scripts of quota/redisstore reach the same
// decision from the same state and report the same windows.
//
// Contracts: all time is integer nanoseconds, and the state of a rate
// dimension is its backlog, max(TAT - now, 0); [Decide] and [Settle] are
// pure functions of that state, the Limits and the amounts; a saturating
// product never wraps. The Lua in quota/redisstore mirrors [Decide] and
// [Settle] line for line; change them together (the redisstore tests
// compare both stores on random traffic).
//
// This package must not do I/O, read a clock or keep state.
package gcra
