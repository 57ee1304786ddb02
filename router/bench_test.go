package router_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

// BenchmarkOverhead sends the same small chat request straight to an
// instant gpuworker, through a bare httputil.ReverseProxy (as sluice-bench
// bareproxy, the Go floor of make bench-overhead) and through Sluice, so
// the differences between the sub-benchmarks are what a Go proxy adds and
// what the router adds beyond it (parse, pick, measure, metrics, tracing
// hooks), measured in one run.
func BenchmarkOverhead(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "stream"}[stream]
		b.Run(name, func(b *testing.B) {
			w := startWorker(b, model, "instant", 0)
			s := startSluice(b, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
			bare := startBareProxy(b, w.srv.URL)
			body := `{"model":"` + model + `","max_tokens":16,"ignore_eos":true,"stream":` +
				strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"hello there, fleet"}]}`
			for _, target := range []struct{ name, url string }{{"direct", w.srv.URL}, {"bare", bare.URL}, {"sluice", s.srv.URL}} {
				b.Run(target.name, func(b *testing.B) {
					client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
					defer client.CloseIdleConnections()
					b.ReportAllocs()
					b.SetParallelism(4)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							res, err := client.Post(target.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
							if err != nil {
								b.Error(err)
								return
							}
							_, _ = io.Copy(io.Discard, res.Body)
							res.Body.Close()
							if res.StatusCode != http.StatusOK {
								b.Errorf("status %d", res.StatusCode)
								return
							}
						}
					})
				})
			}
		})
	}
}

// startBareProxy serves a plain httputil.ReverseProxy to target, set up as
// sluice-bench bareproxy is.
func startBareProxy(b *testing.B, target string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
		Transport:     tr,
		FlushInterval: -1,
	}
	srv := httptest.NewServer(rp)
	b.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv
}

// BenchmarkPipeline is what Sluice's own code costs per request beyond a
// bare httputil.ReverseProxy, without sockets: both serve the same request
// on one goroutine from a transport that answers in memory, event by event
// for a stream, as gpuworker's instant profile does (16 tokens). Sluice
// runs its full pipeline: a tenant's key and limits on the in-process
// store, an admission gate, the default policy, metrics, tracing off; the
// client does not ask for usage, so Sluice asks for it and strips it. On a
// shared machine this is steadier than make bench-overhead, which measures
// the processes whole (issue 12).
func BenchmarkPipeline(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "stream"}[stream]
		body := `{"model":"` + model + `","max_tokens":16,"stream":` + strconv.FormatBool(stream) +
			`,"messages":[{"role":"user","content":"hello there, fleet"}]}`
		tr := memTransport{stream: stream, tokens: 16}
		b.Run(name+"/bare", func(b *testing.B) {
			u, err := url.Parse("http://backend.invalid")
			require.NoError(b, err)
			rp := &httputil.ReverseProxy{
				Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
				Transport:     tr,
				FlushInterval: -1,
			}
			benchServe(b, rp, body)
		})
		b.Run(name+"/sluice", func(b *testing.B) {
			benchServe(b, memSluice(b, tr), body)
		})
	}
}

// benchServe serves body to h as a client with a tenant's key would send it.
func benchServe(b *testing.B, h http.Handler, body string) {
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-bench")
		req.Header.Set("Content-Type", "application/json")
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// memSluice is a Router as make bench-overhead configures it, in front of
// one backend reached through tr.
func memSluice(b *testing.B, tr http.RoundTripper) http.Handler {
	tenant := &auth.Tenant{Name: "bench", Tier: "bench", DefaultMaxTokens: 64, Limits: quota.Limits{
		RequestsPerMinute: 100_000_000, InputTokensPerMinute: 10_000_000_000,
		OutputTokensPerMinute: 10_000_000_000, Concurrency: 1024}}
	dir, err := auth.NewDirectory([]*auth.Tenant{tenant}, [][]auth.Digest{{auth.HashKey("sk-bench")}})
	require.NoError(b, err)
	lim, err := quota.NewLimiter(quota.LimiterOptions{Store: memstore.New()})
	require.NoError(b, err)
	ep, err := backends.NewEndpoint("http://backend.invalid", 1)
	require.NoError(b, err)
	pool, err := backends.NewPool(model, []*backends.Endpoint{ep})
	require.NoError(b, err)
	picker, err := leastrequest.New(nil)
	require.NoError(b, err)
	gate, err := admission.NewGate(pool, picker, admission.Options{
		Budget: func(*backends.Endpoint) int { return 64 }, QueueSize: 64})
	require.NoError(b, err)
	table, err := router.NewTable([]*router.Route{{Pool: pool, Picker: picker, Gate: gate, FirstByteTimeout: time.Minute}})
	require.NoError(b, err)
	rt, err := router.New(router.Options{Table: table, Transport: tr, Tenants: dir, Limiter: lim})
	require.NoError(b, err)
	return rt.Handler()
}

// memTransport answers every request in memory as an instant gpuworker
// would: a whole chat completion, or a stream of events read one per Read,
// with the usage chunk when the request asks for it.
type memTransport struct {
	stream bool
	tokens int
}

func (m memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	in, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	const head = `{"id":"chatcmpl-18ecf270ad8efbf2-1","object":"chat.completion.chunk","created":1796076917,"model":"` + model + `",`
	res := &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: -1, Request: req}
	if !m.stream {
		res.Body = io.NopCloser(strings.NewReader(`{"id":"chatcmpl-1","object":"chat.completion","created":1796076917,"model":"` + model +
			`","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat(" word", m.tokens) +
			`"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":` +
			strconv.Itoa(m.tokens) + `,"total_tokens":` + strconv.Itoa(12+m.tokens) + `}}`))
		return res, nil
	}
	res.Header.Set("Content-Type", "text/event-stream")
	events := []string{"data: " + head + `"choices":[{"index":0,"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]}` + "\n\n"}
	for i := range m.tokens {
		finish := "null"
		if i == m.tokens-1 {
			finish = `"length"`
		}
		events = append(events, "data: "+head+`"choices":[{"index":0,"delta":{"content":" of"},"logprobs":null,"finish_reason":`+finish+"}]}\n\n")
	}
	if strings.Contains(string(in), `"include_usage":true`) {
		events = append(events, "data: "+head+fmt.Sprintf(`"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`,
			m.tokens, 12+m.tokens)+"\n\n")
	}
	res.Body = &eventReader{events: append(events, "data: [DONE]\n\n")}
	return res, nil
}

// eventReader returns one event per Read, as a server that flushes each.
type eventReader struct{ events []string }

func (e *eventReader) Read(p []byte) (int, error) {
	if len(e.events) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.events[0])
	e.events[0] = e.events[0][n:]
	if e.events[0] == "" {
		e.events = e.events[1:]
	}
	return n, nil
}

func (e *eventReader) Close() error { return nil }

// discardWriter is a client that reads everything and keeps nothing.
type discardWriter struct {
	h      http.Header
	status int
}

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}

func (d *discardWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	return len(p), nil
}
func (d *discardWriter) Flush() {}
