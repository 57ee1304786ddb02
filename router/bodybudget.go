package router

import (
	"io"
	"sync/atomic"
)

// bodyBudget bounds the request bodies held at once, in bytes as they
// arrive: 40 bodies of 10 MB from one key took a replica from 100 MB to
// 900 MB before its limits answered 429 to 38 of them (the limits need the
// body's tokens). Counting declared lengths let 26 connections that never
// sent their bodies refuse everyone else, and missed chunked bodies.
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

// budgeted reads r, holding what arrives in b; reading past b's room
// fails with errBodiesFull. release gives it all back.
type budgeted struct {
	r    io.Reader
	b    *bodyBudget
	held int64
}

func (c *budgeted) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		if !c.b.take(int64(n)) {
			return 0, errBodiesFull
		}
		c.held += int64(n)
	}
	return n, err
}

func (c *budgeted) release() {
	c.b.held.Add(-c.held)
	c.held = 0
}
