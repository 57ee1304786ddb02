package router_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-llm/sluice/router"
)

// BenchmarkOverhead sends the same small chat request straight to an
// instant gpuworker and through Sluice, so the difference between the
// direct and sluice sub-benchmarks is what the router adds (parse, pick,
// proxy, metrics, tracing hooks), measured in one run.
func BenchmarkOverhead(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "stream"}[stream]
		b.Run(name, func(b *testing.B) {
			w := startWorker(b, model, "instant", 0)
			s := startSluice(b, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
			body := `{"model":"` + model + `","max_tokens":16,"ignore_eos":true,"stream":` +
				strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"hello there, fleet"}]}`
			for _, target := range []struct{ name, url string }{{"direct", w.srv.URL}, {"sluice", s.srv.URL}} {
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
