package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIdealPrefixReuse(t *testing.T) {
	const b = BlockTokens
	tests := []struct {
		name string
		reqs []Request
		want float64
	}{
		{"empty", nil, 0},
		{"no ids", []Request{{PromptTokens: 100}, {PromptTokens: 100}}, 0},
		{"repeat", []Request{{PromptTokens: 2 * b, HashIDs: []int{1, 2}}, {PromptTokens: 2 * b, HashIDs: []int{1, 2}}}, 0.5},
		{"shared first block", []Request{{PromptTokens: 2 * b, HashIDs: []int{1, 2}}, {PromptTokens: 2 * b, HashIDs: []int{1, 3}}}, 0.25},
		// A block hits only after a hit on every block before it.
		{"chained", []Request{{PromptTokens: 2 * b, HashIDs: []int{1, 2}}, {PromptTokens: 2 * b, HashIDs: []int{3, 2}}}, 0},
		// A partial block counts what earlier requests had of it.
		{"partial after whole", []Request{{PromptTokens: 2 * b, HashIDs: []int{1, 2}}, {PromptTokens: b + 100, HashIDs: []int{1, 2}}}, float64(b+100) / float64(3*b+100)},
		{"whole after partial", []Request{{PromptTokens: b + 100, HashIDs: []int{1, 2}}, {PromptTokens: 2 * b, HashIDs: []int{1, 2}}}, float64(b+100) / float64(3*b+100)},
		{"tail past the ids", []Request{{PromptTokens: 3 * b, HashIDs: []int{1}}, {PromptTokens: 3 * b, HashIDs: []int{1}}}, 1.0 / 6},
		{"ids past the prompt", []Request{{PromptTokens: 10, HashIDs: []int{1, 2}}, {PromptTokens: 10, HashIDs: []int{1, 2}}}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, IdealPrefixReuse(tt.reqs), 1e-12)
		})
	}
}
