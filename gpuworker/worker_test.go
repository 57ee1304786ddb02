package gpuworker_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-llm/sluice/gpuworker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const model = "test-model"

// startWorker runs a worker and an httptest server, both stopped at cleanup.
func startWorker(t *testing.T, opts gpuworker.Options) (*gpuworker.Worker, *httptest.Server) {
	t.Helper()
	if opts.Model == "" {
		opts.Model = model
	}
	w, err := gpuworker.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	return w, srv
}

func client(srv *httptest.Server) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithMaxRetries(0),
	)
}

func TestChatCompletion(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Seed: 3})
	c := client(srv)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there, worker!")}
	resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: model, Messages: msgs, MaxTokens: openai.Int(40),
	})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, int64(gpuworker.CountChatTokens([]string{"Hello there, worker!"})), resp.Usage.PromptTokens)
	assert.GreaterOrEqual(t, resp.Usage.CompletionTokens, int64(1))
	assert.LessOrEqual(t, resp.Usage.CompletionTokens, int64(40))
	assert.Equal(t, resp.Usage.PromptTokens+resp.Usage.CompletionTokens, resp.Usage.TotalTokens)
	assert.Equal(t, int(resp.Usage.CompletionTokens), len(strings.Fields(resp.Choices[0].Message.Content)))

	again, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: model, Messages: msgs, MaxTokens: openai.Int(40),
	})
	require.NoError(t, err)
	assert.Equal(t, resp.Choices[0].Message.Content, again.Choices[0].Message.Content, "deterministic")
}

// n asks for n choices of one prompt: each its own sequence in the
// engine, the prompt counted once in usage, as vLLM counts it.
func TestChatNChoices(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Seed: 3})
	c := client(srv)
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(40),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there, worker!")}}
	one, err := c.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	params.N = openai.Int(3)
	resp, err := c.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 3)
	words := 0
	for i, ch := range resp.Choices {
		assert.EqualValues(t, i, ch.Index)
		words += len(strings.Fields(ch.Message.Content))
	}
	assert.Equal(t, one.Choices[0].Message.Content, resp.Choices[0].Message.Content, "the first choice is the request's alone")
	assert.NotEqual(t, resp.Choices[0].Message.Content, resp.Choices[1].Message.Content, "choices are drawn apart")
	assert.Equal(t, one.Usage.PromptTokens, resp.Usage.PromptTokens, "the prompt counted once")
	assert.EqualValues(t, words, resp.Usage.CompletionTokens)
	assert.Equal(t, one.Usage.CompletionTokens+resp.Usage.CompletionTokens, w.Load().GenerationTokens, "every choice decoded")

	stream := c.Chat.Completions.NewStreaming(t.Context(), params)
	perChoice := map[int64]int{}
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			perChoice[ch.Index]++
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Len(t, perChoice, 3)
}

func TestCompletionIgnoreEOSExactLength(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Speedup: 1000})
	c := client(srv)
	resp, err := c.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:     model,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(37),
	}, option.WithJSONSet("ignore_eos", true))
	require.NoError(t, err)
	assert.Equal(t, int64(37), resp.Usage.CompletionTokens)
	assert.Equal(t, int64(4), resp.Usage.PromptTokens)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, openai.CompletionChoiceFinishReasonLength, resp.Choices[0].FinishReason)
}

func TestChatStreamingWithUsage(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Speedup: 1000})
	c := client(srv)
	stream := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")},
		MaxTokens:     openai.Int(12),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithJSONSet("ignore_eos", true))
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 {
			chunks++
			assert.Equal(t, "chat.completion.chunk", string(chunk.Object))
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Equal(t, 13, chunks, "a role chunk, then one chunk per token")
	assert.Equal(t, int64(12), acc.Usage.CompletionTokens)
	assert.Positive(t, acc.Usage.PromptTokens)
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)
	assert.Len(t, strings.Fields(acc.Choices[0].Message.Content), 12)

	l := w.Load()
	assert.Equal(t, int64(12), l.GenerationTokens)
	assert.Zero(t, l.KVBlocksUsed)
}

func TestCompletionStreamingMultiplePrompts(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{})
	c := client(srv)
	stream := c.Completions.NewStreaming(t.Context(), openai.CompletionNewParams{
		Model:         model,
		Prompt:        openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b"}},
		MaxTokens:     openai.Int(5),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithJSONSet("ignore_eos", true))
	perChoice := map[int64]int{}
	var usage openai.CompletionUsage
	for stream.Next() {
		chunk := stream.Current()
		for _, ch := range chunk.Choices {
			perChoice[ch.Index]++
		}
		if chunk.Usage.TotalTokens > 0 {
			usage = chunk.Usage
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Equal(t, map[int64]int{0: 5, 1: 5}, perChoice)
	assert.Equal(t, int64(10), usage.CompletionTokens)
	assert.Equal(t, int64(2), usage.PromptTokens)
}

func TestCompletionPromptForms(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{})
	tests := []struct {
		name       string
		prompt     string
		wantPrompt int
		wantChoice int
	}{
		{"string", `"12345678"`, 2, 1},
		{"strings", `["1234", "12345678"]`, 3, 2},
		{"token ids", `[1, 2, 3, 4, 5]`, 5, 1},
		{"token id lists", `[[1, 2], [3, 4, 5]]`, 5, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(srv)
			var resp openai.Completion
			body := `{"model":"` + model + `","max_tokens":3,"prompt":` + tt.prompt + `}`
			err := c.Post(t.Context(), "completions", []byte(body), &resp)
			require.NoError(t, err)
			assert.Equal(t, int64(tt.wantPrompt), resp.Usage.PromptTokens)
			assert.Len(t, resp.Choices, tt.wantChoice)
		})
	}
}

func TestRequestErrors(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{})
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		param  string
	}{
		{"bad json", "/v1/chat/completions", `{"model":`, http.StatusBadRequest, ""},
		{"no model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, http.StatusBadRequest, "model"},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, http.StatusNotFound, "model"},
		{"no messages", "/v1/chat/completions", `{"model":"` + model + `","messages":[]}`, http.StatusBadRequest, "messages"},
		{"zero max_tokens", "/v1/completions", `{"model":"` + model + `","prompt":"x","max_tokens":0}`, http.StatusBadRequest, "max_tokens"},
		{"bad prompt", "/v1/completions", `{"model":"` + model + `","prompt":{}}`, http.StatusBadRequest, "prompt"},
		{"messages a string", "/v1/chat/completions", `{"model":"` + model + `","messages":"hi"}`, http.StatusBadRequest, "messages"},
		{"max_tokens a string", "/v1/completions", `{"model":"` + model + `","prompt":"x","max_tokens":"ten"}`, http.StatusBadRequest, "max_tokens"},
		{"n of 0", "/v1/chat/completions", `{"model":"` + model + `","n":0,"messages":[{"role":"user","content":"x"}]}`, http.StatusBadRequest, "n"},
		{"n over 128", "/v1/completions", `{"model":"` + model + `","prompt":"x","n":129}`, http.StatusBadRequest, "n"},
		{"empty prompt list", "/v1/completions", `{"model":"` + model + `","prompt":[]}`, http.StatusBadRequest, "prompt"},
		{"embeddings unknown model", "/v1/embeddings", `{"model":"nope","input":"x"}`, http.StatusNotFound, "model"},
		{"prompt of booleans", "/v1/completions", `{"model":"` + model + `","prompt":[true]}`, http.StatusBadRequest, "prompt"},
		{"token ids with a string", "/v1/completions", `{"model":"` + model + `","prompt":[1,"a"]}`, http.StatusBadRequest, "prompt"},
		{"no prompt", "/v1/completions", `{"model":"` + model + `"}`, http.StatusBadRequest, "prompt"},
		{"content a number", "/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":7}]}`, http.StatusBadRequest, "messages[0].content"},
		{"input a number", "/v1/embeddings", `{"model":"` + model + `","input":7}`, http.StatusBadRequest, "input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var apiErr *openai.Error
			c := client(srv)
			err := c.Post(t.Context(), strings.TrimPrefix(tt.path, "/v1/"), []byte(tt.body), nil)
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tt.status, apiErr.StatusCode)
			assert.NotEmpty(t, apiErr.Message)
			assert.Equal(t, tt.param, apiErr.Param)
			assert.NotContains(t, apiErr.Message, "gpuworker.", "named by the request's fields, not the worker's Go types")
			assert.NotContains(t, apiErr.Message, "Go value", "in JSON's words, not encoding/json's")
			assert.NotContains(t, apiErr.Message, "json:", "in JSON's words, not encoding/json's")
			if tt.status == http.StatusBadRequest {
				assert.Equal(t, "invalid_request_error", apiErr.Type)
			}
		})
	}
}

func TestUnknownModelViaClient(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{})
	c := client(srv)
	_, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "other",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.Equal(t, "model_not_found", apiErr.Code)
}

func TestEmbeddings(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{})
	c := client(srv)
	params := openai.EmbeddingNewParams{
		Model: model,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta"}},
	}
	a, err := c.Embeddings.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, a.Data, 2)
	assert.Len(t, a.Data[0].Embedding, 64)
	assert.NotEqual(t, a.Data[0].Embedding, a.Data[1].Embedding)
	assert.Equal(t, int64(3), a.Usage.PromptTokens)

	params.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatBase64
	params.Dimensions = openai.Int(8)
	b, err := c.Embeddings.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, b.Data, 2)
	assert.NotEmpty(t, b.Data[0].Embedding)
}

func TestModelsHealthMetrics(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{})
	c := client(srv)
	page, err := c.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, model, page.Data[0].ID)

	_, err = c.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:  model,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("12345678")},
	}, option.WithJSONSet("ignore_eos", true))
	require.NoError(t, err)

	res, err := http.Get(srv.URL + "/health")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	assert.Equal(t, http.StatusOK, res.StatusCode)

	res, err = http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	text := string(body)
	for _, want := range []string{
		`vllm:num_requests_running{model_name="test-model"} 0`,
		`vllm:num_requests_waiting{model_name="test-model"} 0`,
		`vllm:kv_cache_usage_perc{model_name="test-model"} 0`,
		`vllm:prompt_tokens_total{model_name="test-model"} 2`,
		`vllm:generation_tokens_total{model_name="test-model"} 16`,
	} {
		assert.Contains(t, text, want)
	}
}

func TestClientDisconnectFreesSlot(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	body := `{"model":"` + model + `","prompt":"long story","max_tokens":100000,"ignore_eos":true,"stream":true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(body))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	require.Equal(t, http.StatusOK, res.StatusCode)
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: {"), line)
	l := w.Load()
	require.Equal(t, 1, l.Running)
	require.Positive(t, l.KVBlocksUsed)

	cancel()
	require.Eventually(t, func() bool {
		l := w.Load()
		return l.Running == 0 && l.Waiting == 0 && l.KVBlocksUsed == 0
	}, 10*time.Second, time.Millisecond)
}

func TestRunStopsInFlight(t *testing.T) {
	w, err := gpuworker.New(gpuworker.Options{Model: model, Profile: "h100-llama3-8b"})
	require.NoError(t, err)
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	body := `{"model":"` + model + `","prompt":"x","max_tokens":100000,"ignore_eos":true}`
	resc := make(chan *http.Response, 1)
	go func() {
		res, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			resc <- nil
			return
		}
		resc <- res
	}()
	require.Eventually(t, func() bool { return w.Load().Running == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	res := <-resc
	require.NotNil(t, res)
	require.NoError(t, res.Body.Close())
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)

	assert.True(t, errors.Is(w.Run(t.Context()), gpuworker.ErrAlreadyRunning))
}

func TestNewOptions(t *testing.T) {
	_, err := gpuworker.New(gpuworker.Options{})
	assert.Error(t, err)
	_, err = gpuworker.New(gpuworker.Options{Model: model, Profile: "nope"})
	assert.ErrorIs(t, err, gpuworker.ErrUnknownProfile)
	_, err = gpuworker.New(gpuworker.Options{Model: model, Speedup: -1})
	assert.Error(t, err)
}

// TestStoppingEndsStreamsWithAnErrorEvent: a worker that stops mid-stream
// tells its client so, rather than end the stream as if it were finished.
func TestStoppingEndsStreamsWithAnErrorEvent(t *testing.T) {
	w, err := gpuworker.New(gpuworker.Options{Model: model, Profile: "h100-llama3-8b", Speedup: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	c := client(srv)
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: model, MaxTokens: openai.Int(5000),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	require.True(t, st.Next())
	cancel()
	require.NoError(t, <-done)
	for st.Next() {
	}
	require.Error(t, st.Err())
	assert.Contains(t, st.Err().Error(), "worker stopped")
}

// Generations predicts the usage a worker reports, without ignore_eos too.
func TestGenerationsMatchTheWorker(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Seed: 3})
	c := client(srv)
	for _, text := range []string{"Hello there, worker!", strings.Repeat("a long prompt ", 40), "x"} {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":` + strconv.Quote(text) + `}],"max_tokens":60}`
		gens, err := gpuworker.Generations("/v1/chat/completions", []byte(body), 3)
		require.NoError(t, err)
		require.Len(t, gens, 1)
		resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}, MaxTokens: openai.Int(60),
		})
		require.NoError(t, err)
		assert.Equal(t, resp.Usage.PromptTokens, int64(gens[0].PromptTokens), text)
		assert.Equal(t, resp.Usage.CompletionTokens, int64(gens[0].OutputTokens), text)

		body = `{"model":"` + model + `","input":` + strconv.Quote(text) + `,"max_output_tokens":60}`
		gens, err = gpuworker.Generations("/v1/responses", []byte(body), 3)
		require.NoError(t, err)
		require.Len(t, gens, 1)
		r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(60),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}})
		require.NoError(t, err)
		assert.Equal(t, r.Usage.InputTokens, int64(gens[0].PromptTokens), text)
		assert.Equal(t, r.Usage.OutputTokens, int64(gens[0].OutputTokens), text)
	}
	gens, err := gpuworker.Generations("/v1/completions", []byte(`{"model":"m","prompt":["ab","cd"],"max_tokens":5,"ignore_eos":true}`), 0)
	require.NoError(t, err)
	assert.Equal(t, []gpuworker.Generation{{PromptTokens: 1, OutputTokens: 5}, {PromptTokens: 1, OutputTokens: 5}}, gens)
	gens, err = gpuworker.Generations("/v1/embeddings", []byte(`{"model":"m","input":"ab"}`), 0)
	require.NoError(t, err)
	assert.Empty(t, gens)
	_, err = gpuworker.Generations("/v1/chat/completions", []byte(`{"messages":[]}`), 0)
	assert.Error(t, err)
}
