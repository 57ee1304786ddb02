package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAliasesAndServedModelNames: clients name a model or one of its
// aliases, and each backend gets the name it serves the model under
// (vLLM's --served-model-name); a gpuworker answers 404 to any other name,
// so every answer below shows the rewrite reached it. The tier's model
// list covers the model's aliases, and the request log and metrics name
// the model, whatever name the client sent.
func TestAliasesAndServedModelNames(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	const hfName = "meta-llama/Meta-Llama-3-8B-Instruct"
	plain, hf, hf2 := startWorker(t, "llama-3-8b"), startWorker(t, hfName), startWorker(t, hfName)
	other := startWorker(t, "other")
	cfg := `listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
scrape:
  enabled: false
models:
  - name: llama-3-8b
    aliases: [gpt-4o-mini, chat-default]
    policy: round_robin
    backends:
      - url: ` + plain.URL + `
      - {url: ` + hf.URL + `, served_model: ` + hfName + `}
  - name: other
    backends:
      - url: ` + other.URL + `
tiers:
  - name: t
    models: [llama-3-8b]
tenants:
  - name: acme
    tier: t
    api_keys: ["` + strings.TrimSpace(sha256Line("sk-acme")) + `"]
`
	logs := &syncBuffer{}
	addr, tr, _ := serveE2E(t, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("sk-acme"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	ctx := context.Background()

	answered := map[string]int{} // by the model the answer names: the name its backend got
	ask := func(name string) {
		t.Helper()
		params := openai.ChatCompletionNewParams{Model: name, MaxTokens: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}
		res, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err, "model %q", name)
		answered[res.Model]++
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		require.NoError(t, stream.Err(), "model %q, streamed", name)
		answered[acc.Model]++
	}
	for _, name := range []string{"llama-3-8b", "gpt-4o-mini", "chat-default"} {
		ask(name)
		ask(name) // round robin: each name reaches both backends
	}
	assert.Equal(t, map[string]int{"llama-3-8b": 6, hfName: 6}, answered,
		"each backend got the name it serves, whichever name the client sent")

	var ids []string
	page, err := client.Models.List(ctx)
	require.NoError(t, err)
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	assert.Equal(t, []string{"llama-3-8b", "gpt-4o-mini", "chat-default"}, ids, "the model, then its aliases; not a model the tier leaves out")
	m, err := client.Models.Get(ctx, "gpt-4o-mini")
	require.NoError(t, err)
	assert.Equal(t, "gpt-4o-mini", m.ID)
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "other",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "the tier does not list it")

	// A backend added through the admin API with its own served name
	// joins the rotation under it.
	adminAddr := adminAddrOf(t, logs)
	req, err := http.NewRequest(http.MethodPost, "http://"+adminAddr+"/admin/backends",
		strings.NewReader(`{"model":"llama-3-8b","url":"`+hf2.URL+`","served_model":"`+hfName+`"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-secret")
	res, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "msg=\"backend added\"") }, 5*time.Second, 5*time.Millisecond)
	clear(answered)
	for range 3 {
		ask("gpt-4o-mini")
	}
	assert.Equal(t, map[string]int{"llama-3-8b": 2, hfName: 4}, answered, "three backends in turn, two under the served name")

	logged := func() map[string]int { // the request log's lines by model
		out := map[string]int{}
		for _, m := range regexp.MustCompile(`msg=request .*? model=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
			out[m[1]]++
		}
		return out
	}
	// A line is written once its answer has gone: the last may come after.
	require.Eventually(t, func() bool { return logged()["llama-3-8b"] == 18 }, 5*time.Second, 5*time.Millisecond,
		"the log names the model, not the alias sent: %v", logged())
	assert.Len(t, logged(), 2, "and the one other request, refused: %v", logged())
}
