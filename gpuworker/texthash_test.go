package gpuworker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHashTextBlocksSharesPrefixes(t *testing.T) {
	a := strings.Repeat("abcdefgh", 8*5) // 5 full blocks
	b := a[:3*TextBlockBytes] + strings.Repeat("z", 2*TextBlockBytes+10)
	ha, hb := HashTextBlocks(a), HashTextBlocks(b)
	assert.Len(t, ha, 5)
	assert.Len(t, hb, 5, "a trailing partial chunk gets no hash")
	assert.Equal(t, ha[:3], hb[:3])
	assert.NotEqual(t, ha[3], hb[3])
	assert.NotEqual(t, ha[4], hb[4])
	assert.Nil(t, HashTextBlocks(a[:TextBlockBytes-1]))
	assert.Equal(t, len(a)/TextBlockBytes, CountTokens(a)/BlockSize, "blocks line up with CountTokens")
}

func TestChatBlockTextMatchesTokenCount(t *testing.T) {
	tests := []struct {
		name     string
		roles    []string
		contents []string
	}{
		{"short", []string{"user"}, []string{"hi"}},
		{"empty content", []string{"system", "user"}, []string{"", "x"}},
		{"long role", []string{"a-role-longer-than-sixteen-bytes"}, []string{strings.Repeat("q", 301)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := chatBlockText(tt.roles, tt.contents)
			assert.Equal(t, 4*CountChatTokens(tt.contents), len(text))
		})
	}
	sys := strings.Repeat("You are a helpful assistant. ", 10)
	one := HashTextBlocks(chatBlockText([]string{"system", "user"}, []string{sys, "first question"}))
	two := HashTextBlocks(chatBlockText([]string{"system", "user"}, []string{sys, "another question entirely"}))
	assert.NotEmpty(t, one)
	assert.Equal(t, one[:len(one)-1], two[:len(one)-1], "a shared system prompt shares its blocks")
}
