package gpuworker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 32 << 20

// Default output lengths when a request names none, as OpenAI's.
const (
	defaultChatMaxTokens       = 256
	defaultCompletionMaxTokens = 16
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// genParams are the fields chat and completion requests share.
type genParams struct {
	Model               string         `json:"model"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	IgnoreEOS           bool           `json:"ignore_eos"`
	Seed                *int64         `json:"seed"`
	N                   *int           `json:"n"`
	// keep, for a Responses API request the worker stores, is its
	// conversation so far (history and input): the answer joins it.
	keep []chatMessage `json:"-"`
	// previous is the Responses API's previous_response_id, "" for none.
	previous string `json:"-"`
}

// maxChoices bounds n, as OpenAI's API does.
const maxChoices = 128

// choices returns how many completions to generate per prompt (n, 1 when
// absent).
func (p genParams) choices() (int, error) {
	if p.N == nil {
		return 1, nil
	}
	if *p.N < 1 || *p.N > maxChoices {
		return 0, invalidRequest("n", "n must be between 1 and %d, got %d", maxChoices, *p.N)
	}
	return *p.N, nil
}

// specs returns the engine's work for prompts: n choices of each, prompt
// by prompt, so that choice i*n+j is prompt i's j-th (OpenAI's order).
// Choice j draws its output with the request's seed plus j, so the n
// choices of one prompt differ as sampled ones do, and the first is what
// the request alone would get.
func (p genParams) specs(prompts []prompt, maxTokens, n int) []genSpec {
	specs := make([]genSpec, 0, len(prompts)*n)
	for _, pr := range prompts {
		for j := range n {
			specs = append(specs, genSpec{prompt: pr.tokens, hash: pr.hash, blocks: pr.blocks, maxTokens: maxTokens,
				ignoreEOS: p.IgnoreEOS, seed: p.seed() + int64(j)})
		}
	}
	return specs
}

type chatRequest struct {
	genParams
	Messages []chatMessage `json:"messages"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type completionRequest struct {
	genParams
	Prompt json.RawMessage `json:"prompt"`
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

// decodeBody reads a JSON body into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := json.NewDecoder(body).Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return invalidRequest("", "request body larger than %d bytes", tooBig.Limit)
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			// Named by the request's field, not by this package's types.
			field := strings.TrimPrefix(typeErr.Field, "genParams.") // the embedded struct's members are the request's own
			return invalidRequest(field, "Invalid type for '%s': expected %s, but got %s.",
				field, expectedJSON(typeErr.Type), typeErr.Value)
		}
		return invalidRequest("", "invalid JSON body: %v", err)
	}
	return nil
}

// expectedJSON names the JSON type a request field of Go type t takes (the
// worker's requests hold strings, booleans, integers, arrays and objects).
func expectedJSON(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[reflect.Kind]string{reflect.String: "a string", reflect.Bool: "a boolean", reflect.Int: "an integer",
		reflect.Int64: "an integer", reflect.Slice: "an array", reflect.Struct: "an object"}
	if n, ok := names[t.Kind()]; ok {
		return n
	}
	return "another type"
}

// readRequest decodes r's body into req, whose model member is model, and
// checks the model; it answers the error itself and reports false when
// either fails.
func (w *Worker) readRequest(rw http.ResponseWriter, r *http.Request, req any, model *string) bool {
	err := decodeBody(rw, r, req)
	if err == nil {
		err = w.checkModel(*model)
	}
	if err != nil {
		writeError(rw, err)
		return false
	}
	return true
}

// checkModel validates the requested model name against the served one.
func (w *Worker) checkModel(model string) error {
	if model == "" {
		return invalidRequest("model", "you must provide a model parameter")
	}
	if model != w.model {
		return &apiError{
			status:  http.StatusNotFound,
			message: fmt.Sprintf("the model %q does not exist", model),
			typ:     "invalid_request_error",
			param:   "model",
			code:    "model_not_found",
		}
	}
	return nil
}

// maxTokens returns the requested output cap, or def.
func (p genParams) maxTokens(def int) (int, error) {
	n, param := def, ""
	if p.MaxTokens != nil {
		n, param = *p.MaxTokens, "max_tokens"
	}
	if p.MaxCompletionTokens != nil {
		n, param = *p.MaxCompletionTokens, "max_completion_tokens"
	}
	if n < 1 {
		return 0, invalidRequest(param, "%s must be at least 1, got %d", param, n)
	}
	return n, nil
}

func (p genParams) includeUsage() bool {
	return p.StreamOptions != nil && p.StreamOptions.IncludeUsage
}

func (p genParams) seed() int64 {
	if p.Seed == nil {
		return 0
	}
	return *p.Seed
}

// messageText extracts the text of a message content: a string, null, or an
// array of parts whose "text" fields are concatenated.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// chatPrompt returns the prompt size, hash and block hashes of a chat
// request.
func chatPrompt(msgs []chatMessage) (prompt, error) {
	if len(msgs) == 0 {
		return prompt{}, invalidRequest("messages", "messages must not be empty")
	}
	parts := make([]string, 0, 2*len(msgs))
	roles := make([]string, 0, len(msgs))
	contents := make([]string, 0, len(msgs))
	for i, m := range msgs {
		text, err := messageText(m.Content)
		if err != nil {
			return prompt{}, invalidRequest(fmt.Sprintf("messages[%d].content", i),
				"messages[%d].content must be a string, null or an array of content parts; found %s", i, jsonFound(err))
		}
		roles = append(roles, m.Role)
		contents = append(contents, text)
		parts = append(parts, m.Role, text)
	}
	return prompt{
		tokens: CountChatTokens(contents),
		hash:   hashStrings(parts),
		blocks: HashTextBlocks(chatBlockText(roles, contents)),
	}, nil
}

// prompt is one prompt's simulated size and identity.
type prompt struct {
	tokens int
	hash   uint64
	blocks []uint64 // chained block hashes for the prefix cache
}

// parsePrompts accepts OpenAI's prompt and input forms: a string, a list of
// strings, a list of token ids, or a list of token-id lists.
func parsePrompts(param string, raw json.RawMessage) ([]prompt, error) {
	raw = bytes.TrimSpace(raw)
	bad := func(err error) ([]prompt, error) {
		return nil, invalidRequest(param, "%s must be a string, a list of strings, a list of token ids or a list of such lists; found %s", param, jsonFound(err))
	}
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		e := invalidRequest(param, "%s is required", param)
		e.code = "missing_required_parameter"
		return nil, e
	}
	var out []prompt
	switch {
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return bad(err)
		}
		out = append(out, textPrompt(s))
	case raw[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return bad(err)
		}
		if len(items) == 0 {
			return nil, invalidRequest(param, "%s must not be empty", param)
		}
		if first := bytes.TrimSpace(items[0]); len(first) > 0 && first[0] != '"' && first[0] != '[' {
			var ids []int
			if err := json.Unmarshal(raw, &ids); err != nil {
				return bad(err)
			}
			return []prompt{idsPrompt(ids)}, nil
		}
		for _, it := range items {
			it = bytes.TrimSpace(it)
			if len(it) > 0 && it[0] == '"' {
				var s string
				if err := json.Unmarshal(it, &s); err != nil {
					return bad(err)
				}
				out = append(out, textPrompt(s))
				continue
			}
			var ids []int
			if err := json.Unmarshal(it, &ids); err != nil {
				return bad(err)
			}
			if len(ids) == 0 {
				return nil, invalidRequest(param, "%s contains an empty token list", param)
			}
			out = append(out, idsPrompt(ids))
		}
	default:
		return bad(&json.UnmarshalTypeError{Value: jsonKind(raw)})
	}
	return out, nil
}

func textPrompt(s string) prompt {
	return prompt{tokens: CountTokens(s), hash: hashStrings([]string{s}), blocks: HashTextBlocks(s)}
}

func idsPrompt(ids []int) prompt {
	return prompt{tokens: len(ids), hash: hashTokens(ids), blocks: HashTokenBlocks(ids)}
}

// Generation is one prompt's work on the engine: its length and the
// output the worker generates for it.
type Generation struct {
	PromptTokens, OutputTokens int
}

// Generations returns the engine work a worker started with seed does for
// a request body sent to path (/v1/chat/completions, /v1/completions or
// /v1/responses):
// one Generation per prompt, by the worker's own token counts and output
// lengths. Embeddings (/v1/embeddings) occupy no engine step and return
// none. A simulator uses it to run a Batch API input file as the workers
// would.
func Generations(path string, body []byte, seed int64) ([]Generation, error) {
	var (
		params  genParams
		prompts []prompt
		def     int
	)
	switch path {
	case "/v1/chat/completions":
		var req chatRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		p, err := chatPrompt(req.Messages)
		if err != nil {
			return nil, err
		}
		params, prompts, def = req.genParams, []prompt{p}, defaultChatMaxTokens
	case "/v1/completions":
		var req completionRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		ps, err := parsePrompts("prompt", req.Prompt)
		if err != nil {
			return nil, err
		}
		params, prompts, def = req.genParams, ps, defaultCompletionMaxTokens
	case "/v1/responses":
		var req responseRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		p, err := req.prompt()
		if err != nil {
			return nil, err
		}
		params, prompts, def = genParams{MaxTokens: req.MaxOutputTokens, IgnoreEOS: req.IgnoreEOS}, []prompt{p}, defaultChatMaxTokens
	case "/v1/embeddings":
		return nil, nil
	default:
		return nil, fmt.Errorf("gpuworker: no generation at %s", path)
	}
	maxTokens, err := params.maxTokens(def)
	if err != nil {
		return nil, err
	}
	n, err := params.choices()
	if err != nil {
		return nil, err
	}
	specs := params.specs(prompts, maxTokens, n)
	out := make([]Generation, len(specs))
	for i, s := range specs {
		out[i] = Generation{PromptTokens: s.prompt, OutputTokens: outputLength(s.hash, seed^s.seed, maxTokens, params.IgnoreEOS)}
	}
	return out, nil
}

// jsonFound says, in JSON's words, what a request held where decoding err
// failed: "a boolean", "a number 1.5", "invalid JSON"; never this
// package's Go types.
func jsonFound(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		kind, rest, _ := strings.Cut(typeErr.Value, " ")
		names := map[string]string{"bool": "a boolean", "number": "a number", "string": "a string",
			"array": "an array", "object": "an object", "null": "null"}
		found, ok := names[kind]
		if !ok {
			found = "a JSON " + kind
		}
		if rest != "" {
			found += " " + rest
		}
		return found
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return "invalid JSON"
	}
	return "an unexpected value"
}

// jsonKind names the JSON value raw starts with, as json.UnmarshalTypeError
// does ("number", "bool", ...).
func jsonKind(raw []byte) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == '{':
		return "object"
	case raw[0] == 't' || raw[0] == 'f':
		return "bool"
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		return "number"
	}
	return "value"
}
