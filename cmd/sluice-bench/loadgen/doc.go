// Package loadgen sends a workload to one OpenAI-compatible target in real
// time and measures every request: open-loop arrivals at each Request's
// Arrival offset (optionally capped at a number of requests in flight),
// POST /v1/completions with a token-id prompt, max_tokens, ignore_eos and,
// for a request of a conversation, the OpenAI "user" field (SessionUser),
// and, when streaming, a timestamp on every SSE chunk for TTFT and
// inter-token latency.
//
// Contracts:
//   - Traffic goes only to Options.Target.
//   - Run owns every goroutine it starts (one per request in flight plus one
//     progress printer) and returns only after all of them have ended.
//   - Cancelling Run's context stops sending, cancels the requests in
//     flight, and still returns the samples measured so far.
package loadgen
