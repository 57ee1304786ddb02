package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
)

// batchFlags are simulate's flags for a Batch API batch run beside the
// workload (--batch).
type batchFlags struct {
	file        string
	concurrency int
	class       string
	start       time.Duration
}

func (b *batchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.file, "batch", "", "with --admission, also run this Batch API input `file` (JSONL lines {custom_id, method, url, body}) as the router's batch runner sends it, beside the workload; each policy row then reports the workload alone and with the batch, and the batch's completion, duration and throughput against the fleet's spare throughput")
	fs.IntVar(&b.concurrency, "batch-concurrency", fleet.DefaultBatchConcurrency, "with --batch, lines sent at once (the router's batch.concurrency)")
	fs.StringVar(&b.class, "batch-class", "flex", "with --batch, the lines' service class: flex (the Batch API's) or default (the same lines as ordinary traffic, for contrast)")
	fs.DurationVar(&b.start, "batch-start", 0, "with --batch, when the batch is created, after the workload's first arrival")
}

func (b *batchFlags) validate(f *simFlags) error {
	if b.file == "" {
		return nil
	}
	var errs []error
	if !f.admit {
		errs = append(errs, errors.New("--batch needs --admission (batch lines run through the admission queue)"))
	}
	if f.saturation {
		errs = append(errs, errors.New("--batch cannot be given with --saturation"))
	}
	if f.oracle {
		errs = append(errs, errors.New("--batch cannot be given with --oracle: the reference has no batch runner"))
	}
	if b.concurrency < 1 {
		errs = append(errs, errors.New("--batch-concurrency must be at least 1"))
	}
	if _, err := b.batchClass(); err != nil {
		errs = append(errs, err)
	}
	if b.start < 0 {
		errs = append(errs, errors.New("--batch-start must not be negative"))
	}
	return errors.Join(errs...)
}

func (b *batchFlags) batchClass() (admission.Class, error) {
	switch b.class {
	case "flex":
		return admission.Flex, nil
	case "default":
		return admission.Default, nil
	}
	return 0, fmt.Errorf("--batch-class %q: want flex or default", b.class)
}

// maxBatchLine bounds one input line, as the router's batch.max_file_bytes
// bounds a file.
const maxBatchLine = 64 << 20

// readBatchFile reads a Batch API input file into the requests a worker
// (seed 0, as gpuworker starts by default) would run for its lines, in line
// order. Embedding lines occupy no engine step and are counted in skipped.
// Batch lines carry no prefix-cache identity (HashIDs), so the simulation
// does not share cached prefixes between them.
func readBatchFile(path string) (reqs []workload.Request, skipped int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	for no := 1; ; no++ {
		line, err := br.ReadBytes('\n')
		if len(line) > maxBatchLine {
			return nil, 0, fmt.Errorf("%s: line %d is longer than %d bytes", path, no, maxBatchLine)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var in struct {
				URL  string          `json:"url"`
				Body json.RawMessage `json:"body"`
			}
			if jerr := json.Unmarshal(line, &in); jerr != nil {
				return nil, 0, fmt.Errorf("%s: line %d: %v", path, no, jerr)
			}
			gens, gerr := gpuworker.Generations(in.URL, in.Body, 0)
			switch {
			case gerr != nil:
				return nil, 0, fmt.Errorf("%s: line %d: %v", path, no, gerr)
			case len(gens) == 0:
				skipped++
			case len(gens) > 1:
				return nil, 0, fmt.Errorf("%s: line %d: a completion with %d prompts is not simulated; give one prompt per line", path, no, len(gens))
			default:
				reqs = append(reqs, workload.Request{PromptTokens: gens[0].PromptTokens, OutputTokens: gens[0].OutputTokens})
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	if len(reqs) == 0 {
		return nil, 0, fmt.Errorf("%s: no chat or completion lines to simulate", path)
	}
	return reqs, skipped, nil
}

// batchReport is a row's "batch" key: the batch beside the workload, and
// the two runs it is measured against, the workload alone and the batch
// alone.
type batchReport struct {
	Class       string `json:"class"`
	Concurrency int    `json:"concurrency"`
	Lines       int    `json:"lines"`
	Completed   int    `json:"completed"`
	Failed      int    `json:"failed"`
	// Resent counts lines admission shed and the runner sent again.
	Resent    int     `json:"resent"`
	StartS    float64 `json:"start_s"`
	DurationS float64 `json:"duration_s"`
	// RequestThroughput is lines per second and OutputThroughput output
	// tokens per second, over the batch's duration.
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	// AloneRequestThroughput is the batch's lines per second when it runs
	// alone, every line sent at once: the fleet's throughput for them.
	AloneRequestThroughput float64 `json:"alone_request_throughput"`
	AloneDurationS         float64 `json:"alone_duration_s"`
	// InteractiveLoad is the workload's arrivals during the batch, per
	// second, over its capacity estimate; SpareThroughput is the fleet's
	// throughput for the batch's lines times what that leaves
	// (1 - InteractiveLoad, at least 0); VsSpare is RequestThroughput over
	// SpareThroughput.
	InteractiveLoad float64 `json:"interactive_load"`
	SpareThroughput float64 `json:"spare_request_throughput"`
	VsSpare         float64 `json:"vs_spare"`
	// While the workload ran (from the batch's start to the workload's
	// last arrival), the same figures: a batch that outlasts the workload
	// runs its rest alone, which the whole-batch figures include.
	WhileWorkload *batchWindow `json:"while_workload,omitempty"`
	// WithoutBatch is the workload's report without the batch; the ratios
	// are with over without.
	WithoutBatch  batchBaseline `json:"without_batch"`
	TTFTP50Ratio  float64       `json:"ttft_p50_vs_without"`
	TTFTP99Ratio  float64       `json:"ttft_p99_vs_without"`
	GoodputRatio  float64       `json:"goodput_vs_without"`
	TPOTP99Ratio  float64       `json:"tpot_p99_vs_without"`
	SkippedEmbeds int           `json:"skipped_embedding_lines,omitempty"`
}

// batchWindow is what the batch did over a stretch of the workload.
type batchWindow struct {
	DurationS         float64 `json:"duration_s"`
	Completed         int     `json:"completed"`
	RequestThroughput float64 `json:"request_throughput"`
	InteractiveLoad   float64 `json:"interactive_load"`
	SpareThroughput   float64 `json:"spare_request_throughput"`
	VsSpare           float64 `json:"vs_spare"`
}

// batchBaseline is the workload's figures without the batch.
type batchBaseline struct {
	TTFTP50 float64 `json:"ttft_p50_ms"`
	TTFTP99 float64 `json:"ttft_p99_ms"`
	TPOTP99 float64 `json:"tpot_p99_ms"`
	Goodput float64 `json:"goodput"`
}

// summarizeBatch measures the batch run res against the workload alone
// (without) and the batch alone (alone). reqs are the workload's requests
// and capacity their capacity estimate in requests per second.
func summarizeBatch(b *batchFlags, lines []workload.Request, res, alone *fleet.Result, with, without simResult, reqs []workload.Request, capacity float64) *batchReport {
	br := res.Batch
	r := &batchReport{Class: b.class, Concurrency: b.concurrency, Lines: len(lines), Resent: br.Resent,
		StartS: br.Start.Seconds(), DurationS: br.Duration().Seconds()}
	var out int64
	for _, o := range br.Requests {
		if o.OK {
			r.Completed++
			out += int64(o.OutputTokens)
		} else {
			r.Failed++
		}
	}
	if d := br.Duration().Seconds(); d > 0 {
		r.RequestThroughput = float64(r.Completed) / d
		r.OutputThroughput = float64(out) / d
	}
	if d := alone.Batch.Duration().Seconds(); d > 0 {
		r.AloneDurationS = d
		n := 0
		for _, o := range alone.Batch.Requests {
			if o.OK {
				n++
			}
		}
		r.AloneRequestThroughput = float64(n) / d
	}
	arrived := 0
	for _, q := range reqs {
		if q.Arrival >= br.Start && q.Arrival < br.End {
			arrived++
		}
	}
	if d := br.Duration().Seconds(); d > 0 && capacity > 0 && !math.IsInf(capacity, 0) {
		r.InteractiveLoad = float64(arrived) / d / capacity
	}
	r.SpareThroughput = r.AloneRequestThroughput * max(0, 1-r.InteractiveLoad)
	r.VsSpare = ratio(r.RequestThroughput, r.SpareThroughput)
	if n := len(reqs); n > 0 && reqs[n-1].Arrival > br.Start {
		end := reqs[n-1].Arrival
		win := &batchWindow{DurationS: (end - br.Start).Seconds()}
		for i, o := range br.Requests {
			if o.OK && res.Batch.Ended[i] <= end {
				win.Completed++
			}
		}
		arrived := 0
		for _, q := range reqs {
			if q.Arrival >= br.Start {
				arrived++
			}
		}
		win.RequestThroughput = float64(win.Completed) / win.DurationS
		if capacity > 0 && !math.IsInf(capacity, 0) {
			win.InteractiveLoad = float64(arrived) / win.DurationS / capacity
		}
		win.SpareThroughput = r.AloneRequestThroughput * max(0, 1-win.InteractiveLoad)
		win.VsSpare = ratio(win.RequestThroughput, win.SpareThroughput)
		r.WhileWorkload = win
	}
	r.WithoutBatch = batchBaseline{TTFTP50: without.TTFT.P50, TTFTP99: without.TTFT.P99, TPOTP99: without.TPOT.P99, Goodput: without.Goodput}
	r.TTFTP50Ratio = ratio(with.TTFT.P50, without.TTFT.P50)
	r.TTFTP99Ratio = ratio(with.TTFT.P99, without.TTFT.P99)
	r.TPOTP99Ratio = ratio(with.TPOT.P99, without.TPOT.P99)
	r.GoodputRatio = ratio(with.Goodput, without.Goodput)
	return r
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// writeBatchTable prints one line per policy row of what the batch did and
// cost the workload.
func writeBatchTable(w io.Writer, rows []simResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nbatch beside the workload\tclass\tlines done\tfailed\tduration s\tlines/s\tout tok/s\tvs spare\tinteractive load\tvs spare while workload\tTTFT p50 x\tTTFT p99 x\tTPOT p99 x\tgoodput x\t")
	for _, r := range rows {
		b := r.Batch
		if b == nil {
			continue
		}
		while := "-"
		if b.WhileWorkload != nil {
			while = fmt.Sprintf("%.2f", b.WhileWorkload.VsSpare)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.2f\t%.0f\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Policy, b.Class, b.Completed, b.Failed,
			b.DurationS, b.RequestThroughput, b.OutputThroughput, b.VsSpare, b.InteractiveLoad, while, b.TTFTP50Ratio, b.TTFTP99Ratio, b.TPOTP99Ratio, b.GoodputRatio)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write batch table: %w", err)
	}
	_, err := fmt.Fprintln(w, "x: the workload with the batch over without it. vs spare: the batch's lines/s over the fleet's lines/s for the batch alone times (1 - the workload's arrivals during the batch over its capacity estimate); \"while workload\" counts only until the workload's last arrival.")
	return err
}

// batchRuns runs the two reference runs of a batch row: the workload
// without the batch (opts as given) and the batch alone with every line
// sent at once and no wait limit, the fleet's throughput for it.
// Each run gets its own pickers (newPickers), as the policy's state is its
// run's.
func batchRuns(opts fleet.Options, newPickers func() ([]policies.Picker, error), reqs []workload.Request, samples []report.Sample, spec fleet.Spec, f *simFlags, label string) (without simResult, alone *fleet.Result, err error) {
	batch := opts.Batch
	opts.Batch = nil
	if opts.Pickers, err = newPickers(); err != nil {
		return simResult{}, nil, err
	}
	res, err := fleet.Run(opts, reqs)
	if err != nil {
		return simResult{}, nil, err
	}
	without = summarizeSim(label, spec, res, samples, f.goodTTFT, f.goodTPOT)
	a := *opts.Admission
	if a.Budget == nil { // the workload's budgets, not the batch's
		a.Budget = fleet.DefaultBudgets(spec, reqs)
	}
	a.MaxWait[admission.Flex] = -1
	a.BatchPrefill = -1 // the fleet's whole throughput, not what the bound leaves
	aloneOpts := opts
	aloneOpts.Admission = &a
	aloneOpts.Classes, aloneOpts.TenantOf = nil, nil
	if aloneOpts.Pickers, err = newPickers(); err != nil {
		return simResult{}, nil, err
	}
	b := *batch
	b.Concurrency = len(b.Requests)
	b.Start = 0
	aloneOpts.Batch = &b
	alone, err = fleet.Run(aloneOpts, nil)
	return without, alone, err
}
