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
		done, ok := b.Allow()
		require.True(t, ok)
		done(c)
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
