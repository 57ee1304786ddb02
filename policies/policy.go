package policies

import (
	"context"
	"errors"

	"github.com/sluice-llm/sluice/backends"
)

// Request is what a policy may know about the request being routed. The
// router fills it once from the parsed body; policies must not modify it.
type Request struct {
	// Model is the requested model name.
	Model string
	// Stream is true for a streamed answer.
	Stream bool
	// PromptTokens is the router's estimate of the prompt's size in tokens.
	PromptTokens int
	// MaxTokens is the requested output cap, or 0 when the client set none.
	MaxTokens int
	// Choices is how many completions the request asks for (OpenAI's n);
	// 0 means one.
	Choices int
	// User is the OpenAI "user" field, if any.
	User string
	// SessionKey identifies a conversation for session affinity: the
	// configured session header if the client sent it, else User. Empty
	// when neither is present.
	SessionKey string
	// PrefixHashes are chained hashes of the prompt's leading fixed-size
	// chunks: equal leading hashes mean an equal prompt prefix, so a
	// prefix-aware policy can send the request where that prefix is likely
	// cached. Nil when the router did not compute them.
	PrefixHashes []uint64
	// PrefixChunkTokens is about how many prompt tokens each of
	// PrefixHashes covers, so that a policy can tell how much prefill a
	// cached prefix saves. Zero when unknown.
	PrefixChunkTokens int
	// Tenant names the tenant the request came from, Tier its quota tier
	// and Priority the tier's priority (higher first); empty and zero when
	// no tenants are configured.
	Tenant   string
	Tier     string
	Priority int
	// Class is the request's service class (priority, default, flex);
	// ServiceTier is the same when the client named one in service_tier
	// (the answer then says which class served it), else empty.
	Class       string
	ServiceTier string
	// Pin, when set, is the one endpoint the request may run on: it holds
	// state the request needs (the stored response a Responses API request
	// continues). The router and the admission queue give the picker only
	// it; policies need not read it.
	Pin *backends.Endpoint
	// Queued is set by the admission queue when it binds the request to
	// one of the endpoints with room (late binding): the requests behind
	// it wait in that queue, in its order, not in the engines' queues.
	Queued bool
}

// DefaultExpectedOutput is the output length assumed for a request that
// sets no max_tokens, when estimating its cost.
const DefaultExpectedOutput = 256

// MaxOutputEstimate bounds the output counted for one choice: a max_tokens
// beyond it (no model writes a billion tokens) is counted as it, so that
// estimates and their sums cannot overflow.
const MaxOutputEstimate = 1 << 30

// OutputEstimate is the output counted for a request: maxTokens (at most
// MaxOutputEstimate) for each of its choices (at least one).
func OutputEstimate(maxTokens, choices int) int64 {
	return int64(min(maxTokens, MaxOutputEstimate)) * int64(max(choices, 1))
}

// ExpectedTokens is the request's estimated cost in tokens: prompt plus
// max_tokens (or DefaultExpectedOutput when max_tokens is unset) for each
// of its choices.
func (r *Request) ExpectedTokens() int64 {
	out := r.MaxTokens
	if out <= 0 {
		out = DefaultExpectedOutput
	}
	return int64(r.PromptTokens) + OutputEstimate(out, r.Choices)
}

// Picker chooses one endpoint for a request. endpoints is never empty and
// must not be modified or retained.
type Picker interface {
	Pick(ctx context.Context, r *Request, endpoints []*backends.Endpoint) (*backends.Endpoint, error)
}

// ErrNoEndpoint is returned by a Picker that finds no endpoint it is willing
// to choose.
var ErrNoEndpoint = errors.New("no endpoint available")
