package fleet

import (
	"time"

	"github.com/sluice-llm/sluice/policies/admission"
)

// Outcome is what one request of the workload experienced, in virtual time
// measured from its arrival.
type Outcome struct {
	// Worker is the index of the worker that served (or refused) the
	// request; -1 if it never reached one.
	Worker int
	// OK is true when the request produced all its tokens; Err says why
	// it did not.
	OK  bool
	Err string
	// PromptTokens is the prompt length; OutputTokens the tokens produced.
	PromptTokens, OutputTokens int
	// TTFT is the time to the first token and E2E the time to the last.
	TTFT, E2E time.Duration
	// Held is the time from arrival until the request was handed to its
	// worker: zero for routing policies, which bind on arrival; the time
	// in the reference scheduler's queue for the oracle, or in the
	// admission queue with Options.Admission (until it was shed, for a
	// shed request).
	Held time.Duration
	// ExpectedTTFT is, with Options.Estimates, the request's expected
	// time to first token on its worker when a routing policy bound it:
	// the prompt tokens that worker had to prefill first, its own
	// included (policies.PrefillBacklog), over the worker's measured
	// prefill rate; QuickestTTFT is the least such estimate over the
	// workers the policy could choose from (with admission, those with
	// room). The ttft scorer reads the same signals (and also credits a
	// cached prefix). Zero when not recorded: the reference scheduler, no
	// rate measured yet, or Estimates off.
	ExpectedTTFT, QuickestTTFT time.Duration
	// Class is the request's service class (Options.Classes) and Tenant
	// its tenant's name (Options.TenantOf or Options.Tenants; "" for
	// none), so reports can split by them.
	Class  admission.Class
	Tenant string
}

// WorkerStats is one worker's share of a run.
type WorkerStats struct {
	// Profile names the worker's profile.
	Profile string
	// Requests counts the requests dispatched to the worker.
	Requests int
	// Busy is the virtual time the engine spent running steps, and
	// Utilization is Busy over the run's Elapsed time.
	Busy        time.Duration
	Utilization float64
	// Preemptions counts recompute preemptions.
	Preemptions int64
	// PrefixQueries and PrefixHits count the prompt tokens looked up in,
	// and found in, the worker's prefix cache; requests without HashIDs are
	// not counted.
	PrefixQueries, PrefixHits int64
	// Budget is the worker's admission budget of requests in flight and
	// PeakInFlight the most it ever had; both zero without admission.
	Budget, PeakInFlight int
	// MeasuredPrefill is the worker's prefill rate, in prompt tokens per
	// second (those its prefix cache served included), as the router
	// replicas measured it by the run's end
	// (backends.Endpoint.PrefillTokensPerSec, the mean over the replicas
	// with a measurement); 0 when none has one, and for the reference
	// scheduler, which measures nothing.
	MeasuredPrefill float64
}

// Result is what Run measured.
type Result struct {
	// Requests holds one Outcome per workload request, in workload order.
	Requests []Outcome
	// ITL is the distribution of every gap between consecutive output
	// tokens of every request (streamed; see Histogram).
	ITL *Histogram
	// Elapsed runs from the first arrival to the last completion.
	Elapsed time.Duration
	// Workers holds per-worker statistics, in worker order.
	Workers []WorkerStats
	// Tenants holds per-tenant statistics, in Options.Tenants order; nil
	// without tenants.
	Tenants []TenantStats
	// ClassITL holds ITL per service class, indexed by class, when
	// Options.Classes is set; TenantITL per tenant name when requests have
	// named tenants. Nil otherwise.
	ClassITL  []*Histogram
	TenantITL map[string]*Histogram
	// Admission holds what admission measured; nil without it.
	Admission *AdmissionStats
	// Batch holds the batch's lines (Options.Batch); nil without one.
	// Requests, ITL and Elapsed are then the workload's alone, and each
	// worker's Utilization is over the whole run, until the later of the
	// workload's last completion and the batch's end.
	Batch *BatchResult
}

// PrefixHitRatio is the fleet's token-weighted prefix-cache hit ratio: hits
// over queries summed over workers, zero when there were no queries.
func (r *Result) PrefixHitRatio() float64 {
	var q, h int64
	for _, w := range r.Workers {
		q += w.PrefixQueries
		h += w.PrefixHits
	}
	if q == 0 {
		return 0
	}
	return float64(h) / float64(q)
}

// Goodput returns the completed requests per second of Elapsed whose TTFT is
// at most ttft and whose mean time per output token after the first is at
// most tpot (requests of one token are judged on TTFT alone).
func (r *Result) Goodput(ttft, tpot time.Duration) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	good := 0
	for _, o := range r.Requests {
		if !o.OK || o.TTFT > ttft {
			continue
		}
		if o.OutputTokens >= 2 && (o.E2E-o.TTFT)/time.Duration(o.OutputTokens-1) > tpot {
			continue
		}
		good++
	}
	return float64(good) / r.Elapsed.Seconds()
}
