package workload

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sessions groups the requests of each conversation, in arrival order.
func sessions(reqs []Request) map[uint64][]Request {
	out := map[uint64][]Request{}
	for _, r := range reqs {
		out[r.Session] = append(out[r.Session], r)
	}
	return out
}

// commonBlocks is the number of leading hash ids a and b share.
func commonBlocks(a, b []int) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// TestMultiTurnConversations checks the structure of conversations over a
// window long enough that few are cut by its ends: turns per conversation,
// growing history, shared blocks and think times.
func TestMultiTurnConversations(t *testing.T) {
	const answerTokenTime = 20 * time.Millisecond
	reqs, err := MultiTurn(MultiTurnOptions{Rate: 2, Duration: 20_000 * time.Second, Seed: 1, SystemTokens: 1024})
	require.NoError(t, err)
	require.Greater(t, len(reqs), 35_000)
	convs := sessions(reqs)
	require.NotContains(t, convs, uint64(0), "every request has a session")

	var (
		turns, most int
		user, think []float64
		system      = reqs[0].HashIDs[:2] // 1024 tokens: two whole blocks
	)
	for id, conv := range convs {
		turns += len(conv)
		most = max(most, len(conv))
		for k, next := range conv {
			require.Equal(t, system, next.HashIDs[:2], "session %d turn %d starts with the system prompt", id, k)
			if k == 0 {
				continue
			}
			prev := conv[k-1]
			u := next.PromptTokens - prev.PromptTokens - prev.OutputTokens
			require.GreaterOrEqual(t, u, 1, "session %d: the prompt resends the history and a new message", id)
			user = append(user, float64(u))
			gap := next.Arrival - prev.Arrival - time.Duration(prev.OutputTokens)*answerTokenTime
			require.Positive(t, gap, "session %d", id)
			think = append(think, gap.Seconds())

			whole := prev.PromptTokens / BlockTokens
			require.Equal(t, prev.HashIDs[:whole], next.HashIDs[:whole], "session %d turn %d keeps the previous turn's whole blocks", id, k)
			if prev.PromptTokens%BlockTokens != 0 {
				assert.NotEqual(t, prev.HashIDs[whole], next.HashIDs[whole], "session %d turn %d: the grown partial block gets a fresh id", id, k)
			}
		}
	}
	assert.LessOrEqual(t, most, 20, "turns are capped")
	// Conversations cut by the window's ends lose a few turns.
	assert.InEpsilon(t, 5, float64(turns)/float64(len(convs)), 0.05, "turns per conversation")
	assert.InEpsilon(t, 100, mean(user), 0.03, "user message tokens")
	assert.InEpsilon(t, 60, mean(think), 0.05, "think time seconds")
	slices.Sort(think)
	assert.InEpsilon(t, 36.4, think[len(think)/2], 0.05, "median think time: 60s / e^0.5 for sigma 1")
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestMultiTurnRateIndependence checks that the rate changes only which
// conversations overlap: a conversation's turns, lengths, ids and the
// think-time gaps between its turns are the same at any rate.
func TestMultiTurnRateIndependence(t *testing.T) {
	// Conversation i starts about i/(rate/5) seconds after the warm-up
	// began, so at twice the rate the windows share about half their
	// conversations.
	slow, err := MultiTurn(MultiTurnOptions{Rate: 2, Count: 8000, Seed: 3})
	require.NoError(t, err)
	fast, err := MultiTurn(MultiTurnOptions{Rate: 4, Count: 8000, Seed: 3})
	require.NoError(t, err)
	again, err := MultiTurn(MultiTurnOptions{Rate: 4, Count: 8000, Seed: 3})
	require.NoError(t, err)
	assert.Equal(t, fast, again, "same seed, same workload")
	other, err := MultiTurn(MultiTurnOptions{Rate: 4, Count: 8000, Seed: 4})
	require.NoError(t, err)
	assert.NotEqual(t, shapes(fast[:20]), shapes(other[:20]), "another seed, other lengths")

	type turn struct {
		Request
		gap time.Duration // since the previous turn, if kept
	}
	index := func(reqs []Request) map[uint64]map[int]turn {
		out := map[uint64]map[int]turn{}
		for id, conv := range sessions(reqs) {
			out[id] = map[int]turn{}
			for k, r := range conv {
				tr := turn{Request: r}
				if k > 0 {
					tr.gap = r.Arrival - conv[k-1].Arrival
				}
				tr.Arrival = 0
				out[id][r.PromptTokens] = tr // prompts grow, so they name turns
			}
		}
		return out
	}
	a, b := index(slow), index(fast)
	common, gaps := 0, 0
	for id, turnsA := range a {
		for p, ta := range turnsA {
			tb, ok := b[id][p]
			if !ok {
				continue
			}
			common++
			require.Equal(t, ta.Request, tb.Request, "session %d, prompt %d", id, p)
			if ta.gap > 0 && tb.gap > 0 {
				gaps++
				require.InDelta(t, ta.gap.Seconds(), tb.gap.Seconds(), 1e-6, "session %d: think times do not scale with the rate", id)
			}
		}
	}
	assert.Greater(t, common, 2000)
	assert.Greater(t, gaps, 1000)
}

// TestMultiTurnSteadyStart checks that the rate is Rate from the first
// request: conversations already under way at 0 contribute their later
// turns, so the run does not ramp up over the first minutes.
func TestMultiTurnSteadyStart(t *testing.T) {
	reqs, err := MultiTurn(MultiTurnOptions{Rate: 10, Count: 6000, Seed: 1})
	require.NoError(t, err)
	// Without the warm start only first turns (a fifth of the rate) would
	// arrive in the first minute.
	assert.InEpsilon(t, 60, reqs[600].Arrival.Seconds(), 0.15, "the first 600 requests take a minute")
	assert.InEpsilon(t, 10, Summarize(reqs).RatePerSec, 0.05)
}

// TestPrompterMultiTurnPrefixes checks that the token-id prompts of
// consecutive turns share exactly the leading tokens their HashIDs say, so
// a live engine's prefix cache sees what the simulator assumes.
func TestPrompterMultiTurnPrefixes(t *testing.T) {
	reqs, err := MultiTurn(MultiTurnOptions{Rate: 1, Count: 3000, Seed: 2, Think: time.Second, SystemTokens: 1024})
	require.NoError(t, err)
	p := NewPrompter(PromptOptions{Seed: 2})
	pairs := 0
	var firstOfOther []int
	for id, conv := range sessions(reqs) {
		for k := 1; k < len(conv) && pairs < 200; k++ {
			prev, next := conv[k-1], conv[k]
			a := p.Tokens(nil, 0, prev)
			b := p.Tokens(nil, 1, next)
			n := commonBlocks(prev.HashIDs, next.HashIDs) * BlockTokens
			require.Greater(t, n, 0)
			n = min(n, len(a))
			require.Equal(t, a[:n], b[:n], "session %d turn %d: shared blocks, shared tokens", id, k)
			if n < len(a) {
				end := min(len(a), n+16)
				require.NotEqual(t, a[n:end], b[n:end], "session %d turn %d: tokens differ where the ids do", id, k)
			}
			pairs++
		}
		if firstOfOther == nil && len(conv) > 0 {
			firstOfOther = p.Tokens(nil, 2, conv[0])
		} else if len(conv) > 0 {
			toks := p.Tokens(nil, 3, conv[0])
			assert.Equal(t, firstOfOther[:1024], toks[:1024], "conversations share the system prompt's blocks")
			assert.NotEqual(t, firstOfOther[1024:1040], toks[1024:1040], "and nothing after it")
		}
	}
	assert.Equal(t, 200, pairs)
}
