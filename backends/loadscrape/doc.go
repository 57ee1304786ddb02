// Package loadscrape polls each backend's Prometheus /metrics and publishes
// the engine's load (requests waiting, requests running, KV-cache use) on
// the endpoint as an immutable backends.Load snapshot.
//
// It reads the metric names of vLLM (also what gpuworker exports by
// default), SGLang and Text Generation Inference, and detects which one a
// backend speaks from the names it finds; the detected dialect is
// remembered per endpoint and re-detected when its names disappear (the
// backend was replaced by another engine).
//
// Contracts: one goroutine owns the Scraper (Run); scrapes within one tick
// run concurrently, bounded by Options.Concurrency, and all of them finish
// before the next tick starts and before Run returns. Every scrape has a
// deadline below the interval. A scrape that fails for any reason
// (connection, timeout, status, unparsable body, no known metric) marks the
// endpoint stale, so policies see "unknown" and never a zero load.
//
// This package must not import the router or the policies.
package loadscrape
