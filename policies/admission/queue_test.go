package admission_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
)

func item(c admission.Class, prio int, tenant string, tokens int64, v int) *admission.Item {
	return &admission.Item{Class: c, TierPriority: prio, Tenant: tenant, Weight: 1, Tokens: tokens, Value: v}
}

func drain(q *admission.Queue) []int {
	var out []int
	for it := q.Pop(); it != nil; it = q.Pop() {
		out = append(out, it.Value.(int))
	}
	return out
}

func TestQueueOrdersByClassThenTierPriorityThenArrival(t *testing.T) {
	q := admission.NewQueue(100)
	for _, it := range []*admission.Item{
		item(admission.Flex, 5, "a", 1, 1),
		item(admission.Default, 0, "a", 1, 2),
		item(admission.Priority, 0, "a", 1, 3),
		item(admission.Default, 2, "a", 1, 4),
		item(admission.Priority, 0, "a", 1, 5),
		item(admission.Default, 0, "a", 1, 6),
	} {
		_, err := q.Push(it)
		require.NoError(t, err)
	}
	assert.Equal(t, []int{3, 5, 4, 2, 6, 1}, drain(q))
	assert.Zero(t, q.Len())
}

func TestQueueSharesByTokensServed(t *testing.T) {
	q := admission.NewQueue(1000)
	// heavy sends 10x light's tokens per request; both keep the queue busy.
	for i := range 50 {
		_, err := q.Push(item(admission.Default, 0, "heavy", 2000, 1000+i))
		require.NoError(t, err)
		_, err = q.Push(item(admission.Default, 0, "light", 200, i))
		require.NoError(t, err)
	}
	var heavyTok, lightTok int64
	for range 33 { // while both wait
		it := q.Pop()
		if it.Tenant == "heavy" {
			heavyTok += it.Tokens
		} else {
			lightTok += it.Tokens
		}
	}
	assert.InDelta(t, 1.0, float64(heavyTok)/float64(lightTok), 0.1, "tokens split by equal weights: heavy %d light %d", heavyTok, lightTok)
}

func TestQueueWeights(t *testing.T) {
	q := admission.NewQueue(1000)
	for i := range 100 {
		a := item(admission.Default, 0, "big", 100, i)
		a.Weight = 3
		_, _ = q.Push(a)
		_, _ = q.Push(item(admission.Default, 0, "small", 100, 100+i))
	}
	n := map[string]int{}
	for range 80 {
		n[q.Pop().Tenant]++
	}
	assert.InDelta(t, 3.0, float64(n["big"])/float64(n["small"]), 0.3, "%v", n)
}

func TestQueueNoBankedCreditAfterIdle(t *testing.T) {
	q := admission.NewQueue(1000)
	for i := range 20 {
		_, _ = q.Push(item(admission.Default, 0, "busy", 100, i))
	}
	for range 20 { // busy is served 2,000 tokens while idle waits for nothing
		q.Pop()
	}
	for i := range 10 {
		_, _ = q.Push(item(admission.Default, 0, "busy", 100, 100+i))
		_, _ = q.Push(item(admission.Default, 0, "idle", 100, 200+i))
	}
	n := map[string]int{}
	for range 10 {
		n[q.Pop().Tenant]++
	}
	assert.Equal(t, 5, n["idle"], "the returning tenant gets its share, not the 20 requests it did not send: %v", n)
}

func TestQueueShedsFlexFirstAndPriorityLast(t *testing.T) {
	q := admission.NewQueue(3)
	d := item(admission.Default, 0, "a", 1, 1)
	f1 := item(admission.Flex, 0, "a", 1, 2)
	f2 := item(admission.Flex, 0, "a", 1, 3)
	for _, it := range []*admission.Item{d, f1, f2} {
		_, err := q.Push(it)
		require.NoError(t, err)
	}
	shed, err := q.Push(item(admission.Priority, 0, "a", 1, 4))
	require.NoError(t, err)
	assert.Same(t, f2, shed, "the newest flex goes first")
	shed, err = q.Push(item(admission.Default, 0, "a", 1, 5))
	require.NoError(t, err)
	assert.Same(t, f1, shed)
	_, err = q.Push(item(admission.Flex, 0, "a", 1, 6))
	assert.ErrorIs(t, err, admission.ErrFull, "a flex request does not push out better ones")
	shed, err = q.Push(item(admission.Priority, 0, "a", 1, 7))
	require.NoError(t, err)
	assert.Equal(t, 5, shed.Value, "then default, newest first; priority stays")
	assert.Equal(t, []int{4, 7, 1}, drain(q))
}

func TestQueueRemove(t *testing.T) {
	q := admission.NewQueue(10)
	a, b, c := item(admission.Default, 0, "x", 1, 1), item(admission.Default, 0, "x", 1, 2), item(admission.Default, 0, "y", 1, 3)
	for _, it := range []*admission.Item{a, b, c} {
		_, _ = q.Push(it)
	}
	q.Remove(a)
	q.Remove(a) // twice is harmless
	assert.Equal(t, 2, q.Len())
	assert.Equal(t, []int{2, 3}, drain(q))
	q.Remove(b) // already popped
	assert.Zero(t, q.Len())
}

func TestQueueNoBankedCreditAfterTheQueueRanEmpty(t *testing.T) {
	q := admission.NewQueue(1000)
	for i := range 20 { // heavy is served alone; the queue then runs empty
		_, _ = q.Push(item(admission.Default, 0, "heavy", 1000, i))
		q.Pop()
	}
	for i := range 10 {
		_, _ = q.Push(item(admission.Default, 0, "light", 1000, 100+i))
		_, _ = q.Push(item(admission.Default, 0, "heavy", 1000, 200+i))
	}
	n := map[string]int{}
	for range 10 {
		n[q.Pop().Tenant]++
	}
	assert.InDelta(t, 5, n["light"], 1, "light did not bank the 20 requests it did not send: %v", n)
}

// PeekPast passes a held item (heavy's, first in the fair order) to the
// next tenant's while that tenant has been served less than heavy would be
// with the held item's tokens counted: a request's worth ahead of its
// share at most. Another class is not passed to.
func TestQueuePeekPastAHeldItemByARequestsWorth(t *testing.T) {
	q := admission.NewQueue(100)
	heavy := item(admission.Default, 0, "heavy", 500, 1)
	for _, it := range []*admission.Item{heavy, item(admission.Default, 0, "light", 200, 2), item(admission.Default, 0, "light", 200, 3),
		item(admission.Default, 0, "light", 200, 4), item(admission.Flex, 0, "other", 1, 5)} {
		_, err := q.Push(it)
		require.NoError(t, err)
	}
	require.Same(t, heavy, q.Peek(), "both level, heavy's came first")
	held := []*admission.Item{heavy}
	var passed []int
	for it := q.PeekPast(held); it != nil; it = q.PeekPast(held) {
		q.Take(it)
		passed = append(passed, it.Value.(int))
	}
	assert.Equal(t, []int{2, 3, 4}, passed, "light served 0, 200, 400: each under heavy's 0 + 500")
	_, err := q.Push(item(admission.Default, 0, "light", 200, 6))
	require.NoError(t, err)
	assert.Nil(t, q.PeekPast(held), "light served 600, past heavy's 500: it waits for heavy")
	assert.Same(t, heavy, q.Pop())
	assert.Equal(t, []int{6, 5}, drain(q))
}
