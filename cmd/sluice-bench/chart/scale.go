package chart

import (
	"math"
	"slices"
	"strconv"
)

// scale maps data values on one axis to pixels. Its range [lo, hi] is the
// data's, widened to the outer ticks so the frame starts and ends on one.
type scale struct {
	lo, hi float64
	log    bool
	p0, p1 float64 // pixels of lo and hi
	ticks  []float64
	step   float64 // linear tick step, for formatting; 0 on a log scale
}

// targetTicks is about how many intervals a linear axis is divided into.
const targetTicks = 5

// newScale fits a scale to vals (NaN, infinite and, on a log axis,
// non-positive values ignored) and maps it onto pixels p0..p1.
func newScale(vals []float64, log, fromZero bool, p0, p1 float64) scale {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) || log && v <= 0 {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	s := scale{log: log, p0: p0, p1: p1}
	if log {
		s.lo, s.hi, s.ticks = logTicks(lo, hi)
		return s
	}
	if fromZero && lo > hi { // no data
		lo, hi = 0, 1
	}
	if fromZero {
		lo, hi = min(lo, 0), max(hi, 0)
	}
	s.lo, s.hi, s.step = linearTicks(lo, hi)
	for i := 0; ; i++ {
		v := s.lo + float64(i)*s.step
		if v > s.hi+s.step/2 {
			break
		}
		s.ticks = append(s.ticks, roundTo(v, s.step))
	}
	return s
}

// pos maps v to its pixel; ok is false when v cannot be drawn (NaN, or
// not positive on a log scale).
func (s scale) pos(v float64) (px float64, ok bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || s.log && v <= 0 {
		return 0, false
	}
	var f float64
	if s.log {
		f = math.Log10(v/s.lo) / math.Log10(s.hi/s.lo)
	} else {
		f = (v - s.lo) / (s.hi - s.lo)
	}
	return s.p0 + f*(s.p1-s.p0), true
}

// linearTicks returns the range [lo, hi] widened to multiples of a 1-2-5
// step that divides it into about targetTicks intervals.
func linearTicks(lo, hi float64) (tlo, thi, step float64) {
	switch {
	case lo > hi: // no data
		lo, hi = 0, 1
	case lo == hi:
		d := math.Abs(lo) / 2
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
	}
	step = niceStep((hi - lo) / targetTicks)
	return roundTo(math.Floor(lo/step+1e-9)*step, step), roundTo(math.Ceil(hi/step-1e-9)*step, step), step
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch r := raw / mag; {
	case r <= 1:
		return mag
	case r <= 2:
		return 2 * mag
	case r <= 5:
		return 5 * mag
	}
	return 10 * mag
}

// logTicks returns the range [lo, hi] widened to the 1-2-5 values strictly
// below and above it (powers of ten when the data spans more than about
// two decades, so ticks stay readable), and the ticks within it.
func logTicks(lo, hi float64) (tlo, thi float64, ticks []float64) {
	switch {
	case lo > hi: // no data
		lo, hi = 1, 10
	case lo == hi:
		lo, hi = lo/2, hi*2
	}
	mantissas := []float64{1, 2, 5}
	if hi/lo > 300 {
		mantissas = []float64{1}
	}
	d0, d1 := int(math.Floor(math.Log10(lo)))-1, int(math.Ceil(math.Log10(hi)))+1
	var all []float64
	for d := d0; d <= d1; d++ {
		for _, m := range mantissas {
			all = append(all, roundSig(m*math.Pow(10, float64(d))))
		}
	}
	// all is ascending and runs from below lo to above hi (one decade
	// beyond each). Keep the candidates from the last one below lo to the
	// first one above hi, so no point or line sits on the frame.
	i := 0
	for i+1 < len(all) && all[i+1] < lo*(1-1e-9) {
		i++
	}
	j := len(all) - 1
	for j-1 >= 0 && all[j-1] > hi*(1+1e-9) {
		j--
	}
	ticks = slices.Clone(all[i : j+1])
	return ticks[0], ticks[len(ticks)-1], ticks
}

// roundTo removes the floating-point residue of adding steps (0.30000000000000004).
func roundTo(v, step float64) float64 {
	return roundSig(math.Round(v/step) * step)
}

// roundSig rounds v to 6 significant digits.
func roundSig(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return r
}

// FormatNumber writes v in plain decimal notation with at most 6
// significant digits and no trailing zeros: 0.25, 40, 1000000. It is the
// axes' default tick format.
func FormatNumber(v float64) string {
	return strconv.FormatFloat(roundSig(v), 'f', -1, 64)
}
