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
// A slot also remembers whether its key has been sent to more than one
// endpoint: such a prefix (a system prompt every request starts with) is
// cached on several endpoints, so it says nothing about where to go, and
// crediting the one it went to last would herd every request there.
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
	slots []prefixSlot
	mask  uint64
}

// prefixSlot keeps a key and its endpoint side by side, so a lookup touches
// one cache line.
type prefixSlot struct {
	key atomic.Uint64 // the key, with spreadBit set once it went to two endpoints
	ep  atomic.Pointer[backends.Endpoint]
}

// spreadBit marks a slot whose key was sent to more than one endpoint. Keys
// are stored without it, so it costs one bit of the 64-bit hash.
const spreadBit = 1 << 63

// NewPrefixTable returns a table of 2^bits slots (bits in 4..24), 16 bytes
// each.
func NewPrefixTable(bits int) *PrefixTable {
	bits = min(max(bits, 4), 24)
	n := 1 << bits
	return &PrefixTable{slots: make([]prefixSlot, n), mask: uint64(n - 1)}
}

// key keeps 0 free to mean an empty slot and the top bit for spreadBit.
func tableKey(k uint64) uint64 { return max(k&^spreadBit, 1) }

// Lookup returns the endpoint key was last recorded with, or nil, and
// whether key has been recorded with more than one endpoint.
func (t *PrefixTable) Lookup(key uint64) (e *backends.Endpoint, spread bool) {
	key = tableKey(key)
	s := &t.slots[Mix(key)&t.mask]
	k := s.key.Load()
	if k&^spreadBit != key {
		return nil, false
	}
	return s.ep.Load(), k&spreadBit != 0
}

// Record remembers that key was sent to e.
func (t *PrefixTable) Record(key uint64, e *backends.Endpoint) {
	key = tableKey(key)
	s := &t.slots[Mix(key)&t.mask]
	k := s.key.Load()
	if k&^spreadBit == key && (k&spreadBit != 0 || s.ep.Load() != e) {
		key |= spreadBit
	}
	s.ep.Store(e)
	s.key.Store(key)
}

// prefixDepths are the prefix hashes (1-based depths) RecordPrefixes
// records besides a prompt's deepest one: dense near the start, where
// system prompts end, and about 1.4x apart beyond, so a pick records a
// dozen entries whatever the prompt's length, and a prompt that shares
// only part of a recorded one still finds it within a factor of 1.4 of
// the depth they share.
var prefixDepths = [...]int{1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 90, 128}

// LongestPrefix returns the endpoint holding the longest prefix of hashes
// this table knows of, and its depth (how many leading hashes it covers).
// It looks at the deepest hash, then down prefixDepths to the deepest one
// recorded, then at every depth between that one and the next of
// prefixDepths: a prompt that extends an earlier one (the next turn of a
// conversation) thus finds the earlier one's deepest hash, which
// RecordPrefixes wrote and nobody else did, even if the conversation has
// moved. The deepest depth recorded with a single endpoint wins; a depth
// recorded with several endpoints ends the search with no owner, since
// everything shallower is shared at least as widely (a system prompt). It
// returns nil, 0 when nothing matches, after about a dozen lookups, at most
// len(prefixDepths) plus the gap between two of them.
func (t *PrefixTable) LongestPrefix(hashes []uint64) (*backends.Endpoint, int) {
	n := len(hashes)
	if n == 0 {
		return nil, 0
	}
	if e, spread := t.Lookup(hashes[n-1]); spread {
		return nil, 0
	} else if e != nil {
		return e, n
	}
	for i := len(prefixDepths) - 1; i >= 0; i-- {
		d := prefixDepths[i]
		if d >= n {
			continue
		}
		e, spread := t.Lookup(hashes[d-1])
		if spread {
			return nil, 0
		}
		if e == nil {
			continue
		}
		// d is recorded; a deeper hash up to the next recorded depth may
		// be an earlier prompt's deepest.
		above := n
		if i+1 < len(prefixDepths) {
			above = min(above, prefixDepths[i+1])
		}
		for dd := above - 1; dd > d; dd-- {
			if e2, spread := t.Lookup(hashes[dd-1]); e2 != nil && !spread {
				return e2, dd
			}
		}
		return e, d
	}
	return nil, 0
}

// RecordPrefixes records that the prompt with these prefix hashes was sent
// to e: its deepest hash and those at prefixDepths.
func (t *PrefixTable) RecordPrefixes(hashes []uint64, e *backends.Endpoint) {
	n := len(hashes)
	for _, d := range prefixDepths {
		if d >= n {
			break
		}
		t.Record(hashes[d-1], e)
	}
	if n > 0 {
		t.Record(hashes[n-1], e)
	}
}
