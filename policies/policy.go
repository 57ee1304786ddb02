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
	// User is the OpenAI "user" field, if any.
	User string
}

// Picker chooses one endpoint for a request. endpoints is never empty and
// must not be modified or retained.
type Picker interface {
	Pick(ctx context.Context, r *Request, endpoints []*backends.Endpoint) (*backends.Endpoint, error)
}

// ErrNoEndpoint is returned by a Picker that finds no endpoint it is willing
// to choose.
var ErrNoEndpoint = errors.New("no endpoint available")
