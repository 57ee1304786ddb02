// Package gpuworker simulates an LLM inference server (a vLLM-like worker)
// for testing and benchmarking Sluice without GPUs.
//
// Two layers:
//
//   - Engine is the performance model: a pure state machine of continuous
//     batching with chunked prefill (or whole-prompt prefill, see
//     Profile.WholePrefill), a paged KV cache with recompute preemption, an
//     automatic prefix cache, and a roofline step-time model of a Profile
//     (a GPU and model pair, see Profiles), optionally capped by a
//     per-sequence host cost (Profile.HostPerSeq). It is driven by a clock
//     value its caller passes to Step and never reads the time, sleeps,
//     draws random numbers or starts goroutines, so a discrete-event
//     simulator can run many engines in virtual time and every run is
//     reproducible.
//   - Worker serves an Engine over an OpenAI-compatible HTTP API
//     (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models,
//     /health, /metrics, and /admin/faults), driving it with the wall clock
//     scaled by a speed-up factor. Its Run method is the only goroutine it
//     needs.
//
// # Prefix cache
//
// The engine follows vLLM's automatic prefix caching over 16-token
// (BlockSize) KV blocks. Each request carries chained block hashes: the
// worker derives them from token-id prompts (HashTokenBlocks), from text
// prompts and chat messages in TextBlockBytes chunks (HashTextBlocks), and
// simulators from trace hash ids (HashIDBlocks, 512 tokens per id). At
// admission the longest run of leading blocks already cached is shared,
// reference-counted, and prefill starts after it, always leaving at least
// one token to compute; cached tokens cost no prefill time but are read as
// context. A block is registered once computed, and blocks of finished,
// cancelled or preempted requests stay cached while free, evicted least
// recently freed first (a prompt's tail before its head). Lookups and hits
// are counted in tokens and exported as metrics.
//
// # Metric dialects
//
// /metrics exports the worker's queue, batch, KV usage, token counters,
// prefix-cache figures and latency histograms under one engine's names,
// chosen by Options.Dialect: DialectVLLM (vllm:*, the default, with vLLM's
// histogram buckets and vllm:cache_config_info), DialectSGLang (sglang:*,
// where the prefix cache is the gauge sglang:cache_hit_rate) or DialectTGI
// (tgi_*, which has no KV-usage or prefix-cache metric;
// tgi_batch_current_max_tokens is the closest). A dialect exports only
// the metrics that engine has, so a router's scraper can be tested against
// each (GPU-FACTS §5).
//
// # Faults
//
// Faults make a live worker misbehave on purpose: ErrorRate answers a
// seeded share of generation requests with an ErrorStatus (5xx) before any
// work; AddedLatency delays each response's start in wall-clock time;
// StallAfter makes every generation hang after that many output tokens;
// CrashAfter makes the worker crash after that many /v1 requests, after
// which every request except /admin/* aborts its connection, streams in
// flight are cut and /health fails. They are set with Options.Faults,
// SetFaults, or on a running worker with PUT /admin/faults (a JSON object
// with error_rate, error_status, added_latency as a Go duration string,
// stall_after and crash_after, decoded strictly: an unknown field or a bad
// value is a 400 naming it; the answer is the faults now in force). GET /admin/faults returns the faults in
// force. Each setting replaces the previous one whole, restarts the
// CrashAfter count and revives a crashed worker.
//
// Token counts are simulated by fixed rules (CountTokens, CountChatTokens)
// and output lengths and texts are deterministic functions of the prompt and
// seed, so a router can predict the usage a worker will report.
//
// The package must not import the router, backends or policies packages.
package gpuworker
