package usage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/router/measure"
	"github.com/sluice-llm/sluice/router/usage"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const model = "test-model"

// startWorker runs a real gpuworker on loopback, stopped at cleanup.
func startWorker(t *testing.T, faults gpuworker.Faults) *url.URL {
	t.Helper()
	w, err := gpuworker.New(gpuworker.Options{Model: model, Profile: "h100-llama3-8b", Speedup: 1000, Seed: 7, Faults: faults})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
	})
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return u
}

// relay stands in for the router's attempt: it asks the backend for usage,
// proxies with httputil.ReverseProxy through a measure.Writer that strips
// the usage chunk when it asked on the client's behalf, and keeps the bytes
// the backend sent.
type relay struct {
	target    *url.URL
	transport *http.Transport

	mu       sync.Mutex
	upstream bytes.Buffer
	injected bool
	result   measure.Result
	done     chan struct{} // closed when the handler has returned
}

func newRelay(t *testing.T, target *url.URL) *relay {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &relay{target: target, transport: tr, done: make(chan struct{})}
}

func (rl *relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer close(rl.done)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, injected, err := usage.AskUsage(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mw := measure.NewWriter(w, time.Now(), nil)
	mw.StripUsageChunk = injected
	defer func() { // also when ReverseProxy aborts a stream cut short
		rl.mu.Lock()
		defer rl.mu.Unlock()
		rl.injected, rl.result = injected, mw.Result()
	}()
	rp := httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(rl.target)
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
			pr.Out.Header.Set("Content-Length", strconv.Itoa(len(body)))
		},
		Transport: rl.transport,
		ModifyResponse: func(res *http.Response) error {
			res.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(res.Body, rl), res.Body}
			return nil
		},
	}
	rp.ServeHTTP(mw, r)
	_ = mw.Finish() // the client has gone if it fails
}

// Write keeps the bytes the backend sent.
func (rl *relay) Write(p []byte) (int, error) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.upstream.Write(p)
}

// wait returns what the relay saw once its handler has returned.
func (rl *relay) wait(t *testing.T) (upstream string, injected bool, res measure.Result) {
	t.Helper()
	select {
	case <-rl.done:
	case <-t.Context().Done():
		t.Fatal("the relay did not finish")
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.upstream.String(), rl.injected, rl.result
}

// events splits an SSE stream with LF line endings into its events.
func events(s string) []string {
	var out []string
	for _, e := range strings.SplitAfter(s, "\n\n") {
		if e != "" {
			out = append(out, e)
		}
	}
	return out
}

// usageOf returns the usage that the backend's usage chunk reported.
func usageOf(t *testing.T, upstream string) (event string, prompt, completion int) {
	t.Helper()
	for _, e := range events(upstream) {
		if !strings.Contains(e, `"choices":[]`) {
			continue
		}
		var c struct {
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(e, "data: "))), &c))
		require.Empty(t, event, "one usage chunk")
		event, prompt, completion = e, c.Usage.PromptTokens, c.Usage.CompletionTokens
	}
	require.NotEmpty(t, event, "gpuworker sent a usage chunk")
	return event, prompt, completion
}

const question = "Tell me about token accounting, in a streamed answer."

func TestUsageIsMeasuredAndStrippedWithARealWorker(t *testing.T) {
	rl := newRelay(t, startWorker(t, gpuworker.Faults{}))
	body := `{"model":"` + model + `","stream":true,"max_tokens":24,"ignore_eos":true,` +
		`"messages":[{"role":"user","content":"` + question + `"}]}`
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	rl.ServeHTTP(rec, req)
	upstream, injected, res := rl.wait(t)

	require.Equal(t, http.StatusOK, rec.Code)
	require.True(t, injected, "the client did not ask for usage")
	usageEvent, prompt, completion := usageOf(t, upstream)
	got := rec.Body.String()
	assert.Equal(t, strings.Replace(upstream, usageEvent, "", 1), got, "the client gets every byte but the usage chunk")
	assert.NotContains(t, got, `"usage"`)
	evs := events(got)
	require.NotEmpty(t, evs)
	assert.Equal(t, "data: [DONE]\n\n", evs[len(evs)-1])
	for _, e := range evs[:len(evs)-1] {
		require.True(t, strings.HasPrefix(e, "data: "), e)
		assert.True(t, json.Valid([]byte(strings.TrimSpace(strings.TrimPrefix(e, "data: ")))), e)
	}

	// The official client reads what the client got.
	stream := ssestream.NewStream[openai.ChatCompletionChunk](ssestream.NewDecoder(rec.Result()), nil)
	var acc openai.ChatCompletionAccumulator
	content := 0
	for stream.Next() {
		c := stream.Current()
		require.True(t, acc.AddChunk(c))
		assert.Zero(t, c.Usage.TotalTokens, "no usage reaches the client")
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			content++
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)

	assert.Equal(t, 24, completion)
	assert.Equal(t, gpuworker.CountChatTokens([]string{question}), prompt)
	assert.True(t, res.UsageExact)
	assert.Equal(t, prompt, res.PromptTokens, "the usage gpuworker reported")
	assert.Equal(t, completion, res.CompletionTokens)
	assert.Equal(t, completion, res.Relayed, "gpuworker sends one token per event")
	assert.Equal(t, content, res.Relayed)
	assert.Positive(t, res.TTFT)
}

func TestTheOfficialClientThroughARelay(t *testing.T) {
	worker := startWorker(t, gpuworker.Faults{})
	tests := []struct {
		name     string
		ask      bool // the client asks for usage itself
		injected bool
	}{
		{"client does not ask for usage", false, true},
		{"client asks for usage", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl := newRelay(t, worker)
			srv := httptest.NewServer(rl)
			t.Cleanup(srv.Close)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"),
				option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
			p := openai.ChatCompletionNewParams{
				Model:     model,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
				MaxTokens: openai.Int(16),
			}
			if tt.ask {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			stream := c.Chat.Completions.NewStreaming(t.Context(), p)
			var acc openai.ChatCompletionAccumulator
			usageChunks := 0
			for stream.Next() {
				ch := stream.Current()
				require.True(t, acc.AddChunk(ch))
				if len(ch.Choices) == 0 {
					usageChunks++
				}
			}
			require.NoError(t, stream.Err())
			require.NoError(t, stream.Close())
			upstream, injected, res := rl.wait(t)
			_, prompt, completion := usageOf(t, upstream)

			assert.Equal(t, tt.injected, injected)
			assert.True(t, res.UsageExact)
			assert.Equal(t, [2]int{prompt, completion}, [2]int{res.PromptTokens, res.CompletionTokens})
			assert.Equal(t, completion, res.Relayed)
			if tt.ask {
				assert.Equal(t, 1, usageChunks, "the client's own usage chunk is relayed")
				assert.Equal(t, int64(prompt), acc.Usage.PromptTokens)
				assert.Equal(t, int64(completion), acc.Usage.CompletionTokens)
				return
			}
			assert.Zero(t, usageChunks, "the injected usage chunk is stripped")
			assert.Zero(t, acc.Usage.TotalTokens)
			require.Len(t, acc.Choices, 1)
			assert.Len(t, strings.Fields(acc.Choices[0].Message.Content), completion)
		})
	}
}

func TestAStreamCutShortIsChargedWhatWasRelayed(t *testing.T) {
	rl := newRelay(t, startWorker(t, gpuworker.Faults{StallAfter: 5}))
	srv := httptest.NewServer(rl)
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		MaxTokens: openai.Int(40),
	}, option.WithJSONSet("ignore_eos", true))
	content := 0
	for content < 5 && stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			content++
		}
	}
	require.Equal(t, 5, content, "the worker stalls after five tokens")
	cancel() // the client gives up on the stalled stream
	_ = stream.Close()
	_, injected, res := rl.wait(t)
	assert.True(t, injected)
	assert.False(t, res.UsageExact, "no usage was reported")
	assert.Zero(t, res.CompletionTokens)
	assert.Equal(t, 5, res.Relayed, "the fallback charge: the token events the client got")
}
