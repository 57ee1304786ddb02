package gcra

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sluice-llm/sluice/policies/quota"
)

// The rate dimensions, as indexes into a [3] array of Rates, amounts or
// backlogs.
const (
	Requests = iota
	Input
	Output
)

// ConcurrencyRetry is the RetryAfter of a concurrency denial: a hint, since
// a slot frees when some other request ends.
const ConcurrencyRetry = time.Second

// DayKept is how long after its UTC midnight a day's total is kept: the day
// itself and the next one, so a request reserved before midnight and
// settled after it still adjusts the right day.
const DayKept = 48 * time.Hour

// Rate is one rate dimension reduced to integer nanoseconds. The zero Rate
// is not limited.
type Rate struct {
	// PerMinute is the configured rate, reported as Window.Limit unless
	// Burst is larger.
	PerMinute int64
	// Burst is the configured burst (PerMinute when none is set): the most
	// Window.Remaining can be.
	Burst int64
	// Interval is the emission interval T = 1m / PerMinute, truncated to
	// whole nanoseconds (at least 1).
	Interval int64
	// Tolerance is burst × T, saturating.
	Tolerance int64
}

// NewRate returns the Rate for perMinute with burst. A perMinute of zero or
// less is not limited. A burst of zero or less means one minute's worth
// (burst = perMinute), the reading of a bare "N per minute".
func NewRate(perMinute, burst int64) Rate {
	if perMinute <= 0 {
		return Rate{}
	}
	if burst <= 0 {
		burst = perMinute
	}
	t := max(int64(time.Minute)/perMinute, 1)
	return Rate{PerMinute: perMinute, Burst: burst, Interval: t, Tolerance: mulSat(burst, t)}
}

// Rates returns lim's three rate dimensions, indexed by Requests, Input and
// Output.
func Rates(lim quota.Limits) [3]Rate {
	return [3]Rate{
		Requests: NewRate(lim.RequestsPerMinute, lim.RequestBurst),
		Input:    NewRate(lim.InputTokensPerMinute, lim.InputBurst),
		Output:   NewRate(lim.OutputTokensPerMinute, lim.OutputBurst),
	}
}

// Amounts returns amt indexed by Requests, Input and Output.
func Amounts(amt quota.Amount) [3]int64 {
	return [3]int64{Requests: amt.Requests, Input: amt.Input, Output: amt.Output}
}

// Limited reports whether r limits anything.
func (r Rate) Limited() bool { return r.Interval > 0 }

// Cost is n × T in nanoseconds, saturating; n may be negative (a refund).
func (r Rate) Cost(n int64) int64 { return mulSat(n, r.Interval) }

// Window reports r's state for a backlog (TAT - now, at least 0). Its Limit
// is the per-minute rate, or the burst when that is larger, so that
// Remaining, which an idle tenant's burst fills, never reads above it
// (a tier with 60 a minute and a burst of 100 reported 60 with 99 left).
func (r Rate) Window(backlog int64) quota.Window {
	if !r.Limited() {
		return quota.Window{}
	}
	var rem int64
	if backlog <= r.Tolerance {
		rem = (r.Tolerance - backlog) / r.Interval
	}
	return quota.Window{Limit: max(r.PerMinute, r.Burst), Remaining: rem, Reset: time.Duration(backlog)}
}

// Windows returns a Decision's Requests and Tokens windows for backlogs.
func Windows(rates [3]Rate, backlog [3]int64) (requests, tokens quota.Window) {
	return rates[Requests].Window(backlog[Requests]),
		TokensWindow(rates[Input].Window(backlog[Input]), rates[Output].Window(backlog[Output]))
}

// TokensWindow picks, of the limited input and output windows, the one with
// the smaller Remaining/Limit share (input on a tie), as Decision.Tokens
// reports it.
func TokensWindow(in, out quota.Window) quota.Window {
	switch {
	case in.Limit == 0:
		return out
	case out.Limit == 0:
		return in
	case less(out.Remaining, in.Limit, in.Remaining, out.Limit):
		return out
	default:
		return in
	}
}

// less reports a×b < c×d exactly, for non-negative operands.
func less(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || h1 == h2 && l1 < l2
}

// Backlog is max(tat - now, 0), both in Unix nanoseconds.
func Backlog(tat, now int64) int64 { return max(addSat(tat, -now), 0) }

// State is what a Reserve reads before deciding.
type State struct {
	// DayTotal is the tokens charged so far on now's UTC day; read only
	// when TokensPerDay is set.
	DayTotal int64
	// Leases counts the unexpired leases; read only when Concurrency is set.
	Leases int64
	// Backlog is each rate dimension's max(TAT - now, 0) in nanoseconds.
	Backlog [3]int64
}

// Outcome is a Reserve's verdict before it is rendered as a Decision.
type Outcome struct {
	Allowed    bool
	Denied     quota.Dimension
	RetryAfter time.Duration
	// Backlog is each limited rate dimension's backlog after the decision:
	// the charged one when allowed, the State's when denied, 0 for a
	// dimension that is not limited.
	Backlog [3]int64
	// Rates are the Limits' rate dimensions, as Rates returns them.
	Rates [3]Rate
}

// Decision renders o.
func (o Outcome) Decision() quota.Decision {
	req, tok := Windows(o.Rates, o.Backlog)
	return quota.Decision{Allowed: o.Allowed, Denied: o.Denied, RetryAfter: o.RetryAfter, Requests: req, Tokens: tok}
}

// verdict accumulates refusals. The first refusing dimension in check
// order is Denied and RetryAfter is the longest wait, unless some dimension
// can never allow the amount: that one (the first such) is Denied and
// RetryAfter is 0, so the caller reports the request as too large instead
// of asking the client to retry something that can never pass.
type verdict struct {
	denied   quota.Dimension
	retry    int64
	tooLarge bool
}

func (v *verdict) wait(d quota.Dimension, retry int64) {
	if v.denied == "" {
		v.denied = d
	}
	if !v.tooLarge && retry > v.retry {
		v.retry = retry
	}
}

func (v *verdict) tooBig(d quota.Dimension) {
	if !v.tooLarge {
		v.tooLarge, v.denied, v.retry = true, d, 0
	}
}

// Decide checks amt against lim in st at now, in the order tokens_per_day,
// concurrency, requests, input_tokens, output_tokens (see [verdict] for
// which refusal is reported). When every dimension allows it, the outcome
// carries the charged backlogs; the caller then adds amt.Tokens() to the
// day total and records the lease.
func Decide(lim quota.Limits, amt quota.Amount, st State, now time.Time) Outcome {
	var v verdict
	if lim.TokensPerDay > 0 {
		n := amt.Tokens()
		switch {
		case n > lim.TokensPerDay:
			v.tooBig(quota.DimTokensPerDay)
		case addSat(st.DayTotal, n) > lim.TokensPerDay:
			v.wait(quota.DimTokensPerDay, int64(UntilMidnight(now)))
		}
	}
	if lim.Concurrency > 0 && st.Leases >= lim.Concurrency {
		v.wait(quota.DimConcurrency, int64(ConcurrencyRetry))
	}
	rates, amounts := Rates(lim), Amounts(amt)
	var charged [3]int64
	for i, r := range rates {
		if !r.Limited() {
			continue
		}
		cost := r.Cost(amounts[i])
		after := addSat(st.Backlog[i], cost)
		switch {
		case cost > r.Tolerance:
			v.tooBig(RateDimension(i))
		case after > r.Tolerance:
			v.wait(RateDimension(i), after-r.Tolerance)
		}
		charged[i] = after
	}
	if v.denied != "" {
		var b [3]int64
		for i, r := range rates {
			if r.Limited() {
				b[i] = st.Backlog[i]
			}
		}
		return Outcome{Denied: v.denied, RetryAfter: time.Duration(v.retry), Backlog: b, Rates: rates}
	}
	return Outcome{Allowed: true, Backlog: charged, Rates: rates}
}

// Settle returns the backlogs after s: each limited dimension's moves by
// (Used - Reserved) × T and never below 0, so a refund after an idle spell
// banks nothing beyond the burst.
func Settle(lim quota.Limits, s quota.Settlement, backlog [3]int64) [3]int64 {
	rates, used, reserved := Rates(lim), Amounts(s.Used), Amounts(s.Reserved)
	for i, r := range rates {
		if r.Limited() {
			backlog[i] = max(addSat(backlog[i], r.Cost(used[i]-reserved[i])), 0)
		}
	}
	return backlog
}

// DayDelta is what Settle adds to the total of s.ReservedAt's UTC day, and
// whether to apply it at all: only when TokensPerDay is set, the tokens
// differ, and that day is still kept at now (see [DayKept]). A day total
// that exists is clamped at 0; a missing one is created only by a positive
// delta.
func DayDelta(lim quota.Limits, s quota.Settlement, now time.Time) (int64, bool) {
	d := s.Used.Tokens() - s.Reserved.Tokens()
	if lim.TokensPerDay <= 0 || d == 0 || DayTTL(Day(s.ReservedAt), now) <= 0 {
		return 0, false
	}
	return d, true
}

// RateDimension names rate dimension i (Requests, Input or Output).
func RateDimension(i int) quota.Dimension {
	switch i {
	case Requests:
		return quota.DimRequests
	case Input:
		return quota.DimInputTokens
	default:
		return quota.DimOutputTokens
	}
}

// Day is t's UTC day, counted from the Unix epoch.
func Day(t time.Time) int64 { return floorDiv(t.Unix(), 86400) }

// DayTTL is how long day's total is still kept at now; zero or less means
// it is gone.
func DayTTL(day int64, now time.Time) time.Duration {
	return time.Unix(day*86400, 0).Add(DayKept).Sub(now)
}

// UntilMidnight is the time from now to the next UTC midnight, in (0, 24h].
func UntilMidnight(now time.Time) time.Duration {
	return time.Unix((Day(now)+1)*86400, 0).Sub(now)
}

// Millis is now in whole Unix milliseconds, the clock leases expire by.
func Millis(now time.Time) int64 { return floorDiv(now.UnixNano(), int64(time.Millisecond)) }

// LeaseTTL is ttl in whole milliseconds, rounded up.
func LeaseTTL(ttl time.Duration) int64 {
	return (int64(ttl) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// LeaseExpiry is when a lease taken at now with ttl stops counting, in Unix
// milliseconds: it counts while Millis(now) < LeaseExpiry.
func LeaseExpiry(now time.Time, ttl time.Duration) int64 { return Millis(now) + LeaseTTL(ttl) }

// CheckReserve rejects arguments no Store can decide on. They are a
// caller's bug, not a tenant's fault, so they make an error, not a denial.
func CheckReserve(lim quota.Limits, amt quota.Amount, lease quota.Lease, now time.Time) error {
	if err := checkAmounts(amt); err != nil {
		return err
	}
	if now.Unix() < 0 {
		return fmt.Errorf("now %v is before the Unix epoch", now)
	}
	if lim.Concurrency > 0 && (lease.ID == "" || lease.TTL <= 0) {
		return fmt.Errorf("concurrency is limited but lease %+v has no ID or no positive TTL", lease)
	}
	return nil
}

// CheckSettle rejects a Settlement no Store can apply. ReservedAt matters
// only when TokensPerDay is set.
func CheckSettle(lim quota.Limits, s quota.Settlement, now time.Time) error {
	if err := checkAmounts(s.Reserved); err != nil {
		return err
	}
	if err := checkAmounts(s.Used); err != nil {
		return err
	}
	if now.Unix() < 0 {
		return fmt.Errorf("now %v is before the Unix epoch", now)
	}
	if lim.TokensPerDay > 0 && s.ReservedAt.Unix() < 0 {
		return fmt.Errorf("ReservedAt %v is before the Unix epoch", s.ReservedAt)
	}
	return nil
}

func checkAmounts(a quota.Amount) error {
	if a.Requests < 0 || a.Input < 0 || a.Output < 0 {
		return fmt.Errorf("negative amount %+v", a)
	}
	return nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(abs(a)), uint64(abs(b)))
	neg := (a < 0) != (b < 0)
	if hi != 0 || lo > math.MaxInt64 {
		if neg {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	if neg {
		return -int64(lo)
	}
	return int64(lo)
}

func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// abs saturates at MaxInt64 for MinInt64.
func abs(a int64) int64 {
	switch {
	case a == math.MinInt64:
		return math.MaxInt64
	case a < 0:
		return -a
	}
	return a
}
