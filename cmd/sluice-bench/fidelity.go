package main

import (
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/loadgen"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// Fidelity runs compare "load" against live gpuworkers with "simulate" of the
// same fleet (deploy/fidelity.sh). Workers run --speedup X times faster than
// the wall clock, so load --time-scale X sends the trace X times faster and
// reports every duration X times longer: the report is in the workers'
// simulated time, directly comparable with the simulator's virtual time.
//
// The router between them is not sped up: its scrape interval and anything
// a policy measures against a fixed duration (scored's ttft scorer adds 1 s
// to expected TTFTs) last X times longer in simulated time, and each
// millisecond of wall-clock scheduling delay costs X. The workers share the
// simulator's engine, so a fidelity run checks the driver, the HTTP path,
// the router's signals and the policy, never the GPU model (validate does).

// compressArrivals sends reqs scale times faster; 1 returns reqs unchanged.
func compressArrivals(reqs []workload.Request, scale float64) []workload.Request {
	if scale == 1 {
		return reqs
	}
	return workload.Scale(reqs, scale)
}

// rescaleResult stretches every measured duration by scale, mapping a run
// against sped-up workers back to their simulated time.
func rescaleResult(res loadgen.Result, scale float64) loadgen.Result {
	if scale == 1 {
		return res
	}
	stretch := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	for i := range res.Samples {
		s := &res.Samples[i]
		s.TTFT, s.E2E = stretch(s.TTFT), stretch(s.E2E)
		for j, d := range s.ITL {
			s.ITL[j] = stretch(d)
		}
	}
	res.Elapsed = stretch(res.Elapsed)
	return res
}
