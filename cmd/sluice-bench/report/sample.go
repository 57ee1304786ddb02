package report

import "time"

// Sample is what one request measured. Latencies are from the moment the
// request was sent.
type Sample struct {
	// OK is true when the request completed; Err says why it did not.
	OK  bool
	Err string
	// Cancelled marks a request cut short by the end of the run (an
	// interrupt): it counts as neither completed nor failed.
	Cancelled bool
	// PromptTokens is the prompt length sent; OutputTokens the tokens the
	// server reported generating.
	PromptTokens, OutputTokens int
	// TTFT is the time to the first token chunk (E2E when not streaming).
	TTFT time.Duration
	// E2E is the time to the end of the response.
	E2E time.Duration
	// ITL holds the gaps between consecutive token chunks.
	ITL []time.Duration
}

// TPOT is the mean time per output token after the first, and false when
// the request produced fewer than two tokens.
func (s Sample) TPOT() (time.Duration, bool) {
	if s.OutputTokens < 2 {
		return 0, false
	}
	return (s.E2E - s.TTFT) / time.Duration(s.OutputTokens-1), true
}
