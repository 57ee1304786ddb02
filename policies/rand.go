package policies

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"time"
)

// golden is the splitmix64 increment (2^64 / phi, odd).
const golden = 0x9e3779b97f4a7c15

// Rand is a lock-free, allocation-free source of random numbers that many
// goroutines share: each draw is one atomic add on a counter followed by the
// splitmix64 finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", OOPSLA 2014). A policy draws once per pick and derives
// any further numbers from a Stream, so concurrent picks contend on one add.
// It is not for cryptography. The zero value is usable but always starts the
// same sequence; use NewRand.
type Rand struct {
	state atomic.Uint64
}

// NewRand returns a Rand. A non-zero seed gives a reproducible sequence (the
// fleet simulator relies on that); 0 seeds it from crypto/rand, or from the
// clock if that fails.
func NewRand(seed uint64) *Rand {
	if seed == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err == nil {
			seed = binary.LittleEndian.Uint64(b[:])
		} else {
			seed = uint64(time.Now().UnixNano())
		}
	}
	r := &Rand{}
	r.state.Store(seed)
	return r
}

// Uint64 returns the next number of the shared sequence.
func (r *Rand) Uint64() uint64 { return Mix(r.state.Add(golden)) }

// Mix is the splitmix64 finaliser: a bijection of uint64 whose output bits
// each depend on every input bit. Policies also use it to hash keys.
func Mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Stream is a splitmix64 sequence for one goroutine, typically one pick,
// seeded from a single Rand draw. It lives on the stack.
type Stream struct {
	s uint64
}

// NewStream starts a stream at seed.
func NewStream(seed uint64) Stream { return Stream{s: seed} }

// Uint64 returns the stream's next number.
func (s *Stream) Uint64() uint64 {
	s.s += golden
	return Mix(s.s)
}

// IntN returns a number in [0, n) for n > 0, by Lemire's multiply-shift
// (the bias is below n/2^64, negligible for pool sizes).
func (s *Stream) IntN(n int) int {
	hi, _ := bits.Mul64(s.Uint64(), uint64(n))
	return int(hi)
}

// Float64 returns a number in [0, 1).
func (s *Stream) Float64() float64 { return float64(s.Uint64()>>11) / (1 << 53) }

// Sample walks a bounded set of indices of a pool of n endpoints, so a policy
// compares at most k of them per pick whatever the pool size. When k >= n it
// yields every index once, starting at a random one, so the scan is exact and
// ties still spread; otherwise it yields k independent uniform draws (with
// replacement: a duplicate only wastes a comparison). Uniform draws, rather
// than a window of neighbours, keep the pool's order from biasing the choice
// (a pool listed as all fast GPUs then all slow ones would otherwise be
// compared mostly against its own kind).
type Sample struct {
	s          Stream
	n, k, i    int
	next       int
	exhaustive bool
}

// NewSample starts a sample of k (at least 1) of n indices seeded by seed.
func NewSample(seed uint64, n, k int) Sample {
	s := Sample{s: NewStream(seed), n: n, k: max(k, 1)}
	if s.k >= n {
		s.exhaustive = true
		s.k = n
		s.next = s.s.IntN(n)
	}
	return s
}

// Next returns the next index, or false when the sample is done.
func (s *Sample) Next() (int, bool) {
	if s.i >= s.k {
		return 0, false
	}
	s.i++
	if !s.exhaustive {
		return s.s.IntN(s.n), true
	}
	i := s.next
	if s.next++; s.next == s.n {
		s.next = 0
	}
	return i, true
}
