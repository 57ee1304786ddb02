// Package report turns per-request measurements into the benchmark report
// that every sluice-bench mode prints: the serving metrics of vLLM's
// benchmark_serving (completed, failed, request and output throughput, and
// TTFT, TPOT, ITL and E2E latency as mean, p50, p90 and p99 in milliseconds),
// as a text table and as JSON.
//
// Live load runs and virtual-time simulations both fill in Samples and call
// Summarize, so their reports compare line by line. The package does no I/O
// beyond the writers it is given.
package report
