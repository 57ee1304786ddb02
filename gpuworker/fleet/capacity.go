package fleet

import (
	"math"
	"math/rand/v2"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// EstimateCapacity estimates the fleet's saturation throughput in req/s for
// requests shaped like the workload: the sum over workers of a steady-state
// roofline model of a saturated engine (see workerCapacity), fed the
// workload's mean prompt and output lengths, its attention work, and, when
// the requests share prefixes (HashIDs), the share of prompt tokens the
// reference scheduler finds in the prefix cache (ReferenceHitRatio, with the
// requests re-timed as Poisson arrivals at 70% of the estimate without
// hits, keeping their order; a generator whose reuse depends on its timing,
// such as multi-turn conversations, should be generated at that rate and
// measured with ReferenceHitRatio instead). It
// ignores burstiness: a trace whose busiest minute runs at three times its
// mean rate is overloaded during that minute at a mean rate well below the
// estimate. "sluice-bench simulate --saturation" measures what it
// estimates. It returns +Inf for zero-cost profiles and 0 for an empty
// workload.
func EstimateCapacity(spec Spec, reqs []workload.Request) float64 {
	hit := 0.0
	if HasPrefixes(reqs) {
		if timed := retimeAt(spec, reqs); timed != nil {
			hit = ReferenceHitRatio(spec, timed)
		}
	}
	return EstimateCapacityWithHits(spec, reqs, hit)
}

// HasPrefixes reports whether any request names prefix blocks (HashIDs).
func HasPrefixes(reqs []workload.Request) bool {
	for _, r := range reqs {
		if r.HashIDs != nil {
			return true
		}
	}
	return false
}

// EstimateCapacityWithHits is EstimateCapacity with the prefix-cache hit
// ratio given: that share of every prompt costs no prefill.
func EstimateCapacityWithHits(spec Spec, reqs []workload.Request, hit float64) float64 {
	m := newShape(reqs, hit)
	if m.requests == 0 {
		return 0
	}
	var total float64
	for _, g := range spec {
		total += float64(g.Count) * workerCapacity(g.Profile, m)
	}
	return total
}

// shape is what the capacity model needs of a workload, as means over its
// requests.
type shape struct {
	requests int
	// prompt and output are the mean lengths; fresh is the mean uncached
	// prompt, prompt*(1-hit); held is the mean prompt a running request
	// holds KV blocks for alone: its prompt less the leading blocks hot
	// enough (hotShare of all requests name them) that many running
	// requests share them, a system prompt or a popular document.
	prompt, output, fresh, held float64
	// prefillAttn is the mean attention work of a prefill, n*(n+2h) for n
	// uncached tokens after h cached ones (chunking does not change it);
	// decodeAttn the mean per decoded token, 1+2*context.
	prefillAttn, decodeAttn float64
}

// hotShare is the share of a workload's requests that must name a prefix
// block for the capacity model to count it as held once by all the running
// requests that use it, rather than by each.
const hotShare = 0.01

func newShape(reqs []workload.Request, hit float64) shape {
	m := shape{requests: len(reqs)}
	if len(reqs) == 0 {
		return m
	}
	hit = min(max(hit, 0), 1)
	refs := map[int]int{}
	for _, r := range reqs {
		for _, id := range r.HashIDs {
			refs[id]++
		}
	}
	hot := max(2, int(hotShare*float64(len(reqs))))
	var decodeTokens float64
	for _, r := range reqs {
		p, o := float64(r.PromptTokens), float64(r.OutputTokens)
		n := p * (1 - hit)
		shared := 0
		for _, id := range r.HashIDs {
			if refs[id] < hot {
				break
			}
			shared++
		}
		m.held += max(p-float64(shared*workload.BlockTokens), n)
		m.prompt += p
		m.output += o
		m.fresh += n
		m.prefillAttn += n * (n + 2*(p-n))
		m.decodeAttn += o * (1 + 2*p + o) // sum over its tokens of 1+2*context
		decodeTokens += o
	}
	k := float64(len(reqs))
	m.prompt /= k
	m.output /= k
	m.fresh /= k
	m.held /= k
	m.prefillAttn /= k
	m.decodeAttn /= decodeTokens
	return m
}

// workerCapacity is one worker's term of EstimateCapacity: the request rate
// of an engine that always has work waiting, in a steady state where it
// runs B sequences (as many as MaxNumSeqs and the KV cache allow, at held
// prompt + output tokens each: a hot prefix is held once for all) and
// admits a = B/output new requests per step as others finish.
// Two regimes, as vLLM's scheduler behaves:
//
//   - Budget-bound (a*fresh > chunk, chunk = budget-B): waiting prompts
//     fill every step's token budget, so each request costs
//     (fresh+output)/budget full steps (the old prefill-heavy estimate).
//   - Admission-bound: prompts are admitted as others finish, in pieces
//     of g = min(fresh, chunk) tokens (the most of one prompt a step
//     takes), Poisson-like at a*fresh/g pieces per step. Of a request's
//     1/a steps, those that carry its prompt (fresh over a carrying
//     step's pieces) run B decodes and the pieces; the rest decode only,
//     memory-bound when B's contexts are long: many small prompts per
//     step when they are short and completions frequent (a system
//     prompt's requests), one long prompt every few steps otherwise.
//
// Steps are timed by the roofline (StepDuration) at the batch's mean
// context, with each piece's attention work. Ignoring the lumps (spreading
// every prompt evenly over the steps) overestimated long-prompt capacity by
// a third; ignoring shared system prompts in B underestimated that work by
// a half, and counting every cached prefix as shared overestimated
// multi-turn conversations (whose history is reused by one request at a
// time) by a fifth.
func workerCapacity(p gpuworker.Profile, m shape) float64 {
	held := m.held + m.output
	if held <= 0 || m.output <= 0 {
		return 0
	}
	budget := float64(p.MaxBatchedTokens)
	b := math.Min(float64(p.MaxNumSeqs), math.Floor(float64(p.KVTokens())/held))
	b = math.Max(b, 1)
	ctx := m.prompt + m.output/2 // each sequence reads its whole context
	var perFresh float64
	if m.fresh > 0 {
		perFresh = m.prefillAttn / m.fresh
	}
	step := func(decodes, prefill float64) float64 {
		pieces := 0.0
		if prefill > 0 {
			pieces = math.Ceil(prefill / math.Max(m.fresh, 1))
		}
		return p.StepDuration(gpuworker.StepWork{
			Tokens:        int(math.Ceil(decodes + prefill)),
			ContextTokens: int(decodes*ctx + prefill),
			AttnWork:      prefill*perFresh + decodes*m.decodeAttn,
			Seqs:          int(math.Ceil(decodes + pieces)),
		}).Seconds()
	}
	chunk := math.Max(budget-b, budget/2)
	a := b / m.output
	var perReq float64 // seconds of engine time per request
	switch g := math.Min(m.fresh, chunk); {
	case a*m.fresh > chunk:
		decodes := math.Min(b, budget*m.output/held)
		perReq = held / budget * step(decodes, budget-decodes)
	case m.fresh == 0:
		perReq = step(b, 0) / a
	default:
		// Prompts arrive in pieces of g tokens, Poisson-like at lumps per
		// step, so a step that carries any carries lumps/(1-e^-lumps)
		// pieces (at most a chunk). Per request that is fresh/x such
		// steps; the rest of its 1/a steps decode only.
		lumps := a * m.fresh / g
		x := math.Min(chunk, g*lumps/-math.Expm1(-lumps))
		carrying := m.fresh / x
		perReq = carrying*step(b, x) + math.Max(0, 1/a-carrying)*step(b, 0)
	}
	if perReq <= 0 {
		return math.Inf(1)
	}
	return 1 / perReq
}

// CapacityWeights returns one integer weight per worker, in worker order, in
// proportion to each worker's term of EstimateCapacity for the workload, the
// smallest being 10: the weights an operator who had benchmarked each GPU
// type on this traffic would configure for a weighted policy. Zero-cost
// profiles get the largest finite weight, or 10 if none is finite.
func CapacityWeights(spec Spec, reqs []workload.Request) []int {
	m := newShape(reqs, 0)
	caps := make([]float64, len(spec))
	least, most := math.Inf(1), 0.0
	for i, g := range spec {
		caps[i] = workerCapacity(g.Profile, m)
		if !math.IsInf(caps[i], 0) && caps[i] > 0 {
			least, most = min(least, caps[i]), max(most, caps[i])
		}
	}
	out := make([]int, 0, spec.Workers())
	for i, g := range spec {
		w := 10
		switch {
		case math.IsInf(least, 0):
		case math.IsInf(caps[i], 0) || caps[i] <= 0:
			w = int(math.Round(10 * most / least))
		default:
			w = int(math.Round(10 * caps[i] / least))
		}
		for range g.Count {
			out = append(out, w)
		}
	}
	return out
}

// hitSample caps the requests ReferenceHitRatio simulates.
const hitSample = 100_000

// ReferenceHitRatio is the share of prompt tokens that the reference
// scheduler (Options.Oracle) finds in the workers' prefix caches when it
// serves the workload as timed, over at most its first hitSample requests:
// what the fleet's caches and the workload's sharing allow a router that
// knows every cache. Reuse depends on timing (a cache holds minutes of
// traffic, not hours), so time the requests near the rate of interest. It
// is 0 for a workload without HashIDs and when the run fails.
func ReferenceHitRatio(spec Spec, reqs []workload.Request) float64 {
	res, err := Run(Options{Spec: spec, Oracle: true}, workload.Limit(reqs, hitSample))
	if err != nil {
		return 0
	}
	return res.PrefixHitRatio()
}

// retimeAt returns the first hitSample requests of reqs with Poisson
// arrivals at 70% of the capacity estimated without any hit (seed 1), or
// nil when that estimate is not finite.
func retimeAt(spec Spec, reqs []workload.Request) []workload.Request {
	reqs = workload.Limit(reqs, hitSample)
	rate := 0.7 * EstimateCapacityWithHits(spec, reqs, 0)
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil
	}
	return workload.Retime(reqs, rate, rand.NewPCG(1, 0x4817))
}
