package policies

import "github.com/sluice-llm/sluice/backends"

// QueueDepth is the number of requests an endpoint is working on or holding,
// as best this replica knows: the scraped waiting plus running, plus the
// requests this replica sent since that scrape (which the scrape cannot show
// yet, so many picks between two scrapes do not all land on the endpoint
// that looked idlest), and never less than this replica's own in-flight
// count. Without a fresh scrape (never scraped, or the last scrape failed)
// it is the in-flight count alone, so missing data reads as "what we know
// we sent", not as an idle engine.
func QueueDepth(e *backends.Endpoint) int64 {
	in := e.InFlight()
	l := e.Load()
	if l == nil {
		return in
	}
	return max(int64(l.Waiting+l.Running)+e.SinceScrape(), in)
}

// TwoChoices is the power of two random choices: of two distinct endpoints
// drawn from eps with a stream seeded by seed, the one with the shorter
// QueueDepth (the first drawn on a tie). It is the p2c policy, and the
// fallback of policies that find no key to route by.
func TwoChoices(seed uint64, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	n := len(eps)
	switch n {
	case 0:
		return nil, ErrNoEndpoint
	case 1:
		return eps[0], nil
	}
	s := NewStream(seed)
	i := s.IntN(n)
	j := s.IntN(n - 1)
	if j >= i {
		j++
	}
	if QueueDepth(eps[j]) < QueueDepth(eps[i]) {
		return eps[j], nil
	}
	return eps[i], nil
}

// PrefillAhead is the prompt tokens e must prefill before it can start on a
// new request with prompt tokens: the prompts this replica has sent there
// without a first token yet (backends.Endpoint.PendingPromptTokens) and,
// when a fresh scrape shows more requests waiting in the engine than this
// replica has pending there (other replicas' prompts), that surplus at the
// mean size of the prompts this replica has sent there (this prompt's size
// before the first). Running requests are not counted: they are past their
// prefill or in it, and the measured prefill rate already reflects the
// decode work they add to each step. Record it when a request is sent and
// pass it to backends.Endpoint.ObservePrefill, so that the measured rate and
// the backlog it divides count the same tokens.
func PrefillAhead(e *backends.Endpoint, prompt int64) int64 {
	own := e.PendingPromptTokens()
	l := e.Load()
	if l == nil {
		return own
	}
	others := int64(l.Waiting) - e.PendingRequests()
	if others <= 0 {
		return own
	}
	mean := e.MeanPrompt()
	if mean == 0 {
		mean = float64(prompt)
	}
	return own + int64(float64(others)*mean)
}

// PrefillBacklog is PrefillAhead plus the new prompt itself: the tokens to
// prefill before the request's first token on e. Divided by the endpoint's
// measured prefill rate it estimates the request's time to first token
// there.
func PrefillBacklog(e *backends.Endpoint, prompt int64) float64 {
	return float64(PrefillAhead(e, prompt) + prompt)
}
