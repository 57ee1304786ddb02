package policies

import (
	"sync/atomic"

	"github.com/sluice-llm/sluice/backends"
)

// PrefixTable remembers which endpoint each recently routed prompt prefix
// was last sent to: where that prefix is most likely in a prefix cache. It
// is a fixed-size, direct-mapped table of slots written on every pick that
// has a prefix key, so memory stays bounded and a lookup is two atomic
// loads; a key is forgotten when a later key lands in its slot.
//
// Unlike a hash ring it sends nothing anywhere on first sight: a prefix it
// has not seen (every prompt of a trace without shared prefixes) earns no
// affinity, so load alone decides, and the next request with that prefix
// is drawn to wherever the first went. Each router replica keeps its own
// table, so with several replicas a prefix can be cached on as many
// endpoints as there are replicas.
//
// Reads and writes are not atomic as a pair: a lookup racing a write to the
// same slot can see the new key with the old endpoint. That costs one pick
// a misplaced affinity credit, never correctness, since the endpoint is
// only compared against the candidates the caller holds.
type PrefixTable struct {
	keys []atomic.Uint64
	eps  []atomic.Pointer[backends.Endpoint]
	mask uint64
}

// NewPrefixTable returns a table of 2^bits slots (bits in 4..24).
func NewPrefixTable(bits int) *PrefixTable {
	bits = min(max(bits, 4), 24)
	n := 1 << bits
	return &PrefixTable{keys: make([]atomic.Uint64, n), eps: make([]atomic.Pointer[backends.Endpoint], n), mask: uint64(n - 1)}
}

// key keeps 0 free to mean an empty slot.
func tableKey(k uint64) uint64 { return max(k, 1) }

// Lookup returns the endpoint key was last recorded with, or nil.
func (t *PrefixTable) Lookup(key uint64) *backends.Endpoint {
	key = tableKey(key)
	i := Mix(key) & t.mask
	if t.keys[i].Load() != key {
		return nil
	}
	return t.eps[i].Load()
}

// Record remembers that key was sent to e.
func (t *PrefixTable) Record(key uint64, e *backends.Endpoint) {
	key = tableKey(key)
	i := Mix(key) & t.mask
	t.eps[i].Store(e)
	t.keys[i].Store(key)
}
