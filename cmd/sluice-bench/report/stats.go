package report

import (
	"math"
	"slices"
	"time"
)

// Dist summarizes one latency distribution in milliseconds.
type Dist struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted, using
// linear interpolation between order statistics (numpy's default, which
// vLLM's benchmark uses). It returns 0 for an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	lo = min(max(lo, 0), len(sorted)-1)
	hi = min(max(hi, 0), len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(rank-float64(lo))
}

// NewDist summarizes durations. An empty input gives all zeros, as in vLLM.
func NewDist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	ms := make([]float64, len(ds))
	var sum float64
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Dist{
		Mean: sum / float64(len(ms)),
		P50:  Percentile(ms, 50),
		P90:  Percentile(ms, 90),
		P99:  Percentile(ms, 99),
	}
}
