package fleet

import (
	"math"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// EstimateCapacity estimates the fleet's sustainable request rate in req/s
// for requests shaped like the workload's mean prompt P and mean output O,
// as the sum over workers of a steady-state roofline estimate:
//
//	B = min(MaxNumSeqs, KVTokens / (P+O))      concurrent sequences that fit
//	k = min(B*(P+O)/O, MaxBatchedTokens)       tokens per step: B decodes plus
//	                                           the prefill that keeps B full
//	b = k*O/(P+O)                              sequences those k tokens sustain
//	rate = k / ((P+O) * StepTime(k, b*(P+O/2)))
//
// Each request costs P+O processed tokens and a step of k tokens over
// contexts averaging P+O/2 takes StepTime, so a worker completes
// k/(P+O) requests per step. It ignores burstiness, length variance and
// preemption, so treat it as the knee of the load curve, not a guarantee.
// It returns +Inf for zero-cost profiles and 0 for an empty workload.
func EstimateCapacity(spec Spec, reqs []workload.Request) float64 {
	s := workload.Summarize(reqs)
	if s.Requests == 0 {
		return 0
	}
	var total float64
	for _, g := range spec {
		total += float64(g.Count) * workerCapacity(g.Profile, s.PromptMean, s.OutputMean)
	}
	return total
}

// workerCapacity is one worker's term of EstimateCapacity.
func workerCapacity(p gpuworker.Profile, prompt, output float64) float64 {
	perReq := prompt + output
	batch := math.Min(float64(p.MaxNumSeqs), math.Floor(float64(p.KVTokens())/perReq))
	batch = math.Max(batch, 1)
	k := math.Min(batch*perReq/output, float64(p.MaxBatchedTokens))
	seqs := k * output / perReq
	step := p.StepTime(int(math.Ceil(k)), int(seqs*(prompt+output/2))).Seconds()
	if step <= 0 {
		return math.Inf(1)
	}
	return k / (perReq * step)
}
