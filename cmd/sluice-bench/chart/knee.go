package chart

import "math"

// Knee is where a latency curve leaves a bound, as FindKnee finds it.
type Knee struct {
	// Index is the last point before the first that exceeds the limit;
	// -1 when the first point already does (or the curve is empty).
	Index int
	// Crossed is true when some point exceeded the limit; false means the
	// curve stayed within it to its last point, so the knee lies at or
	// beyond the highest load measured.
	Crossed bool
}

// FindKnee finds where a latency curve leaves limit: ys are a latency
// percentile (p99 TTFT) at increasing offered loads, and the knee is the
// last point before the first one above limit, the highest load up to
// which latency stays within it. A point after the first crossing does not
// count even if it is back within (a noisy curve does not get a second
// chance), and a NaN latency (nothing completed) counts as above.
func FindKnee(ys []float64, limit float64) Knee {
	k := Knee{Index: -1}
	for i, y := range ys {
		if math.IsNaN(y) || y > limit {
			k.Crossed = true
			return k
		}
		k.Index = i
	}
	return k
}
