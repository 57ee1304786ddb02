package router

import "sync/atomic"

// retryBudget bounds retries to a share of recent traffic, so that a fleet
// in trouble is not sent a storm of repeats: every request deposits ratio of
// a retry (up to max banked), every retry spends one. It starts with min.
type retryBudget struct {
	milli atomic.Int64 // retries banked, in thousandths
	ratio int64        // thousandths of a retry each request earns
	max   int64        // thousandths
}

func newRetryBudget(ratio float64, minRetries, maxRetries int64) *retryBudget {
	b := &retryBudget{ratio: int64(ratio * 1000), max: maxRetries * 1000}
	b.milli.Store(minRetries * 1000)
	return b
}

// deposit records a request.
func (b *retryBudget) deposit() {
	for {
		v := b.milli.Load()
		n := min(v+b.ratio, b.max)
		if v >= b.max || b.milli.CompareAndSwap(v, n) {
			return
		}
	}
}

// spend takes one retry from the budget and reports whether there was one.
func (b *retryBudget) spend() bool {
	for {
		v := b.milli.Load()
		if v < 1000 {
			return false
		}
		if b.milli.CompareAndSwap(v, v-1000) {
			return true
		}
	}
}

// available reports whether a retry is banked, without taking it.
func (b *retryBudget) available() bool { return b.milli.Load() >= 1000 }

// take spends a retry that available promised: it may take the budget
// below zero when other requests took the last one meanwhile (by at most
// the attempts in flight; deposits pay it back).
func (b *retryBudget) take() { b.milli.Add(-1000) }
