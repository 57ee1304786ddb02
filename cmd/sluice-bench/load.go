package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/loadgen"
	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// Defaults of the synthetic workload.
const (
	defaultDuration   = 60 * time.Second
	defaultPromptMean = 512
	defaultOutputMean = 128
)

// loadFlags holds the parsed flags of "sluice-bench load".
type loadFlags struct {
	shapeFlags
	classFlags
	apiKeys            string
	target, model      string
	apiKey             string
	rate               float64
	duration           time.Duration
	concurrency        int
	stream             bool
	jsonOut            string
	outcomes           string
	trace, traceFormat string
	requests           int
	seed               uint64
	maxContext         int
	timeout            time.Duration
	quiet              bool
	timeScale          float64
	fleet              string
	load               float64

	spec fleet.Spec // parsed --fleet, set by validate
}

func newLoadFlagSet(f *loadFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice-bench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench load --target URL --model M --rate R [--duration D] [flags]
       sluice-bench load --target URL --model M --trace FILE [--rate R] [flags]
       sluice-bench load --target URL --model M --fleet SPEC --load L [--trace FILE] [flags]

Sends POST {target}/v1/completions requests open-loop (each at its arrival
time, whether or not earlier ones finished), with a prompt of token ids,
max_tokens and ignore_eos, and prints vLLM benchmark_serving metrics.
Without --trace the workload is synthetic, at a mean of --rate requests/s,
of the --workload kind: poisson (the default: log-normal prompt and output
lengths, nothing shared), shared-prefix, multi-turn or long-doc. Prompts
that share prefix blocks share their leading token ids, so the engines'
prefix caches see the reuse; multi-turn requests send their conversation
as the OpenAI "user" field (conv-<id>). Interrupt (Ctrl-C) stops the run and
reports what completed.

With --fleet and --load the arrival rate comes from the fleet instead of
--rate: the fleet's capacity for the workload's mean prompt and output is
estimated as "simulate" does, and the synthetic workload is generated (a
trace rescaled) so the offered load is L times that capacity, in simulated
time when --time-scale is set. Think times of a multi-turn workload do not
change with the rate.

--mix sends each request with a service_tier drawn in the given shares, and
--tenants with --api-keys each tenant's requests with its key; the report is
then split by class (with the requests shed for saturation: 503, or 429
resource_unavailable) and by tenant.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.target, "target", "", "base `URL` of the endpoint, e.g. http://127.0.0.1:8000 (required); several, comma-separated, share the requests in turn (router replicas)")
	fs.StringVar(&f.model, "model", "", "model `name` to request (required)")
	fs.Float64Var(&f.rate, "rate", 0, "mean arrival rate in requests/s; required without --trace; with --trace, rescales arrivals to this mean rate (0 keeps the trace's timing)")
	fs.DurationVar(&f.duration, "duration", 0, "send arrivals for this long; 0 means 60s for synthetic load and the whole trace with --trace")
	fs.IntVar(&f.concurrency, "concurrency", 0, "maximum requests in flight; a due request waits for a slot (0 = unlimited)")
	fs.BoolVar(&f.stream, "stream", false, "stream responses (SSE with usage), which measures TTFT and ITL; without it TTFT equals E2E latency")
	fs.StringVar(&f.jsonOut, "json", "", "also write the report as JSON to `file`")
	fs.StringVar(&f.outcomes, "outcomes", "", "also write one CSV line per request sent to `file`: its arrival, class, tenant, tokens, whether it completed (and why not), TTFT and end-to-end time")
	fs.StringVar(&f.trace, "trace", "", "replay this trace `file` instead of synthetic load")
	fs.StringVar(&f.traceFormat, "trace-format", "", "trace format: azure (CSV) or mooncake (JSONL); default from the file extension (.csv, .jsonl)")
	fs.IntVar(&f.requests, "requests", 0, "send at most this many requests (0 = no limit)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for synthetic arrivals, lengths and prompt token ids; change it between runs against a warm server, or prompts repeat and hit its prefix cache")
	fs.IntVar(&f.maxContext, "max-context", 0, "drop requests whose prompt plus output exceeds this many tokens, and say how many (0 = keep all)")
	fs.DurationVar(&f.timeout, "request-timeout", 10*time.Minute, "fail a request that takes longer than this (0 = no limit)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress line on stderr")
	fs.StringVar(&f.apiKey, "api-key", os.Getenv("OPENAI_API_KEY"), "API `key` sent as a bearer token, e.g. a Sluice tenant's (default $OPENAI_API_KEY)")
	fs.StringVar(&f.fleet, "fleet", "", "fleet `spec` behind the target, e.g. 4xh100-llama3-8b; with --load, sets the rate from its estimated capacity")
	fs.Float64Var(&f.load, "load", 0, "offered load as a multiple of the --fleet capacity estimate, instead of --rate")
	fs.Float64Var(&f.timeScale, "time-scale", 1, "compress arrivals this many times and report latencies and throughputs rescaled to simulated time; use against gpuworkers run with --speedup of the same value")
	fs.StringVar(&f.apiKeys, "api-keys", "", "with --tenants, each tenant's API `keys`, e.g. heavy=sk-1,light=sk-2: its requests are sent with its key (a tenant not named uses --api-key)")
	f.shapeFlags.register(fs)
	f.classFlags.register(fs)
	return fs
}

// loadCmd runs "sluice-bench load".
func loadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f loadFlags
	fs := newLoadFlagSet(&f, stderr)
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "sluice-bench load: %v\n", err)
		return exitUsage
	}

	reqs, err := f.workload(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench load: %v\n", err)
		return exitError
	}
	opts := loadgen.Options{
		Target:         f.target,
		Model:          f.model,
		Stream:         f.stream,
		Concurrency:    f.concurrency,
		Prompter:       workload.NewPrompter(workload.PromptOptions{Seed: f.seed}),
		RequestTimeout: f.timeout,
		APIKey:         f.apiKey,
	}
	reqs, classes, tenantOf := f.draws(reqs, f.seed)
	describeShares(stderr, reqs, classes, tenantOf)
	if classes != nil {
		opts.ServiceTiers = make([]string, len(classes))
		for i, c := range classes {
			opts.ServiceTiers[i] = c.String()
		}
	}
	if keys, _ := f.tenantKeys(); keys != nil {
		opts.APIKeys = make([]string, len(tenantOf))
		for i, t := range tenantOf {
			opts.APIKeys[i] = keys[t]
		}
	}
	if !f.quiet {
		opts.Progress = stderr
	}
	runner, err := loadgen.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench load: %v\n", err)
		return exitUsage
	}

	res := runner.Run(ctx, compressArrivals(reqs, f.timeScale))
	res = rescaleResult(res, f.timeScale)
	if res.Interrupted {
		fmt.Fprintf(stderr, "sluice-bench load: interrupted; reporting the %d requests sent\n", len(res.Samples))
	}
	rep := loadReport{Report: res.Report(), Goodput: report.Goodput(res.Samples, res.Elapsed, f.goodTTFT, f.goodTPOT)}
	rep.split(res, classes, tenantOf, f.tenantNames(), f.goodTTFT, f.goodTPOT)
	code := exitOK
	if err := rep.write(stdout, f.goodTTFT, f.goodTPOT, classes, f.tenantNames()); err != nil {
		fmt.Fprintf(stderr, "sluice-bench load: %v\n", err)
		code = exitError
	}
	if f.jsonOut != "" {
		if err := writeJSONFile(f.jsonOut, rep.writeJSON); err != nil {
			fmt.Fprintf(stderr, "sluice-bench load: %v\n", err)
			code = exitError
		}
	}
	if f.outcomes != "" {
		if err := writeLoadOutcomes(f.outcomes, reqs, classes, tenantOf, res.Samples); err != nil {
			fmt.Fprintf(stderr, "sluice-bench load: %v\n", err)
			code = exitError
		}
	}
	if code == exitOK && res.Interrupted {
		code = exitInterrupted
	}
	if code == exitOK && rep.Completed == 0 && rep.Failed > 0 {
		// Nothing measured (a wrong key: every request a 401): a script
		// must not take the report for a result.
		fmt.Fprintf(stderr, "sluice-bench load: all %d requests failed\n", rep.Failed)
		code = exitError
	}
	return code
}

// loadReport is the load report plus goodput, which needs the SLO flags,
// and its split by class (--mix) and tenant (--tenants).
type loadReport struct {
	report.Report
	Goodput float64 `json:"goodput"`
	// Classes splits the report by service class and Shed counts, per
	// class, the requests the router refused for fleet saturation (status
	// 503, or 429 resource_unavailable, flex's answer); Tenants splits it
	// by tenant.
	Classes map[string]classReport `json:"classes,omitempty"`
	Shed    map[string]int         `json:"shed,omitempty"`
	Tenants map[string]classReport `json:"tenants,omitempty"`
}

// split fills the report's split by class and tenant from the samples,
// which follow the workload's order as classes and tenantOf do.
func (r *loadReport) split(res loadgen.Result, classes []admission.Class, tenantOf, tenants []string, ttft, tpot time.Duration) {
	if classes != nil {
		order := classNames(classes)
		r.Classes = splitReports(res.Samples, order, func(i int) string { return classes[i].String() }, res.Elapsed, ttft, tpot)
		r.Shed = make(map[string]int, len(order))
		for _, k := range order {
			r.Shed[k] = 0
		}
		for i, s := range res.Samples {
			if shedSample(s) {
				r.Shed[classes[i].String()]++
			}
		}
	}
	if tenantOf != nil {
		r.Tenants = splitReports(res.Samples, tenants, func(i int) string { return tenantOf[i] }, res.Elapsed, ttft, tpot)
	}
}

// shedSample reports whether a request failed because the router shed it
// for fleet saturation: 503, or 429 with code resource_unavailable (a
// tenant's own limits answer 429 rate_limit_exceeded).
func shedSample(s report.Sample) bool {
	return strings.HasPrefix(s.Err, "status 503") ||
		strings.HasPrefix(s.Err, "status 429") && strings.Contains(s.Err, "resource_unavailable")
}

// write prints the report table, the goodput line, then the split tables.
func (r loadReport) write(w io.Writer, ttft, tpot time.Duration, classes []admission.Class, tenants []string) error {
	if err := r.WriteTable(w); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "Goodput (req/s, TTFT<=%v and TPOT<=%v): %.2f\n", ttft, tpot, r.Goodput); err != nil {
		return fmt.Errorf("write load report: %w", err)
	}
	if r.Classes != nil {
		if err := writeSplit(w, "class", classNames(classes), r.Classes, r.Shed); err != nil {
			return err
		}
	}
	if r.Tenants != nil {
		if err := writeSplit(w, "tenant", tenants, r.Tenants, nil); err != nil {
			return err
		}
	}
	return nil
}

func (r loadReport) writeJSON(w io.Writer) error { return writeIndented(w, r, "load") }

// writeIndented writes v as indented JSON; what names it in an error.
func writeIndented(w io.Writer, v any, what string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write %s json: %w", what, err)
	}
	return nil
}

// validate reports every bad flag combination at once.
func (f *loadFlags) validate() error {
	var errs []error
	if f.target == "" {
		errs = append(errs, errors.New("--target is required"))
	} else if err := loadgen.CheckTarget(f.target); err != nil {
		errs = append(errs, fmt.Errorf("--target: %w", err))
	}
	if f.model == "" {
		errs = append(errs, errors.New("--model is required"))
	}
	byLoad := f.fleet != "" || f.load != 0
	switch {
	case !byLoad:
		if f.trace == "" && !(f.rate > 0) {
			errs = append(errs, errors.New("--rate must be positive for synthetic load (or give --trace, or --fleet and --load)"))
		}
	case f.fleet == "" || f.load == 0:
		errs = append(errs, errors.New("--fleet and --load must be given together"))
	case f.rate != 0:
		errs = append(errs, errors.New("--rate and --load are exclusive: --load sets the rate"))
	}
	if f.load < 0 || math.IsNaN(f.load) || math.IsInf(f.load, 0) {
		errs = append(errs, errors.New("--load must be a positive number"))
	}
	if f.fleet != "" {
		spec, err := fleet.ParseSpec(f.fleet)
		if err != nil {
			errs = append(errs, fmt.Errorf("--fleet: %w", err))
		}
		f.spec = spec
	}
	if f.rate < 0 {
		errs = append(errs, errors.New("--rate must not be negative"))
	}
	if f.duration < 0 {
		errs = append(errs, errors.New("--duration must not be negative"))
	}
	if f.concurrency < 0 || f.requests < 0 || f.maxContext < 0 {
		errs = append(errs, errors.New("--concurrency, --requests and --max-context must not be negative"))
	}
	if f.trace == "" && f.traceFormat != "" {
		errs = append(errs, errors.New("--trace-format needs --trace"))
	}
	if !(f.timeScale > 0) || math.IsInf(f.timeScale, 0) {
		errs = append(errs, errors.New("--time-scale must be a positive number"))
	}
	if err := f.shapeFlags.validate(f.trace == ""); err != nil {
		errs = append(errs, err)
	}
	if err := f.classFlags.validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := f.tenantKeys(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// tenantKeys parses --api-keys: NAME=KEY,... naming tenants of --tenants.
func (f *loadFlags) tenantKeys() (map[string]string, error) {
	if f.apiKeys == "" {
		return nil, nil
	}
	if f.tenants == "" {
		return nil, errors.New("--api-keys needs --tenants")
	}
	known := map[string]bool{}
	for _, n := range f.tenantNames() {
		known[n] = true
	}
	keys := map[string]string{}
	for item := range strings.SplitSeq(f.apiKeys, ",") {
		name, key, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, key = strings.TrimSpace(name), strings.TrimSpace(key)
		switch {
		case !ok || name == "" || key == "":
			return nil, fmt.Errorf("--api-keys: %q: want TENANT=KEY", item)
		case f.tenantShares != nil && !known[name]:
			return nil, fmt.Errorf("--api-keys: %q is not a tenant of --tenants", name)
		}
		keys[name] = key
	}
	return keys, nil
}

// workload builds the requests to send and describes them on stderr.
func (f *loadFlags) workload(stderr io.Writer) ([]workload.Request, error) {
	var (
		reqs []workload.Request
		err  error
	)
	if f.trace == "" {
		d := f.duration
		if d == 0 {
			d = defaultDuration
		}
		rate := f.rate
		if f.load > 0 {
			// Estimate the capacity on a sample generated near the rate
			// of interest (shapeFlags.capacity), then generate the real
			// arrivals at load times capacity.
			capacity, err := f.capacity(f.spec, capacitySample, f.seed, f.maxContext)
			if err != nil {
				return nil, err
			}
			if rate, err = f.loadRateFor(capacity, stderr); err != nil {
				return nil, err
			}
		}
		if reqs, err = f.generate(rate, d, f.requests, f.seed); err != nil {
			return nil, err
		}
		var dropped int
		reqs, dropped = workload.DropLonger(reqs, f.maxContext)
		if dropped > 0 {
			fmt.Fprintf(stderr, "sluice-bench load: dropped %d requests longer than %d tokens\n", dropped, f.maxContext)
		}
	} else {
		if reqs, err = readTrace(f.trace, f.traceFormat); err != nil {
			return nil, err
		}
		var dropped int
		reqs, dropped = workload.DropLonger(reqs, f.maxContext)
		if dropped > 0 {
			fmt.Fprintf(stderr, "sluice-bench load: dropped %d requests longer than %d tokens\n", dropped, f.maxContext)
		}
		// Cut to --requests first, so --rate and --load describe what is
		// sent (as simulate does), not the whole trace.
		reqs = workload.Limit(reqs, f.requests)
		rate := f.rate
		if f.load > 0 {
			if rate, err = f.offeredRate(reqs, stderr); err != nil {
				return nil, err
			}
		}
		if rate > 0 {
			if s := workload.Summarize(reqs); s.RatePerSec > 0 {
				reqs = workload.Scale(reqs, rate/s.RatePerSec)
			}
		}
		reqs = workload.Until(reqs, f.duration)
	}
	if len(reqs) == 0 {
		return nil, errors.New("the workload has no requests")
	}
	s := workload.Summarize(reqs)
	fmt.Fprintf(stderr, "sluice-bench load: %d requests over %.1fs (%.2f req/s), mean prompt %.1f, mean output %.1f tokens%s\n",
		s.Requests, s.Duration.Seconds(), s.RatePerSec, s.PromptMean, s.OutputMean, workloadNotes(reqs))
	return reqs, nil
}

// capacitySample is the number of synthetic requests whose lengths
// estimate the fleet's capacity for --load.
const capacitySample = 10_000

// offeredRate estimates the --fleet capacity for requests shaped like reqs,
// prints it, and returns --load times it: the arrival rate in req/s of
// simulated time (with --time-scale, arrivals are then compressed by the
// scale in wall-clock time, like the workers' --speedup).
func (f *loadFlags) offeredRate(reqs []workload.Request, stderr io.Writer) (float64, error) {
	return f.loadRateFor(fleet.EstimateCapacity(f.spec, reqs), stderr)
}

// loadRateFor prints the capacity and returns --load times it.
func (f *loadFlags) loadRateFor(capacity float64, stderr io.Writer) (float64, error) {
	rate, err := loadRate(capacity, f.load)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stderr, "sluice-bench load: fleet %s: estimated capacity %.2f req/s for this workload; --load %g offers %.2f req/s",
		f.spec, capacity, f.load, rate)
	if f.timeScale != 1 {
		fmt.Fprintf(stderr, " of simulated time (%.2f req/s wall-clock at --time-scale %g)", rate*f.timeScale, f.timeScale)
	}
	fmt.Fprintln(stderr)
	return rate, nil
}

// loadRate returns the arrival rate that offers load times capacity. The
// capacity must be positive and finite: a fleet of zero-cost (instant)
// workers has no capacity to take a fraction of.
func loadRate(capacity, load float64) (float64, error) {
	if !(capacity > 0) || math.IsInf(capacity, 0) {
		return 0, fmt.Errorf("--load needs a positive, finite capacity estimate, got %v (instant profiles have no finite capacity)", capacity)
	}
	if !(load > 0) || math.IsInf(load, 0) {
		return 0, fmt.Errorf("--load must be a positive number, got %v", load)
	}
	return load * capacity, nil
}

// readTrace reads a trace file in format, or in the format its extension
// names.
func readTrace(path, format string) ([]workload.Request, error) {
	// Open the file first: a file that is not there is the error to report,
	// not that its name has no extension to tell its format.
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read trace: %w", err)
	}
	defer file.Close()
	if format == "" {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".csv":
			format = "azure"
		case ".jsonl":
			format = "mooncake"
		default:
			return nil, fmt.Errorf("trace %s: cannot tell the format from the extension; set --trace-format azure or mooncake", path)
		}
	}
	var read func(io.Reader) ([]workload.Request, error)
	switch format {
	case "azure":
		read = workload.ReadAzureCSV
	case "mooncake":
		read = workload.ReadMooncake
	default:
		return nil, fmt.Errorf("--trace-format %q: want azure or mooncake", format)
	}
	reqs, err := read(file)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return reqs, nil
}

// writeJSONFile writes a file through write, reporting close errors too.
func writeJSONFile(path string, write func(io.Writer) error) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create json report: %w", err)
	}
	if err := write(file); err != nil {
		file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("close json report: %w", err)
	}
	return nil
}
