package fleet

import (
	"math"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// EstimateCapacity estimates the fleet's sustainable request rate in req/s
// for requests shaped like the workload (mean prompt P, mean output O, mean
// attention work A per request), as the sum over workers of a steady-state
// roofline estimate:
//
//	B = min(MaxNumSeqs, KVTokens / (P+O))      concurrent sequences that fit
//	k = min(B*(P+O)/O, MaxBatchedTokens)       tokens per step: B decodes plus
//	                                           the prefill that keeps B full
//	b = k*O/(P+O)                              sequences those k tokens sustain
//	step = StepDuration(k tokens, contexts b*(P+O/2), attention k/(P+O)*A)
//	rate = k / ((P+O) * step)
//
// Each request costs P+O processed tokens, so a worker completes k/(P+O)
// requests per step. A is the mean over requests of P^2 + O*(2P+O): a
// prompt's prefill costs P^2 of attention however it is chunked, and each
// decoded token reads the context before it. Using the mean of P^2, not the
// square of the mean, matters for long, varied prompts, where attention
// rivals the dense layers. It ignores burstiness, prefix-cache hits and
// preemption, so treat it as the knee of the load curve, not a guarantee.
// It returns +Inf for zero-cost profiles and 0 for an empty workload.
func EstimateCapacity(spec Spec, reqs []workload.Request) float64 {
	s := workload.Summarize(reqs)
	if s.Requests == 0 {
		return 0
	}
	var attn float64
	for _, r := range reqs {
		p, o := float64(r.PromptTokens), float64(r.OutputTokens)
		attn += p*p + o*(2*p+o)
	}
	attn /= float64(len(reqs))
	var total float64
	for _, g := range spec {
		total += float64(g.Count) * workerCapacity(g.Profile, s.PromptMean, s.OutputMean, attn)
	}
	return total
}

// workerCapacity is one worker's term of EstimateCapacity.
func workerCapacity(p gpuworker.Profile, prompt, output, attn float64) float64 {
	perReq := prompt + output
	batch := math.Min(float64(p.MaxNumSeqs), math.Floor(float64(p.KVTokens())/perReq))
	batch = math.Max(batch, 1)
	k := math.Min(batch*perReq/output, float64(p.MaxBatchedTokens))
	seqs := k * output / perReq
	w := gpuworker.StepWork{
		Tokens:        int(math.Ceil(k)),
		ContextTokens: int(seqs * (prompt + output/2)),
		AttnWork:      k / perReq * attn,
		Seqs:          int(math.Ceil(seqs)) + 1, // the decoding batch plus the prefill
	}
	step := p.StepDuration(w).Seconds()
	if step <= 0 {
		return math.Inf(1)
	}
	return k / (perReq * step)
}
