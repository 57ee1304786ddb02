package jsonscan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

func TestSkipValue(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`"abc",`, 5},
		{`"a\"b"}`, 6},
		{`"a\\"x`, 5},
		{`{"a":[1,{"b":"}"}]} ,`, 19},
		{`[1, 2] `, 6},
		{`123,`, 3},
		{`true}`, 4},
		{`"open`, -1},
		{`{"a":1`, -1},
		{``, -1},
		{`,`, -1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, jsonscan.SkipValue([]byte(tt.in), 0), "%q", tt.in)
	}
	assert.Equal(t, 3, jsonscan.SkipSpace([]byte(" \n\tx"), 0))
	assert.Equal(t, 2, jsonscan.SkipSpace([]byte("  "), 0))
}
