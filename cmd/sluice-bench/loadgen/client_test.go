package loadgen

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
)

func TestReadStreamParsing(t *testing.T) {
	long := strings.Repeat("y", 100<<10) // longer than the read buffer
	in := ": keep-alive comment\r\n\r\n" +
		"event: message\r\n" +
		"data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n" +
		"data:{\"choices\":[{\"text\":\"" + long + "\"}]}\n\n" +
		"data: {\"choices\":\n" + // one event split over two data lines
		"data: [{\"text\":\"\"}]}\n\n" + // empty text is not a token chunk
		"data: {\"choices\":[{\"text\":\"c\",\"finish_reason\":\"length\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n" +
		"data: [DONE]\n\n"
	var s report.Sample
	require.NoError(t, readStream(strings.NewReader(in), time.Now(), &s))
	assert.Equal(t, 4, s.OutputTokens, "usage wins over the chunk count")
	assert.Len(t, s.ITL, 2, "three token chunks")
	assert.GreaterOrEqual(t, s.E2E, s.TTFT)
}

func TestReadStreamErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"bad json", "data: {nope\n\n", "decode stream chunk"},
		{"no tokens", "data: [DONE]\n\n", "stream carried no tokens"},
		{"truncated", "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choi", "decode stream chunk"},
		{"no done", "data: {\"choices\":[{\"text\":\"a\"}]}\n\n", "without [DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s report.Sample
			err := readStream(strings.NewReader(tt.in), time.Now(), &s)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
