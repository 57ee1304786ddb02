package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// SharedPrefixOptions configures SharedPrefix. Zero fields mean the
// defaults given on each field; at least one of Duration and Count must be
// set, and generation stops at whichever comes first.
type SharedPrefixOptions struct {
	// Rate is the mean arrival rate in requests per second (> 0).
	Rate float64
	// Duration stops arrivals at this offset; zero means no time bound.
	Duration time.Duration
	// Count stops after this many requests; zero means no count bound.
	Count int
	// Seed makes the workload reproducible.
	Seed uint64

	// SystemPrompts is the number of distinct system prompts (default 1),
	// as when a few applications or prompt templates share a fleet.
	SystemPrompts int
	// SystemTokens is the length of every system prompt (default 2048, at
	// least BlockTokens). Only its whole BlockTokens-token blocks are
	// shared, so pick a multiple of BlockTokens.
	SystemTokens int
	// Zipf is the exponent s of the system prompts' popularity: prompt k
	// (from 0) is picked with probability proportional to 1/(k+1)^s. Zero
	// means uniform; sluice-bench passes 1. It matters only with more than
	// one system prompt.
	Zipf float64
	// Unique is the length of the part after the system prompt, different
	// in every request (default log-normal, mean 300, sigma 0.6, max 8192).
	Unique LengthDist
	// Output is the output length (default log-normal, mean 150, sigma
	// 0.6, max 2048).
	Output LengthDist
}

// WithDefaults returns o with every zero field replaced by its default.
// SharedPrefix applies it; callers use it to show what a run will use.
func (o SharedPrefixOptions) WithDefaults() SharedPrefixOptions {
	if o.SystemPrompts == 0 {
		o.SystemPrompts = 1
	}
	if o.SystemTokens == 0 {
		o.SystemTokens = 2048
	}
	if o.Unique == (LengthDist{}) {
		o.Unique = LengthDist{Mean: 300, Sigma: 0.6, Max: 8192}
	}
	if o.Output == (LengthDist{}) {
		o.Output = LengthDist{Mean: 150, Sigma: 0.6, Max: 2048}
	}
	return o
}

// SharedPrefix generates the workload nearly every application produces:
// each prompt is one of SystemPrompts long system prompts (picked by Zipf
// popularity) followed by a part unique to the request, with Poisson
// arrivals at Rate, the first at 0.
//
// HashIDs name every block of the prompt: the whole blocks of the system
// prompt carry that prompt's ids, and every later block, including the one
// where the system prompt ends and the unique part begins, gets a fresh id.
// Lengths and ids depend on the seed only, not on Rate. The same options
// always give the same requests.
func SharedPrefix(opts SharedPrefixOptions) ([]Request, error) {
	o := opts.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("shared-prefix workload: %w", err)
	}
	var ids idAlloc
	per := o.SystemTokens / BlockTokens
	system := make([][]int, o.SystemPrompts)
	for k := range system {
		system[k] = ids.takeN(per)
	}
	pop := newPopularity(o.SystemPrompts, o.Zipf)
	rng := rand.New(rand.NewPCG(o.Seed, streamSharedPrefix))
	next := func() Request {
		k := pop.draw(rng)
		prompt := o.SystemTokens + o.Unique.sample(rng)
		return Request{
			PromptTokens: prompt,
			OutputTokens: o.Output.sample(rng),
			HashIDs:      withPrefix(system[k], prompt, &ids),
		}
	}
	return openLoop(bounds{o.Rate, o.Duration, o.Count}, o.Seed, next), nil
}

// validate reports every bad option at once.
func (o SharedPrefixOptions) validate() error {
	errs := bounds{o.Rate, o.Duration, o.Count}.validate()
	if o.SystemPrompts < 1 || o.SystemPrompts > MaxPopulation {
		errs = append(errs, fmt.Errorf("system prompts %d must be in [1, %d]", o.SystemPrompts, MaxPopulation))
	}
	switch {
	case o.SystemTokens < BlockTokens:
		errs = append(errs, fmt.Errorf("system tokens %d must be at least %d: a shorter system prompt shares no whole block", o.SystemTokens, BlockTokens))
	case o.SystemPrompts >= 1 && o.SystemTokens/BlockTokens > MaxPopulation/o.SystemPrompts:
		errs = append(errs, fmt.Errorf("%d system prompts of %d tokens are more than %d blocks", o.SystemPrompts, o.SystemTokens, MaxPopulation))
	}
	if err := validZipf(o.Zipf); err != nil {
		errs = append(errs, err)
	}
	if err := validLengths("unique", o.Unique); err != nil {
		errs = append(errs, err)
	}
	if err := validLengths("output", o.Output); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
