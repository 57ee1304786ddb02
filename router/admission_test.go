package router_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

// holdSlot starts a long stream that takes the route's only slot and
// returns the function that ends it.
func holdSlot(t *testing.T, c openai.Client) func() {
	t.Helper()
	p := chatParams(model)
	p.MaxTokens = openai.Int(5000)
	ctx, cancel := context.WithCancel(context.Background())
	st := c.Chat.Completions.NewStreaming(ctx, p)
	require.True(t, st.Next(), "the holder streams")
	return func() { cancel(); _ = st.Close() }
}

// waitQueued waits until n requests wait at the route's gate.
func waitQueued(t *testing.T, s *sluice, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return s.gates[0].Waiting() == n }, 5*time.Second, time.Millisecond)
}

func withTier(p openai.ChatCompletionNewParams, tier string) openai.ChatCompletionNewParams {
	p.ServiceTier = openai.ChatCompletionNewParamsServiceTier(tier)
	return p
}

func TestAdmissionServesPriorityFirstAndBindsLate(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 1})
	c := s.client(t)
	release := holdSlot(t, c)

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, tier := range []string{"flex", "default", "priority"} {
		wg.Go(func() {
			_, err := c.Chat.Completions.New(context.Background(), withTier(chatParams(model), tier))
			assert.NoError(t, err)
			mu.Lock()
			order = append(order, tier)
			mu.Unlock()
		})
		waitQueued(t, s, i+1)
	}
	assert.Equal(t, 1, w.Load().Running+w.Load().Waiting, "late binding: the waiting requests are in the router, not the worker's queue")
	release()
	wg.Wait()
	assert.Equal(t, []string{"priority", "default", "flex"}, order)
	page := scrape(t, s)
	assert.Contains(t, page, `sluice_admission_wait_seconds_count{class="flex",model="`+model+`"} 1`)
}

func TestAdmissionShedsFlexFirst(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 1, queue: 2})
	c := s.client(t)
	release := holdSlot(t, c)
	defer release()

	errs := make(chan error, 3)
	send := func(tier string) {
		go func() {
			_, err := c.Chat.Completions.New(context.Background(), withTier(chatParams(model), tier))
			errs <- err
		}()
	}
	send("flex")
	waitQueued(t, s, 1)
	send("default")
	waitQueued(t, s, 2)
	send("priority") // the queue is full: the flex request goes
	err := <-errs
	assertAPIError(t, err, http.StatusTooManyRequests, "resource_unavailable")
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr))
	assert.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))

	_, err = c.Chat.Completions.New(context.Background(), withTier(chatParams(model), "flex"))
	assertAPIError(t, err, http.StatusTooManyRequests, "resource_unavailable")
	_, err = c.Chat.Completions.New(context.Background(), withTier(chatParams(model), "default"))
	assertAPIError(t, err, http.StatusServiceUnavailable, "server_overloaded")

	release()
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	assert.Contains(t, scrape(t, s), `sluice_admission_shed_total{class="flex",model="`+model+`",reason="queue full"} 2`)
}

func TestAdmissionClientThatLeavesFreesItsPlace(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 1})
	c := s.client(t)
	release := holdSlot(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(ctx, chatParams(model))
		done <- err
	}()
	waitQueued(t, s, 1)
	cancel()
	require.Error(t, <-done)
	waitQueued(t, s, 0)
	release()
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
	assert.EqualValues(t, 2, s.endpoints[w.srv.URL].Requests(), "the request that left never reached the worker")
}

func TestAdmissionSharesTokensFairlyBetweenTenants(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	opts := withTenants(t, &auth.Tenant{Name: "heavy", Tier: "pro"}, &auth.Tenant{Name: "light", Tier: "pro"})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 1, queue: 100})
	heavy, light := s.keyed(t, "sk-heavy", 0), s.keyed(t, "sk-light", 0)
	release := holdSlot(t, light)

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	send := func(c openai.Client, name string, maxTokens int64) {
		wg.Go(func() {
			p := chatParams(model)
			p.MaxTokens = openai.Int(maxTokens)
			_, err := c.Chat.Completions.New(context.Background(), p)
			assert.NoError(t, err)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		})
	}
	for i := range 4 { // heavy asks 10x the tokens of light per request
		send(heavy, "heavy", 200)
		waitQueued(t, s, 2*i+1)
		send(light, "light", 2)
		waitQueued(t, s, 2*i+2)
	}
	release()
	wg.Wait()
	// Served by tokens, not requests: after heavy's first 200-token
	// request, light's (about 30 tokens each with the prompt) all go
	// before heavy's second.
	require.Len(t, order, 8)
	heavySeen := 0
	for _, n := range order {
		if n == "heavy" {
			heavySeen++
		} else {
			assert.LessOrEqual(t, heavySeen, 1, "light waited behind more than one heavy request: %v", order)
		}
	}
}

func TestAnswersNameTheServiceTierThatServedThem(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 4})
	c := s.client(t)
	res, err := c.Chat.Completions.New(context.Background(), withTier(chatParams(model), "flex"))
	require.NoError(t, err)
	assert.Equal(t, openai.ChatCompletionServiceTierFlex, res.ServiceTier)

	st := c.Chat.Completions.NewStreaming(context.Background(), withTier(chatParams(model), "auto"))
	n := 0
	for st.Next() {
		assert.Equal(t, openai.ChatCompletionChunkServiceTierDefault, st.Current().ServiceTier, "auto resolves to the tier's default")
		n++
	}
	require.NoError(t, st.Err())
	assert.Positive(t, n)

	res, err = c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
	assert.Empty(t, res.ServiceTier, "not asked, not stamped: the backend's bytes as they were")
	_, err = c.Chat.Completions.New(context.Background(), withTier(chatParams(model), "turbo"))
	assertAPIError(t, err, http.StatusBadRequest, "invalid_value")
}

// A burst of streams through a gate whose prefill bound fits one prompt
// reaches the backend one prefill at a time: each request bound counts
// from the moment it is bound, not once its attempt has started, and the
// next binds at the first token. The backend is a real server on loopback
// that counts the requests it holds before their first byte.
func TestAdmissionHoldsThePrefillBoundUnderABurst(t *testing.T) {
	var mu sync.Mutex
	prefilling, peak, served := 0, 0, 0
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		prefilling++
		peak = max(peak, prefilling)
		served++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // the prefill
		mu.Lock()
		prefilling--
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"` + model + `","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`
		_, _ = io.WriteString(w, "data: "+chunk+"\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(30 * time.Millisecond) // the decode
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(backend.Close)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{backend.URL}, budget: 16, pendingPrompt: 1})
	c := s.client(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			st := c.Chat.Completions.NewStreaming(context.Background(), chatParams(model))
			for st.Next() {
			}
			assert.NoError(t, st.Err())
		})
	}
	wg.Wait()
	assert.Equal(t, 8, served)
	assert.Equal(t, 1, peak, "one prompt fits the bound: one prefill at a time")
}

// A request bound to a backend that cannot be reached, while the other
// backend is at its budget, waits for room there instead of failing: by
// hand, a request that arrived as a backend was killed got 502 while the
// survivor was full.
func TestAdmissionRetryWaitsForRoom(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{Retries: 1}, routeSpec{model: model, policy: "round_robin", urls: []string{w.srv.URL, deadURL(t)}, budget: 1})
	c := s.client(t)
	release := holdSlot(t, c) // round robin's first pick: the live worker
	done := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(context.Background(), chatParams(model)) // bound to the dead one, the only one with room
		done <- err
	}()
	waitQueued(t, s, 1) // its retry waits for the live worker's slot
	release()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the retry was not bound after the slot freed")
	}
}

// With pending_until_step a request held by the prefill bound binds at the
// step after the prompt that filled the bound was sent, as the stream
// running on the backend shows it, not at that prompt's first token: here
// it is on the backend while a 6,000-token prompt sent before it (about a
// second of an L4's prefill) has no first token yet. Without the option it
// waits for that first token.
func TestPendingUntilStepBindsAtTheNextStep(t *testing.T) {
	for _, until := range []bool{true, false} {
		t.Run(map[bool]string{true: "until_step", false: "until_first_token"}[until], func(t *testing.T) {
			w := startWorker(t, model, "l4-llama3-8b", 1)
			s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 8,
				pendingPrefill: 10 * time.Millisecond, untilStep: until})
			ep := s.endpoints[w.srv.URL]
			c := s.client(t)
			t.Cleanup(holdSlot(t, c)) // a stream running on the backend: its tokens mark the steps

			long := chatParams(model)
			long.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("abcd", 6000))}
			long.MaxTokens = openai.Int(1)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			longDone := make(chan error, 1)
			go func() {
				st := c.Chat.Completions.NewStreaming(ctx, long)
				for st.Next() {
				}
				longDone <- st.Err()
				_ = st.Close()
			}()
			require.Eventually(t, func() bool { return ep.PendingPromptTokens() >= 6000 }, 5*time.Second, time.Millisecond, "the long prompt is sent")
			longPending := ep.PendingPromptTokens()
			shortDone := make(chan error, 1)
			go func() {
				_, err := c.Chat.Completions.New(ctx, chatParams(model))
				shortDone <- err
			}()
			if until {
				// Held only until the holder's next token, which may come
				// before the short request reaches the gate on a busy
				// machine, so what is checked is when it is sent: its prompt
				// joins the long one's, which has no first token yet.
				require.Eventually(t, func() bool { return ep.PendingPromptTokens() > longPending }, 10*time.Second, 100*time.Microsecond,
					"bound while the long prompt had no first token")
			} else {
				waitQueued(t, s, 1) // held: the long prompt fills the bound
				require.Eventually(t, func() bool { return s.gates[0].Waiting() == 0 }, 10*time.Second, 100*time.Microsecond)
				// The router ends a prompt's pending prefill at its first token.
				assert.Less(t, ep.PendingPromptTokens(), int64(6000), "bound only once the long prompt had its first token")
			}
			require.NoError(t, <-shortDone)
			require.NoError(t, <-longDone)
		})
	}
}

// With pending_until_step the router marks a backend's steps from the
// streams it relays: a prompt sent to it stops counting toward the
// prefill bound once a stream from it delivers more bytes, though its own
// first token has not come (here it never does: an attempt begun by hand).
// Without the option nothing is marked.
func TestRelayedStreamsMarkTheBackendsSteps(t *testing.T) {
	for _, until := range []bool{true, false} {
		w := startWorker(t, model, "l4-llama3-8b", 10)
		s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 8,
			pendingPrefill: time.Second, untilStep: until})
		ep := s.endpoints[w.srv.URL]
		p := chatParams(model)
		p.MaxTokens = openai.Int(40)
		c := s.client(t)
		st := c.Chat.Completions.NewStreaming(context.Background(), p)
		require.True(t, st.Next(), "the stream's first chunk: %v", st.Err())
		sent := ep.Start(500, 600) // a prompt sent while the stream runs
		assert.EqualValues(t, 500, ep.FreshPromptTokens())
		for st.Next() {
		}
		require.NoError(t, st.Err())
		require.NoError(t, st.Close())
		assert.GreaterOrEqual(t, ep.PendingPromptTokens(), int64(500), "no first token of its own")
		if until {
			assert.Zero(t, ep.FreshPromptTokens(), "the stream's next bytes marked a step: the prompt is the engine's")
		} else {
			assert.EqualValues(t, 500, ep.FreshPromptTokens(), "no marks without pending_until_step")
		}
		sent.Finish(backends.Outcome{})
	}
}

// TestEndStreamsRefusesQueuedRequests: when the drain time runs out, the
// open streams end with an error event, and the server's base context
// ends: a whole answer still awaited and a request waiting in admission
// (bound to the slot an ended stream frees, or not) are answered 503
// server_shutting_down rather than started, or cut without a word as the
// server closed.
func TestEndStreamsRefusesQueuedRequests(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 2})
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.Config.BaseContext = func(net.Listener) context.Context { return base } // as cmd/sluice serves
	srv.Start()
	s.srv.Close()
	s.srv = srv // closed by startSluice's cleanup
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(5000)
	open := c.Chat.Completions.NewStreaming(context.Background(), p)
	require.True(t, open.Next(), "the first stream runs")

	answers := make(chan error, 2)
	go func() {
		_, err := c.Chat.Completions.New(context.Background(), p)
		answers <- err
	}()
	require.Eventually(t, func() bool { return w.Load().Running == 2 }, 5*time.Second, time.Millisecond, "a whole answer runs")
	go func() {
		st := c.Chat.Completions.NewStreaming(context.Background(), p)
		for st.Next() {
		}
		answers <- st.Err()
	}()
	waitQueued(t, s, 1)

	s.EndStreams()
	endRequests()
	for open.Next() {
	}
	require.Error(t, open.Err())
	assert.Contains(t, open.Err().Error(), "shutting down", "the open stream ends with an error event")
	for range 2 {
		var ae *openai.Error
		require.ErrorAs(t, <-answers, &ae)
		assert.Equal(t, http.StatusServiceUnavailable, ae.StatusCode)
		assert.Equal(t, "server_shutting_down", ae.Code, "the whole answer awaited and the queued request are answered")
	}
	assert.Zero(t, s.gates[0].Waiting())
	require.Eventually(t, func() bool { return w.Load().Running+w.Load().Waiting == 0 }, 5*time.Second, time.Millisecond,
		"nothing runs on the worker")
}
