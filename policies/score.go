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

// PrefillAhead is backends.Endpoint.PrefillAhead: the prompt tokens e must
// prefill before it can start on a new request with prompt tokens.
func PrefillAhead(e *backends.Endpoint, prompt int64) int64 { return e.PrefillAhead(prompt) }

// PrefillBacklog is PrefillAhead plus the new prompt itself: the tokens to
// prefill before the request's first token on e. Divided by the endpoint's
// measured prefill rate it estimates the request's time to first token
// there.
func PrefillBacklog(e *backends.Endpoint, prompt int64) float64 {
	return float64(PrefillAhead(e, prompt) + prompt)
}
