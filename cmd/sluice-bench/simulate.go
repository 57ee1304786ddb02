package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/all"
)

// Simulation defaults.
const (
	defaultSimRequests = 10_000
	defaultSimLoad     = 0.8 // offered load for --synthetic without --load
	defaultPolicyAlias = "default"
	oracleName         = "oracle"
)

// simFlags holds the parsed flags of "sluice-bench simulate".
type simFlags struct {
	shapeFlags
	classFlags
	admissionFlags
	batch              batchFlags
	fleet              string
	trace, traceFormat string
	synthetic          bool
	policies           string
	oracle             bool
	load               float64
	requests, routers  int
	seed               uint64
	jsonOut            string
	outcomes           string
	maxContext         int
	perWorker          bool
	scrapeInterval     time.Duration
	table              string
	saturation         bool
	oracleAging        time.Duration
	oracleClasses      bool
	oracleFirst        string
}

func newSimFlagSet(f *simFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice-bench simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench simulate --fleet SPEC (--trace FILE | --synthetic) [--policy P[,P...]] [flags]

Simulates the fleet in virtual time, routing every request with Sluice's real
policy code, and prints the same report as "load" per policy, plus goodput,
per-group utilization and the prefix-cache hit ratio. The fleet spec is
comma-separated COUNTxPROFILE groups, e.g. 4xh100-llama3-8b,8xl4-llama3-8b
(profiles: gpuworker --list-profiles). A trace keeps its own timing unless
--load rescales it; --synthetic generates the --workload kind (default
poisson) at --load times the estimated capacity (default 0.8).

--admission runs the policy rows through admission control (late binding
from one queue ordered by service class, token-fair between tenants, then
arrival); --mix gives requests service classes and --tenants tenants, and
the report is then split by class (with the shed counts) and by tenant.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.fleet, "fleet", "", "fleet `spec`, e.g. 4xh100-llama3-8b,8xl4-llama3-8b (required)")
	fs.StringVar(&f.trace, "trace", "", "replay this trace `file` (Azure CSV or Mooncake JSONL)")
	fs.StringVar(&f.traceFormat, "trace-format", "", "trace format: azure or mooncake; default from the file extension")
	fs.BoolVar(&f.synthetic, "synthetic", false, "generate a synthetic workload of the --workload kind instead of a trace")
	fs.StringVar(&f.policies, "policy", defaultPolicyAlias, "comma-separated routing `policies` to compare; \"default\" is Sluice's default ("+configs.DefaultPolicy+"), \"all\" every registered policy; NAME:{k: v, ...} passes params (YAML flow map)")
	fs.BoolVar(&f.oracle, "oracle", false, "add a row for the reference scheduler: one central queue with perfect knowledge of every engine, late binding, no head-of-line blocking")
	fs.Float64Var(&f.load, "load", 0, "offered load as a multiple of the estimated capacity: rescales a trace's arrivals (0 keeps its timing) or sets the synthetic rate (default 0.8)")
	fs.IntVar(&f.requests, "requests", 0, "simulate at most this many requests (synthetic default 10000; 0 = the whole trace)")
	fs.IntVar(&f.routers, "routers", 1, "split arrivals round-robin across this many independent router replicas, each with its own in-flight view")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic workload and of randomized policies (each router replica gets its own)")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to `file`")
	fs.StringVar(&f.outcomes, "outcomes", "", "also write one CSV line per request and policy row to `file`: its worker, tokens, TTFT, end-to-end time, time held before binding, and the TTFT a policy row expected on its worker and on the quickest candidate when it bound the request")
	fs.IntVar(&f.maxContext, "max-context", 0, "drop requests whose prompt plus output exceeds this many tokens, and say how many (0 = keep all)")
	fs.BoolVar(&f.perWorker, "per-worker", false, "print one line per worker instead of per fleet group")
	fs.DurationVar(&f.scrapeInterval, "scrape-interval", fleet.DefaultScrapeInterval, "how often each router replica stores every worker's scraped load, in virtual time (0 = never scrape)")
	fs.StringVar(&f.table, "table", tableFull, "output: full (a report per policy, then a comparison) or compact (one comparison table with a scenario header)")
	fs.BoolVar(&f.oracleClasses, "oracle-classes", false, "the reference (--oracle) serves its queue by service class (--mix) first: priority, then default, then flex")
	fs.StringVar(&f.oracleFirst, "oracle-first", "", "the reference (--oracle) serves this `tenant`'s (--tenants) requests ahead of all others")
	fs.DurationVar(&f.oracleAging, "oracle-aging", 0, "order the reference's (--oracle) queue shortest job first with aging, by arrival + this per 1,000 prompt tokens, instead of first come, first served (0); e.g. 3s")
	fs.BoolVar(&f.saturation, "saturation", false, "instead of comparing policies, measure the fleet's saturation throughput for the workload (the reference scheduler, Poisson arrivals, bisection) and print it beside the capacity estimate")
	f.shapeFlags.register(fs)
	f.classFlags.register(fs)
	f.admissionFlags.register(fs)
	f.batch.register(fs)
	return fs
}

// validate reports every bad flag combination at once.
func (f *simFlags) validate() error {
	var errs []error
	if f.fleet == "" {
		errs = append(errs, errors.New("--fleet is required"))
	}
	if (f.trace == "") == !f.synthetic {
		errs = append(errs, errors.New("give exactly one of --trace and --synthetic"))
	}
	if f.load < 0 || math.IsInf(f.load, 0) || math.IsNaN(f.load) {
		errs = append(errs, errors.New("--load must be a non-negative number"))
	}
	if f.requests < 0 || f.maxContext < 0 {
		errs = append(errs, errors.New("--requests and --max-context must not be negative"))
	}
	if f.routers < 1 {
		errs = append(errs, errors.New("--routers must be at least 1"))
	}
	if f.oracleAging < 0 {
		errs = append(errs, errors.New("--oracle-aging must not be negative"))
	}
	if f.oracleClasses && (!f.oracle || f.mix == "") {
		errs = append(errs, errors.New("--oracle-classes needs --oracle and --mix"))
	}
	if f.oracleFirst != "" {
		if shares, err := parseShares(f.tenants); !f.oracle || err != nil ||
			!slices.ContainsFunc(shares, func(s share) bool { return s.name == f.oracleFirst }) {
			errs = append(errs, fmt.Errorf("--oracle-first %q needs --oracle and --tenants naming it", f.oracleFirst))
		}
	}
	if f.scrapeInterval < 0 {
		errs = append(errs, errors.New("--scrape-interval must not be negative"))
	}
	if f.table != tableFull && f.table != tableCompact {
		errs = append(errs, fmt.Errorf("--table must be %s or %s", tableFull, tableCompact))
	}
	if f.saturation && f.outcomes != "" {
		errs = append(errs, errors.New("--outcomes does not apply to --saturation"))
	}
	if f.trace == "" && f.traceFormat != "" {
		errs = append(errs, errors.New("--trace-format needs --trace"))
	}
	if err := f.shapeFlags.validate(f.synthetic); err != nil {
		errs = append(errs, err)
	}
	if err := f.classFlags.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := f.admissionFlags.validate(f.batch.file != ""); err != nil {
		errs = append(errs, err)
	}
	if err := f.batch.validate(f); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// simulateCmd runs "sluice-bench simulate".
func simulateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f simFlags
	fs := newSimFlagSet(&f, stderr)
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitUsage
	}
	spec, err := fleet.ParseSpec(f.fleet)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitUsage
	}
	if err := f.admissionFlags.checkTenants(f.tenantNames()); err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitUsage
	}
	if err := f.admissionFlags.checkSpec(spec); err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitUsage
	}
	reg := policies.NewRegistry()
	if err := all.Register(reg); err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitError
	}
	rows, err := f.policyRows(reg)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitUsage
	}
	for _, r := range rows {
		if r.oracle {
			continue
		}
		if _, err := reg.New(r.name, r.params); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %s: %v\n", r.label, err)
			return exitUsage
		}
	}

	reqs, capacity, err := f.workload(spec, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
		return exitError
	}
	var batch *fleet.Batch
	skipped := 0
	if f.batch.file != "" {
		lines, n, err := readBatchFile(f.batch.file)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: --batch: %v\n", err)
			return exitError
		}
		skipped = n
		class, _ := f.batch.batchClass()
		batch = &fleet.Batch{Requests: lines, Concurrency: f.batch.concurrency, Start: f.batch.start, Class: class}
		s := workload.Summarize(lines)
		fmt.Fprintf(stderr, "sluice-bench simulate: batch %s: %d lines as %s, %d at once, mean prompt %.1f, mean output %.1f tokens (%d embedding lines not simulated)\n",
			filepath.Base(f.batch.file), len(lines), f.batch.class, f.batch.concurrency, s.PromptMean, s.OutputMean, skipped)
	}

	if f.saturation {
		at := func(rate float64) ([]workload.Request, error) { return poissonRetime(reqs, rate, f.seed), nil }
		if f.synthetic {
			at = func(rate float64) ([]workload.Request, error) {
				n := max(len(reqs), satMinRequests, int(math.Ceil(rate*satMinDuration.Seconds())))
				gen, err := f.generate(rate, 0, n, f.seed)
				if err != nil {
					return nil, err
				}
				gen, _ = workload.DropLonger(gen, f.maxContext)
				return gen, nil
			}
		}
		sat, err := measureSaturation(spec, capacity, at)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: saturation: %v\n", err)
			return exitError
		}
		if err := sat.write(stdout); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
		return exitOK
	}

	reqs, classes, tenantOf := f.draws(reqs, f.seed)
	offered := workload.Summarize(reqs).RatePerSec / capacity
	out := simOutput{
		Scenario: f.scenario(spec, capacity, offered, len(reqs)), Workload: f.workloadName(),
		Fleet: spec.String(), Workers: spec.Workers(), Routers: f.routers, Seed: f.seed,
		CapacityEstimate: capacity, OfferedLoad: offered, Requests: len(reqs),
		GoodputTTFTms: ms(f.goodTTFT), GoodputTPOTms: ms(f.goodTPOT),
	}
	scrape := f.scrapeInterval
	if scrape == 0 {
		scrape = -1 // fleet.Options: negative turns scraping off
	}
	samples := make([]report.Sample, len(reqs))
	weights := fleet.CapacityWeights(spec, reqs)
	fmt.Fprintf(stderr, "sluice-bench simulate: endpoint weights (capacity-proportional, as an operator would write them):%s\n", groupWeights(spec, weights))
	describeShares(stderr, reqs, classes, tenantOf)
	adm := f.options(spec, reqs)
	if adm != nil {
		fmt.Fprintf(stderr, "sluice-bench simulate: admission (policy rows): %s\n", describeAdmission(spec, reqs, adm))
	}
	var outcomes *outcomesFile
	if f.outcomes != "" {
		if outcomes, err = createOutcomes(f.outcomes, simOutcomesHeader); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
		defer outcomes.close() // on an early return; the explicit close below reports errors
	}
	for _, pr := range rows {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "sluice-bench simulate: interrupted")
			return exitInterrupted
		}
		opts := fleet.Options{Spec: spec, Oracle: pr.oracle, ScrapeInterval: scrape, Weights: weights, OracleAging: f.oracleAging / 1000, OracleClasses: f.oracleClasses, OracleFirst: f.oracleFirst,
			Classes: classes, TenantOf: tenantOf, Estimates: outcomes != nil}
		newPickers := func() ([]policies.Picker, error) {
			var ps []policies.Picker
			for replica := range f.routers {
				p, err := newSeededPicker(reg, pr.name, pr.params, f.seed, replica)
				if err != nil {
					return nil, err
				}
				ps = append(ps, p)
			}
			return ps, nil
		}
		if !opts.Oracle {
			opts.Admission = adm
			if opts.Pickers, err = newPickers(); err != nil {
				fmt.Fprintf(stderr, "sluice-bench simulate: %s: %v\n", pr.label, err)
				return exitError
			}
			opts.Batch = batch
		}
		start := time.Now()
		res, err := fleet.Run(opts, reqs)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %s: %v\n", pr.label, err)
			return exitError
		}
		fmt.Fprintf(stderr, "sluice-bench simulate: %s: %d requests on %d workers in %.2fs wall\n",
			pr.label, len(reqs), spec.Workers(), time.Since(start).Seconds())
		if outcomes != nil {
			if err := outcomes.addSim(pr.label, spec, reqs, res); err != nil {
				fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
				return exitError
			}
		}
		row := summarizeSim(pr.label, spec, res, samples, f.goodTTFT, f.goodTPOT)
		f.split(&row, res, samples, classes, opts.Admission != nil)
		if opts.Batch != nil {
			without, alone, err := batchRuns(opts, newPickers, reqs, samples, spec, &f, pr.label)
			if err != nil {
				fmt.Fprintf(stderr, "sluice-bench simulate: %s: batch reference runs: %v\n", pr.label, err)
				return exitError
			}
			row.Batch = summarizeBatch(&f.batch, batch.Requests, res, alone, row, without, reqs, capacity)
			row.Batch.SkippedEmbeds = skipped
		}
		if f.table == tableFull {
			if err := row.write(stdout, res, f.perWorker, f.splitOrder(classes)); err != nil {
				fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
				return exitError
			}
		}
		out.Results = append(out.Results, row)
	}
	if f.table == tableCompact {
		if err := writeCompact(stdout, out.Scenario, out.Results, f.splitOrder(classes)); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
	} else if len(out.Results) > 1 {
		if err := writeComparison(stdout, out.Results); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
	}
	if batch != nil {
		if err := writeBatchTable(stdout, out.Results); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
	}
	if outcomes != nil {
		if err := outcomes.close(); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
	}
	if f.jsonOut != "" {
		if err := writeJSONFile(f.jsonOut, out.writeJSON); err != nil {
			fmt.Fprintf(stderr, "sluice-bench simulate: %v\n", err)
			return exitError
		}
	}
	return exitOK
}

// workload builds the requests, estimates the fleet's capacity for them and
// applies --load. A synthetic workload is generated to estimate the
// capacity (shapeFlags.capacity), then at --load times that capacity. The generators take the rate, so the lengths stay
// the same and a multi-turn workload keeps its think times, which
// rescaling the arrivals would compress.
func (f *simFlags) workload(spec fleet.Spec, stderr io.Writer) ([]workload.Request, float64, error) {
	var (
		reqs     []workload.Request
		capacity float64
		err      error
		dropped  int
	)
	if f.synthetic {
		n := f.requests
		if n == 0 {
			n = defaultSimRequests
		}
		load := f.load
		if load == 0 {
			load = defaultSimLoad
		}
		if capacity, err = f.capacity(spec, n, f.seed, f.maxContext); err != nil {
			return nil, 0, err
		}
		fmt.Fprintf(stderr, "sluice-bench simulate: fleet %s: estimated capacity %.2f req/s for this workload\n", spec, capacity)
		if math.IsInf(capacity, 0) || capacity <= 0 {
			return nil, 0, fmt.Errorf("--load needs a finite capacity estimate, got %v", capacity)
		}
		if reqs, err = f.generate(load*capacity, 0, n, f.seed); err != nil {
			return nil, 0, err
		}
		reqs, dropped = workload.DropLonger(reqs, f.maxContext)
	} else {
		if reqs, err = readTrace(f.trace, f.traceFormat); err != nil {
			return nil, 0, err
		}
		reqs, dropped = workload.DropLonger(reqs, f.maxContext)
		reqs = workload.Limit(reqs, f.requests)
	}
	if dropped > 0 {
		fmt.Fprintf(stderr, "sluice-bench simulate: dropped %d requests longer than %d tokens\n", dropped, f.maxContext)
	}
	if len(reqs) == 0 {
		return nil, 0, errors.New("the workload has no requests")
	}
	if !f.synthetic {
		capacity = fleet.EstimateCapacity(spec, reqs)
		fmt.Fprintf(stderr, "sluice-bench simulate: fleet %s: estimated capacity %.2f req/s for this workload\n", spec, capacity)
		if f.load > 0 {
			if math.IsInf(capacity, 0) || capacity <= 0 {
				return nil, 0, fmt.Errorf("--load needs a finite capacity estimate, got %v", capacity)
			}
			if rate := workload.Summarize(reqs).RatePerSec; rate > 0 {
				reqs = workload.Scale(reqs, f.load*capacity/rate)
			}
		}
	}
	s := workload.Summarize(reqs)
	fmt.Fprintf(stderr, "sluice-bench simulate: %d requests over %.1fs (%.2f req/s, %.2fx capacity), mean prompt %.1f, mean output %.1f tokens%s\n",
		s.Requests, s.Duration.Seconds(), s.RatePerSec, s.RatePerSec/capacity, s.PromptMean, s.OutputMean, workloadNotes(reqs))
	return reqs, capacity, nil
}

// simOutput is the JSON document of a simulate run.
type simOutput struct {
	// Scenario is the compact table's header line; Workload names the
	// trace file or the synthetic kind.
	Scenario         string  `json:"scenario"`
	Workload         string  `json:"workload"`
	Fleet            string  `json:"fleet"`
	Workers          int     `json:"workers"`
	Routers          int     `json:"routers"`
	Seed             uint64  `json:"seed"`
	Requests         int     `json:"requests"`
	CapacityEstimate float64 `json:"capacity_estimate"`
	// OfferedLoad is the mean arrival rate over CapacityEstimate.
	OfferedLoad float64 `json:"offered_load"`
	// GoodputTTFTms and GoodputTPOTms are the SLO the goodput column
	// counts against.
	GoodputTTFTms float64     `json:"goodput_ttft_ms"`
	GoodputTPOTms float64     `json:"goodput_tpot_ms"`
	Results       []simResult `json:"results"`
}

// workloadName is the trace's file name or the synthetic workload's kind.
func (f *simFlags) workloadName() string {
	if f.trace != "" {
		return filepath.Base(f.trace)
	}
	return f.workloadKind()
}

func (o simOutput) writeJSON(w io.Writer) error { return writeIndented(w, o, "simulate") }

// simResult is one policy's row: the load report's keys plus the
// simulator's extras.
type simResult struct {
	Policy string `json:"policy"`
	report.Report
	Goodput        float64 `json:"goodput"`
	PrefixHitRatio float64 `json:"prefix_hit_ratio"`
	Utilization    float64 `json:"utilization"`
	// UtilSpread is the largest gap between two workers' utilization
	// within one fleet group: how unevenly a policy loads equal workers.
	UtilSpread float64     `json:"utilization_spread"`
	Groups     []groupStat `json:"groups"`
	// Classes splits the report by service class (with --mix or
	// --admission), Shed counts the requests admission shed per class
	// (with --admission), and Tenants splits it by tenant (--tenants).
	Classes map[string]classReport `json:"classes,omitempty"`
	Shed    map[string]int         `json:"shed,omitempty"`
	Tenants map[string]classReport `json:"tenants,omitempty"`
	// Saturation is what each class got while requests waited (with
	// --admission).
	Saturation *saturationStat `json:"saturation,omitempty"`
	// Batch is the --batch run: the batch's completion and throughput,
	// and the workload's figures without it. The row's other keys are
	// the workload's own requests with the batch beside them.
	Batch *batchReport `json:"batch,omitempty"`
}

// groupStat summarizes one fleet group's workers.
type groupStat struct {
	Profile        string  `json:"profile"`
	Workers        int     `json:"workers"`
	Requests       int     `json:"requests"`
	UtilMean       float64 `json:"utilization_mean"`
	UtilMin        float64 `json:"utilization_min"`
	UtilMax        float64 `json:"utilization_max"`
	PrefixHitRatio float64 `json:"prefix_hit_ratio"`
	Preemptions    int64   `json:"preemptions"`
	// PrefillMin and PrefillMax are the least and greatest of the
	// workers' prefill rates as the router measured them by the run's end
	// (fleet.WorkerStats.MeasuredPrefill), prompt tokens per second;
	// zero where none was measured (the reference scheduler).
	PrefillMin float64 `json:"measured_prefill_min,omitempty"`
	PrefillMax float64 `json:"measured_prefill_max,omitempty"`
	// Budget is each worker's admission budget of requests in flight and
	// PeakInFlight the most any of them had (with --admission).
	Budget       int `json:"budget,omitempty"`
	PeakInFlight int `json:"peak_in_flight,omitempty"`
}

// summarizeSim turns a fleet.Result into a report row. samples is scratch
// space of len(res.Requests), reused between policies. Inter-token latency
// comes from the simulator's streaming histogram, not from the samples.
func summarizeSim(name string, spec fleet.Spec, res *fleet.Result, samples []report.Sample, ttft, tpot time.Duration) simResult {
	for i, o := range res.Requests {
		samples[i] = report.Sample{
			OK: o.OK, Err: o.Err,
			PromptTokens: o.PromptTokens, OutputTokens: o.OutputTokens,
			TTFT: o.TTFT, E2E: o.E2E,
		}
	}
	row := simResult{
		Policy:         name,
		Report:         report.Summarize(samples, res.Elapsed),
		Goodput:        res.Goodput(ttft, tpot),
		PrefixHitRatio: res.PrefixHitRatio(),
	}
	row.ITL = histDist(res.ITL)
	w := 0
	var busy float64
	for _, g := range spec {
		gs := groupStat{Profile: g.Profile.Name, Workers: g.Count, UtilMin: math.Inf(1)}
		var q, h int64
		for _, ws := range res.Workers[w : w+g.Count] {
			gs.Requests += ws.Requests
			gs.UtilMean += ws.Utilization / float64(g.Count)
			gs.UtilMin = min(gs.UtilMin, ws.Utilization)
			gs.UtilMax = max(gs.UtilMax, ws.Utilization)
			gs.Preemptions += ws.Preemptions
			gs.Budget = max(gs.Budget, ws.Budget)
			gs.PeakInFlight = max(gs.PeakInFlight, ws.PeakInFlight)
			q += ws.PrefixQueries
			h += ws.PrefixHits
			busy += ws.Utilization
			if v := ws.MeasuredPrefill; v > 0 {
				if gs.PrefillMin == 0 || v < gs.PrefillMin {
					gs.PrefillMin = v
				}
				gs.PrefillMax = max(gs.PrefillMax, v)
			}
		}
		if q > 0 {
			gs.PrefixHitRatio = float64(h) / float64(q)
		}
		row.Groups = append(row.Groups, gs)
		row.UtilSpread = max(row.UtilSpread, gs.UtilMax-gs.UtilMin)
		w += g.Count
	}
	row.Utilization = busy / float64(len(res.Workers))
	return row
}

// histDist converts the simulator's ITL histogram to a report distribution.
func histDist(h *fleet.Histogram) report.Dist {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return report.Dist{Mean: ms(h.Mean()), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99))}
}

// write prints the row: a title, the load report table, then the extras
// and the report split by class and tenant.
func (r simResult) write(w io.Writer, res *fleet.Result, perWorker bool, order splitOrder) error {
	if _, err := fmt.Fprintf(w, "\nPolicy: %s\n", r.Policy); err != nil {
		return fmt.Errorf("write simulate table: %w", err)
	}
	if err := r.WriteTable(w); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Goodput (req/s, TTFT and TPOT SLO):\t%.2f\n", r.Goodput)
	fmt.Fprintf(tw, "Prefix-cache hit ratio:\t%.4f\n", r.PrefixHitRatio)
	fmt.Fprintf(tw, "Fleet utilization:\t%.4f\n", r.Utilization)
	if perWorker {
		fmt.Fprintln(tw, "worker\tprofile\trequests\tutilization\tprefix hits\tpreemptions\tmeasured prefill (tok/s)")
		for i, ws := range res.Workers {
			ratio := 0.0
			if ws.PrefixQueries > 0 {
				ratio = float64(ws.PrefixHits) / float64(ws.PrefixQueries)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%.4f\t%.4f\t%d\t%.0f\n", i, ws.Profile, ws.Requests, ws.Utilization, ratio, ws.Preemptions, ws.MeasuredPrefill)
		}
	} else {
		fmt.Fprintln(tw, "group\tworkers\trequests\tutil mean\tmin\tmax\tprefix hits\tpreemptions")
		for _, g := range r.Groups {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%d\n",
				g.Profile, g.Workers, g.Requests, g.UtilMean, g.UtilMin, g.UtilMax, g.PrefixHitRatio, g.Preemptions)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write simulate table: %w", err)
	}
	if r.Classes != nil {
		if err := writeSplit(w, "class", order.classes, r.Classes, r.Shed); err != nil {
			return err
		}
	}
	if r.Tenants != nil {
		if err := writeSplit(w, "tenant", order.tenants, r.Tenants, nil); err != nil {
			return err
		}
	}
	if r.Saturation != nil {
		if err := r.Saturation.write(w, order.classes); err != nil {
			return err
		}
	}
	return nil
}

// writeComparison prints one line per policy for a side-by-side view.
func writeComparison(w io.Writer, rows []simResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\npolicy\tok\tfailed\treq/s\tgoodput\tTTFT mean\tTTFT p99\tTPOT p99\tE2E mean\tE2E p99\tutil\tprefix hits\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t\n",
			r.Policy, r.Completed, r.Failed, r.RequestThroughput, r.Goodput,
			r.TTFT.Mean, r.TTFT.P99, r.TPOT.P99, r.E2EL.Mean, r.E2EL.P99, r.Utilization, r.PrefixHitRatio)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	return nil
}

// newSeededPicker builds a policy for one router replica. A randomized policy
// (one whose params accept "seed") gets a seed derived from --seed and the
// replica, unless the params set one, so runs are reproducible and replicas
// draw different numbers; other policies are built as given.
func newSeededPicker(reg *policies.Registry, name string, params map[string]any, seed uint64, replica int) (policies.Picker, error) {
	if _, set := params["seed"]; !set {
		seeded := make(map[string]any, len(params)+1)
		for k, v := range params {
			seeded[k] = v
		}
		seeded["seed"] = seed*1_000_003 + uint64(replica) + 1
		if p, err := reg.New(name, seeded); err == nil {
			return p, nil
		}
	}
	return reg.New(name, params)
}

// groupWeights formats one weight per fleet group, as " PROFILE W,...".
func groupWeights(spec fleet.Spec, weights []int) string {
	var b strings.Builder
	w := 0
	for i, g := range spec {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %d", g.Profile.Name, weights[w])
		w += g.Count
	}
	return b.String()
}
