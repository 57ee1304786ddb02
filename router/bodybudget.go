package router

import (
	"io"
	"sync"
	"sync/atomic"
)

// bodyBudget bounds the request bodies held at once, in bytes as they
// arrive: 40 bodies of 10 MB from one key took a replica from 100 MB to
// 900 MB before its limits answered 429 to 38 of them (the limits need the
// body's tokens). Counting declared lengths let 26 connections that never
// sent their bodies refuse everyone else, and missed chunked bodies. One
// tenant may hold a quarter of it (at least one body), so that one
// tenant's many slow bodies cannot turn every other tenant away.
type bodyBudget struct {
	held  atomic.Int64
	max   int64
	share int64    // what one tenant may hold
	per   sync.Map // tenant name -> *atomic.Int64, what it holds
}

func newBodyBudget(maxBytes, maxBody int64) *bodyBudget {
	return &bodyBudget{max: maxBytes, share: min(max(maxBytes/4, maxBody), maxBytes)}
}

// tenant is what tenant holds (the open router's callers share "").
func (b *bodyBudget) tenant(name string) *atomic.Int64 {
	if v, ok := b.per.Load(name); ok {
		return v.(*atomic.Int64)
	}
	v, _ := b.per.LoadOrStore(name, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// take holds n bytes for a tenant holding mine if they fit both, and
// reports whether they did.
func (b *bodyBudget) take(mine *atomic.Int64, n int64) bool {
	if mine.Add(n) > b.share {
		mine.Add(-n)
		return false
	}
	if b.held.Add(n) > b.max {
		b.held.Add(-n)
		mine.Add(-n)
		return false
	}
	return true
}

// budgeted reads r, holding what arrives in b for the tenant holding
// mine; reading past the room fails with errBodiesFull. release gives it
// all back.
type budgeted struct {
	r    io.Reader
	b    *bodyBudget
	mine *atomic.Int64
	held int64
}

func (c *budgeted) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		if !c.b.take(c.mine, int64(n)) {
			return 0, errBodiesFull
		}
		c.held += int64(n)
	}
	return n, err
}

func (c *budgeted) release() {
	c.b.held.Add(-c.held)
	c.mine.Add(-c.held)
	c.held = 0
}
