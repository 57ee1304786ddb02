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

	b.deposit()
	b.deposit()
	assert.False(t, b.available())
	for range 3 {
		b.deposit()
	}
	assert.True(t, b.available(), "five requests earn one")
	b.take()
	b.take() // promised to two requests at once
	assert.False(t, b.available())
	for range 9 {
		b.deposit()
	}
	assert.False(t, b.available(), "the overdraft is paid back first")
	b.deposit()
	assert.True(t, b.available())
}
