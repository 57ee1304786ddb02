package chart

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFindKnee(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name        string
		ys          []float64
		limit       float64
		wantIndex   int
		wantCrossed bool
	}{
		{"crossed in the middle", []float64{100, 120, 190, 250, 900}, 200, 2, true},
		{"equal to the limit is within", []float64{100, 200, 201}, 200, 1, true},
		{"never crossed", []float64{100, 110, 150}, 200, 2, false},
		{"first point over", []float64{600, 700}, 500, -1, true},
		{"a dip after the crossing does not count", []float64{100, 300, 150}, 200, 0, true},
		{"no completions count as over", []float64{100, nan, 120}, 500, 0, true},
		{"empty", nil, 500, -1, false},
		{"no limit", []float64{1, 1e9}, math.Inf(1), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := FindKnee(tt.ys, tt.limit)
			assert.Equal(t, tt.wantIndex, k.Index)
			assert.Equal(t, tt.wantCrossed, k.Crossed)
		})
	}
}
