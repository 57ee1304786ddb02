package router_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	pngenc "image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

// withTenants returns router options serving tenants, each with key
// "sk-" + its name, over an in-process store.
func withTenants(t testing.TB, tenants ...*auth.Tenant) router.Options {
	t.Helper()
	keys := make([][]auth.Digest, len(tenants))
	for i, tn := range tenants {
		keys[i] = []auth.Digest{auth.HashKey("sk-" + tn.Name)}
		if tn.DefaultMaxTokens == 0 {
			tn.DefaultMaxTokens = 64
		}
	}
	dir, err := auth.NewDirectory(tenants, keys)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	lim, err := quota.NewLimiter(quota.LimiterOptions{Store: memstore.New(), Metrics: reg})
	require.NoError(t, err)
	return router.Options{Tenants: dir, Limiter: lim, Metrics: reg}
}

// keyed is the official client with a tenant's key; retries as given.
func (s *sluice) keyed(t testing.TB, key string, retries int) openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return openai.NewClient(option.WithBaseURL(s.srv.URL+"/v1/"), option.WithAPIKey(key),
		option.WithMaxRetries(retries), option.WithHTTPClient(&http.Client{Transport: tr}))
}

// acmeSluice serves one instant worker to tenant acme of the free tier
// with limits, and returns the official client with acme's key (retries as
// given).
func acmeSluice(t *testing.T, limits quota.Limits, retries int) (*sluice, openai.Client) {
	t.Helper()
	w := startWorker(t, model, "instant", 0)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "free", Limits: limits})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	return s, s.keyed(t, "sk-acme", retries)
}

func TestTenantKeysAndModels(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro"},
		&auth.Tenant{Name: "small", Tier: "free", Models: []string{"embed"}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}},
		routeSpec{model: "embed", urls: []string{w.srv.URL}})
	ctx := context.Background()

	res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","messages":[]}`))
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "no key")
	assert.Equal(t, "invalid_api_key", decodeError(t, res).Code)
	res.Body.Close()

	wrong := s.keyed(t, "sk-wrong", 0)
	_, err = wrong.Chat.Completions.New(ctx, chatParams(model))
	assertAPIError(t, err, http.StatusUnauthorized, "invalid_api_key")

	acme := s.keyed(t, "sk-acme", 0)
	_, err = acme.Chat.Completions.New(ctx, chatParams(model))
	require.NoError(t, err)

	small := s.keyed(t, "sk-small", 0)
	_, err = small.Chat.Completions.New(ctx, chatParams(model))
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr))
	_, unknownErr := small.Chat.Completions.New(ctx, chatParams("gpt-9"))
	var unknown *openai.Error
	require.True(t, errors.As(unknownErr, &unknown))
	assert.Equal(t, strings.ReplaceAll(unknown.Message, "gpt-9", model), apiErr.Message,
		"a model outside the tier reads exactly as an unknown one")

	page, err := small.Models.List(ctx)
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "embed", page.Data[0].ID)
	_, err = small.Models.Get(ctx, model)
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")
}

func TestTenantRequestLimitAnswers429WithHeaders(t *testing.T) {
	s, c := acmeSluice(t, quota.Limits{RequestsPerMinute: 2, RequestBurst: 2, OutputTokensPerMinute: 6000, OutputBurst: 6000}, 0)
	ctx := context.Background()

	var res *http.Response
	_, err := c.Chat.Completions.New(ctx, chatParams(model), option.WithResponseInto(&res))
	require.NoError(t, err)
	assert.Equal(t, "2", res.Header.Get("X-Ratelimit-Limit-Requests"))
	assert.Equal(t, "1", res.Header.Get("X-Ratelimit-Remaining-Requests"))
	assert.NotEmpty(t, res.Header.Get("X-Ratelimit-Reset-Requests"))
	assert.Equal(t, "6000", res.Header.Get("X-Ratelimit-Limit-Tokens"))
	remaining, err := strconv.Atoi(res.Header.Get("X-Ratelimit-Remaining-Tokens"))
	require.NoError(t, err)
	assert.Equal(t, 6000-8, remaining, "max_tokens 8 reserved")

	_, err = c.Chat.Completions.New(ctx, chatParams(model))
	require.NoError(t, err)
	_, err = c.Chat.Completions.New(ctx, chatParams(model))
	assertAPIError(t, err, http.StatusTooManyRequests, "rate_limit_exceeded")
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr))
	assert.Contains(t, apiErr.Message, "requests per minute")
	ra, err := strconv.Atoi(apiErr.Response.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, ra >= 1 && ra <= 30, "one emission interval (30 s) at most, got %d", ra)
	assert.Equal(t, "0", apiErr.Response.Header.Get("X-Ratelimit-Remaining-Requests"))
	assert.Contains(t, scrape(t, s), `sluice_quota_decisions_total{dimension="requests",result="denied"} 1`)
}

// Each of n completions may run to max_tokens, so all of them are
// reserved against the tenant's output tokens: n alone must not let a
// tenant past its limit.
func TestTenantOutputReservationCountsEveryChoice(t *testing.T) {
	_, c := acmeSluice(t, quota.Limits{OutputTokensPerMinute: 100, OutputBurst: 100}, 0)
	ctx := context.Background()

	p := chatParams(model)
	p.N = openai.Int(3)
	var res *http.Response
	answer, err := c.Chat.Completions.New(ctx, p, option.WithResponseInto(&res))
	require.NoError(t, err)
	assert.Equal(t, "76", res.Header.Get("X-Ratelimit-Remaining-Tokens"), "3 choices of max_tokens 8 reserved")
	assert.Len(t, answer.Choices, 3)

	p.MaxTokens = openai.Int(40) // 120 tokens: over the limit though 40 alone is not
	sent := 0
	_, err = c.Chat.Completions.New(ctx, p, option.WithMaxRetries(2),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			sent++
			return next(r)
		}))
	assert.Equal(t, 1, sent, "X-Should-Retry: false keeps the SDK from sending it again (it retried every 429)")
	assertAPIError(t, err, http.StatusTooManyRequests, "rate_limit_exceeded")
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr))
	assert.Contains(t, apiErr.Message, "Request too large")
	assert.Empty(t, apiErr.Response.Header.Get("Retry-After"), "it never fits: waiting would not help")
	assert.Empty(t, apiErr.Response.Header.Get("Retry-After-Ms"))
	assert.Equal(t, "100", apiErr.Response.Header.Get("X-Ratelimit-Limit-Tokens"))

	// A completion's max_completion_tokens counts as its max_tokens does:
	// gpuworker reads it, and one of 3,000 was reserved the tier's default
	// and generated 3,000.
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}},
		option.WithJSONSet("max_completion_tokens", 3000))
	assertAPIError(t, err, http.StatusTooManyRequests, "rate_limit_exceeded")
	require.True(t, errors.As(err, &apiErr))
	assert.Contains(t, apiErr.Message, "Request too large")
}

func TestTenantDailyQuotaAnswersInsufficientQuota(t *testing.T) {
	_, c := acmeSluice(t, quota.Limits{TokensPerDay: 200}, 0)
	p := chatParams(model)
	p.MaxTokens = openai.Int(60)
	_, err := c.Chat.Completions.New(context.Background(), p) // reserves prompt + 60, settles less
	require.NoError(t, err)
	p.MaxTokens = openai.Int(150) // fits the day's quota, not what is left of it
	_, err = c.Chat.Completions.New(context.Background(), p)
	assertAPIError(t, err, http.StatusTooManyRequests, "insufficient_quota")
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr))
	assert.Equal(t, "insufficient_quota", apiErr.Type)
	assert.Equal(t, "false", apiErr.Response.Header.Get("X-Should-Retry"), "not before the day's quota renews")
}

func TestOpenAIClientBacksOffAsRetryAfterSays(t *testing.T) {
	s, c := acmeSluice(t, quota.Limits{RequestsPerMinute: 120, RequestBurst: 1}, 2)
	ctx := context.Background()
	_, err := c.Chat.Completions.New(ctx, chatParams(model))
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Chat.Completions.New(ctx, chatParams(model)) // 429 with Retry-After-Ms <= 500, then passes
	require.NoError(t, err)
	// A lower bound only: the client waited at least what the header said
	// was left of the 500 ms interval, less the time the first call took.
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.Contains(t, scrape(t, s), `sluice_quota_decisions_total{dimension="requests",result="denied"} 1`)
}

// TestClientCredentialsStayWithSluice checks that a tenant's key, cookies
// and organization never reach the backend, that the backend gets its own
// key and the client's address in X-Forwarded-For (not what the client
// claims there), and that its cookies and Server header never reach the
// client.
func TestClientCredentialsStayWithSluice(t *testing.T) {
	var mu sync.Mutex
	var seen http.Header
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Set-Cookie", "session=backend")
		w.Header().Set("Server", "vllm")
		w.Header().Set("X-Ratelimit-Limit-Requests", "999")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}))
	t.Cleanup(backend.Close)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro", Limits: quota.Limits{RequestsPerMinute: 100, RequestBurst: 100}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{backend.URL}})
	s.endpoints[backend.URL].SetAPIKey("backend-secret")

	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Cookie", "sid=client")
	req.Header.Set("OpenAI-Organization", "org-client")
	req.Header.Set("X-Api-Key", "sk-someone-elses") // a credential of some kind: never passed on
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, res.Header.Values("Set-Cookie"))
	assert.Empty(t, res.Header.Get("Server"))
	assert.Equal(t, []string{"100"}, res.Header.Values("X-Ratelimit-Limit-Requests"), "Sluice's limits, not the backend's")

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "Bearer backend-secret", seen.Get("Authorization"))
	assert.Empty(t, seen.Get("Cookie"))
	assert.Empty(t, seen.Get("OpenAI-Organization"))
	assert.Empty(t, seen.Get("X-Api-Key"))
	assert.Equal(t, []string{"127.0.0.1"}, seen.Values("X-Forwarded-For"))
	assert.Equal(t, []string{strings.TrimPrefix(s.srv.URL, "http://")}, seen.Values("X-Forwarded-Host"))
	assert.Equal(t, []string{"http"}, seen.Values("X-Forwarded-Proto"))
}

func TestStreamUsageIsSettledExactlyAndHiddenFromTheClient(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro",
		Limits: quota.Limits{OutputTokensPerMinute: 100000, OutputBurst: 100000}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.keyed(t, "sk-acme", 0)
	p := chatParams(model)
	p.MaxTokens = openai.Int(40)
	st := c.Chat.Completions.NewStreaming(context.Background(), p)
	chunks, content := 0, 0
	for st.Next() {
		ch := st.Current()
		chunks++
		assert.NotEmpty(t, ch.Choices, "the usage-only chunk Sluice asked for must not reach the client")
		assert.Zero(t, ch.Usage.TotalTokens)
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			content++
		}
	}
	require.NoError(t, st.Err())
	require.NoError(t, st.Close())
	require.Positive(t, content)
	gen := w.Load().GenerationTokens
	metrics := scrape(t, s)
	assert.Contains(t, metrics, `sluice_tenant_tokens_total{kind="output",tenant="acme",tier="pro"} `+strconv.FormatInt(gen, 10)+"\n",
		"charged the worker's own count")

	// A client that asked for usage itself gets it.
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st = c.Chat.Completions.NewStreaming(context.Background(), p)
	var usage int64
	for st.Next() {
		usage = max(usage, st.Current().Usage.CompletionTokens)
	}
	require.NoError(t, st.Err())
	assert.Positive(t, usage)
}

func TestStreamCutByTheClientIsChargedWhatWasRelayed(t *testing.T) {
	w := startWorker(t, model, "h100-llama3-8b", 1)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro",
		Limits: quota.Limits{OutputTokensPerMinute: 100000, OutputBurst: 100000, Concurrency: 1}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.keyed(t, "sk-acme", 0)
	p := chatParams(model)
	p.MaxTokens = openai.Int(5000)
	ctx, cancel := context.WithCancel(context.Background())
	st := c.Chat.Completions.NewStreaming(ctx, p)
	read := 0
	for read < 5 && st.Next() {
		read++
	}
	cancel()
	_ = st.Close()
	var charged float64
	require.Eventually(t, func() bool { // settled as the handler returns, just after the client left
		page := scrape(t, s)
		if !strings.Contains(page, `sluice_tenant_tokens_total{kind="output",tenant="acme",tier="pro"}`) {
			return false
		}
		charged = counterValue(t, page, `sluice_tenant_tokens_total{kind="output",tenant="acme",tier="pro"}`)
		return true
	}, 5*time.Second, 10*time.Millisecond)
	assert.GreaterOrEqual(t, charged, float64(read-1), "at least what the client read (less the role chunk)")
	assert.Less(t, charged, 5000.0, "not the reservation")
	assert.LessOrEqual(t, charged, float64(w.Load().GenerationTokens), "never more than the worker generated")

	// The concurrency slot came back with the settlement.
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
}

// counterValue reads one sample's value from a Prometheus text page.
func counterValue(t *testing.T, page, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no sample %s", series)
	return 0
}

// downStore is a limit store that never answers.
type downStore struct{}

func (downStore) Reserve(context.Context, string, quota.Limits, quota.Amount, quota.Lease, time.Time) (quota.Decision, error) {
	return quota.Decision{}, errors.New("connection refused")
}

func (downStore) Settle(context.Context, string, quota.Limits, quota.Settlement, time.Time) error {
	return errors.New("connection refused")
}

func (downStore) Renew(context.Context, []quota.Held, time.Duration, time.Time) error {
	return errors.New("connection refused")
}

func TestLimitStoreDownFailsOpenOrClosed(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	for _, closed := range []bool{false, true} {
		opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro", Limits: quota.Limits{RequestsPerMinute: 1, RequestBurst: 1}})
		lim, err := quota.NewLimiter(quota.LimiterOptions{Store: downStore{}, FailClosed: closed})
		require.NoError(t, err)
		opts.Limiter = lim
		s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
		c := s.keyed(t, "sk-acme", 0)
		for range 3 { // the limit (1 a minute) would refuse the second: nothing is counted
			_, err = c.Chat.Completions.New(context.Background(), chatParams(model))
			if closed {
				assertAPIError(t, err, http.StatusServiceUnavailable, "rate_limit_unavailable")
			} else {
				require.NoError(t, err, "fail open: served uncharged")
			}
		}
		res, err := http.Get(s.srv.URL + "/readyz")
		require.NoError(t, err)
		res.Body.Close()
		want := http.StatusOK
		if closed {
			want = http.StatusServiceUnavailable
		}
		assert.Equal(t, want, res.StatusCode, "ready unless every request would get 503")
		http.DefaultClient.CloseIdleConnections()
	}
}

// TestTheReservedOutputIsTheBackendsCap: a request without max_tokens (or
// with null) reserves the tier's default_max_tokens, and where the tier
// limits output tokens that default is sent as its max_tokens: without it
// the backend may generate to the context's end, far past what was
// reserved. A tier that limits no output sends requests as they came.
func TestTheReservedOutputIsTheBackendsCap(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(backend.Close)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro", DefaultMaxTokens: 77,
		Limits: quota.Limits{OutputTokensPerMinute: 1000, OutputBurst: 1000}},
		&auth.Tenant{Name: "daily", Tier: "day", DefaultMaxTokens: 77, Limits: quota.Limits{TokensPerDay: 100000}},
		&auth.Tenant{Name: "open", Tier: "open", DefaultMaxTokens: 77, Limits: quota.Limits{RequestsPerMinute: 1000}})
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{backend.URL}})
	for _, tt := range []struct {
		path, body string
		want       any // max_tokens as the backend got it
		key        string
	}{
		{"/v1/chat/completions", `{"model":"` + model + `","messages":[]}`, float64(77), ""},
		{"/v1/chat/completions", `{"model":"` + model + `","max_tokens":null,"messages":[]}`, float64(77), ""},
		{"/v1/completions", `{"model":"` + model + `","max_completion_tokens":1,"prompt":"hi"}`, float64(77), ""},
		{"/v1/chat/completions", `{"model":"` + model + `","max_tokens":5,"messages":[]}`, float64(5), ""},
		{"/v1/chat/completions", `{"model":"` + model + `","max_completion_tokens":5,"messages":[]}`, nil, ""},
		{"/v1/embeddings", `{"model":"` + model + `","input":"hi"}`, nil, ""},
		{"/v1/chat/completions", `{"model":"` + model + `","messages":[]}`, float64(77), "sk-daily"},
		{"/v1/chat/completions", `{"model":"` + model + `","messages":[]}`, nil, "sk-open"},
		{"/v1/completions", `{"model":"` + model + `","prompt":"hi"}`, nil, "sk-open"},
		{"/v1/responses", `{"model":"` + model + `","input":"hi"}`, float64(77), ""}, // as max_output_tokens
		{"/v1/responses", `{"model":"` + model + `","input":"hi","max_output_tokens":5}`, float64(5), ""},
	} {
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+tt.path, strings.NewReader(tt.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+cmp.Or(tt.key, "sk-acme"))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, tt.body)
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		capKey := "max_tokens"
		if tt.path == "/v1/responses" {
			capKey = "max_output_tokens"
			assert.NotContains(t, last, "max_tokens", "the Responses API's cap is max_output_tokens")
		}
		assert.Equal(t, tt.want, last[capKey], tt.body)
	}
}

// TestAnInlineImageIsReservedAsAnImage: a vision request with a 512×512
// PNG inlined as a data URL (350 KB of base64) reserves the image's few
// hundred tokens, not its base64's 87,000 at four bytes a token, which
// a tier's 20,000-token input burst refused as too large.
func TestAnInlineImageIsReservedAsAnImage(t *testing.T) {
	_, c := acmeSluice(t, quota.Limits{InputTokensPerMinute: 20000, InputBurst: 20000, OutputTokensPerMinute: 6000, OutputBurst: 6000}, 0)
	img := image.NewGray(image.Rect(0, 0, 512, 512))
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(rnd.Uint32()) // noise: it does not compress
	}
	var png bytes.Buffer
	require.NoError(t, pngenc.Encode(&png, img))
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png.Bytes())
	require.Greater(t, len(url)/4, 80000)

	p := chatParams(model)
	p.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("What is in this image?"),
		openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: url}),
	})}
	var res *http.Response
	_, err := c.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&res))
	require.NoError(t, err)
	// The input reserved: 19 × 19 patches of 28 pixels, plus the text and
	// the message's framing.
	remaining, err := strconv.Atoi(res.Header.Get("X-Ratelimit-Remaining-Tokens"))
	require.NoError(t, err)
	assert.InDelta(t, 20000-361, remaining, 60)
}
