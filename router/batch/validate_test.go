package batch_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/batch"
)

func batchLimits(bytes int64, lines int) batch.Options {
	return batch.Options{MaxFileBytes: bytes, MaxLines: lines}
}

// TestInvalidInput: a batch whose input has bad lines fails, and its
// errors name every line and what is wrong with it; nothing runs.
func TestInvalidInput(t *testing.T) {
	f := start(t, setup{svc: batch.Options{MaxBodyBytes: 4096}})
	acme := f.client(t, "sk-acme")
	tests := []struct {
		name  string
		lines []string
		want  []string // messages, in order
		codes []string
	}{
		{"malformed JSON", []string{chatLine("a", model, 4), `{"custom_id": "b", "method": "POST",`},
			[]string{"line 2: not a JSON object"}, []string{"invalid_json_line"}},
		{"unknown url", []string{chatLine("a", model, 4), chatLine("b", model, 4),
			`{"custom_id":"c","method":"POST","url":"/v1/foo","body":{"model":"` + model + `"}}`},
			[]string{`line 3: url "/v1/foo" is not one of /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses`}, []string{"invalid_url"}},
		{"another endpoint", []string{`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"` + model + `"}}`},
			[]string{`line 1: url "/v1/embeddings" is not the batch's endpoint "/v1/chat/completions"`}, []string{"mismatched_url"}},
		{"duplicate custom_id", []string{chatLine("a", model, 4), chatLine("b", model, 4), chatLine("a", model, 4)},
			[]string{`line 3: custom_id "a" is already used by line 1`}, []string{"duplicate_custom_id"}},
		{"no custom_id, GET, no model", []string{
			`{"method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`,
			`{"custom_id":"b","method":"GET","url":"/v1/chat/completions","body":{"model":"m"}}`,
			`{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`,
			`{"custom_id":"d","method":"POST","url":"/v1/chat/completions","body":"hello"}`},
			[]string{"line 1: custom_id is required", `line 2: method must be "POST"`, "line 3: body.model is required",
				"line 4: body must be a JSON object"},
			[]string{"missing_required_parameter", "invalid_method", "missing_required_parameter", "invalid_body"}},
		{"n of 0", []string{chatLine("a", model, 4), `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"` + model + `","n":0}}`},
			[]string{"line 2: body.n must be from 1 to 128, got 0"}, []string{"invalid_value"}},
		{"blank lines keep their numbers", []string{"", chatLine("a", model, 4), "  ", `[1]`},
			[]string{"line 4: not a JSON object"}, []string{"invalid_json_line"}},
		{"empty", []string{"", ""}, []string{"the input file holds no requests"}, []string{"empty_file"}},
		{"a body over max_body_bytes", []string{chatLine("a", model, 4),
			`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"` + model + `","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}}`},
			[]string{"line 2: body is 5086 bytes as sent (with its service_tier); the server takes request bodies of at most 4096 (max_body_bytes)"}, []string{"request_too_large"}},
		{"two models", []string{chatLine("a", model, 4), chatLine("b", model, 4), chatLine("c", other, 4)},
			[]string{`line 3: body.model "` + other + `" is not "` + model + `", the model of line 1: a batch runs one model`},
			[]string{"mismatched_model"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := upload(t, acme, strings.Join(tt.lines, "\n"))
			b := create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
			b = await(t, acme, b.ID, openai.BatchStatusFailed)
			require.Len(t, b.Errors.Data, len(tt.want), b.RawJSON())
			for i, e := range b.Errors.Data {
				assert.True(t, strings.HasPrefix(e.Message, tt.want[i]), "got %q, want %q...", e.Message, tt.want[i])
				assert.Equal(t, tt.codes[i], e.Code)
			}
			assert.Positive(t, b.FailedAt)
			assert.Empty(t, b.OutputFileID)
			assert.Zero(t, b.RequestCounts.Total)
			_, err := acme.Files.Get(context.Background(), in.ID)
			assert.NoError(t, err, "the input stays")
		})
	}
	if t.Failed() {
		return
	}
	assert.Zero(t, f.worker.Load().GenerationTokens, "no line of an invalid batch ran")
}

// A UTF-8 byte order mark before the first line (some Windows editors
// write one) is not part of its JSON: the batch runs every line.
func TestByteOrderMarkIsSkipped(t *testing.T) {
	f := start(t, setup{})
	acme := f.client(t, "sk-acme")
	in := upload(t, acme, "\xef\xbb\xbf"+chatLines(2, model, 4))
	b := create(t, acme, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	b = await(t, acme, b.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 2, b.RequestCounts.Completed)
	out := download(t, acme, b.OutputFileID)
	require.Len(t, out, 2)
	assert.NotNil(t, out["req-0"].Response, "the first line ran, read from past the mark")
}
