// Package scored is the scored policy: filters, weighted scorers and a
// picker composed in config, in the manner of the Gateway API Inference
// Extension's endpoint picker. Filters drop endpoints that should not take
// the request; each scorer rates the rest from 0 (worst) to 1 (best) on one
// signal; the picker chooses by the weighted sum. Use it to combine signals
// no single policy weighs the way a deployment needs, such as prefix
// affinity plus queue depth plus free KV cache.
//
// Filters (type, max):
//   - queue_depth: keep endpoints whose policies.QueueDepth is at most max.
//   - kv_usage: keep endpoints whose scraped KV-cache use is at most max
//     (0..1); an endpoint not reporting it is kept.
//   - in_flight: keep endpoints with at most max requests in flight from
//     this replica.
//
// If the filters leave no endpoint the pick ignores them rather than fail:
// the router has already removed endpoints that cannot serve.
//
// Scorers (type, weight, and depth for prefix):
//   - queue_depth: 1 - queue/longest queue among the candidates.
//   - in_flight_tokens: 1 - tokens/most tokens among the candidates.
//   - kv_cache: free KV cache, 1 - KV use; 0.5 when unknown.
//   - throughput: measured tokens/sec over the fastest candidate's; an
//     unmeasured endpoint counts as the mean of the measured ones (1 when
//     none is measured).
//   - ttft: (shortest expected TTFT among the candidates + 1 s) /
//     (this endpoint's expected TTFT + 1 s): 1 for the quickest candidate;
//     about 1/2 for one expected to wait twice as long when the waits are
//     many seconds; close to 1 for any wait well under a second.
//     The expected TTFT is the prompt tokens to prefill before the
//     request's first token (policies.PrefillBacklog, less the prefix the
//     prefix scorer finds cached there) over the endpoint's measured
//     prefill rate (backends.Endpoint.PrefillTokensPerSec); an unmeasured
//     endpoint counts as the mean rate of the measured ones (and when none
//     is measured the backlog alone ranks them). A slow GPU thus gets long
//     prompts only while its queue is short. Rating against the quickest,
//     not the slowest, keeps one endpoint with a wildly long estimate from
//     flattening everyone else's differences. When even the quickest
//     expected TTFT is over congestion (default 0.25 s) the pick packs by
//     deadline instead (see ttftScorer.rate): a request may start up to slack
//     (default 5) times its size over the mean prompt's later than the
//     quickest start, at most budget_cap (default 7) times the quickest
//     start and at most max_delay (default 16) seconds after it, and
//     takes the fullest endpoint within that, so short prompts keep the
//     short queues under a burst.
//   - prefix: the share of the request's prefix hashes (its first depth x
//     256 bytes; default all the router computes) that the endpoint holds,
//     by the longest prefix this replica has routed (a
//     policies.PrefixTable of 2^18 slots, about the last 20,000 prompts);
//     0 for the others. A prefix sent to several endpoints (a system
//     prompt) credits nobody, and a prompt that shares nothing earns
//     nothing, so such requests are placed by load alone; the next turn of
//     a conversation finds where its history went.
//   - session: 1 for the endpoint owning the request's session key on a
//     consistent-hash ring of the pool, else 0.
//
// Quickest classes: a request of a class named in quickest_classes
// (default none) goes to the candidate with the shortest expected TTFT,
// the ttft scorer's estimate, while that is at most the ttft scorer's
// congestion threshold; past it the request is scored like any other. The weighted score trades a little
// time to first token for balance (queue depth, free KV cache), which
// serves throughput; an interactive request asks for the first token
// soonest. Measured in simulation (Poisson load over 1 H100 + 2 L4s, 30%
// priority and 70% flex with admission, report seeds 2 and 3), the score
// sent 5-10% of priority requests to an L4, whose prefill of a 500-token
// prompt takes 250 ms: they made priority's p99 TTFT (176 and 170 ms at
// 0.5x capacity, 270 and 247 ms at 1.3x). Picking the quickest took it to
// 94 and 83 ms, and 194 and 150 ms, and flex's median moved under 3%.
// Congested, the score's packing keeps the median and goodput: with every
// request priority on the bursty Azure code trace at 0.8x, picking the
// quickest unconditionally doubled the median TTFT (2.6 to 6.2 s) and
// halved goodput. It is off by default because on a fleet of one GPU type
// with long, cached prompts it costs far more than it gains: with every
// request priority on the long-doc workload over 8 H100s at 0.8x, the
// median TTFT went from 0.4 to 2.5 s and goodput from 9.1 to 5.0 req/s
// (seed 1), the prefix-cache hit ratio from 0.53 to 0.34; placing by
// backlog alone spreads the documents' prefixes. Turn it on for fleets
// that mix GPUs of different speeds.
//
// Pickers: max (default) chooses at random among the candidates scoring
// within Tolerance × (sum of weights) of the best, so near-ties do not herd;
// weighted_random chooses in proportion to score.
//
// Cost: unlike the other policies, scored reads each candidate two or three
// times (once for the pool's extremes, once to score, once to choose), about
// 10 ns per candidate and pass, so a pick considers at most Sample
// endpoints: scoring all 1,000 of a large pool would take tens of
// microseconds. It allocates nothing per pick.
package scored

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
)

// Name is the policy's config name.
const Name = "scored"

// ttftScale, in seconds, is what the ttft scorer adds to every expected
// TTFT before comparing them: differences much shorter than a second barely
// move the score, and a wait of many seconds scores by its ratio to the
// shortest one.
const ttftScale = 1.0

// maxPrefixDepth is the prefix scorer's default depth: every prefix hash
// the router computes.
const maxPrefixDepth = 1 << 10

// prefixTableBits sizes the prefix scorer's table: 2^18 slots, 4 MiB per
// pool, about a dozen slots per routed prompt, so it remembers where the
// last ~20,000 prompts went: a conversation's next turn minutes later at a
// few hundred requests per second.
const prefixTableBits = 18

// DefaultScorers is what scored weighs when the config names no scorers,
// and so Sluice's default routing: expected TTFT at weight 2 (with
// congested packing past 0.25 s at slack 5, budget cap 7 and max delay
// 16 s), queue depth, free KV cache and prefix affinity at weight 1 each.
// The weights and the congestion threshold come from `make bench-policies`
// on seed 1; slack, budget cap and max delay from a grid on the Azure code
// trace at 0.6 and 0.8 x capacity over 4 H100s + 8 L4s and over 2 H100s +
// 4 A100s + 8 L4s on seeds 0, 1, 4 and 5: of the two settings that met
// all three targets against the best baseline (p50 TTFT and goodput
// within 10%, p99 TTFT ahead) in all sixteen runs, the one with the wider
// margin. Expected TTFT leads because it is the one signal that knows a
// GPU's speed: on the prefill-heavy Azure code trace over H100s and L4s
// it keeps long prompts off the slow GPUs' queues. Balancing it alone gave
// the best p99 TTFT under bursts but made every request wait alike, so
// p2c, which wastes the H100s, had twice its median and goodput; packing
// by deadline when congested brings both within 10% of the best
// baseline's, and the max delay keeps the longest prompts' waits, which
// make the p99, bounded in a deep burst. Queue depth and KV use break
// ties, and count half in a congested pick of a request bound on arrival
// (Params.CongestedBalance). Prefix affinity sends a prompt to where its
// longest known prefix went: on multi-turn conversations that is where
// their history is cached.
func DefaultScorers() []ScorerParams {
	return []ScorerParams{
		{Type: "ttft", Weight: 2},
		{Type: "queue_depth", Weight: 1},
		{Type: "kv_cache", Weight: 1},
		{Type: "prefix", Weight: 1},
	}
}

// Params are the policy's config parameters.
type Params struct {
	// Filters drop endpoints before scoring. Default none.
	Filters []FilterParams `yaml:"filters"`
	// Scorers rate endpoints. Default DefaultScorers(): ttft at weight 2,
	// queue_depth, kv_cache and prefix (all its hashes) at weight 1.
	Scorers []ScorerParams `yaml:"scorers"`
	// Picker is max or weighted_random. Default max.
	Picker string `yaml:"picker"`
	// Tolerance is, for the max picker, how far below the best score a
	// candidate may be and still be chosen, as a fraction of the sum of
	// the scorers' weights, 0..1. Default 0.02.
	Tolerance float64 `yaml:"tolerance"`
	// Sample is how many endpoints a pick considers, >= 1: a pool no larger
	// is considered in full, a larger one by uniform random draws. Default
	// 32.
	Sample int `yaml:"sample"`
	// Seed makes the random draws reproducible. Default 0: seeded at random.
	Seed uint64 `yaml:"seed"`
	// QuickestClasses are the service classes (priority, default, flex)
	// whose requests go to the candidate with the shortest expected TTFT
	// while it is at most the ttft scorer's congestion threshold (see the
	// package comment). Needs a ttft scorer. Default none; [priority]
	// for a fleet mixing GPUs of different speeds.
	QuickestClasses []string `yaml:"quickest_classes"`
	// CongestedBalance multiplies the weights of the scorers that spread
	// load (queue_depth, in_flight_tokens and kv_cache) in a congested
	// pick, one where the ttft scorer packs by deadline (see ttftScorer.rate),
	// of a request bound on arrival: those scorers favour the emptiest
	// endpoint, the packing the fullest within each request's budget, and
	// at full weight they overrule it and undo what it keeps the short
	// queues for. A request the admission queue binds (Request.Queued) is
	// scored with their full weights: the requests behind it wait in that
	// queue, in its order, so there is nothing to pack for. 0 leaves them
	// out of congested picks, 1 weighs them as in any other. Needs a ttft
	// scorer. Default DefaultCongestedBalance.
	CongestedBalance *float64 `yaml:"congested_balance"`
}

// DefaultCongestedBalance is the default Params.CongestedBalance. Tried
// on the Azure code trace over both mixed fleets at 0.6 and 0.8 load,
// seeds 0-15, against the best baseline of each run (p50 TTFT and goodput
// within 10%, p99 TTFT ahead): at 1 (as before) the default met all three
// in 45 of 64 runs, at 0.5 in 48; on seeds 16-31, held out, 39 and 45;
// at 0.8 load over 4 H100s + 8 L4s 18 and 23 of 32. Admission picks are
// left as they were: at 0.5 they took priority's p99 growth at 1.3 load
// past 1.25x on three more of the seven seeds tried (docs/benchmarks.md).
const DefaultCongestedBalance = 0.5

// FilterParams configures one filter.
type FilterParams struct {
	// Type is queue_depth, kv_usage or in_flight.
	Type string `yaml:"type"`
	// Max is the highest value an endpoint may have and be kept; >= 0.
	Max float64 `yaml:"max"`
}

// ScorerParams configures one scorer.
type ScorerParams struct {
	// Type is queue_depth, in_flight_tokens, kv_cache, throughput, ttft,
	// prefix or session.
	Type string `yaml:"type"`
	// Weight multiplies the scorer's 0..1 rating; > 0. Default 1.
	Weight float64 `yaml:"weight"`
	// Depth is, for prefix, how many of the request's prefix hashes the
	// scorer reads (the prompt's first Depth x 256 bytes). Default all.
	Depth int `yaml:"depth"`
	// Slack is, for ttft, how much later than the quickest candidate a
	// congested pick may start a request, per mean-sized prompt: see
	// the ttft scorer. 0 turns congested packing off. Default
	// DefaultSlack.
	Slack *float64 `yaml:"slack"`
	// Congestion is, for ttft, the quickest candidate's expected TTFT, in
	// seconds, above which picks are congested. Default
	// DefaultCongestion.
	Congestion float64 `yaml:"congestion"`
	// BudgetCap is, for ttft, the most a congested pick may delay a
	// request's start, in multiples of the quickest candidate's expected
	// TTFT, whatever its size; >= 1. Default DefaultBudgetCap.
	BudgetCap float64 `yaml:"budget_cap"`
	// MaxDelay is, for ttft, the most, in seconds, a congested pick may
	// delay a request's start beyond the quickest candidate's expected
	// TTFT, whatever BudgetCap allows: the budget cap scales with that
	// TTFT, so in a deep burst it would let long prompts wait many
	// seconds, which makes the p99. Negative sets no such bound. Default
	// DefaultMaxDelay.
	MaxDelay *float64 `yaml:"max_delay"`
}

// Defaults of the ttft scorer's congested packing.
const (
	DefaultSlack      = 5.0
	DefaultCongestion = 0.25
	DefaultBudgetCap  = 7.0
	DefaultMaxDelay   = 16.0
)

// filterKind is one of the filters.
type filterKind int

const (
	queueDepthFilter filterKind = iota
	inFlightFilter
	kvUsageFilter
)

func parseFilter(name string) (filterKind, bool) {
	switch name {
	case "queue_depth":
		return queueDepthFilter, true
	case "kv_usage":
		return kvUsageFilter, true
	case "in_flight":
		return inFlightFilter, true
	}
	return 0, false
}

type filter struct {
	kind filterKind
	max  float64
}

// keep reports whether e passes f.
func (f filter) keep(e *backends.Endpoint) bool {
	switch f.kind {
	case queueDepthFilter:
		return float64(policies.QueueDepth(e)) <= f.max
	case inFlightFilter:
		return float64(e.InFlight()) <= f.max
	case kvUsageFilter:
		l := e.Load()
		return l == nil || l.KVUsage < 0 || l.KVUsage <= f.max
	}
	return true
}

// weightedScorer is a configured scorer and its weight; balances marks
// the scorers that spread load, whose weight Params.CongestedBalance
// scales in a congested pick.
type weightedScorer struct {
	scorer
	weight   float64
	balances bool
}

// rnd is the randomness a Balancer draws from, once per pick.
type rnd interface{ Uint64() uint64 }

// Balancer scores endpoints and picks by score. Safe for concurrent use.
type Balancer struct {
	rnd       rnd
	filters   []filter
	scorers   []weightedScorer
	choosers  []chooser
	random    bool
	tol       float64
	weightSum float64
	sample    int
	// congestedBalance scales the balancing scorers' weights in a
	// congested pick (Params.CongestedBalance); balanceSum is their sum.
	congestedBalance float64
	balanceSum       float64
	// ttft is the ttft scorer, if configured, and quickest the classes
	// whose requests it places by itself while uncongested.
	ttft     *ttftScorer
	quickest []string
	// picks recycles the per-pick state: passed to the scorers through an
	// interface it would escape, one allocation per pick.
	picks sync.Pool
}

var _ policies.Picker = (*Balancer)(nil)

// New builds the policy from its params (see Params).
func New(params map[string]any) (policies.Picker, error) {
	p := Params{Tolerance: 0.02, Sample: 32}
	if err := policies.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if len(p.Scorers) == 0 {
		p.Scorers = DefaultScorers()
	}
	b := &Balancer{rnd: policies.NewRand(p.Seed), tol: p.Tolerance, sample: p.Sample}
	b.picks.New = func() any { return new(pick) }
	for i, f := range p.Filters {
		k, ok := parseFilter(f.Type)
		if !ok {
			return nil, fmt.Errorf("params: filters[%d].type: unknown filter %q (want queue_depth, kv_usage or in_flight)", i, f.Type)
		}
		if !(f.Max >= 0) {
			return nil, fmt.Errorf("params: filters[%d].max: want >= 0, got %v", i, f.Max)
		}
		b.filters = append(b.filters, filter{k, f.Max})
	}
	for i, sp := range p.Scorers {
		sc, err := newScorer(sp)
		if err != nil {
			return nil, fmt.Errorf("params: scorers[%d]%w", i, err)
		}
		if sp.Weight == 0 {
			sp.Weight = 1
		}
		if !(sp.Weight > 0) {
			return nil, fmt.Errorf("params: scorers[%d].weight: want > 0, got %v", i, sp.Weight)
		}
		bal := balancing(sc)
		b.scorers = append(b.scorers, weightedScorer{sc, sp.Weight, bal})
		b.weightSum += sp.Weight
		if bal {
			b.balanceSum += sp.Weight
		}
		if t, ok := sc.(*ttftScorer); ok && b.ttft == nil {
			b.ttft = t
		}
		if c, ok := sc.(chooser); ok {
			b.choosers = append(b.choosers, c)
		}
	}
	if err := b.setQuickest(p.QuickestClasses); err != nil {
		return nil, err
	}
	b.congestedBalance = DefaultCongestedBalance
	if p.CongestedBalance != nil {
		b.congestedBalance = *p.CongestedBalance
	}
	if !(b.congestedBalance >= 0) || math.IsInf(b.congestedBalance, 0) {
		return nil, fmt.Errorf("params: congested_balance: want >= 0, got %v", b.congestedBalance)
	}
	switch p.Picker {
	case "", "max":
	case "weighted_random":
		b.random = true
	default:
		return nil, fmt.Errorf("params: picker: want max or weighted_random, got %q", p.Picker)
	}
	if !(p.Tolerance >= 0 && p.Tolerance <= 1) {
		return nil, fmt.Errorf("params: tolerance: want 0..1, got %v", p.Tolerance)
	}
	if p.Sample < 1 {
		return nil, fmt.Errorf("params: sample: want >= 1, got %d", p.Sample)
	}
	return b, nil
}

// setQuickest sets the classes placed by expected TTFT alone.
func (b *Balancer) setQuickest(classes []string) error {
	for i, c := range classes {
		if _, ok := admission.ParseClass(c); !ok {
			return fmt.Errorf("params: quickest_classes[%d]: unknown class %q (want priority, default or flex)", i, c)
		}
	}
	if len(classes) > 0 && b.ttft == nil {
		return errors.New("params: quickest_classes: needs a ttft scorer, whose estimate it picks by")
	}
	b.quickest = classes
	return nil
}

// newScorer builds one scorer from its params; an error's text continues
// the field path "params: scorers[i]".
func newScorer(sp ScorerParams) (scorer, error) {
	if sp.Depth != 0 && sp.Type != "prefix" {
		return nil, errors.New(".depth: only the prefix scorer takes a depth")
	}
	if (sp.Slack != nil || sp.Congestion != 0 || sp.BudgetCap != 0 || sp.MaxDelay != nil) && sp.Type != "ttft" {
		return nil, errors.New(": only the ttft scorer takes slack, congestion, budget_cap and max_delay")
	}
	switch sp.Type {
	case "queue_depth":
		return queueDepthScorer{}, nil
	case "in_flight_tokens":
		return inFlightTokensScorer{}, nil
	case "kv_cache":
		return kvCacheScorer{}, nil
	case "throughput":
		return throughputScorer{}, nil
	case "ttft":
		s := &ttftScorer{slack: DefaultSlack, congestion: DefaultCongestion, budgetCap: DefaultBudgetCap, maxDelay: DefaultMaxDelay}
		if sp.Slack != nil {
			s.slack = *sp.Slack
		}
		if sp.Congestion != 0 {
			s.congestion = sp.Congestion
		}
		if sp.BudgetCap != 0 {
			s.budgetCap = sp.BudgetCap
		}
		if sp.MaxDelay != nil {
			s.maxDelay = *sp.MaxDelay
		}
		if !(s.budgetCap >= 1) {
			return nil, fmt.Errorf(".budget_cap: want >= 1, got %v", sp.BudgetCap)
		}
		if !(s.slack >= 0) || math.IsInf(s.slack, 0) {
			return nil, fmt.Errorf(".slack: want >= 0, got %v", s.slack)
		}
		if !(s.congestion > 0) || math.IsInf(s.congestion, 0) {
			return nil, fmt.Errorf(".congestion: want > 0 seconds, got %v", sp.Congestion)
		}
		if math.IsNaN(s.maxDelay) || math.IsInf(s.maxDelay, 0) {
			return nil, fmt.Errorf(".max_delay: want seconds (negative: no bound), got %v", s.maxDelay)
		}
		return s, nil
	case "prefix":
		if sp.Depth < 0 {
			return nil, fmt.Errorf(".depth: want >= 1, got %d", sp.Depth)
		}
		depth := sp.Depth
		if depth == 0 {
			depth = maxPrefixDepth
		}
		return &prefixScorer{depth: depth, table: policies.NewPrefixTable(prefixTableBits)}, nil
	case "session":
		return &sessionScorer{aff: policies.NewAffinity(32)}, nil
	}
	return nil, fmt.Errorf(".type: unknown scorer %q (want queue_depth, in_flight_tokens, kv_cache, throughput, ttft, prefix or session)", sp.Type)
}

// Pick returns the best-scoring endpoint by the configured picker.
func (b *Balancer) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	n := len(eps)
	if n == 0 {
		return nil, policies.ErrNoEndpoint
	}
	if n == 1 && len(b.choosers) == 0 {
		return eps[0], nil
	}
	// With one candidate the pick is made all the same when scorers learn
	// from choices (prefix affinity, the ttft scorer's mean prompt): an
	// admission queue often offers the one endpoint with room, and the
	// conversation's next turn must find where this one went.
	seed := b.rnd.Uint64()
	k := b.sample
	st := b.picks.Get().(*pick)
	defer b.picks.Put(st)
	*st = pick{}
	b.observe(st, r, eps, seed, k)
	st.damp = b.ttft != nil && b.ttft.packs(st) && (r == nil || !r.Queued)
	if b.ttft != nil && slices.Contains(b.quickest, r.Class) && st.pknown > 0 && st.minTTFT <= b.ttft.congestion {
		return b.chose(b.quickestOf(st, eps, seed, k), st), nil
	}

	// Score, tracking the best and, for weighted_random, choosing by
	// weighted reservoir sampling in the same pass.
	draw := policies.NewStream(^seed)
	var chosen, best *backends.Endpoint
	bestScore, total := 0.0, 0.0
	s := policies.NewSample(seed, n, k)
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		e := eps[i]
		if st.filtered && !b.keep(e) {
			continue
		}
		v := b.score(e, st)
		if best == nil || v > bestScore {
			best, bestScore = e, v
		}
		if b.random {
			total += v
			if chosen == nil || (total > 0 && draw.Float64()*total < v) {
				chosen = e
			}
		}
	}
	if b.random {
		return b.chose(chosen, st), nil
	}
	// Choose uniformly among the candidates within tolerance of the best,
	// a fraction of the weights this pick used.
	weights := b.weightSum
	if st.damp {
		weights -= (1 - b.congestedBalance) * b.balanceSum
	}
	limit := bestScore - b.tol*weights
	seen := 0
	chosen = best
	s = policies.NewSample(seed, n, k)
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		e := eps[i]
		if st.filtered && !b.keep(e) {
			continue
		}
		if b.score(e, st) >= limit {
			if seen++; seen == 1 || draw.IntN(seen) == 0 {
				chosen = e
			}
		}
	}
	return b.chose(chosen, st), nil
}

// quickestOf is the candidate (of the same sample as the pass that
// observed them, passing the filters) with the shortest expected TTFT.
func (b *Balancer) quickestOf(st *pick, eps []*backends.Endpoint, seed uint64, k int) *backends.Endpoint {
	var best *backends.Endpoint
	shortest := math.Inf(1)
	s := policies.NewSample(seed, len(eps), k)
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		e := eps[i]
		if st.filtered && !b.keep(e) {
			continue
		}
		if v := expectedTTFT(e, st); best == nil || v < shortest {
			best, shortest = e, v
		}
	}
	return best
}

// chose tells the scorers that learn from choices, and returns e.
func (b *Balancer) chose(e *backends.Endpoint, st *pick) *backends.Endpoint {
	for _, c := range b.choosers {
		c.chose(st, e)
	}
	return e
}

// observe makes the first pass over the candidates: whether any passes the
// filters, then each scorer's prepare, observe and finish.
func (b *Balancer) observe(st *pick, r *policies.Request, eps []*backends.Endpoint, seed uint64, k int) {
	if len(b.filters) > 0 {
		s := policies.NewSample(seed, len(eps), k)
		for i, ok := s.Next(); ok; i, ok = s.Next() {
			if b.keep(eps[i]) {
				st.filtered = true
				break
			}
		}
	}
	for _, sc := range b.scorers {
		sc.prepare(st, r, eps)
	}
	s := policies.NewSample(seed, len(eps), k)
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		e := eps[i]
		if st.filtered && !b.keep(e) {
			continue
		}
		for _, sc := range b.scorers {
			sc.observe(st, e)
		}
	}
	for _, sc := range b.scorers {
		sc.finish(st)
	}
}

// keep reports whether e passes every filter.
func (b *Balancer) keep(e *backends.Endpoint) bool {
	for _, f := range b.filters {
		if !f.keep(e) {
			return false
		}
	}
	return true
}

// score is e's weighted sum of ratings; in a congested pick of a request
// bound on arrival the balancing scorers weigh congestedBalance times
// their weight.
func (b *Balancer) score(e *backends.Endpoint, st *pick) float64 {
	var v float64
	for _, s := range b.scorers {
		w := s.weight
		if st.damp && s.balances {
			w *= b.congestedBalance
		}
		v += w * max(s.rate(st, e), 0)
	}
	return v
}

// balancing reports whether sc is one of the scorers that spread load.
func balancing(sc scorer) bool {
	switch sc.(type) {
	case queueDepthScorer, inFlightTokensScorer, kvCacheScorer:
		return true
	}
	return false
}
