package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// Saturation throughput, the yardstick "--load" is measured against:
//
// A fleet's saturation throughput for a workload is the highest mean
// arrival rate at which the reference scheduler (the oracle row: a central
// queue with perfect knowledge and late binding) keeps the p99 TTFT within
// satBoundFactor times its p99 TTFT at light load (satLightLoad times the
// capacity estimate), and never less than satBoundFloor. Arrivals are
// Poisson at the probed rate, so a trace's burstiness (a property of the
// trace, not of the fleet) does not enter: a trace's requests keep their
// order, lengths and prefixes and are re-timed; a generator is run at the
// probed rate. The rate is found by bisection to within satPrecision.
//
// Near saturation the p99 TTFT of an open queue rises steeply with the
// rate, so the bound's exact value moves the result little; the command
// prints the figure for a bound half and twice as large as well.
const (
	satBoundFactor = 10
	satBoundFloor  = time.Second
	satLightLoad   = 0.1
	satPrecision   = 0.01
	satMaxProbes   = 24
)

// satProbe is one simulated rate.
type satProbe struct {
	Rate    float64       `json:"rate"`
	P99TTFT time.Duration `json:"p99_ttft_ns"`
}

// saturation is the outcome of measureSaturation.
type saturation struct {
	Estimate float64       `json:"capacity_estimate"`
	Measured float64       `json:"saturation_throughput"`
	Light    time.Duration `json:"light_load_p99_ttft_ns"`
	Bound    time.Duration `json:"p99_ttft_bound_ns"`
	// Half and Double are the saturation throughputs for a bound half and
	// twice as large: how sensitive Measured is to the bound.
	Half, Double float64
	Probes       []satProbe `json:"probes"`
}

// Ratio is the estimate over the measurement.
func (s saturation) Ratio() float64 { return s.Estimate / s.Measured }

// errNoSaturation is returned when even the lowest probed rate misses the
// bound, which means the bound is wrong for the workload, not the fleet.
var errNoSaturation = errors.New("the reference misses the p99 TTFT bound even at light load")

// measureSaturation finds the saturation throughput of spec for the
// workload that at(rate) generates, starting from the capacity estimate.
func measureSaturation(spec fleet.Spec, estimate float64, at func(rate float64) ([]workload.Request, error)) (saturation, error) {
	s := saturation{Estimate: estimate}
	cache := map[float64]time.Duration{}
	p99 := func(rate float64) (time.Duration, error) {
		if d, ok := cache[rate]; ok {
			return d, nil
		}
		reqs, err := at(rate)
		if err != nil {
			return 0, err
		}
		res, err := fleet.Run(fleet.Options{Spec: spec, Oracle: true}, reqs)
		if err != nil {
			return 0, err
		}
		ttfts := make([]time.Duration, 0, len(res.Requests))
		for _, o := range res.Requests {
			if o.OK {
				ttfts = append(ttfts, o.TTFT)
			}
		}
		d := quantile(ttfts, 0.99)
		cache[rate] = d
		s.Probes = append(s.Probes, satProbe{Rate: rate, P99TTFT: d})
		return d, nil
	}
	light, err := p99(satLightLoad * estimate)
	if err != nil {
		return s, err
	}
	s.Light = light
	s.Bound = max(satBoundFactor*light, satBoundFloor)
	find := func(bound time.Duration) (float64, error) {
		lo, hi := satLightLoad*estimate, 0.0
		// Grow the bracket: double until a rate misses the bound.
		for r := estimate; hi == 0; r *= 2 {
			d, err := p99(r)
			if err != nil {
				return 0, err
			}
			if d > bound {
				hi = r
			} else {
				lo = r
			}
			if len(s.Probes) > satMaxProbes {
				return 0, fmt.Errorf("no rate up to %.3g req/s misses the bound", r)
			}
		}
		for hi-lo > satPrecision*lo && len(s.Probes) < 3*satMaxProbes {
			mid := (lo + hi) / 2
			d, err := p99(mid)
			if err != nil {
				return 0, err
			}
			if d > bound {
				hi = mid
			} else {
				lo = mid
			}
		}
		return lo, nil
	}
	if light > s.Bound {
		return s, errNoSaturation
	}
	if s.Measured, err = find(s.Bound); err != nil {
		return s, err
	}
	if s.Half, err = find(max(s.Bound/2, satBoundFloor/2)); err != nil {
		return s, err
	}
	if s.Double, err = find(2 * s.Bound); err != nil {
		return s, err
	}
	slices.SortFunc(s.Probes, func(a, b satProbe) int {
		switch {
		case a.Rate < b.Rate:
			return -1
		case a.Rate > b.Rate:
			return 1
		}
		return 0
	})
	return s, nil
}

// quantile returns the q-quantile of ds (nearest rank); it sorts ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// satMinDuration and satMinRequests set a probe's length: long enough that
// a rate a few per cent above saturation builds a queue that breaks the
// bound, however short the workload.
const (
	satMinDuration = 300 * time.Second
	satMinRequests = 4000
)

// poissonRetime returns the requests of reqs, in order and repeated as often
// as it takes to fill satMinDuration and satMinRequests, with Poisson
// arrivals at rate per second (the first at 0), seeded. Each repetition
// renames its prefix hash ids, so a repeat shares blocks within itself as
// the original does, never with an earlier repetition.
func poissonRetime(reqs []workload.Request, rate float64, seed uint64) []workload.Request {
	if len(reqs) == 0 {
		return nil
	}
	n := max(len(reqs), satMinRequests, int(math.Ceil(rate*satMinDuration.Seconds())))
	offset := 0
	for _, r := range reqs {
		for _, id := range r.HashIDs {
			offset = max(offset, id+1)
		}
	}
	out := make([]workload.Request, n)
	for i := range out {
		r := reqs[i%len(reqs)]
		if rep := i / len(reqs); rep > 0 && r.HashIDs != nil {
			ids := make([]int, len(r.HashIDs))
			for j, id := range r.HashIDs {
				ids[j] = id + rep*offset
			}
			r.HashIDs = ids
		}
		out[i] = r
	}
	return workload.Retime(out, rate, rand.NewPCG(seed, 0x5a7_0a7e))
}

// write prints the measurement.
func (s saturation) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nSaturation throughput (reference p99 TTFT <= %v = max(%dx light-load p99 %v, %v)):\t%.2f req/s\n",
		s.Bound.Round(time.Millisecond), satBoundFactor, s.Light.Round(time.Millisecond), satBoundFloor, s.Measured)
	fmt.Fprintf(tw, "  with half / twice the bound:\t%.2f / %.2f req/s\n", s.Half, s.Double)
	fmt.Fprintf(tw, "Capacity estimate:\t%.2f req/s (estimate / measured = %.3f)\n", s.Estimate, s.Ratio())
	fmt.Fprintln(tw, "  probes (req/s: reference p99 TTFT):")
	for _, p := range s.Probes {
		fmt.Fprintf(tw, "    %.2f:\t%v\n", p.Rate, p.P99TTFT.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write saturation: %w", err)
	}
	return nil
}
