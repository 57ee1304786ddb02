package router

import "sync/atomic"

// bodyBudget bounds the request bodies held at once, in bytes: 40 bodies
// of 10 MB from one key took a replica from 100 MB to 900 MB before its
// limits answered 429 to 38 of them (the limits need the body's tokens).
type bodyBudget struct {
	held atomic.Int64
	max  int64
}

// take holds n bytes if they fit, and reports whether they did.
func (b *bodyBudget) take(n int64) bool {
	if b.held.Add(n) > b.max && n > 0 {
		b.held.Add(-n)
		return false
	}
	return true
}

// add holds n more bytes (less when negative), fitting or not: a chunked
// body's, known once read.
func (b *bodyBudget) add(n int64) { b.held.Add(n) }
