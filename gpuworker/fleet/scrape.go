package fleet

import (
	"time"

	"github.com/sluice-llm/sluice/backends"
)

// initScrape sets up the replicas' scrape ticks. Replica r first scrapes at
// (r+1)/replicas of the interval, so replicas are out of phase the way
// independent router processes are.
func (s *sim) initScrape() {
	iv := s.opts.ScrapeInterval
	if iv == 0 {
		iv = DefaultScrapeInterval
	}
	if iv < 0 || len(s.opts.Pickers) == 0 {
		return
	}
	replicas, n := len(s.opts.Pickers), len(s.engines)
	s.scrapeEvery = int64(iv)
	s.nextScrape = make([]int64, replicas)
	var start int64
	if len(s.arrival) > 0 {
		start = s.arrival[0]
	}
	for r := range s.nextScrape {
		s.nextScrape[r] = start + s.scrapeEvery*int64(r+1)/int64(replicas)
	}
	s.version = make([]uint64, n)
	s.stored = make([]uint64, replicas*n)
}

// changed notes that worker w's engine may have changed.
func (s *sim) changed(w int) {
	if s.version != nil {
		s.version[w]++
	}
}

// scrapeUntil runs every replica's scrape ticks up to and including t, the
// time of the next event. Engines change only at events, so after the first
// tick past the latest event the remaining ticks before t would store
// nothing new: they are skipped, keeping long idle gaps cheap.
func (s *sim) scrapeUntil(t int64) {
	for r, at := range s.nextScrape {
		if at > t {
			continue
		}
		s.scrape(r, at)
		// Ticks in (at, t] see the same engines; skip to the first tick
		// after t, keeping the phase.
		at += s.scrapeEvery * ((t-at)/s.scrapeEvery + 1)
		s.nextScrape[r] = at
	}
}

// scrape stores, at virtual time now, the load of every worker whose engine
// changed since replica r last stored it. An unchanged engine keeps its
// previous snapshot: the scraped values would be equal and the replica's
// in-flight count cannot have moved without the engine changing.
func (s *sim) scrape(r int, now int64) {
	n := len(s.engines)
	seen := s.stored[r*n : (r+1)*n]
	at := epoch.Add(time.Duration(now))
	for w, e := range s.engines {
		if seen[w] == s.version[w] {
			continue
		}
		seen[w] = s.version[w]
		l := e.Load()
		s.eps[r][w].StoreLoad(&backends.Load{At: at, Waiting: l.Waiting, Running: l.Running, KVUsage: l.KVUsage})
	}
}
