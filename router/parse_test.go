package router

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseInference(t *testing.T) {
	tests := []struct {
		name string
		body string
		want parsed
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":7,"user":"u1"}`,
			parsed{model: "m", stream: true, maxTokens: 7, user: "u1"}},
		{"max_completion_tokens wins", `{"model":"m","max_tokens":7,"max_completion_tokens":9}`, parsed{model: "m", maxTokens: 9}},
		{"no max", `{"model":"m","prompt":[1,2,3]}`, parsed{model: "m"}},
		{"unknown fields pass", `{"model":"m","ignore_eos":true,"logit_bias":{"1":2}}`, parsed{model: "m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, apiErr := parseInference([]byte(tt.body))
			require.Nil(t, apiErr)
			tt.want.promptTokens = len(tt.body) / bytesPerToken
			assert.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseInference(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[]}`, `{"model":""}`, `{"model":1}`, `[]`, `{`, ``, `null`,
		`{"model":"m","max_tokens":-1}`, `{"model":"m","stream":"x"}`, `{"model":"m","stream_options":{"include_usage":true}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, apiErr := parseInference(body)
		if apiErr != nil {
			if apiErr.Status != 400 || apiErr.Message == "" || apiErr.Type != typeInvalidRequest {
				t.Fatalf("bad rejection %+v", apiErr)
			}
			return
		}
		if p.model == "" || p.maxTokens < 0 {
			t.Fatalf("accepted %q as %+v", body, p)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
	})
}
