package router_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-llm/sluice/router"
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
