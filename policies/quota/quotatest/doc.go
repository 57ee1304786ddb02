// Package quotatest is the contract suite every quota.Store must pass, and
// the benchmark every Store runs: Run(t, newStore) from a Store's tests,
// Bench(b, store) from its BenchmarkReserveSettle.
//
// Contracts: the suite drives time by hand (a fixed now that it advances),
// never sleeps and asserts nothing about wall time; each subtest gets a
// fresh Store from newStore, so Stores that share a backend must isolate
// subtests (redisstore uses a key prefix per subtest). It checks behaviour
// visible through quota.Store only, never a Store's internals.
//
// It is for tests only; no production code may import it.
package quotatest
