// Package gpuworker simulates an LLM inference server (a vLLM-like worker)
// for testing and benchmarking Sluice without GPUs.
//
// Two layers:
//
//   - Engine is the performance model: a pure state machine of continuous
//     batching with chunked prefill, a paged KV cache with recompute
//     preemption, and a roofline step-time model of a Profile (a GPU and
//     model pair, see Profiles). It is driven by a clock value its caller
//     passes to Step and never reads the time, sleeps or starts goroutines,
//     so a discrete-event simulator can run many engines in virtual time.
//   - Worker serves an Engine over an OpenAI-compatible HTTP API
//     (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models,
//     /health) with vLLM metric names on /metrics, driving it with the wall
//     clock scaled by a speed-up factor. Its Run method is the only
//     goroutine it needs.
//
// Token counts are simulated by fixed rules (CountTokens, CountChatTokens)
// and output lengths and texts are deterministic functions of the prompt and
// seed, so a router can predict the usage a worker will report.
//
// The package must not import the router, backends or policies packages.
package gpuworker
