package roundrobin

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
)

func endpoints(t testing.TB, n int) []*backends.Endpoint {
	t.Helper()
	eps := make([]*backends.Endpoint, n)
	for i := range eps {
		e, err := backends.NewEndpoint(fmt.Sprintf("http://10.0.0.%d:8000", i), 1)
		require.NoError(t, err)
		eps[i] = e
	}
	return eps
}

func TestPickRotatesEvenly(t *testing.T) {
	eps := endpoints(t, 3)
	eps[0].Begin(0) // load is ignored by design
	p, err := New(nil)
	require.NoError(t, err)
	counts := map[*backends.Endpoint]int{}
	for range 300 {
		e, err := p.Pick(context.Background(), &policies.Request{}, eps)
		require.NoError(t, err)
		counts[e]++
	}
	for _, e := range eps {
		assert.Equal(t, 100, counts[e], e.Address())
	}
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{16, 256, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			eps := endpoints(b, n)
			p, _ := New(nil)
			req := &policies.Request{}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Pick(context.Background(), req, eps)
			}
		})
	}
}
