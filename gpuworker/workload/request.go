package workload

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// BlockTokens is the number of prompt tokens one prefix hash id stands for,
// as in the Mooncake trace.
const BlockTokens = 512

// Request is one request of a workload.
type Request struct {
	// Arrival is the send time as an offset from the start of the run.
	Arrival time.Duration
	// PromptTokens is the exact prompt length in tokens.
	PromptTokens int
	// OutputTokens is the number of tokens to generate (max_tokens with
	// ignore_eos).
	OutputTokens int
	// HashIDs names the prompt's BlockTokens-sized blocks in order; equal ids
	// mean equal blocks. Nil means the prompt shares nothing. Treat it as
	// read-only: helpers share it between copies of a request.
	HashIDs []int
	// Session names the conversation the request belongs to, so a
	// session-affinity policy can keep a conversation on one worker; 0 means
	// none. Only MultiTurn sets it; sluice-bench load sends it as the OpenAI
	// "user" field.
	Session uint64
}

// Scale returns a copy of reqs with every arrival divided by factor, so a
// factor of 2 replays the same requests twice as fast. It panics if factor
// is not a positive finite number; callers validate user input first.
func Scale(reqs []Request, factor float64) []Request {
	if !(factor > 0) || factor > 1e18 {
		panic(fmt.Sprintf("workload: Scale factor %v is not positive and finite", factor))
	}
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Arrival = time.Duration(float64(r.Arrival) / factor)
		out[i] = r
	}
	return out
}

// Limit returns a copy of at most the first n requests. n <= 0 means no
// limit.
func Limit(reqs []Request, n int) []Request {
	if n <= 0 || n > len(reqs) {
		n = len(reqs)
	}
	out := make([]Request, n)
	copy(out, reqs[:n])
	return out
}

// Until returns a copy of the requests that arrive before d. d <= 0 means no
// cut.
func Until(reqs []Request, d time.Duration) []Request {
	out := make([]Request, 0, len(reqs))
	for _, r := range reqs {
		if d > 0 && r.Arrival >= d {
			continue
		}
		out = append(out, r)
	}
	return out
}

// DropLonger returns a copy of the requests whose prompt plus output fits in
// maxTokens, and how many were dropped. maxTokens <= 0 keeps everything. Use
// it to fit a trace to a model's context and report what was cut.
func DropLonger(reqs []Request, maxTokens int) (kept []Request, dropped int) {
	kept = make([]Request, 0, len(reqs))
	for _, r := range reqs {
		if maxTokens > 0 && r.PromptTokens+r.OutputTokens > maxTokens {
			dropped++
			continue
		}
		kept = append(kept, r)
	}
	return kept, dropped
}

// Summary describes a workload in the terms the trace README uses.
type Summary struct {
	Requests     int
	Duration     time.Duration // last arrival minus first
	PromptTotal  int64
	OutputTotal  int64
	PromptMean   float64
	OutputMean   float64
	RatePerSec   float64 // Requests / Duration; 0 if Duration is 0
	HashBlocks   int     // total hash id references
	PromptMaxLen int
}

// Summarize computes a Summary of reqs.
func Summarize(reqs []Request) Summary {
	var s Summary
	s.Requests = len(reqs)
	if len(reqs) == 0 {
		return s
	}
	for _, r := range reqs {
		s.PromptTotal += int64(r.PromptTokens)
		s.OutputTotal += int64(r.OutputTokens)
		s.HashBlocks += len(r.HashIDs)
		s.PromptMaxLen = max(s.PromptMaxLen, r.PromptTokens)
	}
	s.Duration = reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	s.PromptMean = float64(s.PromptTotal) / float64(len(reqs))
	s.OutputMean = float64(s.OutputTotal) / float64(len(reqs))
	if s.Duration > 0 {
		s.RatePerSec = float64(len(reqs)) / s.Duration.Seconds()
	}
	return s
}

// Retime gives reqs, in place and in order, Poisson arrivals at rate per
// second drawn from src, the first at 0, and returns reqs: the same
// requests offered at another rate with the trace's own burstiness
// replaced by Poisson's.
func Retime(reqs []Request, rate float64, src rand.Source) []Request {
	rng := rand.New(src)
	var at time.Duration
	for i := range reqs {
		reqs[i].Arrival = at
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
	}
	return reqs
}
