package main

import (
	"flag"
	"time"

	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// shapeFlags are the flags load and simulate share: the lengths of a
// synthetic workload and the goodput SLO. Both commands embed them.
type shapeFlags struct {
	promptMean, promptSD float64
	promptMax            int
	outputMean, outputSD float64
	outputMax            int
	goodTTFT, goodTPOT   time.Duration
}

func (s *shapeFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&s.promptMean, "prompt-mean", defaultPromptMean, "synthetic prompt length mean in tokens")
	fs.Float64Var(&s.promptSD, "prompt-sigma", 0.5, "synthetic prompt length log-normal sigma (0 = constant)")
	fs.IntVar(&s.promptMax, "prompt-max", 8192, "synthetic prompt length maximum")
	fs.Float64Var(&s.outputMean, "output-mean", defaultOutputMean, "synthetic output length mean in tokens")
	fs.Float64Var(&s.outputSD, "output-sigma", 0.5, "synthetic output length log-normal sigma (0 = constant)")
	fs.IntVar(&s.outputMax, "output-max", 2048, "synthetic output length maximum")
	fs.DurationVar(&s.goodTTFT, "goodput-ttft", time.Second, "goodput counts requests with TTFT at most this")
	fs.DurationVar(&s.goodTPOT, "goodput-tpot", 100*time.Millisecond, "goodput counts requests with TPOT at most this")
}

// promptDist and outputDist are the synthetic length distributions.
func (s *shapeFlags) promptDist() workload.LengthDist {
	return workload.LengthDist{Mean: s.promptMean, Sigma: s.promptSD, Max: s.promptMax}
}

func (s *shapeFlags) outputDist() workload.LengthDist {
	return workload.LengthDist{Mean: s.outputMean, Sigma: s.outputSD, Max: s.outputMax}
}
