// Package workload describes the requests a benchmark replays: when each one
// arrives, how long its prompt is, how many tokens it generates, and which
// 512-token prefix blocks it shares with other requests.
//
// It reads the two public traces kept in shared/workloads (Azure LLM inference
// 2023 CSV and Mooncake FAST'25 JSONL), generates synthetic Poisson workloads
// from a seed, and turns a request into a prompt of token ids for
// /v1/completions, so that equal prefix blocks give equal token blocks.
//
// Contracts:
//   - Every Request has PromptTokens >= 1 and OutputTokens >= 1, and a slice
//     returned by a reader or generator is sorted by Arrival, starting at 0.
//   - Everything is deterministic: the same input or seed gives the same
//     requests and the same token ids.
//
// The package imports only the standard library. It does no I/O of its own
// beyond the io.Reader it is given, and it never sends a request.
package workload
