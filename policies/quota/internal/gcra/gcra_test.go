package gcra

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/policies/quota"
)

func TestNewRate(t *testing.T) {
	tests := []struct {
		name             string
		perMinute, burst int64
		want             Rate
	}{
		{"unlimited", 0, 10, Rate{}},
		{"negative", -5, 10, Rate{}},
		{"exact", 60, 5, Rate{PerMinute: 60, Burst: 5, Interval: int64(time.Second), Tolerance: int64(5 * time.Second)}},
		{"truncated interval", 7, 7, Rate{PerMinute: 7, Burst: 7, Interval: 8571428571, Tolerance: 7 * 8571428571}},
		{"burst defaults to a minute's worth", 600, 0, Rate{PerMinute: 600, Burst: 600, Interval: int64(100 * time.Millisecond), Tolerance: int64(time.Minute)}},
		{"interval at least 1ns", 1e12, 10, Rate{PerMinute: 1e12, Burst: 10, Interval: 1, Tolerance: 10}},
		{"tolerance saturates", 1, math.MaxInt64, Rate{PerMinute: 1, Burst: math.MaxInt64, Interval: int64(time.Minute), Tolerance: math.MaxInt64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, NewRate(tt.perMinute, tt.burst))
		})
	}
}

func TestSaturation(t *testing.T) {
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"mul", mulSat(3, 4), 12},
		{"mul negative", mulSat(-3, 4), -12},
		{"mul overflow", mulSat(math.MaxInt64/2, 3), math.MaxInt64},
		{"mul underflow", mulSat(math.MinInt64/2, 3), math.MinInt64},
		{"mul min", mulSat(math.MinInt64, -1), math.MaxInt64},
		{"add", addSat(3, -4), -1},
		{"add overflow", addSat(math.MaxInt64, 1), math.MaxInt64},
		{"add underflow", addSat(math.MinInt64, -1), math.MinInt64},
		{"backlog of a far TAT", Backlog(math.MaxInt64, -5), math.MaxInt64},
		{"backlog of a past TAT", Backlog(5, 10), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, tt.got) })
	}
}

func TestTokensWindow(t *testing.T) {
	in := quota.Window{Limit: 6000, Remaining: 3000}
	out := quota.Window{Limit: 600, Remaining: 300}
	tests := []struct {
		name    string
		in, out quota.Window
		want    quota.Window
	}{
		{"neither limited", quota.Window{}, quota.Window{}, quota.Window{}},
		{"input only", in, quota.Window{}, in},
		{"output only", quota.Window{}, out, out},
		{"tie goes to input", in, out, in},
		{"output smaller", in, quota.Window{Limit: 600, Remaining: 299}, quota.Window{Limit: 600, Remaining: 299}},
		{"input smaller", quota.Window{Limit: 6000, Remaining: 2999}, out, quota.Window{Limit: 6000, Remaining: 2999}},
		{"exact with huge values", quota.Window{Limit: math.MaxInt64, Remaining: math.MaxInt64 - 1}, quota.Window{Limit: math.MaxInt64 - 1, Remaining: math.MaxInt64 - 2}, quota.Window{Limit: math.MaxInt64 - 1, Remaining: math.MaxInt64 - 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, TokensWindow(tt.in, tt.out)) })
	}
}

func TestCalendar(t *testing.T) {
	noon := time.Date(2026, 3, 14, 12, 0, 0, 5, time.UTC)
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, midnight.Sub(noon), UntilMidnight(noon))
	assert.Equal(t, 24*time.Hour, UntilMidnight(midnight))
	assert.Equal(t, time.Nanosecond, UntilMidnight(midnight.Add(-time.Nanosecond)))
	assert.Equal(t, Day(noon)+1, Day(midnight))
	assert.Equal(t, Day(noon), Day(noon.In(time.FixedZone("UTC-11", -11*3600))), "days are UTC days")
	assert.Equal(t, int64(-1), Day(time.Unix(-1, 0)))

	assert.Equal(t, 36*time.Hour-5, DayTTL(Day(noon), noon))
	assert.Equal(t, time.Duration(0), DayTTL(Day(noon), midnight.Add(24*time.Hour)), "gone after the next day")

	assert.Equal(t, int64(1000), LeaseTTL(time.Second))
	assert.Equal(t, int64(1001), LeaseTTL(time.Second+1))
	assert.Equal(t, noon.UnixMilli()+1000, LeaseExpiry(noon, time.Second))
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	lim := quota.Limits{
		RequestsPerMinute: 60, RequestBurst: 2,
		OutputTokensPerMinute: 60, OutputBurst: 10,
		Concurrency: 1, TokensPerDay: 100,
	}
	sec := int64(time.Second)
	tests := []struct {
		name string
		amt  quota.Amount
		st   State
		want Outcome
	}{
		{"allowed", quota.Amount{Requests: 1, Output: 3}, State{}, Outcome{Allowed: true, Backlog: [3]int64{sec, 0, 3 * sec}}},
		{"first refusal named, longest wait", quota.Amount{Requests: 1, Output: 3},
			State{Leases: 1, Backlog: [3]int64{2 * sec, 0, 9 * sec}},
			Outcome{Denied: quota.DimConcurrency, RetryAfter: 2 * time.Second, Backlog: [3]int64{2 * sec, 0, 9 * sec}}},
		{"day waits until midnight", quota.Amount{Output: 3}, State{DayTotal: 98, Leases: 1},
			Outcome{Denied: quota.DimTokensPerDay, RetryAfter: 12 * time.Hour}},
		{"too large beats waits", quota.Amount{Requests: 1, Output: 11}, State{DayTotal: 98, Leases: 1},
			Outcome{Denied: quota.DimOutputTokens}},
		{"first too large", quota.Amount{Requests: 3, Output: 101}, State{},
			Outcome{Denied: quota.DimTokensPerDay}},
		{"overcharged dimension refuses zero", quota.Amount{}, State{Backlog: [3]int64{0, 0, 12 * sec}},
			Outcome{Denied: quota.DimOutputTokens, RetryAfter: 2 * time.Second, Backlog: [3]int64{0, 0, 12 * sec}}},
		{"unlimited dimension's backlog ignored", quota.Amount{}, State{Backlog: [3]int64{0, 99 * sec, 0}},
			Outcome{Allowed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Rates = Rates(lim)
			assert.Equal(t, tt.want, Decide(lim, tt.amt, tt.st, now))
		})
	}
}

func TestSettleAndDayDelta(t *testing.T) {
	lim := quota.Limits{InputTokensPerMinute: 60, OutputTokensPerMinute: 60, TokensPerDay: 1000}
	sec := int64(time.Second)
	s := quota.Settlement{Reserved: quota.Amount{Input: 5, Output: 5}, Used: quota.Amount{Input: 8, Output: 1}}
	assert.Equal(t, [3]int64{7, 13 * sec, 0}, Settle(lim, s, [3]int64{7, 10 * sec, 2 * sec}),
		"overcharge adds, refund stops at 0, unlimited untouched")

	now := time.Date(2026, 3, 15, 23, 0, 0, 0, time.UTC)
	s.ReservedAt = now.Add(-24 * time.Hour)
	d, ok := DayDelta(lim, s, now)
	assert.True(t, ok)
	assert.Equal(t, int64(-1), d)
	s.ReservedAt = now.Add(-48 * time.Hour)
	_, ok = DayDelta(lim, s, now)
	assert.False(t, ok, "that day is no longer kept")
	_, ok = DayDelta(quota.Limits{}, s, now)
	assert.False(t, ok, "no daily limit")
}
