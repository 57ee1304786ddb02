package fleet

import (
	"math/bits"
	"time"
)

// histSubBits is the number of mantissa bits per power of two: 2^7 = 128
// sub-buckets bound the relative error of a reported quantile by 1/128
// (under 0.8%).
const histSubBits = 7

// Histogram is a streaming log-linear histogram of durations (HDR style):
// exact below 2^histSubBits ns, then 128 buckets per power of two. It keeps
// the exact count, sum and so mean, and answers quantiles to within 0.8%,
// in constant memory (about 60 KiB) however many values it sees. The
// simulator folds every inter-token gap into one, since storing a million
// requests' gaps would take gigabytes.
type Histogram struct {
	counts [64 << histSubBits]uint64
	n      uint64
	sum    float64 // nanoseconds
}

// bucket maps a non-negative value to its bucket index.
func bucket(v uint64) int {
	if v < 1<<histSubBits {
		return int(v)
	}
	exp := bits.Len64(v) - histSubBits - 1 // shift that leaves histSubBits+1 bits
	return (exp+1)<<histSubBits + int(v>>exp) - 1<<histSubBits
}

// bucketMid returns a representative value of bucket i: its midpoint.
func bucketMid(i int) float64 {
	if i < 1<<histSubBits {
		return float64(i)
	}
	exp := i>>histSubBits - 1
	lo := uint64(i&(1<<histSubBits-1)+1<<histSubBits) << exp
	width := uint64(1) << exp
	return float64(lo) + float64(width-1)/2
}

// Add records one duration; negative durations count as zero.
func (h *Histogram) Add(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucket(v)]++
	h.n++
	h.sum += float64(v)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Mean is the exact mean, zero when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the q-th quantile (0 <= q <= 1): the midpoint of the
// bucket holding the value of 0-based rank floor(q*(n-1)), zero when empty.
// (report.Percentile interpolates between ranks; the difference is below
// the bucket width for any sizeable sample.)
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketMid(i))
		}
	}
	return time.Duration(bucketMid(len(h.counts) - 1))
}
