package router

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/policies/quota"
)

func TestSetRateHeaders(t *testing.T) {
	tests := []struct {
		name string
		d    quota.Decision
		want http.Header
	}{
		{"unlimited", quota.Decision{}, http.Header{}},
		{"requests only", quota.Decision{Requests: quota.Window{Limit: 60, Remaining: 59, Reset: time.Second}}, http.Header{
			"X-Ratelimit-Limit-Requests":     {"60"},
			"X-Ratelimit-Remaining-Requests": {"59"},
			"X-Ratelimit-Reset-Requests":     {"1s"},
		}},
		{"both", quota.Decision{
			Requests: quota.Window{Limit: 100_000_000, Remaining: -3, Reset: 20*time.Millisecond + time.Nanosecond},
			Tokens:   quota.Window{Limit: 6000, Remaining: 5000, Reset: 6*time.Minute + 400*time.Microsecond},
		}, http.Header{
			"X-Ratelimit-Limit-Requests":     {"100000000"},
			"X-Ratelimit-Remaining-Requests": {"0"},
			"X-Ratelimit-Reset-Requests":     {"21ms"},
			"X-Ratelimit-Limit-Tokens":       {"6000"},
			"X-Ratelimit-Remaining-Tokens":   {"5000"},
			"X-Ratelimit-Reset-Tokens":       {"6m0s"},
		}},
		{"tokens only, replenished", quota.Decision{Tokens: quota.Window{Limit: 1 << 62, Remaining: 1 << 62}}, http.Header{
			"X-Ratelimit-Limit-Tokens":     {"4611686018427387904"},
			"X-Ratelimit-Remaining-Tokens": {"4611686018427387904"},
			"X-Ratelimit-Reset-Tokens":     {"0s"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			setRateHeaders(h, tt.d)
			assert.Equal(t, tt.want, h)
		})
	}
}

func TestSetRateHeadersReplacesAndAddsApart(t *testing.T) {
	h := http.Header{"X-Ratelimit-Limit-Requests": {"1", "2"}}
	setRateHeaders(h, quota.Decision{Requests: quota.Window{Limit: 5, Remaining: 4}})
	assert.Equal(t, []string{"5"}, h.Values("X-Ratelimit-Limit-Requests"))
	h.Add("X-Ratelimit-Limit-Requests", "6") // must not overwrite the next header's value
	assert.Equal(t, []string{"4"}, h.Values("X-Ratelimit-Remaining-Requests"))
}
