package fleet

import (
	"testing"

	"github.com/sluice-llm/sluice/policies/leastrequest"
)

// benchSimulate runs n synthetic requests (512/128 tokens mean, load 0.8)
// on workers H100s with least_request and reports simulated requests per
// wall second. Run with GOMAXPROCS=1 for the single-core figure.
func benchSimulate(b *testing.B, workers, n int) {
	spec := Spec{{Count: workers, Profile: mustSpec(b, "h100-llama3-8b")[0].Profile}}
	reqs := synthetic(b, spec, n, 0.8, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Run(Options{Spec: spec, Pickers: pickers(b, leastrequest.New, 1)}, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkSimulate100x100k is the quick scale check.
func BenchmarkSimulate100x100k(b *testing.B) { benchSimulate(b, 100, 100_000) }

// BenchmarkSimulate1000x1M is the target: 1,000 workers and
// 1,000,000 requests in under 60 s on one core.
func BenchmarkSimulate1000x1M(b *testing.B) { benchSimulate(b, 1000, 1_000_000) }
