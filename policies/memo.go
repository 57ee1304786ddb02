package policies

import (
	"sync/atomic"
	"unsafe"

	"github.com/sluice-llm/sluice/backends"
)

// memoSlots is how many distinct pools one Memo remembers, so a policy
// shared by a few models does not rebuild on every pick.
const memoSlots = 4

// Memo caches a value derived from a pool's membership (a hash ring, a
// weight table) across picks, since Pick receives the endpoints afresh each
// call. An entry matches a slice of the same length with the same first,
// middle and last endpoints; that check costs three comparisons, not a scan.
// It can miss a change in the middle of a slice, so a policy must check each
// index it uses with Fresh and call Rebuild when it fails. A stale entry can
// thus cost affinity for a pick but never choose an endpoint outside the
// current slice, because a policy always returns eps[i] of the slice it was
// given. Building allocates; it happens only when membership changes.
type Memo[T any] struct {
	slots [memoSlots]atomic.Pointer[Memoized[T]]
}

// Memoized is one cached value and the membership it was built from.
type Memoized[T any] struct {
	// Val is the derived value. It is immutable once published.
	Val T
	eps []*backends.Endpoint
}

// Fresh reports whether index i of eps is the endpoint the value was built
// with.
func (m *Memoized[T]) Fresh(eps []*backends.Endpoint, i int) bool {
	return i < len(m.eps) && i < len(eps) && m.eps[i] == eps[i]
}

func (m *Memoized[T]) matches(eps []*backends.Endpoint) bool {
	n := len(eps)
	return len(m.eps) == n && n > 0 && m.eps[0] == eps[0] && m.eps[n/2] == eps[n/2] && m.eps[n-1] == eps[n-1]
}

func slot(eps []*backends.Endpoint) int {
	p := uint64(uintptr(unsafe.Pointer(eps[0])))
	return int(Mix(p^uint64(len(eps))) % memoSlots)
}

// Load returns the value for eps (not empty), calling build on a miss.
func (m *Memo[T]) Load(eps []*backends.Endpoint, build func([]*backends.Endpoint) T) *Memoized[T] {
	s := &m.slots[slot(eps)]
	if v := s.Load(); v != nil && v.matches(eps) {
		return v
	}
	return m.store(s, eps, build)
}

// Rebuild builds the value for eps anew, after Fresh reported a change.
func (m *Memo[T]) Rebuild(eps []*backends.Endpoint, build func([]*backends.Endpoint) T) *Memoized[T] {
	return m.store(&m.slots[slot(eps)], eps, build)
}

func (m *Memo[T]) store(s *atomic.Pointer[Memoized[T]], eps []*backends.Endpoint, build func([]*backends.Endpoint) T) *Memoized[T] {
	own := make([]*backends.Endpoint, len(eps))
	copy(own, eps)
	v := &Memoized[T]{Val: build(own), eps: own}
	s.Store(v)
	return v
}
