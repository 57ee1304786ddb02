package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// Kinds of synthetic workload, for --workload.
const (
	kindPoisson      = "poisson"
	kindSharedPrefix = "shared-prefix"
	kindMultiTurn    = "multi-turn"
	kindLongDoc      = "long-doc"
)

// kinds lists the --workload kinds in the order help and errors name them.
func kinds() []string {
	return []string{kindPoisson, kindSharedPrefix, kindMultiTurn, kindLongDoc}
}

// shapeFlags are the flags load and simulate share: the kind and knobs of a
// synthetic workload, and the goodput SLO. Both commands embed them.
type shapeFlags struct {
	// flags is the set they were registered on; it tells the flags a user
	// gave from defaults, because the length flags default per kind.
	flags *flag.FlagSet

	kind                 string
	promptMean, promptSD float64
	promptMax            int
	outputMean, outputSD float64
	outputMax            int
	systemTokens         int
	systemPrompts        int
	zipf                 float64
	turnsMean            float64
	turnsMax             int
	thinkTime            time.Duration
	docPool              int
	docMin, docMax       int
	goodTTFT, goodTPOT   time.Duration
}

func (s *shapeFlags) register(fs *flag.FlagSet) {
	s.flags = fs
	sp := workload.SharedPrefixOptions{}.WithDefaults()
	mt := workload.MultiTurnOptions{}.WithDefaults()
	ld := workload.LongDocOptions{}.WithDefaults()
	// perKind lists a length flag's defaults for the kinds other than
	// poisson; the flag package appends poisson's.
	perKind := func(sp, mt, ld any) string {
		return fmt.Sprintf("defaults %s %v, %s %v, %s %v; poisson's", kindSharedPrefix, sp, kindMultiTurn, mt, kindLongDoc, ld)
	}

	fs.StringVar(&s.kind, "workload", kindPoisson, "synthetic workload `kind`: "+
		"poisson (independent requests, nothing shared), "+
		"shared-prefix (a long system prompt, then a part unique to the request), "+
		"multi-turn (chat conversations that resend their history each turn, with user think times), "+
		"long-doc (questions about 8k-32k-token documents from a pool with Zipf popularity)")
	fs.Float64Var(&s.promptMean, "prompt-mean", defaultPromptMean, "synthetic prompt length mean in tokens; for kinds other than poisson, of the new text of each request "+
		"(the part after the system prompt, each user message, the question), with "+perKind(sp.Unique.Mean, mt.User.Mean, ld.Question.Mean))
	fs.Float64Var(&s.promptSD, "prompt-sigma", 0.5, "synthetic prompt length log-normal sigma (0 = constant); "+perKind(sp.Unique.Sigma, mt.User.Sigma, ld.Question.Sigma))
	fs.IntVar(&s.promptMax, "prompt-max", 8192, "synthetic prompt length maximum; "+perKind(sp.Unique.Max, mt.User.Max, ld.Question.Max))
	fs.Float64Var(&s.outputMean, "output-mean", defaultOutputMean, "synthetic output length mean in tokens; "+perKind(sp.Output.Mean, mt.Answer.Mean, ld.Output.Mean))
	fs.Float64Var(&s.outputSD, "output-sigma", 0.5, "synthetic output length log-normal sigma (0 = constant); "+perKind(sp.Output.Sigma, mt.Answer.Sigma, ld.Output.Sigma))
	fs.IntVar(&s.outputMax, "output-max", 2048, "synthetic output length maximum; "+perKind(sp.Output.Max, mt.Answer.Max, ld.Output.Max))
	fs.IntVar(&s.systemTokens, "system-prompt-tokens", 0, fmt.Sprintf("tokens in each system prompt (%s %d, %s %d); only whole %d-token blocks are shared",
		kindSharedPrefix, sp.SystemTokens, kindMultiTurn, mt.SystemTokens, workload.BlockTokens))
	fs.IntVar(&s.systemPrompts, "system-prompts", sp.SystemPrompts, "number of distinct system prompts, picked by Zipf popularity ("+kindSharedPrefix+")")
	fs.Float64Var(&s.zipf, "zipf", 1, "Zipf exponent of the popularity of system prompts ("+kindSharedPrefix+") or documents ("+kindLongDoc+"); 0 = uniform")
	fs.Float64Var(&s.turnsMean, "turns-mean", mt.TurnsMean, "mean turns per conversation, geometric ("+kindMultiTurn+")")
	fs.IntVar(&s.turnsMax, "turns-max", mt.TurnsMax, "most turns in a conversation ("+kindMultiTurn+")")
	fs.DurationVar(&s.thinkTime, "think-time", mt.Think, "mean user think time between an answer and the next turn, log-normal with sigma 1 ("+kindMultiTurn+")")
	fs.IntVar(&s.docPool, "doc-pool", ld.Pool, "number of documents questions are drawn from; a smaller pool repeats documents more ("+kindLongDoc+")")
	fs.IntVar(&s.docMin, "doc-tokens-min", ld.DocMin, "shortest document in tokens; lengths are log-uniform ("+kindLongDoc+")")
	fs.IntVar(&s.docMax, "doc-tokens-max", ld.DocMax, "longest document in tokens ("+kindLongDoc+")")
	fs.DurationVar(&s.goodTTFT, "goodput-ttft", time.Second, "goodput counts requests with TTFT at most this")
	fs.DurationVar(&s.goodTPOT, "goodput-tpot", 100*time.Millisecond, "goodput counts requests with TPOT at most this")
}

// flagKinds returns the kinds a synthetic-workload flag applies to (nil
// for every kind), and whether name is a synthetic-workload flag at all.
func flagKinds(name string) (only []string, synthetic bool) {
	switch name {
	case "workload", "prompt-mean", "prompt-sigma", "prompt-max", "output-mean", "output-sigma", "output-max":
		return nil, true
	case "system-prompt-tokens":
		return []string{kindSharedPrefix, kindMultiTurn}, true
	case "system-prompts":
		return []string{kindSharedPrefix}, true
	case "zipf":
		return []string{kindSharedPrefix, kindLongDoc}, true
	case "turns-mean", "turns-max", "think-time":
		return []string{kindMultiTurn}, true
	case "doc-pool", "doc-tokens-min", "doc-tokens-max":
		return []string{kindLongDoc}, true
	}
	return nil, false
}

// given returns the names of the flags set on the command line.
func (s *shapeFlags) given() map[string]bool {
	set := map[string]bool{}
	if s.flags != nil {
		s.flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
	}
	return set
}

// workloadKind is --workload, poisson when unset.
func (s *shapeFlags) workloadKind() string { return cmp.Or(s.kind, kindPoisson) }

// validate reports every bad synthetic-workload flag at once, naming it.
// Without synthetic load (a trace), no synthetic-workload flag may be given.
func (s *shapeFlags) validate(synthetic bool) error {
	given := s.given()
	names := make([]string, 0, len(given))
	for name := range given {
		names = append(names, name)
	}
	slices.Sort(names)
	var errs []error
	kind := s.workloadKind()
	if !synthetic {
		for _, name := range names {
			if _, ok := flagKinds(name); ok {
				errs = append(errs, fmt.Errorf("--%s applies to synthetic workloads only, not to --trace", name))
			}
		}
		return errors.Join(errs...)
	}
	if !slices.Contains(kinds(), kind) {
		return fmt.Errorf("--workload %q: want one of %s", s.kind, strings.Join(kinds(), ", "))
	}
	for _, name := range names {
		if only, _ := flagKinds(name); only != nil && !slices.Contains(only, kind) {
			errs = append(errs, fmt.Errorf("--%s applies only to --workload %s, not %s", name, strings.Join(only, " or "), kind))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	// Check the values a run will use: the length flags always for
	// poisson, every other flag when given (the kind's defaults are valid).
	used := func(names ...string) bool {
		for _, name := range names {
			if given[name] || kind == kindPoisson && isLengthFlag(name) {
				return true
			}
		}
		return false
	}
	check := func(ok bool, name string, format string, args ...any) {
		if !ok && used(name) {
			errs = append(errs, fmt.Errorf("--"+name+" "+format, args...))
		}
	}
	check(s.promptMean >= 1 && !math.IsInf(s.promptMean, 0), "prompt-mean", "%v must be at least 1", s.promptMean)
	check(s.promptSD >= 0 && !math.IsInf(s.promptSD, 0), "prompt-sigma", "%v must be a non-negative number", s.promptSD)
	check(s.promptMax >= 0, "prompt-max", "%d must not be negative", s.promptMax)
	check(s.outputMean >= 1 && !math.IsInf(s.outputMean, 0), "output-mean", "%v must be at least 1", s.outputMean)
	check(s.outputSD >= 0 && !math.IsInf(s.outputSD, 0), "output-sigma", "%v must be a non-negative number", s.outputSD)
	check(s.outputMax >= 0, "output-max", "%d must not be negative", s.outputMax)
	if kind == kindSharedPrefix {
		check(s.systemTokens >= workload.BlockTokens, "system-prompt-tokens",
			"%d must be at least %d with --workload %s: a shorter system prompt shares no whole block", s.systemTokens, workload.BlockTokens, kindSharedPrefix)
	} else {
		check(s.systemTokens >= 0, "system-prompt-tokens", "%d must not be negative", s.systemTokens)
	}
	check(s.systemPrompts >= 1 && s.systemPrompts <= workload.MaxPopulation, "system-prompts", "%d must be in [1, %d]", s.systemPrompts, workload.MaxPopulation)
	check(s.zipf >= 0 && !math.IsInf(s.zipf, 0), "zipf", "%v must be a non-negative number", s.zipf)
	check(s.turnsMax >= 1 && s.turnsMax <= 1000, "turns-max", "%d must be in [1, 1000]", s.turnsMax)
	check(s.turnsMean >= 1, "turns-mean", "%v must be at least 1", s.turnsMean)
	if s.turnsMean > float64(s.turnsMax) && used("turns-mean", "turns-max") {
		errs = append(errs, fmt.Errorf("--turns-mean %v must not exceed --turns-max %d", s.turnsMean, s.turnsMax))
	}
	check(s.thinkTime > 0 && s.thinkTime <= workload.MaxThink, "think-time", "%v must be positive and at most %v", s.thinkTime, workload.MaxThink)
	check(s.docPool >= 1 && s.docPool <= workload.MaxPopulation, "doc-pool", "%d must be in [1, %d]", s.docPool, workload.MaxPopulation)
	check(s.docMin >= workload.BlockTokens, "doc-tokens-min", "%d must be at least %d: a shorter document shares no whole block", s.docMin, workload.BlockTokens)
	if s.docMax < s.docMin && used("doc-tokens-min", "doc-tokens-max") {
		errs = append(errs, fmt.Errorf("--doc-tokens-max %d must be at least --doc-tokens-min %d", s.docMax, s.docMin))
	}
	return errors.Join(errs...)
}

// isLengthFlag reports whether name is one of the prompt and output length
// flags.
func isLengthFlag(name string) bool {
	return strings.HasPrefix(name, "prompt-") || strings.HasPrefix(name, "output-")
}

// promptDist and outputDist are the poisson length distributions.
func (s *shapeFlags) promptDist() workload.LengthDist {
	return workload.LengthDist{Mean: s.promptMean, Sigma: s.promptSD, Max: s.promptMax}
}

func (s *shapeFlags) outputDist() workload.LengthDist {
	return workload.LengthDist{Mean: s.outputMean, Sigma: s.outputSD, Max: s.outputMax}
}

// lengths returns a kind's distributions of new prompt text and output:
// the given length flags over the kind's defaults.
func (s *shapeFlags) lengths(prompt, output workload.LengthDist) (workload.LengthDist, workload.LengthDist) {
	given := s.given()
	set := func(name string, dst *float64, v float64) {
		if given[name] {
			*dst = v
		}
	}
	setInt := func(name string, dst *int, v int) {
		if given[name] {
			*dst = v
		}
	}
	set("prompt-mean", &prompt.Mean, s.promptMean)
	set("prompt-sigma", &prompt.Sigma, s.promptSD)
	setInt("prompt-max", &prompt.Max, s.promptMax)
	set("output-mean", &output.Mean, s.outputMean)
	set("output-sigma", &output.Sigma, s.outputSD)
	setInt("output-max", &output.Max, s.outputMax)
	return prompt, output
}

// generate builds the synthetic workload of the --workload kind: arrivals
// at rate requests/s until duration or count (zero means no bound). The
// generators take the rate, so the same seed gives the same lengths at any
// rate and a multi-turn workload keeps its think times.
func (s *shapeFlags) generate(rate float64, duration time.Duration, count int, seed uint64) ([]workload.Request, error) {
	switch s.workloadKind() {
	case kindSharedPrefix:
		o := workload.SharedPrefixOptions{Rate: rate, Duration: duration, Count: count, Seed: seed,
			SystemPrompts: s.systemPrompts, SystemTokens: s.systemTokens, Zipf: s.zipf}
		d := o.WithDefaults()
		o.Unique, o.Output = s.lengths(d.Unique, d.Output)
		return workload.SharedPrefix(o)
	case kindMultiTurn:
		o := workload.MultiTurnOptions{Rate: rate, Duration: duration, Count: count, Seed: seed,
			SystemTokens: s.systemTokens, TurnsMean: s.turnsMean, TurnsMax: s.turnsMax, Think: s.thinkTime}
		d := o.WithDefaults()
		o.User, o.Answer = s.lengths(d.User, d.Answer)
		return workload.MultiTurn(o)
	case kindLongDoc:
		o := workload.LongDocOptions{Rate: rate, Duration: duration, Count: count, Seed: seed,
			Pool: s.docPool, Zipf: s.zipf, DocMin: s.docMin, DocMax: s.docMax}
		d := o.WithDefaults()
		o.Question, o.Output = s.lengths(d.Question, d.Output)
		return workload.LongDoc(o)
	}
	return workload.Synthetic(workload.SyntheticOptions{Rate: rate, Duration: duration, Count: count, Seed: seed,
		Prompt: s.promptDist(), Output: s.outputDist()})
}

// workloadNotes describes what reqs share, for the workload line on
// stderr: the ideal prefix reuse and, for conversations, how many.
func workloadNotes(reqs []workload.Request) string {
	notes := fmt.Sprintf(", ideal prefix reuse %.3f", workload.IdealPrefixReuse(reqs))
	sessions := map[uint64]bool{}
	for _, r := range reqs {
		if r.Session != 0 {
			sessions[r.Session] = true
		}
	}
	if len(sessions) > 0 {
		notes += fmt.Sprintf(", %d conversations (%.1f requests each)", len(sessions), float64(len(reqs))/float64(len(sessions)))
	}
	return notes
}

// capacity estimates spec's saturation throughput for the synthetic
// workload of count requests: the roofline on the workload's lengths and,
// when it shares prefixes, on the prefix-cache hit ratio the reference
// scheduler reaches serving it at 70% of the estimate. Reuse depends on
// the rate (a multi-turn conversation's history survives in a cache for
// so many requests, not so many seconds), so the workload is generated at
// that rate, twice, each time from the last estimate.
func (s *shapeFlags) capacity(spec fleet.Spec, count int, seed uint64, maxContext int) (float64, error) {
	gen := func(rate float64) ([]workload.Request, error) {
		reqs, err := s.generate(rate, 0, count, seed)
		if err != nil {
			return nil, err
		}
		reqs, _ = workload.DropLonger(reqs, maxContext)
		if len(reqs) == 0 {
			return nil, errors.New("the workload has no requests")
		}
		return reqs, nil
	}
	reqs, err := gen(1)
	if err != nil {
		return 0, err
	}
	capacity := fleet.EstimateCapacityWithHits(spec, reqs, 0)
	if !fleet.HasPrefixes(reqs) || math.IsInf(capacity, 0) || !(capacity > 0) {
		return capacity, nil
	}
	for range 2 {
		if reqs, err = gen(0.7 * capacity); err != nil {
			return 0, err
		}
		capacity = fleet.EstimateCapacityWithHits(spec, reqs, fleet.ReferenceHitRatio(spec, reqs))
	}
	return capacity, nil
}
