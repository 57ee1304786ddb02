package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// parsed is a request after parsing: its routing fields and an estimate of
// its size in tokens.
type parsed struct {
	model        string
	stream       bool
	maxTokens    int
	choices      int // OpenAI's n: how many completions to generate, 1 when absent
	user         string
	includeUsage bool   // the client asked for stream_options.include_usage itself
	serviceTier  string // as sent; "" when absent
	promptTokens int    // token ids exactly, text at four bytes a token; checkRoute makes it the route's
	// The tokens and bytes of the messages, prompt and input members'
	// values, and the body's bytes, for checkRoute's estimate.
	memberTokens, memberBytes [3]int
	bodyBytes                 int
	// maxTokensOnly is max_tokens as sent (0 when absent), which legacy
	// completions servers read rather than max_completion_tokens: a
	// completion without it is sent the tier's default.
	maxTokensOnly int
	prompt        []byte   // the prompt member's value, for checkRoute's count of prompts
	input         []byte   // the input member's value, a response's prompt for checkRoute's prefix hashes
	prefix        []uint64 // see prefixHashes
	// The first byte of the messages, prompt and input members' values
	// ('[' for an array, '"' for a string...), 0 for a member absent.
	messagesKind, promptKind, inputKind byte
	// previousResponse is the Responses API's previous_response_id: the
	// stored response the request continues, which only the backend that
	// made it holds. noStore is its store: false (store defaults true).
	previousResponse string
	noStore          bool
	// background is the Responses API's background: true (answered at
	// once, the response made after), which checkRoute refuses.
	background bool
}

// maxChoices is the most completions a request may ask for (n), as
// OpenAI's API allows.
const maxChoices = 128

// parseInference validates body as a JSON object carrying a model name and
// returns its routing fields, or an *APIError naming the problem. The body
// is read once: jsonscan.Object validates it (as json.Valid would, several
// times faster) while it hands over the top-level members, so the messages
// are skipped without being decoded; only the few members routing reads
// are decoded. Keys match exactly, as OpenAI-compatible servers read them.
// A member routing reads may appear once, its name unescaped: a backend
// decodes "m\u0061x_tokens" as max_tokens, and with duplicates takes the
// last or the first, so either let a request pass the limits as one thing
// and run as another (until 2026-12-02: 16 times a daily quota in one
// request, another model than the tier's on a backend serving several).
func parseInference(body []byte) (parsed, error) {
	var (
		// The request and the members decoded through pointers, in one
		// struct so that they move to the heap in one allocation rather
		// than one each.
		f struct {
			p                            parsed
			maxTokens, maxCompl, choices *int
			maxOutput                    *int // the Responses API's max_output_tokens
			bestOf                       *int
			opts                         *streamOptions
			store                        *bool
		}
		err                  error
		messages, promptText []byte
		input                []byte
		tokens               [3]int // ApproxTokens of messages, promptText and input
	)
	p := &f.p
	decode := func(name string, val []byte, into any) {
		if err != nil || decodeSimple(val, into) {
			return
		}
		if e := json.Unmarshal(val, into); e != nil {
			var typeErr *json.UnmarshalTypeError
			field, want, got := name, jsonscan.TypeName(reflect.TypeOf(into)), "another type"
			if errors.As(e, &typeErr) {
				if typeErr.Field != "" {
					field += "." + typeErr.Field
				}
				want, got = jsonscan.TypeName(typeErr.Type), jsonscan.ValueName(typeErr.Value)
			}
			if err = numberError(field, want, val); err != nil {
				return
			}
			err = badRequest(field, "invalid_type",
				fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", field, want, got))
		}
	}
	var seen uint32 // the routing members met, by routingMember
	valid := jsonscan.ObjectTokens(body, func(key, val []byte, n int) {
		if err == nil {
			err = checkMember(key, &seen)
		}
		switch string(key) {
		case "model":
			decode("model", val, &p.model)
		case "stream":
			decode("stream", val, &p.stream)
		case "max_tokens":
			decode("max_tokens", val, &f.maxTokens)
		case "max_completion_tokens":
			decode("max_completion_tokens", val, &f.maxCompl)
		case "max_output_tokens":
			decode("max_output_tokens", val, &f.maxOutput)
		case "n":
			decode("n", val, &f.choices)
		case "best_of":
			decode("best_of", val, &f.bestOf)
		case "user":
			decode("user", val, &p.user)
		case "stream_options":
			decode("stream_options", val, &f.opts)
		case "service_tier":
			if string(val) == `""` && err == nil { // given, and empty: not the same as absent
				err = badRequest("service_tier", "invalid_value", `service_tier must be one of auto, default, flex, priority; got ""`)
			}
			decode("service_tier", val, &p.serviceTier)
		case "previous_response_id":
			decode("previous_response_id", val, &p.previousResponse)
		case "store":
			decode("store", val, &f.store)
		case "background":
			decode("background", val, &p.background)
		case "messages":
			messages, tokens[0] = val, n
		case "prompt":
			promptText, tokens[1] = val, n
		case "input":
			input, tokens[2] = val, n
		}
	})
	if !valid { // before any error decoding found: invalid JSON is named as such
		return parsed{}, badRequest("", "invalid_json",
			"We could not parse the JSON body of your request. The body must be a JSON object with a \"model\" field.")
	}
	if err != nil {
		return parsed{}, err
	}
	if p.model == "" {
		return parsed{}, badRequest("model", "missing_required_parameter",
			"you must provide a model parameter")
	}
	// The first prompt member's tokens, from the counts the check made on
	// its way; checkRoute makes it the route's.
	p.promptTokens = len(body) / jsonscan.BytesPerToken
	if i := jsonscan.PromptMember(messages, promptText, input); i >= 0 {
		p.promptTokens = tokens[i]
	}
	p.memberTokens, p.bodyBytes = tokens, len(body)
	p.memberBytes = [3]int{len(messages), len(promptText), len(input)}
	p.messagesKind, p.promptKind, p.inputKind = firstByte(messages), firstByte(promptText), firstByte(input)
	if messages == nil {
		messages = promptText
	}
	p.prefix = prefixHashesOf(messages)
	p.includeUsage = f.opts != nil && f.opts.IncludeUsage
	p.noStore = f.store != nil && !*f.store
	for _, m := range []struct {
		name string
		val  *int
	}{{"max_tokens", f.maxTokens}, {"max_completion_tokens", f.maxCompl}, {"max_output_tokens", f.maxOutput}} {
		if m.val != nil {
			if *m.val < 1 {
				return parsed{}, badRequest(m.name, "integer_below_min_value", fmt.Sprintf(
					"Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", m.name, *m.val))
			}
			// The largest: a backend reads one or another (vLLM's chat
			// prefers max_completion_tokens, legacy servers read
			// max_tokens alone, gpuworker's completions read both, the
			// Responses API max_output_tokens), and the limits must cover
			// whichever it reads.
			p.maxTokens = max(p.maxTokens, *m.val)
		}
	}
	if f.maxTokens != nil {
		p.maxTokensOnly = *f.maxTokens
	}
	p.prompt, p.input = promptText, input
	// best_of: legacy completions (and vLLM) generate best_of sequences
	// and return the n best, so the output to reserve is the larger's.
	p.choices = 1
	for _, m := range []struct {
		name string
		val  *int
	}{{"n", f.choices}, {"best_of", f.bestOf}} {
		if m.val == nil {
			continue
		}
		switch v := *m.val; {
		case v < 1:
			return parsed{}, badRequest(m.name, "integer_below_min_value", fmt.Sprintf(
				"Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", m.name, v))
		case v > maxChoices:
			return parsed{}, badRequest(m.name, "integer_above_max_value", fmt.Sprintf(
				"Invalid '%s': integer above maximum value. Expected a value <= %d, but got %d instead.", m.name, maxChoices, v))
		}
		p.choices = max(p.choices, *m.val)
	}
	return *p, nil
}

// numberError is the answer for a JSON number val that an integer field
// (want, as jsonscan.TypeName names it) could not take, in OpenAI's words:
// a decimal number is the wrong type; an integer past the range of int is
// above (or below) the largest value. Nil when val is not a number or the
// field not an integer.
func numberError(field, want string, val []byte) error {
	if want != "an integer" || len(val) == 0 || (val[0] != '-' && (val[0] < '0' || val[0] > '9')) {
		return nil
	}
	if bytes.ContainsAny(val, ".eE") {
		return badRequest(field, "invalid_type",
			fmt.Sprintf("Invalid type for '%s': expected an integer, but got a decimal number instead.", field))
	}
	if val[0] == '-' {
		return badRequest(field, "integer_below_min_value", fmt.Sprintf(
			"Invalid '%s': integer below minimum value. Expected a value >= %d, but got %s instead.", field, math.MinInt, echo(string(val))))
	}
	return badRequest(field, "integer_above_max_value", fmt.Sprintf(
		"Invalid '%s': integer above maximum value. Expected a value <= %d, but got %s instead.", field, math.MaxInt, echo(string(val))))
}

func firstByte(val []byte) byte {
	if len(val) == 0 {
		return 0
	}
	return val[0]
}

// responsesPath is OpenAI's Responses API, served like chat: its prompt
// is input (a string or an array of items) and instructions, its output
// cap max_output_tokens.
const responsesPath = "/v1/responses"

// checkRoute checks what the route's prompt member must be, as OpenAI
// does, so that a malformed request is answered here rather than by a
// backend in its own words: chat needs messages, an array; a completion's
// prompt and an embedding's or a response's input, when present and not
// null, are a string or an array (vLLM also takes prompt_embeds without a prompt, and
// chat-style messages for embeddings, so neither is required).
//
// It also makes the prompt estimate the route's: its member's tokens (ids
// exactly), and every other byte of the body at four bytes a token. The
// first of messages, prompt and input was counted whatever the route, so a
// completion that also sent "messages":[] had its 9.5 MB prompt estimated
// at nothing (119 times a daily quota in one request), and chat's tools,
// which the template puts in the prompt, were not counted at all.
func (p *parsed) checkRoute(path string) error {
	if i := jsonscan.RouteMember(path); i >= 0 {
		p.promptTokens = p.memberTokens[i] + (p.bodyBytes-p.memberBytes[i])/jsonscan.BytesPerToken
	}
	if path == responsesPath && p.prefix == nil {
		// A conversation sent again with its next turn shares its
		// history's prefix: the prefix scorer finds where it went.
		p.prefix = prefixHashesOf(p.input)
	}
	if path == responsesPath && p.background {
		// Answered at once, made after: the request's end would free its
		// admission slot, its concurrency and its reserved output while
		// the backend still generates, whose usage no answer brings.
		return badRequest("background", "unsupported_value",
			"Background responses are not supported here: Sluice's limits and admission queue hold a response's capacity while its request is open. Send it without background (stream it to follow its progress).")
	}
	if path == "/v1/completions" {
		// Each prompt of a list gets its n (or best_of) completions: 500
		// prompts with max_tokens 1000 were reserved 1,000 output tokens
		// and generated 500,000.
		p.choices *= jsonscan.PromptCount(p.prompt)
	}
	member, kind, want := "", byte(0), ""
	switch path {
	case "/v1/chat/completions":
		if p.messagesKind == 0 || p.messagesKind == 'n' {
			return badRequest("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
		}
		if p.messagesKind != '[' {
			member, kind, want = "messages", p.messagesKind, "an array of objects"
		}
	case "/v1/completions":
		if !textOrAbsent(p.promptKind) {
			member, kind, want = "prompt", p.promptKind, "a string or an array"
		}
	case "/v1/embeddings", responsesPath:
		if !textOrAbsent(p.inputKind) {
			member, kind, want = "input", p.inputKind, "a string or an array"
		}
	}
	if member == "" {
		return nil
	}
	return badRequest(member, "invalid_type",
		fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", member, want, kindOf(kind)))
}

// textOrAbsent reports whether a prompt member of kind k (its first byte)
// is a string, an array, null or absent.
func textOrAbsent(k byte) bool { return k == 0 || k == 'n' || k == '[' || k == '"' }

// kindOf names the JSON type of a value from its first byte.
func kindOf(b byte) string {
	switch b {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// decodeSimple decodes the plainest values of the types parseInference
// reads straight into into, as json.Unmarshal would, and reports whether
// it did: a string without escapes in valid UTF-8, true or false, an
// integer that fits, stream_options as {"include_usage":true} or false.
// Anything else (null, an escape, a type error) is left to json.Unmarshal,
// whose errors the 400 answers quote. json.Unmarshal checks its input
// again and decodes through reflection, which cost a small body a few
// microseconds per member (issue 12). FuzzDecodeSimple holds the two equal.
func decodeSimple(val []byte, into any) bool {
	switch v := into.(type) {
	case *string:
		if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' {
			return false
		}
		in := val[1 : len(val)-1]
		if bytes.IndexByte(in, '\\') >= 0 || !utf8.Valid(in) {
			return false
		}
		*v = string(in)
	case *bool:
		switch string(val) {
		case "true":
			*v = true
		case "false":
			*v = false
		default:
			return false
		}
	case **int:
		if len(val) == 0 || val[0] != '-' && (val[0] < '0' || val[0] > '9') {
			return false
		}
		n, err := strconv.Atoi(string(val))
		if err != nil { // a fraction, an exponent or out of range
			return false
		}
		if *v == nil {
			*v = new(int)
		}
		**v = n
	case **streamOptions:
		var on bool
		switch string(val) {
		case `{"include_usage":true}`:
			on = true
		case `{"include_usage":false}`:
		default:
			return false
		}
		if *v == nil {
			*v = new(streamOptions)
		}
		(*v).IncludeUsage = on
	default:
		return false
	}
	return true
}

// bodyTooLarge is the 413 for a body over the configured limit.
func bodyTooLarge(limit int64) *APIError {
	return &APIError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
}

// routingMembers are the members parseInference reads.
var routingMembers = [...]string{"model", "stream", "max_tokens", "max_completion_tokens", "n", "best_of", "user",
	"stream_options", "service_tier", "messages", "prompt", "input", "max_output_tokens", "previous_response_id", "store", "background"}

// checkMember refuses a second routing member of one name, or one whose
// name is escaped (a backend would read it as that member, Sluice would
// not); seen holds the routing members met so far.
func checkMember(key []byte, seen *uint32) error {
	name := key
	escaped := bytes.IndexByte(key, '\\') >= 0
	if escaped {
		var s string
		if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
			return nil // not valid JSON: the check says so
		}
		name = []byte(s)
	}
	for i, m := range routingMembers {
		if string(name) != m {
			continue
		}
		if escaped {
			return badRequest(m, "invalid_value", fmt.Sprintf(
				"Invalid parameter name '%s': write '%s' without escapes.", echo(string(key)), m))
		}
		if *seen&(1<<i) != 0 {
			return badRequest(m, "invalid_value", fmt.Sprintf("Duplicate parameter '%s': send it once.", m))
		}
		*seen |= 1 << i
		return nil
	}
	if folds(name) {
		// Go's encoding/json matches member names without regard to case
		// (Unicode's simple folding: "ſtream" is stream to it), so a Go
		// backend reads "Model" or "MAX_TOKENS" as the member Sluice did
		// not check.
		for _, m := range routingMembers {
			if strings.EqualFold(string(name), m) {
				return badRequest(m, "invalid_value", fmt.Sprintf(
					"Invalid parameter name '%s': write '%s' exactly as that.", echo(string(key)), m))
			}
		}
	}
	return nil
}

// folds reports whether name has a byte that case folding could turn
// into a routing member's (an upper-case letter, or not ASCII): lower-case
// ASCII names, nearly all, need no folded comparison.
func folds(name []byte) bool {
	for _, c := range name {
		if c >= 0x80 || ('A' <= c && c <= 'Z') {
			return true
		}
	}
	return false
}
