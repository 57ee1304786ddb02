package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// LengthDist is a log-normal token-length distribution.
type LengthDist struct {
	// Mean is the distribution's mean in tokens; it must be >= 1.
	Mean float64
	// Sigma is the standard deviation of the underlying normal. Zero gives
	// the constant round(Mean).
	Sigma float64
	// Max clamps samples from above; zero means no upper clamp. Samples are
	// always clamped below at 1. A clamp shifts the mean a little.
	Max int
}

// SyntheticOptions configures Synthetic. At least one of Duration and Count
// must be set; generation stops at whichever comes first.
type SyntheticOptions struct {
	// Rate is the mean arrival rate in requests per second (> 0).
	Rate float64
	// Duration stops arrivals at this offset; zero means no time bound.
	Duration time.Duration
	// Count stops after this many requests; zero means no count bound.
	Count int
	// Prompt and Output are the length distributions.
	Prompt LengthDist
	Output LengthDist
	// Seed makes the workload reproducible.
	Seed uint64
}

// Synthetic generates an open-loop workload: Poisson arrivals at Rate (the
// first request arrives at 0) and log-normal prompt and output lengths. The
// same options always give the same requests.
func Synthetic(opts SyntheticOptions) ([]Request, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("synthetic workload: %w", err)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed_5a11_ce00_0001))
	var (
		reqs []Request
		at   time.Duration
	)
	for opts.Count == 0 || len(reqs) < opts.Count {
		if opts.Duration > 0 && at >= opts.Duration {
			break
		}
		reqs = append(reqs, Request{
			Arrival:      at,
			PromptTokens: opts.Prompt.sample(rng),
			OutputTokens: opts.Output.sample(rng),
		})
		at += time.Duration(rng.ExpFloat64() / opts.Rate * float64(time.Second))
	}
	return reqs, nil
}

// validate reports every bad option at once.
func (o SyntheticOptions) validate() error {
	errs := bounds{o.Rate, o.Duration, o.Count}.validate()
	if err := o.Prompt.validate(); err != nil {
		errs = append(errs, fmt.Errorf("prompt: %w", err))
	}
	if err := o.Output.validate(); err != nil {
		errs = append(errs, fmt.Errorf("output: %w", err))
	}
	return errors.Join(errs...)
}

func (d LengthDist) validate() error {
	var errs []error
	if !(d.Mean >= 1) || math.IsInf(d.Mean, 0) {
		errs = append(errs, fmt.Errorf("mean %v must be at least 1", d.Mean))
	}
	if !(d.Sigma >= 0) || math.IsInf(d.Sigma, 0) {
		errs = append(errs, fmt.Errorf("sigma %v must be a non-negative number", d.Sigma))
	}
	if d.Max < 0 {
		errs = append(errs, fmt.Errorf("max %d must not be negative", d.Max))
	}
	return errors.Join(errs...)
}

// sample draws one length. With mu = ln(Mean) - Sigma²/2 the log-normal's
// mean is Mean.
func (d LengthDist) sample(rng *rand.Rand) int {
	v := d.Mean
	if d.Sigma > 0 {
		mu := math.Log(d.Mean) - d.Sigma*d.Sigma/2
		v = math.Exp(mu + d.Sigma*rng.NormFloat64())
	}
	n := 1
	if v >= 1 {
		n = int(min(math.Round(v), math.MaxInt32))
	}
	if d.Max > 0 {
		n = min(n, d.Max)
	}
	return n
}
