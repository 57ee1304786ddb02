package backends

import (
	"math"
	"sync/atomic"
	"time"
)

// Load is an endpoint's engine state as last scraped from its metrics
// endpoint. It is immutable once stored: the scraper builds a new one every
// interval and readers never modify it.
type Load struct {
	// At is when the metrics were read.
	At time.Time
	// Waiting is the number of requests queued in the engine.
	Waiting int
	// Running is the number of requests in the engine's running batch.
	Running int
	// KVUsage is the fraction of KV-cache in use, 0..1, or -1 when the
	// backend's metric dialect does not report it.
	KVUsage float64
}

// ewmaAlpha weighs a new observation in the endpoint's moving averages: 0.2
// follows a change within about ten answers without jumping on one outlier.
const ewmaAlpha = 0.2

// signals are the load signals an Endpoint keeps besides its counters. They
// live in their own struct so endpoint.go stays about identity and health.
type signals struct {
	load             atomic.Pointer[Load]
	inFlightAtScrape atomic.Int64
	inFlightTokens   atomic.Int64
	tokensPerSec     atomic.Uint64 // float64 bits; 0 until the first observation
	ttft             atomic.Uint64 // float64 bits, seconds; 0 until the first observation
	pendingPrompt    atomic.Int64
	pendingRequests  atomic.Int64
	sentPrompt       atomic.Int64                  // prompt tokens of every BeginPrefill
	sentPrefills     atomic.Int64                  // number of BeginPrefill calls
	prefillRate      atomic.Uint64                 // float64 bits, tokens/s; 0 until the first observation
	streamTimed      atomic.Bool                   // a streamed first token has been timed (Attempt.FirstToken)
	othersPending    atomic.Pointer[othersPending] // StoreOthersPending's
}

// othersPending is the prompt tokens other router replicas had sent an
// endpoint and not yet seen prefilled, as the shared admission store
// reported them at a time.
type othersPending struct {
	at     time.Time
	tokens int64
}

// StoreOthersPending records what the shared admission store reported at
// time at: the prompt tokens pending on the endpoint over all replicas,
// this one's included. PrefillAhead counts the part not this replica's in
// place of the scraped queue while the report is newer than the scrape.
func (e *Endpoint) StoreOthersPending(at time.Time, all int64) {
	e.sig.othersPending.Store(&othersPending{at: at, tokens: max(all-e.PendingPromptTokens(), 0)})
}

// Load returns the last scraped engine state, or nil when the endpoint has
// never been scraped or its last scrape failed (stale data is dropped, never
// read as zero).
func (e *Endpoint) Load() *Load { return e.sig.load.Load() }

// StoreLoad publishes a fresh scrape and remembers this replica's in-flight
// count at that moment, so SinceScrape can tell what the scrape cannot see yet.
func (e *Endpoint) StoreLoad(l *Load) {
	e.sig.inFlightAtScrape.Store(e.inFlight.Load())
	e.sig.load.Store(l)
}

// MarkStale drops the scraped state after a failed scrape.
func (e *Endpoint) MarkStale() { e.sig.load.Store(nil) }

// SinceScrape is how many more requests this replica has in flight to the
// endpoint than when it was last scraped (never negative): work the scraped
// queue does not show yet. Policies add it to scraped depths so that many
// picks between two scrapes do not all land on the endpoint that looked
// idlest.
func (e *Endpoint) SinceScrape() int64 {
	return max(e.inFlight.Load()-e.sig.inFlightAtScrape.Load(), 0)
}

// InFlightTokens is the prompt plus expected output tokens of the requests
// this replica has in flight to the endpoint.
func (e *Endpoint) InFlightTokens() int64 { return e.sig.inFlightTokens.Load() }

// TokensPerSec is the moving average of decode throughput measured on
// answers this replica proxied (output tokens after the first, over the time
// after the first), or 0 before the first measurement.
func (e *Endpoint) TokensPerSec() float64 { return math.Float64frombits(e.sig.tokensPerSec.Load()) }

// TTFT is the moving average of time to first token measured on answers
// this replica proxied, or 0 before the first measurement.
func (e *Endpoint) TTFT() time.Duration {
	return time.Duration(math.Float64frombits(e.sig.ttft.Load()) * float64(time.Second))
}

// ObserveTTFT folds one measured time to first token into the average.
func (e *Endpoint) ObserveTTFT(d time.Duration) {
	if d > 0 {
		ewma(&e.sig.ttft, d.Seconds())
	}
}

// ObserveDecode folds one answer's decode phase (tokens generated after the
// first, over the time they took) into the throughput average.
func (e *Endpoint) ObserveDecode(tokens int, d time.Duration) {
	if tokens > 0 && d > 0 {
		ewma(&e.sig.tokensPerSec, float64(tokens)/d.Seconds())
	}
}

// BeginPrefill records that a request with prompt tokens was sent and has
// not produced its first token yet. Pair it with one EndPrefill(prompt),
// called at the first token or when the attempt ends, whichever comes first.
func (e *Endpoint) BeginPrefill(prompt int64) {
	e.sig.pendingPrompt.Add(prompt)
	e.sig.pendingRequests.Add(1)
	e.sig.sentPrompt.Add(prompt)
	e.sig.sentPrefills.Add(1)
}

// EndPrefill records that a request begun with BeginPrefill(prompt) has
// produced its first token or ended.
func (e *Endpoint) EndPrefill(prompt int64) {
	e.sig.pendingPrompt.Add(-prompt)
	e.sig.pendingRequests.Add(-1)
}

// PendingPromptTokens is the prompt tokens of the requests this replica has
// in flight to the endpoint that have not produced a first token yet: the
// prefill work queued ahead of a new request, as far as this replica knows.
func (e *Endpoint) PendingPromptTokens() int64 { return max(e.sig.pendingPrompt.Load(), 0) }

// PendingRequests is how many requests make up PendingPromptTokens.
func (e *Endpoint) PendingRequests() int64 { return max(e.sig.pendingRequests.Load(), 0) }

// MeanPrompt is the mean prompt size, in tokens, of the requests this
// replica has sent to the endpoint, or 0 before the first.
func (e *Endpoint) MeanPrompt() float64 {
	n := e.sig.sentPrefills.Load()
	if n == 0 {
		return 0
	}
	return float64(e.sig.sentPrompt.Load()) / float64(n)
}

// PrefillTokensPerSec estimates how fast the endpoint prefills prompts, in
// prompt tokens per second, or 0 before the first measurement.
func (e *Endpoint) PrefillTokensPerSec() float64 {
	return math.Float64frombits(e.sig.prefillRate.Load())
}

// ObservePrefill folds one answer's time to first token into the
// prefill-rate estimate: ahead is the prompt tokens the endpoint had queued
// before the request when it was sent (PrefillAhead), prompt its own
// prompt tokens.
//
// An engine prefills in arrival order, so by the request's first token it
// has prefilled the prompts queued ahead of it plus its own:
// (ahead+prompt)/ttft is the rate at which the endpoint drains a prefill
// queue, whatever the queue's length. Dividing by the prompt alone would
// read a busy endpoint as slow (its TTFT includes the wait), and dividing
// the queue by that rate would then count the queue twice. The estimate is
// a moving average (weight 0.2) of these rates.
func (e *Endpoint) ObservePrefill(ahead int64, prompt int, ttft time.Duration) {
	if prompt > 0 && ttft > 0 {
		ewma(&e.sig.prefillRate, (float64(max(ahead, 0))+float64(prompt))/ttft.Seconds())
	}
}

func ewma(v *atomic.Uint64, x float64) {
	for {
		old := v.Load()
		cur := math.Float64frombits(old)
		next := x
		if old != 0 {
			next = cur + ewmaAlpha*(x-cur)
		}
		if v.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}
