package gpuworker

import "hash/fnv"

// Deterministic stand-ins for a tokenizer. Routers and benchmarks that want
// to predict the worker's usage numbers can use the same rules.

// CountTokens returns the simulated token count of text: one token per four
// UTF-8 bytes, rounded up, and at least 1.
func CountTokens(text string) int {
	return max(1, (len(text)+3)/4)
}

// ChatTokensPerMessage is the framing overhead CountChatTokens adds for each
// message (role and separators).
const ChatTokensPerMessage = 4

// CountChatTokens returns the simulated prompt size of a chat request: for
// each message, CountTokens of its text content plus ChatTokensPerMessage.
func CountChatTokens(contents []string) int {
	n := 0
	for _, c := range contents {
		n += CountTokens(c) + ChatTokensPerMessage
	}
	return max(1, n)
}

// outputLength returns how many tokens to generate: maxTokens when ignoreEOS,
// otherwise a length in [1, maxTokens] fixed by the prompt hash and seed.
func outputLength(promptHash uint64, seed int64, maxTokens int, ignoreEOS bool) int {
	if ignoreEOS || maxTokens <= 1 {
		return max(1, maxTokens)
	}
	return 1 + int(mix(promptHash^uint64(seed))%uint64(maxTokens))
}

// mix is the splitmix64 finaliser: a cheap, well-spread 64-bit hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hashStrings hashes a list of strings unambiguously.
func hashStrings(parts []string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// hashTokens hashes a list of token ids.
func hashTokens(ids []int) uint64 {
	x := uint64(len(ids))
	for _, id := range ids {
		x = mix(x ^ uint64(id))
	}
	return x
}

// tokenText returns the text of output token i (0-based) of a request keyed
// by key: a space and a word from a fixed 32-word vocabulary.
func tokenText(key uint64, i int) string {
	switch mix(key+uint64(i)) % 32 {
	case 0:
		return " the"
	case 1:
		return " of"
	case 2:
		return " and"
	case 3:
		return " to"
	case 4:
		return " in"
	case 5:
		return " is"
	case 6:
		return " it"
	case 7:
		return " that"
	case 8:
		return " for"
	case 9:
		return " on"
	case 10:
		return " with"
	case 11:
		return " as"
	case 12:
		return " was"
	case 13:
		return " at"
	case 14:
		return " by"
	case 15:
		return " an"
	case 16:
		return " be"
	case 17:
		return " this"
	case 18:
		return " are"
	case 19:
		return " from"
	case 20:
		return " or"
	case 21:
		return " have"
	case 22:
		return " not"
	case 23:
		return " but"
	case 24:
		return " what"
	case 25:
		return " all"
	case 26:
		return " were"
	case 27:
		return " when"
	case 28:
		return " we"
	case 29:
		return " there"
	case 30:
		return " can"
	default:
		return " more"
	}
}
