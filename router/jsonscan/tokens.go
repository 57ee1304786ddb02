package jsonscan

// BytesPerToken is the rough size of a token in text: about four bytes of
// English or code per token in the common tokenizers (and exactly four in
// gpuworker's stand-in tokenizer).
const BytesPerToken = 4

// ApproxTokens estimates the tokens a prompt's JSON value v holds without
// a tokenizer: each number counts one (a prompt given as token ids, as
// /v1/completions and /v1/embeddings accept, is counted exactly) and each
// string one per BytesPerToken bytes, rounded up. Keys and role names are
// strings too, so a chat message's framing counts a few tokens, about what
// chat templates add. v must be valid JSON. It allocates nothing.
func ApproxTokens(v []byte) int {
	n := 0
	for i := 0; i < len(v); {
		switch c := v[i]; {
		case c == '"':
			end := SkipString(v, i)
			if end < 0 {
				return n
			}
			n += (end - i - 2 + BytesPerToken - 1) / BytesPerToken
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

// PromptTokens estimates a request's prompt tokens from its members: the
// first present of messages (chat), prompt (completions) and input
// (embeddings), by ApproxTokens; with none, the body's bodyLen bytes at
// BytesPerToken.
func PromptTokens(messages, prompt, input []byte, bodyLen int) int {
	members := [...][]byte{messages, prompt, input}
	if i := PromptMember(messages, prompt, input); i >= 0 {
		return ApproxTokens(members[i])
	}
	return bodyLen / BytesPerToken
}

// PromptMember is which of messages, prompt and input (0, 1 or 2)
// PromptTokens counts: the first present; -1 when none is.
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
