package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
)

// inferenceRequest holds the few fields of an OpenAI request body that
// routing needs. The body itself is forwarded untouched.
type inferenceRequest struct {
	Model               string         `json:"model"`
	Stream              bool           `json:"stream"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	User                string         `json:"user"`
	StreamOptions       *streamOptions `json:"stream_options"`
	ServiceTier         string         `json:"service_tier"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// parsed is a request after parsing: its routing fields and an estimate of
// its size in tokens.
type parsed struct {
	model        string
	stream       bool
	maxTokens    int
	user         string
	includeUsage bool   // the client asked for stream_options.include_usage itself
	serviceTier  string // as sent; "" when absent
	promptTokens int
	prefix       []uint64 // see prefixHashes
}

// bytesPerToken is the rough prompt estimate used until a tokenizer-aware
// count exists: about four bytes of JSON per token.
const bytesPerToken = 4

// parseInference validates body as a JSON object carrying a model name and
// returns its routing fields, or an *APIError naming the problem.
func parseInference(body []byte) (parsed, error) {
	var f inferenceRequest
	if err := json.Unmarshal(body, &f); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return parsed{}, badRequest(typeErr.Field, "invalid_type",
				fmt.Sprintf("Invalid type for '%s': expected %s, but got %s.", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value))
		}
		return parsed{}, badRequest("", "invalid_json",
			"We could not parse the JSON body of your request. The body must be a JSON object with a \"model\" field.")
	}
	if f.Model == "" {
		return parsed{}, badRequest("model", "missing_required_parameter",
			"you must provide a model parameter")
	}
	p := parsed{model: f.Model, stream: f.Stream, user: f.User, promptTokens: len(body) / bytesPerToken,
		prefix: prefixHashes(body), includeUsage: f.StreamOptions != nil && f.StreamOptions.IncludeUsage,
		serviceTier: f.ServiceTier}
	switch {
	case f.MaxCompletionTokens != nil:
		p.maxTokens = *f.MaxCompletionTokens
	case f.MaxTokens != nil:
		p.maxTokens = *f.MaxTokens
	}
	if p.maxTokens < 0 {
		return parsed{}, badRequest("max_tokens", "invalid_value", "max_tokens must be at least 1")
	}
	return p, nil
}

// bodyTooLarge is the 413 for a body over the configured limit.
func bodyTooLarge(limit int64) *APIError {
	return &APIError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another type"
}
