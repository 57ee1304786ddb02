// Package policytest builds hand-made endpoint snapshots and runs the shared
// checks and benchmark every routing policy uses in its tests. It is for
// tests only.
package policytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

// Spec describes one endpoint's state. Zero fields mean: weight 1, nothing
// in flight, never scraped, no throughput measured yet.
type Spec struct {
	Weight int
	// InFlight requests were begun before the scrape, each costing Tokens.
	InFlight int
	// AfterScrape requests were begun after the scrape (SinceScrape).
	AfterScrape int
	// Tokens is each in-flight request's cost; default 100.
	Tokens int64
	// Load, when set, is stored as the scraped state.
	Load *backends.Load
	// Stale stores Load and then marks it stale, as after a failed scrape.
	Stale bool
	// TokensPerSec, when set, is observed as one decode measurement.
	TokensPerSec int
}

// Scraped is a fresh scrape with the given queue.
func Scraped(waiting, running int) *backends.Load {
	return &backends.Load{At: time.Unix(1, 0), Waiting: waiting, Running: running, KVUsage: -1}
}

// Build returns one endpoint per spec, addressed http://10.0.<i/256>.<i%256>:8000.
func Build(t testing.TB, specs ...Spec) []*backends.Endpoint {
	t.Helper()
	eps := make([]*backends.Endpoint, len(specs))
	for i, s := range specs {
		e, err := backends.NewEndpoint(fmt.Sprintf("http://10.0.%d.%d:8000", i/256, i%256), s.Weight)
		if err != nil {
			t.Fatal(err)
		}
		tok := s.Tokens
		if tok == 0 {
			tok = 100
		}
		for range s.InFlight {
			e.Begin(tok)
		}
		if s.Load != nil {
			e.StoreLoad(s.Load)
			if s.Stale {
				e.MarkStale()
			}
		}
		for range s.AfterScrape {
			e.Begin(tok)
		}
		if s.TokensPerSec > 0 {
			e.ObserveDecode(s.TokensPerSec, time.Second)
		}
		eps[i] = e
	}
	return eps
}

// Idle returns n idle, never-scraped endpoints.
func Idle(t testing.TB, n int) []*backends.Endpoint {
	t.Helper()
	return Build(t, make([]Spec, n)...)
}

// Fleet returns n endpoints in the state of a busy heterogeneous fleet:
// scraped queues of varying depth, some requests since the scrape, three
// GPU speeds, and every 16th endpoint never scraped and unmeasured.
func Fleet(t testing.TB, n int) []*backends.Endpoint {
	t.Helper()
	specs := make([]Spec, n)
	for i := range specs {
		s := Spec{InFlight: 1 + i%5, AfterScrape: i % 3, TokensPerSec: []int{30, 60, 120}[i%3]}
		if i%16 != 15 {
			s.Load = Scraped(i%7, 4+i%9)
			s.Load.KVUsage = float64(i%10) / 10
		} else {
			s.TokensPerSec = 0
		}
		specs[i] = s
	}
	return Build(t, specs...)
}

// Index returns the position of e in eps, or -1.
func Index(eps []*backends.Endpoint, e *backends.Endpoint) int {
	for i, x := range eps {
		if x == e {
			return i
		}
	}
	return -1
}

// Counts picks n times for r and counts the picks by index in eps.
func Counts(t testing.TB, p policies.Picker, r *policies.Request, eps []*backends.Endpoint, n int) []int {
	t.Helper()
	c := make([]int, len(eps))
	for range n {
		e, err := p.Pick(context.Background(), r, eps)
		if err != nil {
			t.Fatal(err)
		}
		i := Index(eps, e)
		if i < 0 {
			t.Fatalf("picked %s, not in the pool", e.Address())
		}
		c[i]++
	}
	return c
}

// BenchmarkPick measures p picking for r from a Fleet of 16, 256 and 1,000
// endpoints, the sizes the policies' cost bound is stated for, and of one
// (an admission queue often offers one endpoint with room).
func BenchmarkPick(b *testing.B, p policies.Picker, r *policies.Request) {
	for _, n := range [...]int{1, 16, 256, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			eps := Fleet(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Pick(ctx, r, eps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Seeded builds a policy with factory from params (nil for none) plus the
// given seed, so its random draws repeat from run to run, and fails t on a
// construction error.
func Seeded(t testing.TB, factory policies.Factory, params map[string]any, seed uint64) policies.Picker {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["seed"] = seed
	p, err := factory(params)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
