package router_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/proxy"
)

// TestProxiedAnswersFeedTheEndpointAverages streams through Sluice to a
// real-time simulated L4 (about 50 ms per token, so events do not arrive
// coalesced into one read) and checks the endpoint learned a TTFT and a
// decode rate; a whole answer on another endpoint teaches a rate too.
func TestProxiedAnswersFeedTheEndpointAverages(t *testing.T) {
	streamed := startWorker(t, model, "l4-llama3-8b", 1)
	whole := startWorker(t, "other", "l4-llama3-8b", 1)
	s := startSluice(t, router.Options{},
		routeSpec{model: model, urls: []string{streamed.srv.URL}},
		routeSpec{model: "other", urls: []string{whole.srv.URL}})
	c := s.client(t)

	p := chatParams(model)
	p.MaxTokens = openai.Int(6)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(context.Background(), p, option.WithJSONSet("ignore_eos", true))
	for stream.Next() {
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	e := s.endpoints[streamed.srv.URL]
	// The router records an answer when its handler returns, which can be
	// just after the client has read the last byte.
	require.Eventually(t, func() bool { return e.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	assert.Positive(t, e.TTFT(), "TTFT measured on the stream")
	assert.Positive(t, e.TokensPerSec(), "decode rate measured on the stream")
	assert.Positive(t, e.PrefillTokensPerSec(), "prefill rate from the prompt estimate and the TTFT")
	assert.Eventually(t, func() bool { return e.PendingPromptTokens() == 0 }, time.Second, time.Millisecond,
		"the prompt is no longer pending once answered")

	p = chatParams("other")
	p.MaxTokens = openai.Int(6)
	_, err := c.Chat.Completions.New(context.Background(), p, option.WithJSONSet("ignore_eos", true))
	require.NoError(t, err)
	o := s.endpoints[whole.srv.URL]
	require.Eventually(t, func() bool { return o.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	assert.Zero(t, o.TTFT(), "no TTFT from a whole answer")
	assert.Zero(t, o.PrefillTokensPerSec(), "no prefill rate without a TTFT")
	assert.Eventually(t, func() bool { return o.PendingPromptTokens() == 0 }, time.Second, time.Millisecond)
	assert.Positive(t, o.TokensPerSec(), "approximate rate from usage.completion_tokens")
}

// recorder is a picker that keeps a copy of every request it routes.
type recorder struct {
	mu   sync.Mutex
	seen []policies.Request
}

func (r *recorder) Pick(_ context.Context, req *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := *req
	cp.PrefixHashes = append([]uint64(nil), req.PrefixHashes...)
	r.seen = append(r.seen, cp)
	return eps[0], nil
}

func TestSessionKeyAndPrefixHashesReachThePicker(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	e, err := backends.NewEndpoint(w.srv.URL, 1)
	require.NoError(t, err)
	pool, err := backends.NewPool(model, []*backends.Endpoint{e})
	require.NoError(t, err)
	rec := &recorder{}
	table, err := router.NewTable([]*router.Route{{Pool: pool, Picker: rec}})
	require.NoError(t, err)
	_, err = router.New(router.Options{Table: table, SessionHeader: "Bad Header"})
	require.Error(t, err)
	s := startSluiceWith(t, router.Options{Table: table, SessionHeader: "x-conversation"})

	client := s.client(t)
	system := strings.Repeat("You are a careful assistant. ", 40) // about 1.2 KB: four whole chunks
	send := func(user, session, question string) {
		t.Helper()
		p := chatParams(model)
		p.Messages = []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(question)}
		if user != "" {
			p.User = openai.String(user)
		}
		var opts []option.RequestOption
		if session != "" {
			opts = append(opts, option.WithHeader("X-Conversation", session))
		}
		_, err := client.Chat.Completions.New(context.Background(), p, opts...)
		require.NoError(t, err)
	}
	kv := strings.Repeat("What is a KV cache? ", 20) // long enough to fill whole chunks of its own
	send("alice", "conv-1", kv)
	send("alice", "", "Why is the sky blue? "+strings.Repeat("Explain at length. ", 30))
	send("", "", kv)

	require.Len(t, rec.seen, 3)
	assert.Equal(t, "conv-1", rec.seen[0].SessionKey, "the configured header wins")
	assert.Equal(t, "alice", rec.seen[1].SessionKey, "else the user field")
	assert.Empty(t, rec.seen[2].SessionKey)

	a, b := rec.seen[0].PrefixHashes, rec.seen[1].PrefixHashes
	require.GreaterOrEqual(t, len(a), 4)
	require.Greater(t, len(b), len(a), "a longer prompt has more chunks")
	assert.Equal(t, a[:4], b[:4], "the shared system prompt gives equal leading hashes")
	assert.NotEqual(t, a[len(a)-1], b[len(a)-1], "the questions differ after it")
	assert.Equal(t, a, rec.seen[2].PrefixHashes, "the same prompt hashes the same")

	// A Responses conversation sent again with its next turn: its input
	// shares the first turn's prefix.
	turn := []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage(kv, responses.EasyInputMessageRoleUser)}
	respond := func(items responses.ResponseInputParam) {
		t.Helper()
		_, err := client.Responses.New(context.Background(), responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(4),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items}})
		require.NoError(t, err)
	}
	respond(turn)
	respond(append(turn, responses.ResponseInputItemParamOfMessage("A cache.", responses.EasyInputMessageRoleAssistant),
		responses.ResponseInputItemParamOfMessage(kv+" And why?", responses.EasyInputMessageRoleUser)))
	require.Len(t, rec.seen, 5)
	first, next := rec.seen[3].PrefixHashes, rec.seen[4].PrefixHashes
	require.NotEmpty(t, first)
	require.Greater(t, len(next), len(first))
	assert.Equal(t, first[:len(first)-1], next[:len(first)-1], "the next turn shares the history's prefix")
}

// startSluiceWith serves a router built from opts as given.
func startSluiceWith(t *testing.T, opts router.Options) *sluice {
	t.Helper()
	tr := proxy.NewTransport(proxy.TransportOptions{})
	opts.Transport = tr
	rt, err := router.New(opts)
	require.NoError(t, err)
	s := &sluice{Router: rt, endpoints: map[string]*backends.Endpoint{}, srv: httptest.NewServer(rt.Handler())}
	t.Cleanup(func() {
		s.srv.Close()
		tr.CloseIdleConnections()
	})
	return s
}
