package leastrequest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

func endpoints(t testing.TB, inFlight ...int) []*backends.Endpoint {
	t.Helper()
	eps := make([]*backends.Endpoint, len(inFlight))
	for i, f := range inFlight {
		e, err := backends.NewEndpoint(fmt.Sprintf("http://10.0.0.%d:8000", i), 1)
		require.NoError(t, err)
		for range f {
			e.Begin(0)
		}
		eps[i] = e
	}
	return eps
}

func TestPickLeastInFlight(t *testing.T) {
	tests := []struct {
		name     string
		inFlight []int
		want     int
	}{
		{"single", []int{5}, 0},
		{"last is idle", []int{3, 2, 0}, 2},
		{"middle is least", []int{4, 1, 2}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := endpoints(t, tt.inFlight...)
			p, err := New(nil)
			require.NoError(t, err)
			for range len(eps) * 2 { // from every rotating start
				got, err := p.Pick(context.Background(), &policies.Request{}, eps)
				require.NoError(t, err)
				assert.Same(t, eps[tt.want], got)
			}
		})
	}
}

func TestPickSpreadsTies(t *testing.T) {
	eps := endpoints(t, 1, 1, 1, 1)
	p, err := New(nil)
	require.NoError(t, err)
	seen := map[*backends.Endpoint]int{}
	for range 400 {
		e, err := p.Pick(context.Background(), &policies.Request{}, eps)
		require.NoError(t, err)
		seen[e]++
	}
	for _, e := range eps {
		assert.Equal(t, 100, seen[e])
	}
}

func TestPickFollowsLoad(t *testing.T) {
	eps := endpoints(t, 0, 0)
	p, err := New(nil)
	require.NoError(t, err)
	// Requests that never finish on the first endpoint push new work to the second.
	for range 10 {
		e, err := p.Pick(context.Background(), &policies.Request{}, eps)
		require.NoError(t, err)
		e.Begin(0)
	}
	assert.Equal(t, int64(5), eps[0].InFlight())
	assert.Equal(t, int64(5), eps[1].InFlight())
}

func TestPickLargePoolInWindows(t *testing.T) {
	load := make([]int, 1000)
	for i := range load {
		load[i] = 2
	}
	load[700] = 1
	eps := endpoints(t, load...)
	p, err := New(nil)
	require.NoError(t, err)
	// Windows of 256 cover the pool within ceil(1000/256) = 4 picks.
	found := false
	for range 4 {
		e, err := p.Pick(context.Background(), &policies.Request{}, eps)
		require.NoError(t, err)
		found = found || e == eps[700]
	}
	assert.True(t, found)
}

func TestPickLargePoolSpreadsTies(t *testing.T) {
	load := make([]int, 1000)
	for i := range load {
		load[i] = 1
	}
	eps := endpoints(t, load...)
	p, err := New(map[string]any{"scan": 100})
	require.NoError(t, err)
	seen := map[*backends.Endpoint]int{}
	for range 1000 {
		e, err := p.Pick(context.Background(), &policies.Request{}, eps)
		require.NoError(t, err)
		seen[e]++
	}
	assert.Len(t, seen, 1000, "every endpoint starts a window once")
}

func TestNewRejectsBadScan(t *testing.T) {
	for _, bad := range []any{0, 2000, "all"} {
		_, err := New(map[string]any{"scan": bad})
		assert.ErrorContains(t, err, "scan")
	}
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{16, 256, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			load := make([]int, n)
			for i := range load {
				load[i] = 1 + i%7
			}
			eps := endpoints(b, load...)
			p, _ := New(nil)
			req := &policies.Request{}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Pick(context.Background(), req, eps)
			}
		})
	}
}
