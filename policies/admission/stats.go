package admission

import (
	"sync/atomic"
	"time"
)

// ClassStats is one service class at a gate, for the operator's status
// page. The counts start when the gate is built, or carry on from the
// gate it replaces (CountWith).
type ClassStats struct {
	// Waiting is how many requests of the class wait now.
	Waiting int
	// Admitted counts the requests bound to an endpoint, Shed those
	// refused (queue full or waited too long).
	Admitted, Shed uint64
	// Waited is the admitted requests' total time in the queue.
	Waited time.Duration
	// Behind counts the looks for room at which a request of the class
	// was held back because one that goes first waits on another replica
	// (the shared store's Behind).
	Behind uint64
	// Detoured counts the requests of the class set aside to wait for a
	// quick endpoint (Options.BelowShareDetour, BetterClassDetour).
	Detoured uint64
	// HeldAbove counts the looks for room at which a request of the class
	// was held by AboveSharePrefill or WorseClassPrefill where endpoints had
	// room for other requests (which went meanwhile).
	HeldAbove uint64
}

// classCounters are a gate's counts for one class.
type classCounters struct {
	admitted, shed, behind, detoured, heldAbove atomic.Uint64
	waited                                      atomic.Int64 // ns
}

// CountWith makes g count into old's counters, from where they are: a
// reload that builds a model a new gate (its admission settings changed)
// carries the counts on, and the old gate's requests still waiting count
// there too (the status page's counts went back to zero), and are counted
// waiting in g's Stats until they leave. Call it before g admits anything.
func (g *Gate) CountWith(old *Gate) {
	g.counts = old.counts
	g.prev.Store(old)
}

// Stats returns each class's stats, indexed by Class.
func (g *Gate) Stats() [NumClasses]ClassStats {
	var out [NumClasses]ClassStats
	g.mu.Lock()
	for c := range out {
		out[c].Waiting = g.q.ClassLen(Class(c))
	}
	for _, w := range g.aside {
		out[w.r.Class].Waiting++
	}
	g.mu.Unlock()
	if p := g.prev.Load(); p != nil {
		left := 0
		for c, s := range p.Stats() {
			out[c].Waiting += s.Waiting
			left += s.Waiting
		}
		if left == 0 {
			g.prev.CompareAndSwap(p, nil) // none waits there any more: let it go
		}
	}
	for c := range out {
		k := &g.counts[c]
		out[c].Admitted, out[c].Shed, out[c].Waited = k.admitted.Load(), k.shed.Load(), time.Duration(k.waited.Load())
		out[c].Behind, out[c].Detoured, out[c].HeldAbove = k.behind.Load(), k.detoured.Load(), k.heldAbove.Load()
	}
	return out
}

// admitted counts a request of class c bound at now after waiting waited
// (now is the caller's clock read: none more on the request's path).
func (g *Gate) admitted(c Class, waited time.Duration, now time.Time) {
	g.binds.add(now.UnixNano())
	if c < NumClasses {
		g.counts[c].admitted.Add(1)
		g.counts[c].waited.Add(int64(waited))
	}
}

// ClassLen is the number of waiting items of class c.
func (q *Queue) ClassLen(c Class) int {
	n := 0
	for _, lv := range q.levels {
		if lv.class == c {
			n += lv.n
		}
	}
	return n
}
