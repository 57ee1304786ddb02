package gpuworker

import "time"

// Request is one generation job submitted to an Engine.
type Request struct {
	// ID identifies the request in events and Cancel; the caller chooses it
	// and it must be unique among the requests the engine holds.
	ID uint64
	// PromptTokens is the prompt length, at least 1.
	PromptTokens int
	// OutputTokens is exactly how many tokens to generate, at least 1.
	OutputTokens int
	// BlockHashes are the chained hashes of the prompt's full BlockSize-token
	// blocks (see HashTokenBlocks and HashIDBlocks), used by the prefix
	// cache. Nil disables prefix caching for the request; hashes beyond the
	// prompt's full blocks are ignored. The engine keeps the slice, so the
	// caller must not modify it afterwards.
	BlockHashes []uint64
}

// EventKind says what happened to a request at the end of a step.
type EventKind uint8

// Event kinds, in the order a request sees them.
const (
	// EventFirstToken: the prompt has been prefilled and the first output
	// token sampled.
	EventFirstToken EventKind = iota + 1
	// EventToken: one more output token was decoded.
	EventToken
	// EventFinished: the request produced all its tokens and left the
	// engine; it follows the event of its last token in the same step.
	EventFinished
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventFirstToken:
		return "first_token"
	case EventToken:
		return "token"
	case EventFinished:
		return "finished"
	}
	return "unknown"
}

// Event reports progress of one request, stamped with the end of the step
// that produced it.
type Event struct {
	Time time.Time
	ID   uint64
	Kind EventKind
	// Tokens is the number of output tokens the request has produced so far.
	Tokens int
}

// Load is a point-in-time report of an engine's queue and cache.
type Load struct {
	// Waiting counts requests queued (including preempted ones).
	Waiting int
	// Running counts requests admitted to the batch.
	Running int
	// KVUsage is the fraction of KV-cache blocks in use, 0..1.
	KVUsage float64
	// KVBlocksUsed and KVBlocksTotal are the raw block counts; a block
	// shared by several requests counts once. Free blocks that still hold a
	// cached prefix are not used.
	KVBlocksUsed, KVBlocksTotal int
	// KVBlocksCached counts free blocks that still hold a reusable prefix.
	KVBlocksCached int
	// PromptTokens counts the prompt tokens of requests that reached their
	// first token (like vllm:prompt_tokens_total).
	PromptTokens int64
	// GenerationTokens counts every output token produced.
	GenerationTokens int64
	// Preemptions counts running requests sent back to the queue.
	Preemptions int64
	// PrefixCacheQueries and PrefixCacheHits count, in tokens, the known
	// tokens of admitted requests that carried block hashes and how many of
	// them were found in the prefix cache (like vllm:prefix_cache_queries
	// and vllm:prefix_cache_hits). Requests without hashes are not counted.
	PrefixCacheQueries, PrefixCacheHits int64
}
