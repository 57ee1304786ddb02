package workload

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestHelpers(t *testing.T) {
	reqs := []Request{
		{Arrival: 0, PromptTokens: 10, OutputTokens: 1},
		{Arrival: 2 * time.Second, PromptTokens: 20, OutputTokens: 2},
		{Arrival: 4 * time.Second, PromptTokens: 30, OutputTokens: 3},
	}
	scaled := Scale(reqs, 2)
	assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, arrivals(scaled))
	assert.Equal(t, 2*time.Second, reqs[1].Arrival, "Scale must not modify its input")
	assert.Equal(t, []time.Duration{0, 4 * time.Second, 8 * time.Second}, arrivals(Scale(reqs, 0.5)))
	assert.Panics(t, func() { Scale(reqs, 0) })

	assert.Len(t, Limit(reqs, 2), 2)
	assert.Len(t, Limit(reqs, 0), 3)
	assert.Len(t, Limit(reqs, 10), 3)
	assert.Len(t, Until(reqs, 4*time.Second), 2)
	assert.Len(t, Until(reqs, 0), 3)

	kept, dropped := DropLonger(reqs, 22)
	assert.Len(t, kept, 2)
	assert.Equal(t, 1, dropped)
}

func arrivals(reqs []Request) []time.Duration {
	out := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		out[i] = r.Arrival
	}
	return out
}
