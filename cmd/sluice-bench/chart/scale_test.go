package chart

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLinearTicks(t *testing.T) {
	tests := []struct {
		name           string
		lo, hi         float64
		wantLo, wantHi float64
		wantStep       float64
	}{
		{"loads", 0.3, 1.3, 0.2, 1.4, 0.2},
		{"from zero", 0, 87.4, 0, 100, 20},
		{"tokens", 0, 2460, 0, 2500, 500},
		{"one value", 5, 5, 2, 8, 1},
		{"zero only", 0, 0, -1, 1, 0.5},
		{"no data", math.Inf(1), math.Inf(-1), 0, 1, 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi, step := linearTicks(tt.lo, tt.hi)
			assert.InDelta(t, tt.wantLo, lo, 1e-9)
			assert.InDelta(t, tt.wantHi, hi, 1e-9)
			assert.InDelta(t, tt.wantStep, step, 1e-9)
		})
	}
}

func TestNewScaleLinear(t *testing.T) {
	s := newScale([]float64{0.3, 0.5, 1.3, math.NaN()}, false, false, 100, 300)
	assert.Equal(t, []float64{0.2, 0.4, 0.6, 0.8, 1, 1.2, 1.4}, s.ticks, "ticks are exact decimals, not 0.6000000000000001")
	px, ok := s.pos(0.8)
	assert.True(t, ok)
	assert.InDelta(t, 200, px, 1e-9, "the middle of the range maps to the middle of the pixels")
	_, ok = s.pos(math.NaN())
	assert.False(t, ok)

	z := newScale([]float64{30, 60}, false, true, 0, 100)
	assert.Equal(t, 0.0, z.ticks[0], "FromZero starts at zero")
	assert.Equal(t, 60.0, z.ticks[len(z.ticks)-1])
}

func TestLogTicks(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
		want   []float64
	}{
		{"within a decade and a half, 1-2-5", 120, 900, []float64{100, 200, 500, 1000}},
		{"ends on a tick widen, off the frame", 100, 500, []float64{50, 100, 200, 500, 1000}},
		{"wide, decades only", 80, 430_000, []float64{10, 100, 1000, 10_000, 100_000, 1_000_000}},
		{"below one", 0.03, 0.4, []float64{0.02, 0.05, 0.1, 0.2, 0.5}},
		{"one value", 300, 300, []float64{100, 200, 500, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi, ticks := logTicks(tt.lo, tt.hi)
			assert.Equal(t, tt.want, ticks)
			assert.Equal(t, tt.want[0], lo)
			assert.Equal(t, tt.want[len(tt.want)-1], hi)
		})
	}
}

func TestNewScaleLog(t *testing.T) {
	s := newScale([]float64{-1, 0, 100, 10_000}, true, false, 400, 0)
	assert.Equal(t, []float64{50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000}, s.ticks, "non-positive values are ignored")
	mid, ok := s.pos(1000)
	assert.True(t, ok)
	assert.InDelta(t, 200, mid, 1e-9, "a log scale puts 1000 halfway between 50 and 20000")
	_, ok = s.pos(0)
	assert.False(t, ok, "zero has no place on a log scale")
}

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0.30000000000000004, "0.3"},
		{40, "40"},
		{1_000_000, "1000000"},
		{0.05, "0.05"},
		{1234.5678, "1234.57"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, FormatNumber(tt.v))
	}
}
