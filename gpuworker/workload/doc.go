// Package workload describes the requests a benchmark replays: when each one
// arrives, how long its prompt is, how many tokens it generates, which
// 512-token prefix blocks it shares with other requests, and which
// conversation it belongs to.
//
// It reads the two public traces kept in shared/workloads (Azure LLM inference
// 2023 CSV and Mooncake FAST'25 JSONL), turns a request into a prompt of
// token ids for /v1/completions, so that equal prefix blocks give equal
// token blocks, and generates synthetic workloads from a seed:
//
//   - Synthetic: Poisson arrivals, log-normal prompt and output lengths,
//     nothing shared. The baseline.
//   - SharedPrefix: a long system prompt (one, or several with Zipf
//     popularity) before a unique part: what nearly every application sends.
//   - MultiTurn: chat conversations that resend their growing history every
//     turn, with user think times between turns; requests carry a Session.
//   - LongDoc: questions about 8k-32k-token documents drawn from a pool
//     with Zipf popularity, so some documents are asked about again.
//
// IdealPrefixReuse gives the share of prompt tokens an infinite prefix cache
// could serve, the ceiling a report can compare hit ratios with.
//
// Contracts:
//   - Every Request has PromptTokens >= 1 and OutputTokens >= 1, and a slice
//     returned by a reader or generator is sorted by Arrival, starting at 0.
//   - Everything is deterministic: the same input or seed gives the same
//     requests and the same token ids.
//   - A generator's Rate sets arrival times only. Lengths, hash ids and a
//     conversation's turns and think times come from the seed, so a caller
//     can generate once to estimate capacity and again at the rate it wants,
//     without compressing think times as Scale would.
//
// The package imports only the standard library. It does no I/O of its own
// beyond the io.Reader it is given, and it never sends a request.
package workload
