package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrompterLengthAndRange(t *testing.T) {
	p := NewPrompter(PromptOptions{Seed: 3, VocabLow: 10, VocabHigh: 20})
	for _, n := range []int{1, 511, 512, 513, 2000} {
		toks := p.Tokens(nil, 0, Request{PromptTokens: n, OutputTokens: 1})
		require.Len(t, toks, n)
		for _, tok := range toks {
			require.True(t, tok >= 10 && tok < 20, "token %d out of range", tok)
		}
	}
}

func TestPrompterUniqueAndDeterministic(t *testing.T) {
	p := NewPrompter(PromptOptions{Seed: 1})
	r := Request{PromptTokens: 64, OutputTokens: 1}
	a := p.Tokens(nil, 0, r)
	b := p.Tokens(nil, 1, r)
	assert.NotEqual(t, a[:8], b[:8], "different requests must not share a prefix")
	assert.Equal(t, a, p.Tokens(nil, 0, r), "same index, same prompt")
	assert.Equal(t, a, NewPrompter(PromptOptions{Seed: 1}).Tokens(nil, 0, r))
	assert.NotEqual(t, a, NewPrompter(PromptOptions{Seed: 2}).Tokens(nil, 0, r))

	dst := []int{-1}
	assert.Equal(t, append([]int{-1}, a...), p.Tokens(dst, 0, r), "Tokens appends")
}

func TestPrompterSharedBlocks(t *testing.T) {
	p := NewPrompter(PromptOptions{Seed: 9})
	a := p.Tokens(nil, 0, Request{PromptTokens: 1200, HashIDs: []int{7, 8, 9}})
	b := p.Tokens(nil, 1, Request{PromptTokens: 700, HashIDs: []int{7, 8}})
	c := p.Tokens(nil, 2, Request{PromptTokens: 1100, HashIDs: []int{7, 5, 9}})
	require.Len(t, a, 1200)
	require.Len(t, b, 700)
	require.Len(t, c, 1100)

	assert.Equal(t, a[:700], b, "equal ids, equal blocks, cut at the prompt length")
	assert.Equal(t, a[:512], c[:512])
	assert.NotEqual(t, a[512:520], c[512:520], "different id, different block")

	// More tokens than blocks: the tail is unique to the request.
	d := p.Tokens(nil, 3, Request{PromptTokens: 600, HashIDs: []int{7}})
	e := p.Tokens(nil, 4, Request{PromptTokens: 600, HashIDs: []int{7}})
	assert.Equal(t, d[:512], e[:512])
	assert.NotEqual(t, d[512:], e[512:])
}
