package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/roundrobin"
	"github.com/sluice-llm/sluice/router"
)

const model = "llama-3-8b"

func chatParams(m string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     m,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello to the fleet.")},
		MaxTokens: openai.Int(8),
	}
}

func TestModels(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{},
		routeSpec{model: model, urls: []string{w.srv.URL}},
		routeSpec{model: "embed", urls: []string{w.srv.URL}})
	c := s.client(t)

	page, err := c.Models.List(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		assert.Equal(t, "sluice", m.OwnedBy)
	}
	assert.Equal(t, []string{model, "embed"}, ids)

	m, err := c.Models.Get(context.Background(), model)
	require.NoError(t, err)
	assert.Equal(t, model, m.ID)

	_, err = c.Models.Get(context.Background(), "gpt-9")
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")
}

func TestChatCompletion(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)

	resp, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.NotEmpty(t, resp.Choices[0].Message.Content)
	assert.Positive(t, resp.Usage.PromptTokens)
	assert.Positive(t, resp.Usage.CompletionTokens)
	assert.LessOrEqual(t, resp.Usage.CompletionTokens, int64(8))
	assert.Equal(t, resp.Usage.PromptTokens+resp.Usage.CompletionTokens, resp.Usage.TotalTokens)
}

func TestChatCompletionStreaming(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)

	p := chatParams(model)
	p.MaxTokens = openai.Int(16)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunks++
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.GreaterOrEqual(t, chunks, 2)
	require.Len(t, acc.Choices, 1)
	assert.NotEmpty(t, acc.Choices[0].Message.Content)
	assert.Positive(t, acc.Usage.CompletionTokens, "usage chunk arrives when include_usage is set")
}

func TestStreamEndsWithDone(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})

	body := `{"model":"` + model + `","stream":true,"max_tokens":4,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, "text/event-stream", strings.Split(res.Header.Get("Content-Type"), ";")[0])
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	events := strings.Split(strings.TrimSpace(string(raw)), "\n\n")
	require.GreaterOrEqual(t, len(events), 3)
	assert.Equal(t, "data: [DONE]", events[len(events)-1])
	for _, e := range events[:len(events)-1] {
		assert.True(t, strings.HasPrefix(e, "data: {"), e)
	}
}

func TestCompletionsAndEmbeddings(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)

	comp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     model,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(5),
	})
	require.NoError(t, err)
	require.Len(t, comp.Choices, 1)
	assert.Positive(t, comp.Usage.CompletionTokens)

	emb, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: model,
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("route me")},
	})
	require.NoError(t, err)
	require.Len(t, emb.Data, 1)
	assert.NotEmpty(t, emb.Data[0].Embedding)
	assert.Positive(t, emb.Usage.PromptTokens)
}

// An error's message reads as written on the wire: JSON's HTML escapes
// are valid but make ">= 1" read "\u003e= 1" to anyone looking at it.
func TestErrorMessagesAreNotHTMLEscaped(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","n":0,"messages":[]}`))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Contains(t, string(raw), "Expected a value >= 1")
}

func TestClientErrors(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{MaxBodyBytes: 4096}, routeSpec{model: model, urls: []string{w.srv.URL}})

	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   string
		param  string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model":`, 400, "invalid_json", ""},
		{"not an object", "/v1/completions", `[1,2]`, 400, "invalid_json", ""},
		{"empty body", "/v1/embeddings", ``, 400, "invalid_json", ""},
		{"missing model", "/v1/chat/completions", `{"messages":[]}`, 400, "missing_required_parameter", "model"},
		{"model of wrong type", "/v1/chat/completions", `{"model":7}`, 400, "invalid_type", "model"},
		{"stream of wrong type", "/v1/chat/completions", `{"model":"m","stream":"yes"}`, 400, "invalid_type", "stream"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[]}`, 404, "model_not_found", "model"},
		{"no messages", "/v1/chat/completions", `{"model":"` + model + `"}`, 400, "missing_required_parameter", "messages"},
		{"messages a string", "/v1/chat/completions", `{"model":"` + model + `","messages":"hi"}`, 400, "invalid_type", "messages"},
		{"prompt a number", "/v1/completions", `{"model":"` + model + `","prompt":7}`, 400, "invalid_type", "prompt"},
		{"input an object", "/v1/embeddings", `{"model":"` + model + `","input":{}}`, 400, "invalid_type", "input"},
		{"n of 0", "/v1/chat/completions", `{"model":"` + model + `","n":0,"messages":[]}`, 400, "integer_below_min_value", "n"},
		{"best_of of 0", "/v1/completions", `{"model":"` + model + `","best_of":0,"prompt":"hi"}`, 400, "integer_below_min_value", "best_of"},
		{"n over 128", "/v1/chat/completions", `{"model":"` + model + `","n":129,"messages":[]}`, 400, "integer_above_max_value", "n"},
		{"max_tokens of 0", "/v1/chat/completions", `{"model":"` + model + `","max_tokens":0,"messages":[]}`, 400, "integer_below_min_value", "max_tokens"},
		{"max_completion_tokens negative", "/v1/chat/completions", `{"model":"` + model + `","max_completion_tokens":-3,"messages":[]}`, 400, "integer_below_min_value", "max_completion_tokens"},
		{"max_tokens past int", "/v1/chat/completions", `{"model":"` + model + `","max_tokens":9223372036854775808,"messages":[]}`, 400, "integer_above_max_value", "max_tokens"},
		{"n far below int", "/v1/chat/completions", `{"model":"` + model + `","n":-99999999999999999999,"messages":[]}`, 400, "integer_below_min_value", "n"},
		{"max_tokens a decimal", "/v1/chat/completions", `{"model":"` + model + `","max_tokens":5.5,"messages":[]}`, 400, "invalid_type", "max_tokens"},
		{"service_tier empty", "/v1/chat/completions", `{"model":"` + model + `","service_tier":"","messages":[]}`, 400, "invalid_value", "service_tier"},
		{"body too large", "/v1/completions", `{"model":"` + model + `","prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "request_too_large", ""},
		{"unknown route", "/v1/images/generations", `{}`, 404, "not_found", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := http.Post(s.srv.URL+tt.path, "application/json", strings.NewReader(tt.body))
			require.NoError(t, err)
			defer res.Body.Close()
			assert.Equal(t, tt.status, res.StatusCode)
			e := decodeError(t, res)
			assert.Equal(t, tt.code, e.Code)
			assert.Equal(t, tt.param, e.Param)
			assert.NotEmpty(t, e.Message)
			if tt.status < 500 {
				assert.Equal(t, "invalid_request_error", e.Type)
			}
		})
	}

	res, err := http.Post(s.srv.URL+"/v1/audio/speech", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	assert.Equal(t, "Invalid URL (POST /v1/audio/speech)", decodeError(t, res).Message, "names what is not served, as OpenAI does")
	res.Body.Close()

	res, err = http.Get(s.srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

func TestClientErrorsThroughOpenAIClient(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)

	_, err := c.Chat.Completions.New(context.Background(), chatParams("gpt-9"))
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")
	_, err = c.Chat.Completions.New(context.Background(), chatParams(""))
	assertAPIError(t, err, http.StatusBadRequest, "missing_required_parameter")
}

func TestRequestID(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	body := `{"model":"` + model + `","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`

	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", "trace-abc-123")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, []string{"trace-abc-123"}, res.Header.Values("X-Request-Id"))

	req, _ = http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", "has spaces\tand tabs")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	got := res.Header.Get("X-Request-Id")
	assert.Len(t, got, 32, "an invalid ID is replaced by a generated one")
	http.DefaultClient.CloseIdleConnections()
}

func TestRetriesAnotherBackendWhenOneIsDown(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	dead := deadURL(t)
	s := startSluice(t, router.Options{Retries: 1, Cooldown: time.Hour},
		routeSpec{model: model, policy: "round_robin", urls: []string{dead, w.srv.URL}})
	c := s.client(t)
	for range 6 {
		_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
		require.NoError(t, err)
	}
	assert.EqualValues(t, 1, s.endpoints[dead].Failures(), "tried once, then held out")
	assert.False(t, s.endpoints[dead].Available(time.Now()))
	assert.EqualValues(t, 6, s.endpoints[w.srv.URL].Requests())
}

func TestNoReachableBackend(t *testing.T) {
	dead := deadURL(t)
	s := startSluice(t, router.Options{Retries: 1, Cooldown: time.Hour},
		routeSpec{model: model, urls: []string{dead}})
	body := `{"model":"` + model + `","messages":[]}`

	res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadGateway, res.StatusCode)
	assert.Equal(t, "upstream_unavailable", decodeError(t, res).Code)
	res.Body.Close()

	// Now the only backend is held out: 503 with Retry-After.
	res, err = http.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.NotEmpty(t, res.Header.Get("Retry-After"))
	assert.Equal(t, "no_backend_available", decodeError(t, res).Code)
	res.Body.Close()

	res, err = http.Get(s.srv.URL + "/readyz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	res.Body.Close()
	res, err = http.Get(s.srv.URL + "/healthz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
}

// TestReadyWhileSomeModelIsServed: a model whose only backend is out of
// routing (drained, down) leaves the replica ready, naming that model, so
// that draining one model's last backend does not take the other models
// out of every load balancer; with no model served it is unready.
func TestReadyWhileSomeModelIsServed(t *testing.T) {
	w := startWorker(t, model, "instant", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}},
		routeSpec{model: "other", urls: []string{w.srv.URL + "/other"}})
	ready := func() (int, map[string]any) {
		t.Helper()
		res, err := http.Get(s.srv.URL + "/readyz")
		require.NoError(t, err)
		defer res.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		return res.StatusCode, body
	}
	code, body := ready()
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, map[string]any{"status": "ready"}, body)

	s.endpoints[w.srv.URL+"/other"].SetDrained(true)
	code, body = ready()
	assert.Equal(t, http.StatusOK, code, "another model is served")
	assert.Equal(t, []any{"other"}, body["models_without_backends"])

	s.endpoints[w.srv.URL].SetDrained(true)
	code, body = ready()
	assert.Equal(t, http.StatusServiceUnavailable, code, "no model is served")
	assert.ElementsMatch(t, []any{model, "other"}, body["models_without_backends"])
	http.DefaultClient.CloseIdleConnections()
}

func TestLeastRequestSpreadsConcurrentStreams(t *testing.T) {
	// Slow enough that streams overlap: h100 decode is ~6 ms a token.
	w1 := startWorker(t, model, "h100-llama3-8b", 1)
	w2 := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w1.srv.URL, w2.srv.URL}})
	c := s.client(t)

	p := chatParams(model)
	p.MaxTokens = openai.Int(1000) // ~6 s per stream; they are cancelled long before
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []interface{ Close() error }
	for range 4 {
		st := c.Chat.Completions.NewStreaming(ctx, p)
		require.True(t, st.Next(), "first chunk")
		streams = append(streams, st)
	}
	// Four streams open at once: least_request put two on each worker.
	assert.EqualValues(t, 2, s.endpoints[w1.srv.URL].InFlight())
	assert.EqualValues(t, 2, s.endpoints[w2.srv.URL].InFlight())
	assert.Equal(t, 2, w1.Load().Running)
	assert.Equal(t, 2, w2.Load().Running)
	cancel()
	for _, st := range streams {
		_ = st.Close()
	}
	require.Eventually(t, func() bool {
		return s.endpoints[w1.srv.URL].InFlight() == 0 && s.endpoints[w2.srv.URL].InFlight() == 0
	}, 5*time.Second, 10*time.Millisecond)
}

func TestStreamIsRelayedAsItIsGenerated(t *testing.T) {
	// 200 tokens at ~6 ms each take over a second; the first chunk must reach
	// the client while the worker is still generating.
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := c.Chat.Completions.NewStreaming(ctx, p)
	require.True(t, st.Next())
	assert.Equal(t, 1, w.Load().Running, "still generating when the first chunk arrived")
	cancel()
	for st.Next() {
	}
	_ = st.Close()
}

func scrape(t *testing.T, s *sluice) string {
	t.Helper()
	s.settled(t)
	res, err := http.Get(s.srv.URL + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	http.DefaultClient.CloseIdleConnections()
	return string(b)
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(5000)
	ctx, cancel := context.WithCancel(context.Background())
	st := c.Chat.Completions.NewStreaming(ctx, p)
	require.True(t, st.Next())
	require.Equal(t, 1, w.Load().Running)
	cancelled := time.Now()
	cancel()
	_ = st.Close()
	// 5000 tokens would take ~30 s; the slot must be freed long before.
	// How long it took is logged, not asserted (this machine is noisy).
	require.Eventually(t, func() bool {
		l := w.Load()
		return l.Running == 0 && l.Waiting == 0 && s.endpoints[w.srv.URL].InFlight() == 0
	}, 5*time.Second, time.Millisecond)
	t.Logf("the worker's running count dropped to 0 within %v of the cancel", time.Since(cancelled).Round(time.Millisecond))
	assert.Less(t, w.Load().GenerationTokens, int64(5000))
	assert.Contains(t, scrape(t, s), `sluice_upstream_attempts_total{backend="`+w.srv.URL+`",outcome="client_gone"} 1`)
}

func TestMetricsEndpoint(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
	// The request is counted as its handler returns, which can be just
	// after the client has its answer.
	want := `sluice_http_requests_total{class="default",code="200",model="llama-3-8b",route="/v1/chat/completions",tier="none"} 1`
	var text string
	require.Eventually(t, func() bool { text = scrape(t, s); return strings.Contains(text, want) },
		5*time.Second, time.Millisecond)
	assert.Contains(t, text, `sluice_upstream_attempts_total{backend="`+w.srv.URL+`",outcome="ok"} 1`)
}

type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param"`
	Code    string `json:"code"`
}

func decodeError(t *testing.T, res *http.Response) apiError {
	t.Helper()
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	var body struct {
		Error *apiError `json:"error"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	require.NotNil(t, body.Error)
	return *body.Error
}

func assertAPIError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "want *openai.Error, got %v", err)
	assert.Equal(t, status, apiErr.StatusCode)
	assert.Equal(t, code, apiErr.Code)
}

// TestTableRefusesAClashingAlias: an alias names one route only, never
// another model or another model's alias.
func TestTableRefusesAClashingAlias(t *testing.T) {
	route := func(model string, aliases ...string) *router.Route {
		e, err := backends.NewEndpoint("http://127.0.0.1:1", 1)
		require.NoError(t, err)
		pool, err := backends.NewPool(model, []*backends.Endpoint{e})
		require.NoError(t, err)
		picker, err := roundrobin.New(nil)
		require.NoError(t, err)
		return &router.Route{Pool: pool, Picker: picker, Aliases: aliases}
	}
	_, err := router.NewTable([]*router.Route{route("a", "x"), route("b", "y")})
	require.NoError(t, err)
	for _, routes := range [][]*router.Route{
		{route("a", "b"), route("b")},
		{route("a", "x"), route("b", "x")},
		{route("a", "")},
	} {
		_, err := router.NewTable(routes)
		assert.ErrorContains(t, err, "is empty or names another route")
	}
}
