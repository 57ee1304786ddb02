package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRetryBudgetIsAShareOfTraffic(t *testing.T) {
	b := newRetryBudget(0.2, 2, 5)
	assert.True(t, b.spend())
	assert.True(t, b.spend())
	assert.False(t, b.spend(), "the starting two are spent")
	for range 10 {
		b.deposit()
	}
	assert.True(t, b.spend())
	assert.True(t, b.spend())
	assert.False(t, b.spend(), "ten requests earn two retries")
	for range 1000 {
		b.deposit()
	}
	n := 0
	for b.spend() {
		n++
	}
	assert.Equal(t, 5, n, "at most five banked")
}
