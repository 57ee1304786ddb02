package backends_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
)

func TestBreakerCountsOnlyBackendFaults(t *testing.T) {
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	e.SetBreaker(backends.BreakerSettings{ConsecutiveFailures: 3, OpenFor: time.Hour})
	b := e.Breaker()
	end := func(c backends.ErrorClass) {
		pass, ok := b.Allow()
		require.True(t, ok)
		pass.Done(c)
	}
	for range 10 { // a client's cancels and bad requests are not the backend's fault
		end(backends.ClassClientGone)
		end(backends.ClassUpstream4xx)
	}
	end(backends.ClassUpstream5xx)
	end(backends.ClassTimeout)
	end(backends.ClassOK) // a success in between resets the run
	end(backends.ClassUnreachable)
	end(backends.ClassFailed)
	assert.Equal(t, "closed", b.State())
	assert.True(t, e.Available(time.Now()))
	end(backends.ClassUpstream5xx)
	assert.Equal(t, "open", b.State())
	assert.False(t, e.Available(time.Now()), "an open breaker takes the endpoint out")
	assert.True(t, e.Available(time.Now().Add(2*time.Hour)), "until its time is up")
	_, ok := b.Allow()
	assert.False(t, ok)
}

// TestBreakerCountsAttemptsLongerThanItsWindow: an attempt's result counts
// when it ends, however long it took. gobreaker, asked at the attempt's
// start, dropped results from an earlier window: twelve 12 s first-byte
// timeouts under the 10 s window never tripped it.
func TestBreakerCountsAttemptsLongerThanItsWindow(t *testing.T) {
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	e.SetBreaker(backends.BreakerSettings{ConsecutiveFailures: 3, Window: 20 * time.Millisecond, OpenFor: time.Hour})
	b := e.Breaker()
	var passes []*backends.Pass
	for range 3 {
		p, ok := b.Allow()
		require.True(t, ok)
		passes = append(passes, p)
	}
	time.Sleep(50 * time.Millisecond) // past the window the attempts began in
	for _, p := range passes {
		p.Done(backends.ClassTimeout)
	}
	assert.Equal(t, "open", b.State())
}

// TestBreakerProbeClosesOnItsAnswer: a half-open breaker closes as its
// probe's answer begins, not when the answer ends (a long stream held a
// recovered backend to one request that long); a fault after that counts
// as any other.
func TestBreakerProbeClosesOnItsAnswer(t *testing.T) {
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	e.SetBreaker(backends.BreakerSettings{ConsecutiveFailures: 1, OpenFor: 10 * time.Millisecond})
	b := e.Breaker()
	p, ok := b.Allow()
	require.True(t, ok)
	p.Done(backends.ClassUpstream5xx)
	require.Equal(t, "open", b.State())
	require.Eventually(t, func() bool { return b.State() == "half-open" }, 5*time.Second, time.Millisecond)
	probe, ok := b.Allow()
	require.True(t, ok)
	_, ok = b.Allow()
	assert.False(t, ok, "one probe at a time")
	probe.Answered()
	assert.Equal(t, "closed", b.State())
	other, ok := b.Allow()
	require.True(t, ok, "closed: attempts go")
	other.Done(backends.ClassOK)
	probe.Done(backends.ClassFailed) // its stream broke later: a fault like any other
	assert.Equal(t, "open", b.State())
}
