package backends

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadSnapshotAndStaleness(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	assert.Nil(t, e.Load(), "never scraped")
	e.Begin(100)
	e.Begin(100)
	assert.EqualValues(t, 2, e.SinceScrape(), "before any scrape, everything in flight is unseen")

	l := &Load{At: time.Unix(1, 0), Waiting: 3, Running: 5, KVUsage: 0.5}
	e.StoreLoad(l)
	assert.Same(t, l, e.Load())
	assert.Zero(t, e.SinceScrape(), "the scrape saw what was in flight")
	e.Begin(100)
	assert.EqualValues(t, 1, e.SinceScrape())
	e.End(100)
	e.End(100)
	e.End(100)
	assert.Zero(t, e.SinceScrape(), "never negative")
	assert.Zero(t, e.InFlightTokens())

	e.MarkStale()
	assert.Nil(t, e.Load(), "a failed scrape drops the data instead of reading as zero")
}

func TestMovingAverages(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	assert.Zero(t, e.TokensPerSec())
	assert.Zero(t, e.TTFT())

	e.ObserveDecode(100, time.Second)
	assert.InDelta(t, 100, e.TokensPerSec(), 1e-9, "the first observation is taken as is")
	e.ObserveDecode(200, time.Second)
	assert.InDelta(t, 100+ewmaAlpha*100, e.TokensPerSec(), 1e-9)
	e.ObserveDecode(0, time.Second) // ignored
	e.ObserveDecode(5, 0)           // ignored
	assert.InDelta(t, 120, e.TokensPerSec(), 1e-9)

	e.ObserveTTFT(200 * time.Millisecond)
	e.ObserveTTFT(100 * time.Millisecond)
	assert.InDelta(t, 0.18, e.TTFT().Seconds(), 1e-9)

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				e.ObserveDecode(50, time.Second)
			}
		})
	}
	wg.Wait()
	assert.InDelta(t, 50, e.TokensPerSec(), 1, "converges under concurrent updates")
}

func TestPendingPromptTokens(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	assert.Zero(t, e.PendingPromptTokens())
	assert.Zero(t, e.MeanPrompt(), "nothing sent")
	e.BeginPrefill(2000)
	e.BeginPrefill(500)
	assert.EqualValues(t, 2500, e.PendingPromptTokens())
	assert.EqualValues(t, 2, e.PendingRequests())
	e.EndPrefill(2000)
	assert.EqualValues(t, 500, e.PendingPromptTokens(), "the first request produced its first token")
	assert.EqualValues(t, 1, e.PendingRequests())
	e.EndPrefill(500)
	assert.Zero(t, e.PendingPromptTokens())
	assert.Zero(t, e.PendingRequests())
	assert.InDelta(t, 1250, e.MeanPrompt(), 1e-9, "the mean of every prompt sent, pending or not")
}

func TestObservePrefillMeasuresTheDrainRate(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	assert.Zero(t, e.PrefillTokensPerSec(), "unmeasured")
	e.ObservePrefill(0, 0, time.Second)
	e.ObservePrefill(0, 100, 0)
	assert.Zero(t, e.PrefillTokensPerSec(), "empty observations are ignored")

	e.ObservePrefill(0, 2000, 100*time.Millisecond)
	assert.InDelta(t, 20000, e.PrefillTokensPerSec(), 1e-6, "the first observation is taken whole")

	// The same prompt queued behind 18,000 tokens waits ten times as long:
	// the engine drained 20,000 tokens in that second, the same rate, so
	// the estimate does not move. The queue is not the engine's speed.
	e.ObservePrefill(18000, 2000, time.Second)
	assert.InDelta(t, 20000, e.PrefillTokensPerSec(), 1e-6)

	// A real slowdown moves it by the average's weight.
	e.ObservePrefill(0, 2000, 200*time.Millisecond)
	assert.InDelta(t, 20000+ewmaAlpha*(10000-20000), e.PrefillTokensPerSec(), 1e-6)
	for range 50 {
		e.ObservePrefill(8000, 2000, time.Second)
	}
	assert.InDelta(t, 10000, e.PrefillTokensPerSec(), 10, "a lasting change is followed")

	e.ObservePrefill(-5, 1000, 100*time.Millisecond)
	assert.InDelta(t, 10000, e.PrefillTokensPerSec(), 10, "a negative ahead counts as none")
}

func TestObservePrefillConcurrent(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				e.BeginPrefill(10)
				e.ObservePrefill(0, 1000, 100*time.Millisecond)
				e.EndPrefill(10)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, e.PendingPromptTokens())
	assert.InDelta(t, 10000, e.PrefillTokensPerSec(), 1e-6)
}
