package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluice-llm/sluice/gpuworker"
)

// closedLoopStats are the metrics of one closed-loop run, in the units the
// metric names say.
type closedLoopStats map[string]float64

// closedLoop runs one engine in virtual time with c clients, each sending
// its next request (prompt and output tokens fixed, no think time) the
// moment the previous one finishes, until total requests have been sent.
//
// Clients start at seeded random times within one estimated request
// lifetime rather than all at once: with fixed lengths and a deterministic
// engine a simultaneous start would keep every client in lockstep forever,
// all prefills queued behind each other, where a real benchmark's jitter
// spreads them out within a few rounds. Metrics cover the requests sent
// after the first warm completions and before the last c sends, when c
// requests are always in the system, and throughput counts output tokens
// between those completions.
func closedLoop(p gpuworker.Profile, c, prompt, output, total int, seed uint64) (closedLoopStats, error) {
	e, err := gpuworker.NewEngine(p)
	if err != nil {
		return nil, err
	}
	warm := max(c, total/4)
	lastMeasured := total - c
	type reqTimes struct{ sent, first, done time.Time }
	times := make([]reqTimes, total)
	sent := 0
	send := func(at time.Time) error {
		times[sent].sent = at
		r := gpuworker.Request{ID: uint64(sent), PromptTokens: prompt, OutputTokens: output}
		sent++
		return e.Submit(r)
	}
	lifetime := p.PrefillTime(prompt, 0) + time.Duration(output)*p.StepTime(c, c*(prompt+output/2))
	rng := rand.New(rand.NewPCG(seed, uint64(c)))
	startAt := make([]time.Time, c)
	for i := range startAt {
		startAt[i] = time.Time{}.Add(time.Duration(rng.Int64N(int64(lifetime))))
	}
	slices.SortFunc(startAt, time.Time.Compare)
	starts := 0 // clients started so far
	var (
		now              time.Time
		events           []gpuworker.Event
		finished         int
		winStart, winEnd time.Time
		winTokens        int
		inWindow         bool
	)
	for {
		for starts < c && !now.Before(startAt[starts]) {
			starts++
			if err := send(now); err != nil {
				return nil, err
			}
		}
		events = e.Step(now, events[:0])
		for _, ev := range events {
			switch ev.Kind {
			case gpuworker.EventFirstToken, gpuworker.EventToken:
				if inWindow {
					winTokens++
				}
				if ev.Kind == gpuworker.EventFirstToken {
					times[ev.ID].first = ev.Time
				}
			case gpuworker.EventFinished:
				times[ev.ID].done = ev.Time
				finished++
				switch finished {
				case warm:
					winStart, inWindow = ev.Time, true
				case lastMeasured:
					winEnd, inWindow = ev.Time, false
				}
				if sent < total {
					if err := send(ev.Time); err != nil {
						return nil, err
					}
				}
			}
		}
		next, ok := e.Next()
		if starts < c {
			if at := startAt[starts]; !ok || at.Before(next) {
				next, ok = at, true
			}
		}
		if !ok {
			break
		}
		now = next
	}
	if finished != total || !winEnd.After(winStart) {
		return nil, fmt.Errorf("closed loop: %d of %d requests finished, no steady-state window", finished, total)
	}
	var ttfts, tpots []float64
	for _, t := range times[warm:lastMeasured] {
		ttfts = append(ttfts, ms(t.first.Sub(t.sent)))
		if output > 1 {
			tpots = append(tpots, ms(t.done.Sub(t.first))/float64(output-1))
		}
	}
	return closedLoopStats{
		metricTTFT:      mean(ttfts),
		metricTTFTP50:   median(ttfts),
		metricITL:       mean(tpots),
		metricTPOTP50:   median(tpots),
		metricOutputTok: float64(winTokens) / winEnd.Sub(winStart).Seconds(),
	}, nil
}

// staticBatch runs one engine in virtual time on a single batch: b
// requests (prompt and output tokens fixed) submitted together at time
// zero, as an offline LLM.generate call does, and run to completion. The
// batch latency is the time the last request finishes.
func staticBatch(p gpuworker.Profile, b, prompt, output int) (closedLoopStats, error) {
	e, err := gpuworker.NewEngine(p)
	if err != nil {
		return nil, err
	}
	for i := range b {
		if err := e.Submit(gpuworker.Request{ID: uint64(i), PromptTokens: prompt, OutputTokens: output}); err != nil {
			return nil, err
		}
	}
	var (
		now      time.Time
		events   []gpuworker.Event
		ttfts    []float64
		tpots    []float64
		first    = make([]time.Time, b)
		finished int
		last     time.Time
	)
	for {
		events = e.Step(now, events[:0])
		for _, ev := range events {
			switch ev.Kind {
			case gpuworker.EventFirstToken:
				first[ev.ID] = ev.Time
				ttfts = append(ttfts, ms(ev.Time.Sub(time.Time{})))
			case gpuworker.EventFinished:
				finished++
				last = ev.Time
				if output > 1 {
					tpots = append(tpots, ms(ev.Time.Sub(first[ev.ID]))/float64(output-1))
				}
			}
		}
		next, ok := e.Next()
		if !ok {
			break
		}
		now = next
	}
	if finished != b {
		return nil, fmt.Errorf("static batch: %d of %d requests finished", finished, b)
	}
	return closedLoopStats{
		metricBatchE2E:  ms(last.Sub(time.Time{})),
		metricTTFT:      mean(ttfts),
		metricITL:       mean(tpots),
		metricOutputTok: float64(b*output) / last.Sub(time.Time{}).Seconds(),
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
