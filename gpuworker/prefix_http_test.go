package gpuworker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

func TestPrefixCacheHitsOverHTTP(t *testing.T) {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 60) // 2700 bytes, 675 tokens
	ids := make([]string, 700)
	for i := range ids {
		ids[i] = fmt.Sprint(i * 7)
	}
	tests := []struct {
		name string
		path string
		body string
	}{
		{"text prompt", "completions", `{"model":"` + model + `","max_tokens":4,"prompt":"` + long + `"}`},
		{"token ids", "completions", `{"model":"` + model + `","max_tokens":4,"prompt":[` + strings.Join(ids, ",") + `]}`},
		{"chat", "chat/completions", `{"model":"` + model + `","max_tokens":4,"messages":[` +
			`{"role":"system","content":"` + long + `"},{"role":"user","content":"hello"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Speedup: 1000})
			c := client(srv)
			var first openai.Completion
			require.NoError(t, c.Post(t.Context(), tt.path, []byte(tt.body), &first))
			prompt := first.Usage.PromptTokens
			require.Greater(t, prompt, int64(600))
			before := w.Load()
			assert.Zero(t, before.PrefixCacheHits, "a cold cache has nothing to offer")

			require.NoError(t, c.Post(t.Context(), tt.path, []byte(tt.body), nil))
			after := w.Load()
			hits := after.PrefixCacheHits - before.PrefixCacheHits
			// Every full block of the prompt is shared; at most the last one
			// is recomputed, as in vLLM.
			assert.GreaterOrEqual(t, hits, prompt/gpuworker.BlockSize*gpuworker.BlockSize-gpuworker.BlockSize)
			assert.Less(t, hits, prompt)
			assert.Greater(t, after.PrefixCacheQueries, before.PrefixCacheQueries)
		})
	}
}
