package loadscrape

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/sluice-llm/sluice/backends"
)

// BenchmarkFetch is one scrape of a gpuworker's metrics page over loopback,
// as Run does it every interval for every backend: request, read, filter,
// parse. `go test -run '^$' -bench Fetch -benchmem ./backends/loadscrape/`.
func BenchmarkFetch(b *testing.B) {
	page, err := os.ReadFile("testdata/gpuworker-metrics.txt")
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(page)
	}))
	defer srv.Close()
	s, err := New(Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.ownClient.CloseIdleConnections()
	ep, err := backends.NewEndpoint(srv.URL, 1)
	if err != nil {
		b.Fatal(err)
	}
	ts, _ := s.retarget(&[]*backends.Endpoint{ep}, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.fetch(ctx, ts[0]); err != nil {
			b.Fatal(err)
		}
	}
}
