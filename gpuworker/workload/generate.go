package workload

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// PRNG streams of the generators. Arrivals, lengths and per-document draws
// come from separate streams, so the lengths a seed gives do not depend on
// the rate.
const (
	streamArrivals     = 0xa771_7a15_0000_0001
	streamSharedPrefix = 0x5ba2_ed00_0000_0002
	streamMultiTurn    = 0x3417_1702_0000_0003
	streamLongDoc      = 0x10a9_d0c0_0000_0004
	streamDocLength    = 0xd0c1_e9a7_0000_0005
)

// MaxPopulation bounds SharedPrefixOptions.SystemPrompts and
// LongDocOptions.Pool: their popularity table takes eight bytes an entry.
const MaxPopulation = 10_000_000

// bounds are the options every generator shares: the mean request rate
// and when to stop.
type bounds struct {
	rate     float64
	duration time.Duration
	count    int
}

// validate reports every bad bound.
func (b bounds) validate() []error {
	var errs []error
	if !(b.rate > 0) || math.IsInf(b.rate, 0) {
		errs = append(errs, fmt.Errorf("rate %v must be a positive number", b.rate))
	}
	if b.duration < 0 || b.count < 0 {
		errs = append(errs, errors.New("duration and count must not be negative"))
	}
	if b.duration == 0 && b.count == 0 {
		errs = append(errs, errors.New("set a duration or a count"))
	}
	return errs
}

// openLoop returns requests from next with Poisson arrivals at b.rate, the
// first at 0, until a bound is reached. Arrivals come from their own
// stream, so next sees the same sequence of calls at any rate.
func openLoop(b bounds, seed uint64, next func() Request) []Request {
	arr := rand.New(rand.NewPCG(seed, streamArrivals))
	var (
		reqs []Request
		at   time.Duration
	)
	for b.count == 0 || len(reqs) < b.count {
		if b.duration > 0 && at >= b.duration {
			break
		}
		r := next()
		r.Arrival = at
		reqs = append(reqs, r)
		at += time.Duration(arr.ExpFloat64() / b.rate * float64(time.Second))
	}
	return reqs
}

// idAlloc hands out fresh hash ids, in the order a generator asks for
// them, so a seed always names the same blocks the same way.
type idAlloc struct{ next int }

func (a *idAlloc) take() int {
	id := a.next
	a.next++
	return id
}

// takeN returns n fresh ids.
func (a *idAlloc) takeN(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = a.take()
	}
	return ids
}

// withPrefix returns the hash ids of a prompt of prompt tokens that starts
// with the whole blocks named by shared: those ids, then fresh ids for
// every block after them, including a last partial one. shared must not
// name more than prompt/BlockTokens blocks.
func withPrefix(shared []int, prompt int, ids *idAlloc) []int {
	n := blocks(prompt)
	out := make([]int, len(shared), n)
	copy(out, shared)
	for len(out) < n {
		out = append(out, ids.take())
	}
	return out
}

// blocks is the number of BlockTokens-token blocks, the last possibly
// partial, that a prompt of n tokens spans.
func blocks(n int) int { return (n + BlockTokens - 1) / BlockTokens }

// popularity draws ranks 0..n-1 with P(rank k) proportional to 1/(k+1)^s: a
// Zipf law, uniform at s = 0.
type popularity struct{ cdf []float64 }

func newPopularity(n int, s float64) popularity {
	cdf := make([]float64, n)
	var sum float64
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return popularity{cdf: cdf}
}

// draw returns a rank; it always consumes one number from rng.
func (p popularity) draw(rng *rand.Rand) int {
	k, _ := slices.BinarySearch(p.cdf, rng.Float64())
	return min(k, len(p.cdf)-1)
}

// validZipf checks a popularity exponent.
func validZipf(s float64) error {
	if !(s >= 0) || math.IsInf(s, 0) {
		return fmt.Errorf("zipf %v must be a non-negative number", s)
	}
	return nil
}

// lognormal draws a log-normal value with the given mean and sigma.
func lognormal(rng *rand.Rand, mean, sigma float64) float64 {
	mu := math.Log(mean) - sigma*sigma/2
	return math.Exp(mu + sigma*rng.NormFloat64())
}

// validLengths checks that a distribution is usable, naming it.
func validLengths(name string, d LengthDist) error {
	if err := d.validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// sortByArrival sorts reqs by arrival, keeping generation order among
// equal arrivals, and shifts them so the first arrives at 0.
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
	if len(reqs) == 0 {
		return
	}
	t0 := reqs[0].Arrival
	for i := range reqs {
		reqs[i].Arrival -= t0
	}
}
