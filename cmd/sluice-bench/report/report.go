package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// maxErrorKinds bounds the distinct error messages a Report keeps; the rest
// are counted under otherErrors.
const (
	maxErrorKinds = 10
	otherErrors   = "(other errors)"
)

// Report is the result of one benchmark run. Its JSON keys completed,
// failed, request_throughput, output_throughput, ttft_ms, tpot_ms, itl_ms
// and e2el_ms are a stable interface for scripts; the others are extras.
type Report struct {
	Completed         int            `json:"completed"`
	Failed            int            `json:"failed"`
	Cancelled         int            `json:"cancelled"`
	DurationS         float64        `json:"duration_s"`
	TotalInputTokens  int64          `json:"total_input_tokens"`
	TotalOutputTokens int64          `json:"total_output_tokens"`
	RequestThroughput float64        `json:"request_throughput"`
	OutputThroughput  float64        `json:"output_throughput"`
	TotalThroughput   float64        `json:"total_token_throughput"`
	TTFT              Dist           `json:"ttft_ms"`
	TPOT              Dist           `json:"tpot_ms"`
	ITL               Dist           `json:"itl_ms"`
	E2EL              Dist           `json:"e2el_ms"`
	Errors            map[string]int `json:"errors,omitempty"`
}

// Summarize builds the report of samples measured over elapsed wall (or
// virtual) time. Only completed requests count toward tokens, throughput
// and latencies, as in vLLM.
func Summarize(samples []Sample, elapsed time.Duration) Report {
	var (
		r                    Report
		ttft, tpot, itl, e2e []time.Duration
	)
	for _, s := range samples {
		switch {
		case s.Cancelled:
			r.Cancelled++
			continue
		case !s.OK:
			r.Failed++
			r.addError(s.Err)
			continue
		}
		r.Completed++
		r.TotalInputTokens += int64(s.PromptTokens)
		r.TotalOutputTokens += int64(s.OutputTokens)
		ttft = append(ttft, s.TTFT)
		e2e = append(e2e, s.E2E)
		itl = append(itl, s.ITL...)
		if d, ok := s.TPOT(); ok {
			tpot = append(tpot, d)
		}
	}
	r.DurationS = elapsed.Seconds()
	if r.DurationS > 0 {
		r.RequestThroughput = float64(r.Completed) / r.DurationS
		r.OutputThroughput = float64(r.TotalOutputTokens) / r.DurationS
		r.TotalThroughput = float64(r.TotalInputTokens+r.TotalOutputTokens) / r.DurationS
	}
	r.TTFT, r.TPOT, r.ITL, r.E2EL = NewDist(ttft), NewDist(tpot), NewDist(itl), NewDist(e2e)
	return r
}

func (r *Report) addError(msg string) {
	if msg == "" {
		msg = "unknown error"
	}
	if r.Errors == nil {
		r.Errors = map[string]int{}
	}
	if _, ok := r.Errors[msg]; !ok && len(r.Errors) >= maxErrorKinds {
		msg = otherErrors
	}
	r.Errors[msg]++
}

// WriteJSON writes r as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report json: %w", err)
	}
	return nil
}

// WriteTable writes r as the human-readable table, in the layout of vLLM's
// benchmark_serving with a p90 row added.
func (r Report) WriteTable(w io.Writer) error {
	tw := &tableWriter{w: w}
	tw.rule("Serving Benchmark Result", '=')
	tw.int("Successful requests:", int64(r.Completed))
	tw.int("Failed requests:", int64(r.Failed))
	if r.Cancelled > 0 {
		tw.int("Cancelled requests:", int64(r.Cancelled))
	}
	tw.float("Benchmark duration (s):", r.DurationS)
	tw.int("Total input tokens:", r.TotalInputTokens)
	tw.int("Total generated tokens:", r.TotalOutputTokens)
	tw.float("Request throughput (req/s):", r.RequestThroughput)
	tw.float("Output token throughput (tok/s):", r.OutputThroughput)
	tw.float("Total token throughput (tok/s):", r.TotalThroughput)
	tw.dist("Time to First Token", "TTFT", r.TTFT)
	tw.dist("Time per Output Token (excl. 1st token)", "TPOT", r.TPOT)
	tw.dist("Inter-token Latency", "ITL", r.ITL)
	tw.dist("End-to-end Latency", "E2EL", r.E2EL)
	if len(r.Errors) > 0 {
		tw.rule("Errors", '-')
		type kind struct {
			msg string
			n   int
		}
		kinds := make([]kind, 0, len(r.Errors))
		for msg, n := range r.Errors {
			kinds = append(kinds, kind{msg, n})
		}
		slices.SortFunc(kinds, func(a, b kind) int {
			return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.msg, b.msg))
		})
		for _, k := range kinds {
			tw.printf("%6d  %s\n", k.n, k.msg)
		}
	}
	tw.printf("%s\n", fill('=', tableWidth))
	return tw.err
}
