package router

import "github.com/sluice-llm/sluice/router/jsonscan"

// Prefix hashes let a prefix-aware policy send requests that share a prompt
// prefix to the same backend, where that prefix is likely in the prefix
// cache. They are computed on the raw JSON bytes of the prompt ("messages",
// else "prompt") as the client sent them, without decoding it: two requests
// from the same client library with the same leading conversation serialize
// to the same leading bytes.
//
// The prompt is cut into prefixChunk-byte chunks from its start and hash i
// is FNV-1a over chunks 0..i (one running state, read out after each
// chunk), so equal prefixes give equal leading hashes and the first
// differing chunk changes every hash after it. Only whole chunks are
// hashed, as an engine's prefix cache holds only whole blocks. 256 bytes is
// about 64 tokens (four 16-token vLLM blocks) of English text in JSON; 64
// chunks cover the first 16 KiB of prompt (about 4k tokens), enough to tell
// shared system prompts and conversation histories apart while costing at
// most one 512-byte allocation per request.
const (
	prefixChunk     = 256
	prefixMaxChunks = 64

	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// prefixHashes returns the chained chunk hashes of body's prompt, or nil
// when it has no whole chunk. body must be valid JSON.
func prefixHashes(body []byte) []uint64 { return prefixHashesOf(promptValue(body)) }

// prefixHashesOf is prefixHashes of an already found prompt value v.
func prefixHashesOf(v []byte) []uint64 {
	n := min(len(v)/prefixChunk, prefixMaxChunks)
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	h := uint64(fnvOffset64)
	for i := range n {
		for _, c := range v[i*prefixChunk : (i+1)*prefixChunk] {
			h ^= uint64(c)
			h *= fnvPrime64
		}
		out[i] = h
	}
	return out
}

// promptValue returns the raw bytes of the top-level "messages" member of
// the JSON object b, else of its "prompt" member, else nil. Keys match
// exactly (as OpenAI-compatible servers read them); with duplicate keys the
// last wins, as in encoding/json. It allocates nothing; b must be valid
// JSON (parseInference finds the same value while it validates).
func promptValue(b []byte) []byte {
	var messages, prompt []byte
	jsonscan.Object(b, func(key, val []byte) {
		switch string(key) {
		case "messages":
			messages = val
		case "prompt":
			prompt = val
		}
	})
	if messages != nil {
		return messages
	}
	return prompt
}
