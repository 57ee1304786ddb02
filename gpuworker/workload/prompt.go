package workload

import (
	"math/rand/v2"
	"slices"
)

// Default token id range for prompts: ordinary vocabulary in every common
// tokenizer, clear of the special tokens at the low and high ends.
const (
	DefaultVocabLow  = 1000
	DefaultVocabHigh = 30000
)

// blockStream separates the PRNG streams of shared blocks from those of
// per-request tokens.
const blockStream = 0xb10c_b10c_b10c_b10c

// PromptOptions configures a Prompter. Zero fields mean defaults.
type PromptOptions struct {
	// Seed selects the token ids; the same seed gives the same prompts.
	Seed uint64
	// VocabLow and VocabHigh bound the token ids to [VocabLow, VocabHigh).
	// Default DefaultVocabLow and DefaultVocabHigh.
	VocabLow, VocabHigh int
}

// Prompter turns a Request into a prompt of token ids, for /v1/completions
// with prompt as a list of ints. Its prompts have exactly PromptTokens ids.
// Tokens at block positions covered by HashIDs are a function of the hash id
// alone, so equal ids give equal BlockTokens-sized blocks (and shared
// prefixes reach the engine's prefix cache); every other token is drawn
// from a stream unique to the request's index, so unrelated prompts share no
// accidental prefix. A Prompter is immutable and safe for concurrent use.
type Prompter struct {
	seed      uint64
	low, span int
}

// NewPrompter returns a Prompter for opts.
func NewPrompter(opts PromptOptions) *Prompter {
	low, high := opts.VocabLow, opts.VocabHigh
	if low <= 0 {
		low = DefaultVocabLow
	}
	if high <= low {
		high = max(DefaultVocabHigh, low+1)
	}
	return &Prompter{seed: opts.Seed, low: low, span: high - low}
}

// Tokens appends the prompt of r, the index-th request of its workload, to
// dst and returns the extended slice.
func (p *Prompter) Tokens(dst []int, index int, r Request) []int {
	dst = slices.Grow(dst, r.PromptTokens)
	n := 0
	for _, id := range r.HashIDs {
		if n >= r.PromptTokens {
			break
		}
		k := min(BlockTokens, r.PromptTokens-n)
		dst = p.fill(dst, rand.NewPCG(p.seed^blockStream, uint64(id)), k)
		n += k
	}
	if n < r.PromptTokens {
		dst = p.fill(dst, rand.NewPCG(p.seed, uint64(index)), r.PromptTokens-n)
	}
	return dst
}

// fill appends k token ids drawn from src.
func (p *Prompter) fill(dst []int, src *rand.PCG, k int) []int {
	rng := rand.New(src)
	for range k {
		dst = append(dst, p.low+rng.IntN(p.span))
	}
	return dst
}
