package jsonscan

import (
	"bytes"
	"encoding/json"
)

// BytesPerToken is the rough size of a token in text: about four bytes of
// English or code per token in the common tokenizers (and exactly four in
// gpuworker's stand-in tokenizer).
const BytesPerToken = 4

// ApproxTokens estimates the tokens a prompt's JSON value v holds without
// a tokenizer: each number counts one (a prompt given as token ids, as
// /v1/completions and /v1/embeddings accept, is counted exactly) and each
// string one per BytesPerToken bytes, rounded up, and at least one (a
// tokenizer adds a special token to each prompt: 100,000 empty strings
// as embeddings inputs were 200,000 tokens estimated at none). Keys and role names are
// strings too, so a chat message's framing counts a few tokens, about what
// chat templates add. A string that is a base64 data URL counts as the
// media it holds (see ImagePatch and BytesPerMediaToken), not as text.
// v must be valid JSON. It allocates nothing but to read an inline image's
// header.
func ApproxTokens(v []byte) int {
	n := 0
	for i := 0; i < len(v); {
		switch c := v[i]; {
		case c == '"':
			end := SkipString(v, i)
			if end < 0 {
				return n
			}
			n += valueTokens(v[i:end])
			i = end
		case c == '-' || c >= '0' && c <= '9':
			n++
			for i++; i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.' || v[i] == 'e' || v[i] == 'E' || v[i] == '+' || v[i] == '-'); i++ {
			}
		default:
			i++
		}
	}
	return n
}

// RouteTokens estimates the prompt tokens of a request to path, as the
// router does: the route's member (messages for chat, prompt for
// completions, input for embeddings) by ApproxTokens, and every other byte
// of its bodyLen-byte body at BytesPerToken.
func RouteTokens(path string, messages, prompt, input []byte, bodyLen int) int {
	var m []byte
	if i := RouteMember(path); i >= 0 {
		m = [...][]byte{messages, prompt, input}[i]
	}
	return ApproxTokens(m) + (bodyLen-len(m))/BytesPerToken
}

// RouteMember is which of messages, prompt and input (0, 1, 2) a request
// to path carries its prompt in; -1 for another path.
func RouteMember(path string) int {
	switch path {
	case "/v1/chat/completions":
		return 0
	case "/v1/completions":
		return 1
	case "/v1/embeddings", "/v1/responses":
		return 2
	}
	return -1
}

// PromptCount is how many prompts a completion's prompt member holds: a
// string or an array of token ids is one, an array of strings or of id
// arrays one per element.
func PromptCount(prompt []byte) int {
	v := bytes.TrimLeft(prompt, " \t\r\n")
	if len(v) == 0 || v[0] != '[' {
		return 1
	}
	first := bytes.TrimLeft(v[1:], " \t\r\n")
	if len(first) == 0 || (first[0] != '"' && first[0] != '[') {
		return 1 // token ids, or empty
	}
	var list []json.RawMessage
	if json.Unmarshal(v, &list) != nil || len(list) == 0 {
		return 1
	}
	return len(list)
}

// PromptMember is which of messages, prompt and input (0, 1 or 2)
// parseInference estimates before it knows the route: the first present;
// -1 when none is.
func PromptMember(messages, prompt, input []byte) int {
	switch {
	case messages != nil:
		return 0
	case prompt != nil:
		return 1
	case input != nil:
		return 2
	}
	return -1
}
