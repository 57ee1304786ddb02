package policies

import (
	"cmp"
	"slices"

	"github.com/sluice-llm/sluice/backends"
)

// HashString is 64-bit FNV-1a of s, finished with Mix. It allocates
// nothing, and it is the same in every router replica and every run, so
// replicas agree on where a key lives.
func HashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return Mix(h)
}

// maxVnodes bounds one endpoint's points on a ring, whatever its weight.
const maxVnodes = 1024

// Ring is a consistent-hash ring (Karger et al., STOC 1997) over a pool's
// endpoints. Each endpoint owns vnodes×weight points placed by hashing its
// address, so every replica builds the same ring and removing an endpoint
// moves only the keys it owned. It is immutable once built.
type Ring struct {
	points []uint64
	owners []int32 // index in the pool slice of each point's endpoint
}

// NewRing builds the ring of eps with vnodes points per unit of weight.
func NewRing(eps []*backends.Endpoint, vnodes int) Ring {
	type point struct {
		h     uint64
		owner int32
	}
	var pts []point
	for i, e := range eps {
		base := HashString(e.Address())
		nv := min(max(vnodes, 1)*e.Weight(), maxVnodes)
		for v := range nv {
			pts = append(pts, point{Mix(base + uint64(v+1)*golden), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.owner, b.owner)
	})
	r := Ring{points: make([]uint64, len(pts)), owners: make([]int32, len(pts))}
	for i, p := range pts {
		r.points[i], r.owners[i] = p.h, p.owner
	}
	return r
}

// search returns the position of the first point at or after h, wrapping.
func (r *Ring) search(h uint64) int {
	lo, hi := 0, len(r.points)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.points[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.points) {
		return 0
	}
	return lo
}

// maxProbes bounds how many distinct endpoints an affinity pick considers.
const maxProbes = 16

// Affinity sends equal keys to the same endpoint, bounded by load: it is
// consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
// SODA 2018). A key goes to the first endpoint clockwise from it on the
// pool's ring whose queue depth is under a limit the caller sets; when the
// first probes distinct endpoints are all at or over it, Pick says so and
// the caller spreads the request (Bounded uses two random choices over the
// whole pool). The ring is cached per pool membership (see Memo). Safe for
// concurrent use.
type Affinity struct {
	memo  Memo[Ring]
	build func([]*backends.Endpoint) Ring
}

// NewAffinity returns an Affinity whose rings give each endpoint vnodes
// points per unit of weight.
func NewAffinity(vnodes int) *Affinity {
	return &Affinity{build: func(eps []*backends.Endpoint) Ring { return NewRing(eps, vnodes) }}
}

// Pick returns the endpoint of eps (not empty) for key, considering at most
// probes (1..16) distinct endpoints and accepting the first whose QueueDepth
// is below limit. When all of them are at or over it, it returns nil: a key
// hot enough to fill its first probes owners must spread further, or the
// rest of the pool idles while they queue (a shared system prompt, the key
// of every request, once left half a fleet idle that way).
func (a *Affinity) Pick(eps []*backends.Endpoint, key uint64, limit float64, probes int) *backends.Endpoint {
	probes = min(max(probes, 1), maxProbes, len(eps))
	m := a.memo.Load(eps, a.build)
	for range 2 {
		e, fresh := a.walk(m, eps, Mix(key), limit, probes)
		if fresh {
			return e
		}
		m = a.memo.Rebuild(eps, a.build)
	}
	return nil // unreachable: a ring just built from eps is fresh
}

// walk returns the first endpoint under limit, or nil; fresh is false if the
// ring proved stale for eps.
func (a *Affinity) walk(m *Memoized[Ring], eps []*backends.Endpoint, h uint64, limit float64, probes int) (e *backends.Endpoint, fresh bool) {
	r := &m.Val
	var seen [maxProbes]int32
	ns := 0
	pos := r.search(h)
	for range len(r.points) {
		o := r.owners[pos]
		if pos++; pos == len(r.points) {
			pos = 0
		}
		if slices.Contains(seen[:ns], o) {
			continue
		}
		if !m.Fresh(eps, int(o)) {
			return nil, false
		}
		if e := eps[o]; float64(QueueDepth(e)) < limit {
			return e, true
		}
		seen[ns] = o
		if ns++; ns == probes {
			break
		}
	}
	return nil, true
}

// MeanDepth estimates the pool's mean QueueDepth from k sampled endpoints
// (exactly when k >= len(eps)), so a load cap costs k reads, not a scan.
func MeanDepth(seed uint64, eps []*backends.Endpoint, k int) float64 {
	s := NewSample(seed, len(eps), k)
	var sum int64
	n := 0
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		sum += QueueDepth(eps[i])
		n++
	}
	return float64(sum) / float64(n)
}

// Owner returns the index in eps (not empty) of the endpoint that owns key
// on the pool's ring, ignoring load.
func (a *Affinity) Owner(eps []*backends.Endpoint, key uint64) int {
	m := a.memo.Load(eps, a.build)
	for range 2 {
		r := &m.Val
		if o := int(r.owners[r.search(Mix(key))]); m.Fresh(eps, o) {
			return o
		}
		m = a.memo.Rebuild(eps, a.build)
	}
	return 0 // unreachable: a ring just built from eps is fresh
}
