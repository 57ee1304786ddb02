package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestGoodput(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{OK: true, OutputTokens: 11, TTFT: 500 * ms, E2E: 1500 * ms}, // TPOT 100 ms: good
		{OK: true, OutputTokens: 11, TTFT: 500 * ms, E2E: 1510 * ms}, // TPOT 101 ms: too slow
		{OK: true, OutputTokens: 1, TTFT: 900 * ms, E2E: 900 * ms},   // one token: TTFT only
		{OK: true, OutputTokens: 5, TTFT: 1100 * ms, E2E: 1200 * ms}, // TTFT too slow
		{OK: false, OutputTokens: 5, TTFT: 100 * ms, E2E: 200 * ms},  // failed
	}
	assert.InDelta(t, 1.0, Goodput(samples, 2*time.Second, time.Second, 100*ms), 1e-9)
	assert.Zero(t, Goodput(samples, 0, time.Second, 100*ms))
}
