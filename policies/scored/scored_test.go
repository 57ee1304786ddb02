package scored

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB, params map[string]any) policies.Picker {
	return policytest.Seeded(t, New, params, 6)
}

func kv(waiting, running int, use float64) *backends.Load {
	l := policytest.Scraped(waiting, running)
	l.KVUsage = use
	return l
}

func scorers(s ...map[string]any) map[string]any {
	list := make([]any, len(s))
	for i, x := range s {
		list[i] = x
	}
	return map[string]any{"scorers": list, "tolerance": 0}
}

func TestPickByScore(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]any
		specs  []policytest.Spec
		want   int
	}{
		{"default: queue and free KV", nil,
			[]policytest.Spec{{Load: kv(2, 8, 0.9)}, {Load: kv(0, 4, 0.3)}, {Load: kv(0, 10, 0.2)}}, 1},
		{"stale scrape scored by in-flight", scorers(map[string]any{"type": "queue_depth"}),
			[]policytest.Spec{{Load: kv(0, 0, 0.1), Stale: true, InFlight: 5}, {InFlight: 2}}, 1},
		{"throughput, unmeasured at the mean", scorers(map[string]any{"type": "throughput"}),
			[]policytest.Spec{{TokensPerSec: 30}, {}, {TokensPerSec: 90}}, 2},
		{"in-flight tokens", scorers(map[string]any{"type": "in_flight_tokens"}),
			[]policytest.Spec{{InFlight: 3}, {InFlight: 1, Tokens: 50}, {InFlight: 1}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := policytest.Build(t, tt.specs...)
			c := policytest.Counts(t, newBalancer(t, tt.params), &policies.Request{}, eps, 20)
			assert.Equal(t, 20, c[tt.want])
		})
	}
}

func TestFiltersAndTheirFallback(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{Load: kv(0, 0, 0.99)}, policytest.Spec{Load: kv(0, 6, 0.5)}, policytest.Spec{Load: kv(0, 9, -1)})
	p := newBalancer(t, map[string]any{
		"filters": []any{map[string]any{"type": "kv_usage", "max": 0.95}, map[string]any{"type": "queue_depth", "max": 8}},
		"scorers": []any{map[string]any{"type": "queue_depth"}},
	})
	c := policytest.Counts(t, p, &policies.Request{}, eps, 20)
	assert.Equal(t, 20, c[1], "the idle endpoint is full, the third too busy")

	p = newBalancer(t, map[string]any{"filters": []any{map[string]any{"type": "in_flight", "max": 0}}})
	busy := policytest.Build(t, policytest.Spec{InFlight: 2, Load: kv(0, 2, 0.5)}, policytest.Spec{InFlight: 1, Load: kv(0, 1, 0.5)})
	c = policytest.Counts(t, p, &policies.Request{}, busy, 20)
	assert.Equal(t, 20, c[1], "no endpoint passes: filters are ignored")
}

func TestPrefixAndSessionScorers(t *testing.T) {
	eps := policytest.Idle(t, 8)
	p := newBalancer(t, scorers(map[string]any{"type": "prefix", "weight": 2, "depth": 2}, map[string]any{"type": "queue_depth"}))
	r := &policies.Request{PrefixHashes: []uint64{11, 22, 33}}
	c := policytest.Counts(t, p, r, eps, 20)
	home := -1
	for i, n := range c {
		if n == 20 {
			home = i
		}
	}
	require.GreaterOrEqual(t, home, 0, "one endpoint takes the prefix: %v", c)
	assert.Equal(t, c, policytest.Counts(t, p, &policies.Request{PrefixHashes: []uint64{11, 22, 99}}, eps, 20), "same key at depth 2")

	p = newBalancer(t, scorers(map[string]any{"type": "session"}))
	c = policytest.Counts(t, p, &policies.Request{SessionKey: "bob"}, eps, 20)
	assert.Contains(t, c, 20)
}

func TestPrefixScorerFollowsWhereAPrefixWent(t *testing.T) {
	eps := policytest.Idle(t, 4)
	p := newBalancer(t, scorers(map[string]any{"type": "prefix", "depth": 1}, map[string]any{"type": "queue_depth"}))
	ctx := context.Background()

	// New prefixes earn no affinity: with equal queues they spread at random
	// instead of each going to a fixed owner.
	c := make([]int, len(eps))
	for i := range 400 {
		e, err := p.Pick(ctx, &policies.Request{PrefixHashes: []uint64{uint64(1000 + i)}}, eps)
		require.NoError(t, err)
		c[policytest.Index(eps, e)]++
	}
	for i, n := range c {
		assert.InDelta(t, 100, n, 40, "endpoint %d: %v", i, c)
	}

	// A prefix seen before goes where it went, unless load outweighs it:
	// endpoint 0's queue is the longest, so the first request goes elsewhere
	// and the second follows it there, not to a ring owner.
	eps = policytest.Build(t, policytest.Spec{InFlight: 4}, policytest.Spec{}, policytest.Spec{}, policytest.Spec{})
	r := &policies.Request{PrefixHashes: []uint64{77}}
	first, err := p.Pick(ctx, r, eps)
	require.NoError(t, err)
	assert.NotSame(t, eps[0], first)
	first.Begin(1) // it now has a queue of one, like two of the others' zero
	for range 10 {
		e, err := p.Pick(ctx, r, eps)
		require.NoError(t, err)
		assert.Same(t, first, e, "prefix credit (1) beats a queue one longer (0.25)")
	}
}

func TestOneCandidateIsRemembered(t *testing.T) {
	// An admission queue often offers the policy one endpoint, the only
	// one with room: the prefix must still be remembered there, or the
	// conversation's next turn goes wherever load sends it.
	ctx := context.Background()
	eps := policytest.Build(t, policytest.Spec{InFlight: 1}, policytest.Spec{InFlight: 1}, policytest.Spec{InFlight: 1}, policytest.Spec{InFlight: 1})
	p := newBalancer(t, scorers(map[string]any{"type": "prefix"}, map[string]any{"type": "queue_depth"}))
	e, err := p.Pick(ctx, &policies.Request{PrefixHashes: []uint64{5, 6, 7}}, eps[2:3])
	require.NoError(t, err)
	require.Same(t, eps[2], e)
	next := &policies.Request{PrefixHashes: []uint64{5, 6, 7, 8}}
	for range 10 {
		e, err := p.Pick(ctx, next, eps)
		require.NoError(t, err)
		assert.Same(t, eps[2], e, "the next turn goes where the one-candidate pick sent the first")
	}
}

func TestWeightedRandomPicker(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{Load: kv(0, 0, 0.25)}, policytest.Spec{Load: kv(0, 0, 0.75)})
	p := newBalancer(t, map[string]any{"picker": "weighted_random", "scorers": []any{map[string]any{"type": "kv_cache"}}})
	c := policytest.Counts(t, p, &policies.Request{}, eps, 4000)
	assert.InDelta(t, 3000, c[0], 150)
}

func TestNewRejectsBadParams(t *testing.T) {
	tests := []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"filters": []any{map[string]any{"type": "gpu"}}}, "filters[0].type"},
		{map[string]any{"filters": []any{map[string]any{"type": "in_flight", "max": -1}}}, "filters[0].max"},
		{map[string]any{"scorers": []any{map[string]any{"type": "queue_depth"}, map[string]any{"type": "luck"}}}, "scorers[1].type"},
		{map[string]any{"scorers": []any{map[string]any{"type": "kv_cache", "weight": -1}}}, "scorers[0].weight"},
		{map[string]any{"scorers": []any{map[string]any{"type": "kv_cache", "depth": 3}}}, "scorers[0].depth"},
		{map[string]any{"scorers": []any{map[string]any{"type": "ttft", "slack": -1}}}, "scorers[0].slack"},
		{map[string]any{"scorers": []any{map[string]any{"type": "ttft", "congestion": -1}}}, "scorers[0].congestion"},
		{map[string]any{"scorers": []any{map[string]any{"type": "queue_depth", "slack": 1}}}, "scorers[0]: only the ttft scorer"},
		{map[string]any{"scorers": []any{map[string]any{"type": "kv_cache", "budget_cap": 2}}}, "scorers[0]: only the ttft scorer"},
		{map[string]any{"scorers": []any{map[string]any{"type": "ttft", "budget_cap": 0.5}}}, "scorers[0].budget_cap: want >= 1"},
		{map[string]any{"scorers": []any{map[string]any{"type": "ttft", "max_delay": math.Inf(1)}}}, "scorers[0].max_delay: want seconds"},
		{map[string]any{"scorers": []any{map[string]any{"type": "queue_depth", "max_delay": 1}}}, "scorers[0]: only the ttft scorer"},
		{map[string]any{"congested_balance": -0.5}, "congested_balance: want >= 0"},
		{map[string]any{"congested_balance": math.Inf(1)}, "congested_balance: want >= 0"},
		{map[string]any{"scorers": []any{map[string]any{"type": "kv_cache", "bias": 3}}}, "bias"},
		{map[string]any{"picker": "min"}, "picker"},
		{map[string]any{"tolerance": 2}, "tolerance"},
		{map[string]any{"sample": 0}, "sample"},
	}
	for _, tt := range tests {
		_, err := New(tt.params)
		assert.ErrorContains(t, err, tt.field)
	}
}

func BenchmarkPick(b *testing.B) {
	r := &policies.Request{PromptTokens: 500, PrefixHashes: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}}
	b.Run("default", func(b *testing.B) { policytest.BenchmarkPick(b, newBalancer(b, nil), r) })
	b.Run("prefix+queue+kv/sample8", func(b *testing.B) {
		policytest.BenchmarkPick(b, newBalancer(b, map[string]any{"sample": 8, "scorers": []any{
			map[string]any{"type": "prefix", "weight": 2}, map[string]any{"type": "queue_depth"}, map[string]any{"type": "kv_cache"},
		}}), r)
	})
}

// prefillFleet is a fast endpoint (20,000 prompt tokens/s) with pending
// prompt tokens queued and an idle slow one (4,000/s).
func prefillFleet(t *testing.T, fastPending int64) []*backends.Endpoint {
	t.Helper()
	eps := policytest.Build(t, policytest.Spec{}, policytest.Spec{})
	eps[0].ObservePrefill(0, 2000, 100*time.Millisecond)
	eps[0].BeginPrefill(fastPending)
	eps[1].ObservePrefill(0, 2000, 500*time.Millisecond)
	return eps
}

func TestTTFTScorer(t *testing.T) {
	// Slack 0: the quickest expected start wins even when congested
	// (TestTTFTScorerCongested covers packing).
	ttftOnly := func() map[string]any { return scorers(map[string]any{"type": "ttft", "slack": 0}) }
	req := &policies.Request{PromptTokens: 2000}

	// (6,000+2,000)/20,000 = 0.4 s on the fast GPU beats 2,000/4,000 = 0.5 s.
	c := policytest.Counts(t, newBalancer(t, ttftOnly()), req, prefillFleet(t, 6000), 20)
	assert.Equal(t, 20, c[0], "a short queue on the fast GPU")

	// (10,000+2,000)/20,000 = 0.6 s loses to the idle slow GPU.
	c = policytest.Counts(t, newBalancer(t, ttftOnly()), req, prefillFleet(t, 10000), 20)
	assert.Equal(t, 20, c[1], "a long queue on the fast GPU")

	// A small prompt goes to the slow GPU sooner: 10,100/20,000 > 100/4,000.
	c = policytest.Counts(t, newBalancer(t, ttftOnly()), &policies.Request{PromptTokens: 100}, prefillFleet(t, 10000), 20)
	assert.Equal(t, 20, c[1])
}

func TestTTFTScorerIgnoresAnOutlier(t *testing.T) {
	// Three endpoints prefilling 10,000 tokens/s: A waits 1 s with a long
	// queue of requests, B 10 s with none, C 1,000 s (a stale, wildly low
	// rate would look like this). Rated against the slowest, A and B would
	// both score about 1 on ttft and B's empty queue would win; rated
	// against the quickest, A's ten times shorter wait wins. (Slack 0: the
	// rating, not congested packing, is under test.)
	eps := policytest.Build(t, policytest.Spec{InFlight: 100}, policytest.Spec{}, policytest.Spec{InFlight: 50})
	for i, pending := range []int64{10_000, 100_000, 10_000_000} {
		eps[i].ObservePrefill(0, 1000, 100*time.Millisecond)
		eps[i].BeginPrefill(pending)
	}
	p := newBalancer(t, scorers(map[string]any{"type": "ttft", "weight": 2, "slack": 0}, map[string]any{"type": "queue_depth"}))
	c := policytest.Counts(t, p, &policies.Request{PromptTokens: 1}, eps, 20)
	assert.Equal(t, 20, c[0], "%v", c)
}

func TestTTFTScorerUnmeasured(t *testing.T) {
	ttftOnly := scorers(map[string]any{"type": "ttft"})
	req := &policies.Request{PromptTokens: 1000}

	// Nothing measured: the prefill backlog alone ranks.
	eps := policytest.Build(t, policytest.Spec{}, policytest.Spec{})
	eps[0].BeginPrefill(3000)
	c := policytest.Counts(t, newBalancer(t, ttftOnly), req, eps, 20)
	assert.Equal(t, 20, c[1])

	// An unmeasured endpoint counts at the measured ones' mean rate.
	eps = policytest.Build(t, policytest.Spec{}, policytest.Spec{}, policytest.Spec{})
	eps[0].ObservePrefill(0, 1000, 100*time.Millisecond) // 10,000/s, idle: 0.1 s
	eps[1].ObservePrefill(0, 1000, 10*time.Millisecond)  // 100,000/s
	eps[1].BeginPrefill(19000)                           // 2 s
	eps[2].BeginPrefill(1000)                            // at 55,000/s: 0.036 s
	c = policytest.Counts(t, newBalancer(t, ttftOnly), req, eps, 20)
	assert.Equal(t, 20, c[2])
}

func TestDefaultScorersIncludeTTFT(t *testing.T) {
	var types []string
	for _, s := range DefaultScorers() {
		types = append(types, s.Type)
	}
	assert.Contains(t, types, "ttft")
	_, err := New(map[string]any{"scorers": []any{map[string]any{"type": "ttft", "weight": 2}}})
	assert.NoError(t, err)
}

// congestedFleet is three endpoints prefilling 10,000 prompt tokens/s with
// 0.5 s, 2 s and 6 s of prompts queued.
func congestedFleet(t *testing.T) []*backends.Endpoint {
	t.Helper()
	eps := policytest.Build(t, policytest.Spec{}, policytest.Spec{}, policytest.Spec{})
	for i, pending := range []int64{5_000, 20_000, 60_000} {
		eps[i].ObservePrefill(0, 1000, 100*time.Millisecond)
		eps[i].BeginPrefill(pending)
	}
	return eps
}

func TestTTFTScorerCongested(t *testing.T) {
	pick := func(p policies.Picker, prompt int, eps []*backends.Endpoint) int {
		t.Helper()
		e, err := p.Pick(context.Background(), &policies.Request{PromptTokens: prompt}, eps)
		require.NoError(t, err)
		return policytest.Index(eps, e)
	}
	primed := func(params map[string]any) policies.Picker {
		p := newBalancer(t, params)
		pick(p, 1000, policytest.Idle(t, 2)) // the mean prompt starts at 1,000 tokens
		return p
	}
	eps := congestedFleet(t)
	p := primed(scorers(map[string]any{"type": "ttft"}))

	// A short prompt's budget, 0.51 s x (1 + 5 x 100/1,000), fits only the
	// least loaded endpoint.
	assert.Equal(t, 0, pick(p, 100, eps))
	// A long one may start up to 1 s x min(1 + 5 x 5, 7) = 7 s: it takes
	// the fullest endpoint within that (6.5 s on the third), leaving the
	// short queues to shorter prompts.
	assert.Equal(t, 2, pick(p, 5000, eps))
	// A middling one (budget 0.6 s x 6 = 3.6 s) fits the second, not the
	// third (6.1 s).
	assert.Equal(t, 1, pick(p, 1000, eps))

	// A budget cap of 6 stops the long one short of the third.
	p = primed(scorers(map[string]any{"type": "ttft", "budget_cap": 6}))
	assert.Equal(t, 1, pick(p, 5000, eps))
	// max_delay 1 s bounds its budget to 1 + 1 = 2 s: the least loaded;
	// 2 s allows 3 s, so the second.
	p = primed(scorers(map[string]any{"type": "ttft", "max_delay": 1}))
	assert.Equal(t, 0, pick(p, 5000, eps))
	p = primed(scorers(map[string]any{"type": "ttft", "max_delay": 2}))
	assert.Equal(t, 1, pick(p, 5000, eps))
	// With slack 2 a middling one (budget 0.6 s x 3 = 1.8 s) fits none but
	// the first; 2.1 s on the second is past it.
	p = primed(scorers(map[string]any{"type": "ttft", "slack": 2}))
	assert.Equal(t, 0, pick(p, 1000, eps))

	// In a deep burst the default max delay, 16 s, binds before the cap:
	// queues of 10 s and 27 s give the long prompt 10.5 s and 27.5 s, a
	// budget of min(10.5 s x 7, 10.5 s + 16 s) = 26.5 s, so the quickest;
	// with no bound (negative) 73.5 s, so the fuller.
	deep := policytest.Build(t, policytest.Spec{}, policytest.Spec{})
	for i, pending := range []int64{100_000, 270_000} {
		deep[i].ObservePrefill(0, 1000, 100*time.Millisecond)
		deep[i].BeginPrefill(pending)
	}
	p = primed(scorers(map[string]any{"type": "ttft"}))
	assert.Equal(t, 0, pick(p, 5000, deep))
	p = primed(scorers(map[string]any{"type": "ttft", "max_delay": -1}))
	assert.Equal(t, 1, pick(p, 5000, deep))

	// Without slack, every prompt goes where it starts soonest.
	p = primed(scorers(map[string]any{"type": "ttft", "slack": 0}))
	assert.Equal(t, 0, pick(p, 5000, eps))

	// Uncongested (the quickest start under congestion, 0.25 s), the
	// quickest wins too.
	idle := policytest.Build(t, policytest.Spec{}, policytest.Spec{})
	idle[0].ObservePrefill(0, 1000, 100*time.Millisecond)
	idle[1].ObservePrefill(0, 1000, 100*time.Millisecond)
	idle[1].BeginPrefill(1000)
	p = primed(scorers(map[string]any{"type": "ttft"}))
	assert.Equal(t, 0, pick(p, 1000, idle))
	// With congestion set to 0.01 s the same pick packs.
	p = primed(scorers(map[string]any{"type": "ttft", "congestion": 0.01}))
	assert.Equal(t, 1, pick(p, 1000, idle))
}

// TestCongestedBalance checks that in a congested pick the scorers that
// spread load weigh congested_balance times their weight, so that they no
// longer overrule the ttft scorer's packing, unless the admission queue
// binds the request.
func TestCongestedBalance(t *testing.T) {
	// Prefill backlogs of 0.5, 2 and 6 s at 10,000 tokens/s; the third
	// has the longest queue.
	eps := policytest.Build(t, policytest.Spec{}, policytest.Spec{}, policytest.Spec{InFlight: 10})
	for i, pending := range []int64{5_000, 20_000, 60_000} {
		eps[i].ObservePrefill(0, 1000, 100*time.Millisecond)
		eps[i].BeginPrefill(pending)
	}
	pick := func(p policies.Picker, r *policies.Request) int {
		t.Helper()
		e, err := p.Pick(context.Background(), r, eps)
		require.NoError(t, err)
		return policytest.Index(eps, e)
	}
	primed := func(params map[string]any) policies.Picker {
		p := newBalancer(t, params)
		_, err := p.Pick(context.Background(), &policies.Request{PromptTokens: 1000}, policytest.Idle(t, 2)) // the mean prompt starts at 1,000 tokens
		require.NoError(t, err)
		return p
	}
	ttftAndQueue := func(balance any) map[string]any {
		params := scorers(map[string]any{"type": "ttft", "weight": 2}, map[string]any{"type": "queue_depth"})
		if balance != nil {
			params["congested_balance"] = balance
		}
		return params
	}
	long := &policies.Request{PromptTokens: 5000}
	// A 5,000-token prompt expects 1, 2.5 and 6.5 s and may start within
	// 7 s: the packing rates the endpoints 0.57, 0.68 and 0.96, and
	// prefers the fullest. At weight 2 against the queue's 1, 1 and 0 it
	// is overruled (2.14, 2.36, 1.93): the second.
	assert.Equal(t, 1, pick(primed(ttftAndQueue(1.0)), long))
	// With the default congested_balance, 0.5, the queue counts half
	// (1.64, 1.86, 1.93): the packing decides.
	assert.Equal(t, 2, pick(primed(ttftAndQueue(nil)), long))
	// A request the admission queue binds is scored with full weights.
	assert.Equal(t, 1, pick(primed(ttftAndQueue(nil)), &policies.Request{PromptTokens: 5000, Queued: true}))
	// 0 leaves the queue out of congested picks altogether.
	assert.Equal(t, 2, pick(primed(ttftAndQueue(0.0)), long))

	// Uncongested (the congestion threshold raised past the quickest
	// start, 1 s), the weights are as configured, whatever
	// congested_balance says.
	calm := primed(map[string]any{
		"scorers":           []any{map[string]any{"type": "ttft", "weight": 2, "congestion": 2.0}, map[string]any{"type": "queue_depth"}},
		"congested_balance": 0.0,
	})
	// Not congested (1 s <= 2 s): ratings (m+1)/(est+1) = 1, 0.57 and
	// 0.27 at weight 2 plus the queue's 1, 1 and 0: the first.
	assert.Equal(t, 0, pick(calm, long))
}

// quickFleet is a fast endpoint (20,000 prompt tokens/s) with a long queue
// of requests in flight and fastPending prompt tokens awaiting prefill,
// beside an idle slow one (2,000/s) with slowPending.
func quickFleet(t *testing.T, fastPending, slowPending int64) []*backends.Endpoint {
	t.Helper()
	eps := policytest.Build(t, policytest.Spec{InFlight: 40}, policytest.Spec{})
	eps[0].ObservePrefill(0, 2000, 100*time.Millisecond)
	eps[0].BeginPrefill(fastPending)
	eps[1].ObservePrefill(0, 2000, time.Second)
	eps[1].BeginPrefill(slowPending)
	return eps
}

func TestQuickestClasses(t *testing.T) {
	priority := &policies.Request{PromptTokens: 500, Class: "priority"}
	plain := &policies.Request{PromptTokens: 500, Class: "default"}
	quick := func() policies.Picker { return newBalancer(t, map[string]any{"quickest_classes": []any{"priority"}}) }

	// Uncongested: 1,500/20,000 = 0.075 s on the fast GPU against
	// 500/2,000 = 0.25 s on the idle slow one. The default score prefers
	// the slow one's empty queue (ttft 2 x 1.075/1.25 + queue 1 against
	// 2 x 1 + queue 0), for every class unless quickest_classes names it;
	// a class named takes the quickest.
	eps := quickFleet(t, 1000, 0)
	assert.Equal(t, 20, policytest.Counts(t, newBalancer(t, nil), priority, eps, 20)[1], "default: scored")
	assert.Equal(t, 20, policytest.Counts(t, quick(), plain, eps, 20)[1], "a class not named: scored")
	assert.Equal(t, 20, policytest.Counts(t, quick(), priority, eps, 20)[0], "priority named: the quickest")
	flex := newBalancer(t, map[string]any{"quickest_classes": []any{"flex", "default"}})
	assert.Equal(t, 20, policytest.Counts(t, flex, &policies.Request{PromptTokens: 500, Class: "flex"}, eps, 20)[0])
	assert.Equal(t, 20, policytest.Counts(t, flex, plain, eps, 20)[0])
	assert.Equal(t, 20, policytest.Counts(t, flex, priority, eps, 20)[1], "only the classes named")

	// Congested (the quickest expected TTFT 0.55 s, past 0.25 s): a
	// priority request is scored as any other, by the same draws.
	eps = quickFleet(t, 10_000, 600)
	assert.Equal(t, policytest.Counts(t, quick(), plain, eps, 50), policytest.Counts(t, quick(), priority, eps, 50))
}

func TestQuickestClassesParams(t *testing.T) {
	_, err := New(map[string]any{"quickest_classes": []any{"gold"}})
	assert.ErrorContains(t, err, `quickest_classes[0]: unknown class "gold"`)
	_, err = New(map[string]any{"quickest_classes": []any{"priority"}, "scorers": []any{map[string]any{"type": "queue_depth"}}})
	assert.ErrorContains(t, err, "quickest_classes: needs a ttft scorer")
}
