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
