package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// thinkSigma is the log-normal sigma of user think times: with it the
// median is 0.61 of the mean, and one gap in a hundred is more than six
// times the mean.
const thinkSigma = 1.0

// maxTurns bounds MultiTurnOptions.TurnsMax.
const maxTurns = 1000

// MaxThink bounds MultiTurnOptions.Think. MultiTurn starts conversations
// up to TurnsMax think times before the run, so the bound also bounds
// that work.
const MaxThink = 24 * time.Hour

// MultiTurnOptions configures MultiTurn. Zero fields mean the defaults
// given on each field; at least one of Duration and Count must be set, and
// generation stops at whichever comes first.
type MultiTurnOptions struct {
	// Rate is the mean arrival rate of requests (turns, not conversations)
	// per second (> 0). Conversations start at Rate/TurnsMean.
	Rate float64
	// Duration stops arrivals at this offset; zero means no time bound.
	Duration time.Duration
	// Count stops after this many requests; zero means no count bound.
	Count int
	// Seed makes the workload reproducible.
	Seed uint64

	// SystemTokens is the length of a system prompt every conversation
	// starts with; zero (the default) means none, as in public chat logs
	// such as LMSYS-Chat-1M and ShareGPT, so the workload's reuse is the
	// conversations' own history (shared-prefix models system prompts).
	// Only its whole BlockTokens-token blocks are shared between
	// conversations.
	SystemTokens int
	// TurnsMean is the mean number of turns (requests) per conversation
	// (default 5), and TurnsMax caps it (default 20). Turns are geometric,
	// cut at TurnsMax, with the parameter chosen so the mean after the cut
	// is TurnsMean.
	TurnsMean float64
	TurnsMax  int
	// User is the length of each new user message (default log-normal,
	// mean 100, sigma 0.8, max 2048).
	User LengthDist
	// Answer is the length of each answer, the request's output (default
	// log-normal, mean 250, sigma 0.6, max 2048).
	Answer LengthDist
	// Think is the mean user think time between an answer and the next
	// turn (default 60s); think times are log-normal with sigma 1.
	Think time.Duration
	// AnswerTokenTime is the nominal time to stream one answer token
	// (default 20ms, 50 tokens/s). The next turn arrives Think after the
	// answer would have finished at that speed; the workload is open loop,
	// so it does not wait for the real answer.
	AnswerTokenTime time.Duration
}

// WithDefaults returns o with every zero field replaced by its default.
// MultiTurn applies it; callers use it to show what a run will use.
func (o MultiTurnOptions) WithDefaults() MultiTurnOptions {
	if o.TurnsMean == 0 {
		o.TurnsMean = 5
	}
	if o.TurnsMax == 0 {
		o.TurnsMax = 20
	}
	if o.User == (LengthDist{}) {
		o.User = LengthDist{Mean: 100, Sigma: 0.8, Max: 2048}
	}
	if o.Answer == (LengthDist{}) {
		o.Answer = LengthDist{Mean: 250, Sigma: 0.6, Max: 2048}
	}
	if o.Think == 0 {
		o.Think = time.Minute
	}
	if o.AnswerTokenTime == 0 {
		o.AnswerTokenTime = 20 * time.Millisecond
	}
	return o
}

// MultiTurn generates chat conversations. Conversations start as a Poisson
// process at Rate/TurnsMean; turn k+1 arrives AnswerTokenTime per answer
// token plus a think time after turn k. Every turn resends the whole
// history: the shared system prompt, every earlier user message and
// answer, then the new user message. Each request's Session is its
// conversation's id (from 1).
//
// HashIDs make turn k+1 share every whole block of turn k's prompt (and
// the system prompt's whole blocks are shared by all conversations). The
// block that was partial in turn k grows in turn k+1, so it gets a fresh
// id: a simplification at BlockTokens granularity. Answers enter the
// prompt of the next turn only: the engine's caching of generated tokens
// is not modelled.
//
// The run starts in steady state: conversations start from well before 0
// (long enough to hold 99.9% of their turns) and only turns from 0 on are
// kept, so the request rate is Rate from the first request instead of
// ramping up over the first minutes. The early turns of those
// conversations were never sent, so their history misses every cache, as
// for a router started in the middle of the day. Requests are sorted by
// Arrival and shifted so the first arrives at 0.
//
// A conversation's turns, lengths and ids depend on the seed only, not on
// Rate; Rate changes which conversations overlap and where the bounds cut.
// The same options always give the same requests.
func MultiTurn(opts MultiTurnOptions) ([]Request, error) {
	o := opts.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("multi-turn workload: %w", err)
	}
	var ids idAlloc
	system := ids.takeN(o.SystemTokens / BlockTokens)
	q := geometricRatio(o.TurnsMean, o.TurnsMax)
	meanGap := o.Think.Seconds() + o.Answer.Mean*o.AnswerTokenTime.Seconds()
	warmup := float64(min(o.TurnsMax, geometricQuantile(q, 0.999))-1) * meanGap
	convRate := o.Rate / o.TurnsMean
	end := math.Inf(1)
	if o.Duration > 0 {
		end = o.Duration.Seconds()
	}

	arr := rand.New(rand.NewPCG(o.Seed, streamArrivals))
	rng := rand.New(rand.NewPCG(o.Seed, streamMultiTurn))
	var reqs []Request
	cut := math.Inf(1) // with Count: no request after this can make the first Count
	start := -warmup
	for session := uint64(1); ; session++ {
		start += arr.ExpFloat64() / convRate
		if start >= end || start > cut {
			break
		}
		turns := geometricTurns(rng, q, o.TurnsMax)
		conv := slices.Clone(system) // ids of the history's whole blocks
		history := o.SystemTokens
		at := start
		for range turns {
			prompt := history + o.User.sample(rng)
			answer := o.Answer.sample(rng)
			think := lognormal(rng, o.Think.Seconds(), thinkSigma)
			for len(conv) < prompt/BlockTokens {
				conv = append(conv, ids.take())
			}
			if at >= 0 && at < end {
				reqs = append(reqs, Request{
					Arrival:      time.Duration(at * float64(time.Second)),
					PromptTokens: prompt,
					OutputTokens: answer,
					HashIDs:      withPrefix(conv, prompt, &ids),
					Session:      session,
				})
			} else if prompt%BlockTokens != 0 {
				// Take the partial block's id anyway, so ids do not depend
				// on where the bounds cut.
				ids.take()
			}
			history = prompt + answer
			at += float64(answer)*o.AnswerTokenTime.Seconds() + think
		}
		if o.Count > 0 && len(reqs) >= o.Count && math.IsInf(cut, 1) {
			cut = nthArrival(reqs, o.Count).Seconds()
		}
	}
	sortByArrival(reqs)
	if o.Count > 0 && len(reqs) > o.Count {
		reqs = slices.Clip(reqs[:o.Count])
	}
	return reqs, nil
}

// nthArrival returns the n-th earliest arrival of reqs (n >= 1).
func nthArrival(reqs []Request, n int) time.Duration {
	at := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		at[i] = r.Arrival
	}
	slices.Sort(at)
	return at[n-1]
}

// geometricRatio returns q such that min(G, limit), for G geometric on
// 1, 2, ... with P(G > k) = q^k, has mean mean: (1 - q^limit)/(1 - q) =
// mean, found by bisection.
func geometricRatio(mean float64, limit int) float64 {
	if mean <= 1 {
		return 0
	}
	if mean >= float64(limit) {
		return 1
	}
	lo, hi := 0.0, 1.0
	for range 200 {
		q := (lo + hi) / 2
		if (1-math.Pow(q, float64(limit)))/(1-q) < mean {
			lo = q
		} else {
			hi = q
		}
	}
	return (lo + hi) / 2
}

// geometricTurns draws min(G, limit); it always consumes one number.
func geometricTurns(rng *rand.Rand, q float64, limit int) int {
	u := 1 - rng.Float64() // (0, 1]
	switch {
	case q <= 0:
		return 1
	case q >= 1:
		return limit
	}
	return 1 + int(min(math.Floor(math.Log(u)/math.Log(q)), float64(limit-1)))
}

// geometricQuantile returns the smallest k with P(G <= k) >= p.
func geometricQuantile(q, p float64) int {
	switch {
	case q <= 0:
		return 1
	case q >= 1:
		return math.MaxInt32
	}
	return max(1, int(math.Ceil(math.Log(1-p)/math.Log(q))))
}

// validate reports every bad option at once.
func (o MultiTurnOptions) validate() error {
	errs := bounds{o.Rate, o.Duration, o.Count}.validate()
	if o.SystemTokens < 0 || o.SystemTokens > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("system tokens %d must be in [0, %d]", o.SystemTokens, math.MaxInt32))
	}
	if o.TurnsMax < 1 || o.TurnsMax > maxTurns {
		errs = append(errs, fmt.Errorf("turns max %d must be in [1, %d]", o.TurnsMax, maxTurns))
	}
	if !(o.TurnsMean >= 1) || o.TurnsMean > float64(o.TurnsMax) {
		errs = append(errs, fmt.Errorf("turns mean %v must be in [1, turns max %d]", o.TurnsMean, o.TurnsMax))
	}
	if err := validLengths("user", o.User); err != nil {
		errs = append(errs, err)
	}
	if err := validLengths("answer", o.Answer); err != nil {
		errs = append(errs, err)
	}
	if o.Think < 0 || o.Think > MaxThink {
		errs = append(errs, fmt.Errorf("think %v must be in [0, %v]", o.Think, MaxThink))
	}
	if o.AnswerTokenTime < 0 {
		errs = append(errs, fmt.Errorf("answer token time %v must not be negative", o.AnswerTokenTime))
	}
	return errors.Join(errs...)
}
