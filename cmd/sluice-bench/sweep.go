package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/chart"
	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/policies/admission"
)

// A sweep runs "simulate" (or, live, "load") once per offered load, through
// the command itself: it parses its own flags plus every flag of the
// command it runs, hands those on unchanged with --load (or --rate) and a
// temporary --json file per point, and reads the results back. Whatever
// simulate or load measure (classes, shedding, tenants) reaches the sweep
// without a second code path.

// Sweep defaults and the knee's definition.
const (
	defaultSweepLoads = "0.3,0.5,0.7,0.8,0.9,1.0,1.1,1.3"
	// kneeFactor bounds p99 TTFT at the knee: this multiple of the
	// fleet's low-load p99 TTFT (kneeRule).
	kneeFactor = 2
	modeSim    = "simulate"
	modeLive   = "live"
	xRequests  = "requests"
	xTokens    = "tokens"
)

// sweepFlags are the sweep's own flags; the rest belong to the command it
// runs.
type sweepFlags struct {
	loads, rates  string
	jsonOut, svg  string
	chartX        string
	loadList      []float64 // parsed --loads
	rateList      []float64 // parsed --rates
	live          bool
	innerFlagName map[string]bool // the inner command's flags the sweep accepts
}

// sweepCmd runs "sluice-bench sweep".
func sweepCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		sw  sweepFlags
		sim simFlags
		ld  loadFlags
	)
	sw.live = isLiveSweep(args)
	var inner *flag.FlagSet
	if sw.live {
		inner = newLoadFlagSet(&ld, stderr)
	} else {
		inner = newSimFlagSet(&sim, stderr)
	}
	fs := sw.flagSet(inner, stderr)
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	if err := sw.validate(); err != nil {
		fmt.Fprintf(stderr, "sluice-bench sweep: %v\n", err)
		return exitUsage
	}
	out := sweepOutput{Mode: modeSim, KneeRule: kneeRule, SLORule: sloRule, XAxis: sw.chartX}
	if sw.live {
		out.Mode, out.Target, out.Model, out.Seed = modeLive, ld.target, ld.model, ld.seed
		out.Fleet, out.Workload = ld.fleet, ld.workloadKind()
		if ld.trace != "" {
			out.Workload = filepath.Base(ld.trace)
		}
		out.GoodputTTFTms, out.GoodputTPOTms = ms(ld.goodTTFT), ms(ld.goodTPOT)
	} else {
		out.Seed = sim.seed
		out.GoodputTTFTms, out.GoodputTPOTms = ms(sim.goodTTFT), ms(sim.goodTPOT)
	}

	code := sw.run(ctx, sw.innerArgs(fs), &out, stderr)
	if code != exitOK && code != exitInterrupted {
		return code
	}
	out.Knees = findKnees(out)
	if err := out.writeTable(stdout); err != nil {
		fmt.Fprintf(stderr, "sluice-bench sweep: %v\n", err)
		return exitError
	}
	if sw.jsonOut != "" {
		if err := writeJSONFile(sw.jsonOut, out.writeJSON); err != nil {
			fmt.Fprintf(stderr, "sluice-bench sweep: %v\n", err)
			return exitError
		}
	}
	if sw.svg != "" {
		if err := writeSVGFile(sw.svg, out.chart()); err != nil {
			fmt.Fprintf(stderr, "sluice-bench sweep: %v\n", err)
			return exitError
		}
	}
	return code
}

// run runs the inner command at each point, with the inner flags passed
// and the point's --load or --rate, and appends the points to out. It
// returns the first failing point's exit code, or exitInterrupted with the
// points completed before the interrupt.
func (sw *sweepFlags) run(ctx context.Context, passed []string, out *sweepOutput, stderr io.Writer) int {
	dir, err := os.MkdirTemp("", "sluice-sweep-")
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench sweep: %v\n", err)
		return exitError
	}
	defer os.RemoveAll(dir)

	plan := sw.points()
	for i, pt := range plan {
		fmt.Fprintf(stderr, "sluice-bench sweep: %s (%d/%d)\n", pt.describe(), i+1, len(plan))
		tmp := filepath.Join(dir, fmt.Sprintf("point-%d.json", i))
		args := append(slices.Clone(passed), pt.flag(), "-json="+tmp)
		var (
			got  sweepPoint
			code int
			err  error
		)
		if sw.live {
			if code = loadCmd(ctx, args, io.Discard, stderr); code == exitOK {
				got, err = readLoadPoint(tmp)
			}
		} else {
			if code = simulateCmd(ctx, append(args, "-table="+tableCompact), io.Discard, stderr); code == exitOK {
				got, err = readSimPoint(tmp, out)
			}
		}
		switch {
		case code == exitInterrupted:
			fmt.Fprintf(stderr, "sluice-bench sweep: interrupted; writing the %d points that completed\n", len(out.Points))
			return code
		case code != exitOK:
			fmt.Fprintf(stderr, "sluice-bench sweep: %s failed; stopping\n", pt.describe())
			return code
		case err != nil:
			fmt.Fprintf(stderr, "sluice-bench sweep: %s: %v\n", pt.describe(), err)
			return exitError
		}
		got.Load = pt.load
		if got.Rate == 0 { // simulate measures the rate; load was given it
			got.Rate = pt.rate
		}
		out.Points = append(out.Points, got)
	}
	return exitOK
}

// writeSVGFile writes the chart to path.
func writeSVGFile(path string, c chart.Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create svg: %w", err)
	}
	if err := c.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close svg: %w", err)
	}
	return nil
}

// isLiveSweep reports whether args set --target, which makes the sweep
// run "load" against it instead of "simulate".
func isLiveSweep(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if name != a && (name == "target" || strings.HasPrefix(name, "target=")) {
			return true
		}
	}
	return false
}

// flagSet is the sweep's flag set: every flag of inner (load's when live,
// else simulate's), bound to inner's values, except those the sweep sets
// per point or that make no sweep, then the sweep's own.
func (sw *sweepFlags) flagSet(inner *flag.FlagSet, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice-bench sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	skip := []string{"load", "json", "saturation", "table", "per-worker"}
	if sw.live {
		skip = []string{"rate", "load", "json"}
	}
	sw.innerFlagName = map[string]bool{}
	inner.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(skip, f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
			sw.innerFlagName[f.Name] = true
		}
	})
	live := sw.live
	fs.Usage = func() {
		if live {
			fmt.Fprint(fs.Output(), `Usage: sluice-bench sweep --target URL --model M (--rates R[,R...] | --fleet SPEC --loads L[,L...]) [--duration D] [--stream] [flags]

Runs "sluice-bench load" against the target once per arrival rate (or per
offered load, a multiple of the --fleet capacity estimate), in the order
given, and writes each point's throughput, goodput and TTFT and TPOT
percentiles, per service class when load reports classes, as a table, as
JSON (--json) and as a latency-throughput chart (--svg). Every flag of
"load" is accepted except --rate, --load and --json, which the sweep sets
per point.

Flags:
`)
		} else {
			fmt.Fprint(fs.Output(), `Usage: sluice-bench sweep --fleet SPEC (--trace FILE | --synthetic) [--policy P[,P...]] [--oracle] [--loads L[,L...]] [flags]
       sluice-bench sweep --target URL ... (live: run "sluice-bench sweep --target x -h")

Runs "sluice-bench simulate" once per offered load (a multiple of the
capacity estimate, as simulate's --load), in the order given, and writes each
policy's throughput (completed req/s, output tok/s), goodput at the
--goodput-ttft/--goodput-tpot SLO, p50 and p99 TTFT and p99 TPOT per load,
per service class with --mix or --admission, as a table, as JSON (--json)
and as a latency-throughput chart (--svg). For each policy (and class) it
finds the knee, the highest load before p99 TTFT first exceeds twice the
fleet's low-load p99 TTFT (the lowest any policy reached at the lowest
load), and the highest load before p99 TTFT first exceeds the SLO. Every
flag of "simulate" is accepted except --load, --json, --saturation, --table
and --per-worker; simulate checks them at the first load.

Flags:
`)
		}
		fs.PrintDefaults()
	}
	if live {
		fs.StringVar(&sw.rates, "rates", "", "arrival `rates` in requests/s, comma-separated and increasing, e.g. 2,4,8,16 (each runs load --rate R)")
		fs.StringVar(&sw.loads, "loads", "", "offered `loads` as multiples of the --fleet capacity estimate, comma-separated and increasing (each runs load --load L); instead of --rates")
	} else {
		fs.StringVar(&sw.loads, "loads", defaultSweepLoads, "offered `loads` as multiples of the estimated capacity, comma-separated and increasing (each runs simulate --load L)")
	}
	fs.StringVar(&sw.jsonOut, "json", "", "write the sweep as JSON to `file`")
	fs.StringVar(&sw.svg, "svg", "", "write the latency-throughput chart as SVG to `file`")
	fs.StringVar(&sw.chartX, "chart-x", xRequests, "the chart's throughput axis: requests (completed req/s) or tokens (output tok/s)")
	return fs
}

// validate parses the offered values and checks the sweep's own flags;
// the inner command checks its flags at the first point.
func (sw *sweepFlags) validate() error {
	var errs []error
	var err error
	if sw.loads != "" {
		if sw.loadList, err = parseOffered(sw.loads); err != nil {
			errs = append(errs, fmt.Errorf("--loads: %w", err))
		}
	}
	if sw.rates != "" {
		if sw.rateList, err = parseOffered(sw.rates); err != nil {
			errs = append(errs, fmt.Errorf("--rates: %w", err))
		}
	}
	switch {
	case !sw.live && sw.loads == "":
		errs = append(errs, errors.New("--loads must name at least one load"))
	case sw.live && (sw.loads == "") == (sw.rates == ""):
		errs = append(errs, errors.New("give exactly one of --rates and --loads"))
	}
	if sw.chartX != xRequests && sw.chartX != xTokens {
		errs = append(errs, fmt.Errorf("--chart-x %q: want %s or %s", sw.chartX, xRequests, xTokens))
	}
	return errors.Join(errs...)
}

// parseOffered reads a comma-separated list of positive, finite,
// strictly increasing numbers.
func parseOffered(s string) ([]float64, error) {
	var out []float64
	for item := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(item), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q: want positive numbers", item)
		}
		if len(out) > 0 && v <= out[len(out)-1] {
			return nil, fmt.Errorf("%v after %v: the list must increase", v, out[len(out)-1])
		}
		out = append(out, v)
	}
	return out, nil
}

// innerArgs returns the inner command's flags as given on the command
// line, each as -name=value so booleans keep their values.
func (sw *sweepFlags) innerArgs(fs *flag.FlagSet) []string {
	var args []string
	fs.Visit(func(f *flag.Flag) {
		if sw.innerFlagName[f.Name] {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// sweepPlan is one point to run: an offered load or an arrival rate.
type sweepPlan struct {
	load, rate float64
}

func (sw *sweepFlags) points() []sweepPlan {
	var out []sweepPlan
	for _, l := range sw.loadList {
		out = append(out, sweepPlan{load: l})
	}
	for _, r := range sw.rateList {
		out = append(out, sweepPlan{rate: r})
	}
	return out
}

// flag is the inner command's flag that sets the point.
func (p sweepPlan) flag() string {
	if p.load > 0 {
		return "-load=" + strconv.FormatFloat(p.load, 'g', -1, 64)
	}
	return "-rate=" + strconv.FormatFloat(p.rate, 'g', -1, 64)
}

func (p sweepPlan) describe() string {
	if p.load > 0 {
		return fmt.Sprintf("load %g", p.load)
	}
	return fmt.Sprintf("rate %g req/s", p.rate)
}

// sweepOutput is the JSON document of a sweep.
type sweepOutput struct {
	// Mode is simulate or live.
	Mode     string `json:"mode"`
	Workload string `json:"workload,omitempty"`
	Fleet    string `json:"fleet,omitempty"`
	Target   string `json:"target,omitempty"`
	Model    string `json:"model,omitempty"`
	Seed     uint64 `json:"seed"`
	// CapacityEstimate (req/s) is what a point's load multiplies; zero in
	// live mode.
	CapacityEstimate float64 `json:"capacity_estimate,omitempty"`
	GoodputTTFTms    float64 `json:"goodput_ttft_ms"`
	GoodputTPOTms    float64 `json:"goodput_tpot_ms"`
	// XAxis is the chart's throughput axis, requests or tokens.
	XAxis string `json:"chart_x"`
	// KneeRule and SLORule define Knees' two points.
	KneeRule string       `json:"knee_rule"`
	SLORule  string       `json:"slo_rule"`
	Points   []sweepPoint `json:"points"`
	Knees    []sweepKnee  `json:"knees"`
}

// kneeRule and sloRule define the two points a sweep finds on each curve,
// for the JSON, the table and the chart. The knee's base is the fleet's
// low-load latency for the curve's requests (all, or one class): the best
// any policy reached for them at the lowest load, not the curve's own. A
// policy already saturated at the lowest load (round_robin sending long
// prompts to slow workers) has no low-load value of its own, and measuring
// it against itself would put its "knee" where it merely stops getting
// worse.
const (
	kneeRule = "knee: the highest offered load before the first whose p99 TTFT exceeds 2x the fleet's low-load p99 TTFT (the lowest any policy reached at the lowest load, for all requests or per class)"
	sloRule  = "within SLO: the highest offered load before the first whose p99 TTFT exceeds the TTFT SLO"
)

// sweepPoint is one offered load's results.
type sweepPoint struct {
	// Load is the offered load as a multiple of the capacity estimate
	// (zero for a live sweep by --rates); Rate is the mean arrival rate in
	// req/s (the requested one in a live sweep, the workload's in
	// simulation; zero in a live sweep by --loads).
	Load     float64       `json:"load,omitempty"`
	Rate     float64       `json:"offered_rate,omitempty"`
	Requests int           `json:"requests,omitempty"`
	Results  []sweepResult `json:"results"`
}

// offered is the point's x in the goodput panel and its knee label.
func (p sweepPoint) offered() float64 { return cmp.Or(p.Load, p.Rate) }

// sweepResult is one policy's figures at one load (a live sweep has one,
// named "live").
type sweepResult struct {
	Policy string `json:"policy"`
	sweepStats
	// Classes splits the figures by service class, and Shed counts the
	// requests admission shed per class, as simulate and load report them.
	Classes map[string]sweepStats `json:"classes,omitempty"`
	Shed    map[string]int        `json:"shed,omitempty"`
}

// sweepStats are the figures a sweep keeps of a report.
type sweepStats struct {
	Completed         int     `json:"completed"`
	Failed            int     `json:"failed"`
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	Goodput           float64 `json:"goodput"`
	TTFTP50           float64 `json:"ttft_p50_ms"`
	TTFTP99           float64 `json:"ttft_p99_ms"`
	TPOTP99           float64 `json:"tpot_p99_ms"`
}

func statsOf(r report.Report, goodput float64) sweepStats {
	return sweepStats{
		Completed: r.Completed, Failed: r.Failed,
		RequestThroughput: r.RequestThroughput, OutputThroughput: r.OutputThroughput, Goodput: goodput,
		TTFTP50: r.TTFT.P50, TTFTP99: r.TTFT.P99, TPOTP99: r.TPOT.P99,
	}
}

// classStats is the one place a sweep reads the per-class split of a
// simulate or load result; nil when the result has none.
func classStats(parts map[string]classReport) map[string]sweepStats {
	if len(parts) == 0 {
		return nil
	}
	out := make(map[string]sweepStats, len(parts))
	for k, p := range parts {
		out[k] = statsOf(p.Report, p.Goodput)
	}
	return out
}

// readSimPoint reads one simulate --json document and fills out's
// description of the run from it.
func readSimPoint(path string, out *sweepOutput) (sweepPoint, error) {
	var sim simOutput
	if err := readJSONFile(path, &sim); err != nil {
		return sweepPoint{}, err
	}
	out.Workload, out.Fleet, out.CapacityEstimate = sim.Workload, sim.Fleet, sim.CapacityEstimate
	pt := sweepPoint{Rate: sim.OfferedLoad * sim.CapacityEstimate, Requests: sim.Requests}
	for _, r := range sim.Results {
		pt.Results = append(pt.Results, sweepResult{Policy: r.Policy, sweepStats: statsOf(r.Report, r.Goodput),
			Classes: classStats(r.Classes), Shed: r.Shed})
	}
	return pt, nil
}

// loadPoint is what a sweep reads of load --json: the report, goodput
// and, when load reports them, classes and shed counts.
type loadPoint struct {
	report.Report
	Goodput float64                `json:"goodput"`
	Classes map[string]classReport `json:"classes"`
	Shed    map[string]int         `json:"shed"`
}

// liveLabel names a live sweep's one series.
const liveLabel = "live"

func readLoadPoint(path string) (sweepPoint, error) {
	var lp loadPoint
	if err := readJSONFile(path, &lp); err != nil {
		return sweepPoint{}, err
	}
	return sweepPoint{Requests: lp.Completed + lp.Failed + lp.Cancelled, Results: []sweepResult{{
		Policy: liveLabel, sweepStats: statsOf(lp.Report, lp.Goodput), Classes: classStats(lp.Classes), Shed: lp.Shed,
	}}}, nil
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read point: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read point %s: %w", path, err)
	}
	return nil
}

func (o sweepOutput) writeJSON(w io.Writer) error { return writeIndented(w, o, "sweep") }

// curve is one line of the sweep: a policy, or one class of a policy, at
// every point, in order.
type curve struct {
	policy, class string
	stats         []sweepStats // per point; zero where the point lacks it
}

// name is the curve's legend entry.
func (c curve) name() string {
	n := c.policy
	if n == configs.DefaultPolicy {
		n += " (default)"
	}
	if c.class != "" {
		n += ", " + c.class
	}
	return n
}

// p99s is the curve's p99 TTFT per point, NaN where nothing completed.
func (c curve) p99s() []float64 {
	ys := make([]float64, len(c.stats))
	for i, s := range c.stats {
		ys[i] = s.TTFTP99
		if s.Completed == 0 {
			ys[i] = math.NaN()
		}
	}
	return ys
}

// curves lists the policies in order of first appearance, each followed by
// its classes (service-class order) when it reports two or more.
func (o sweepOutput) curves() []curve {
	var policies []string
	classes := map[string][]string{}
	for _, pt := range o.Points {
		for _, r := range pt.Results {
			if !slices.Contains(policies, r.Policy) {
				policies = append(policies, r.Policy)
			}
			for k := range r.Classes {
				if !slices.Contains(classes[r.Policy], k) {
					classes[r.Policy] = append(classes[r.Policy], k)
				}
			}
		}
	}
	var out []curve
	for _, p := range policies {
		ks := orderClasses(classes[p])
		if len(ks) < 2 {
			ks = nil
		}
		for _, k := range append([]string{""}, ks...) {
			c := curve{policy: p, class: k, stats: make([]sweepStats, len(o.Points))}
			for i, pt := range o.Points {
				for _, r := range pt.Results {
					if r.Policy != p {
						continue
					}
					if k == "" {
						c.stats[i] = r.sweepStats
					} else {
						c.stats[i] = r.Classes[k]
					}
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// orderClasses sorts class names best first (priority, default, flex),
// unknown names last.
func orderClasses(names []string) []string {
	rank := func(n string) int {
		if c, ok := admission.ParseClass(n); ok {
			return int(c)
		}
		return int(admission.NumClasses)
	}
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

// sweepKnee is one curve's knee (kneeRule) and highest load within the
// SLO (sloRule).
type sweepKnee struct {
	Policy    string    `json:"policy"`
	Class     string    `json:"class,omitempty"`
	Knee      kneePoint `json:"knee"`
	WithinSLO kneePoint `json:"within_slo"`
}

// kneePoint is the last point of a curve before it first exceeds LimitMs.
type kneePoint struct {
	// Point indexes Points; -1 when even the lowest load exceeds the
	// limit. Load and Rate are that point's, TTFTP99 and
	// RequestThroughput the curve's there.
	Point             int     `json:"point"`
	Load              float64 `json:"load,omitempty"`
	Rate              float64 `json:"offered_rate,omitempty"`
	TTFTP99           float64 `json:"ttft_p99_ms,omitempty"`
	RequestThroughput float64 `json:"request_throughput,omitempty"`
	LimitMs           float64 `json:"limit_ms"`
	// Crossed is false when no point exceeded the limit: the point is at
	// or beyond the highest load swept.
	Crossed bool `json:"crossed"`
}

// findKnees returns each curve's knee and highest load within the SLO.
func findKnees(o sweepOutput) []sweepKnee {
	curves := o.curves()
	// The knee's base per class ("" for a policy's total): the lowest p99
	// TTFT at the lowest load. Without one (nothing completed there) the
	// limit is 0 and every curve's knee is "none".
	base := map[string]float64{}
	for _, c := range curves {
		if ys := c.p99s(); len(ys) > 0 && !math.IsNaN(ys[0]) {
			if b, ok := base[c.class]; !ok || ys[0] < b {
				base[c.class] = ys[0]
			}
		}
	}
	at := func(c curve, limit float64) kneePoint {
		k := chart.FindKnee(c.p99s(), limit)
		kp := kneePoint{Point: k.Index, LimitMs: limit, Crossed: k.Crossed}
		if k.Index >= 0 {
			kp.Load, kp.Rate = o.Points[k.Index].Load, o.Points[k.Index].Rate
			kp.TTFTP99, kp.RequestThroughput = c.stats[k.Index].TTFTP99, c.stats[k.Index].RequestThroughput
		}
		return kp
	}
	var knees []sweepKnee
	for _, c := range curves {
		knees = append(knees, sweepKnee{Policy: c.policy, Class: c.class,
			Knee: at(c, kneeFactor*base[c.class]), WithinSLO: at(c, o.GoodputTTFTms)})
	}
	return knees
}

// kneeText says where a knee is: "0.8", ">=1.3" (never crossed) or
// "none" (crossed at the lowest load).
func (o sweepOutput) kneeText(k kneePoint) string {
	if k.Point < 0 {
		return "none"
	}
	s := chart.FormatNumber(o.Points[k.Point].offered())
	if !k.Crossed {
		s = ">=" + s
	}
	return s
}

// writeTable prints one line per policy and load (and class), then the
// knees.
func (o sweepOutput) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\toffered req/s\tpolicy\tok\tfailed\tshed\treq/s\tout tok/s\tgoodput req/s\tTTFT p50 ms\tTTFT p99 ms\tTPOT p99 ms\t")
	line := func(load, rate, label string, s sweepStats, shed string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%.2f\t%.0f\t%.2f\t%.0f\t%.0f\t%.1f\t\n", load, rate, label,
			s.Completed, s.Failed, shed, s.RequestThroughput, s.OutputThroughput, s.Goodput, s.TTFTP50, s.TTFTP99, s.TPOTP99)
	}
	for _, pt := range o.Points {
		load, rate := "-", "-"
		if pt.Load > 0 {
			load = chart.FormatNumber(pt.Load)
		}
		if pt.Rate > 0 {
			rate = fmt.Sprintf("%.2f", pt.Rate)
		}
		for _, r := range pt.Results {
			shed := "-"
			if r.Shed != nil {
				n := 0
				for _, k := range r.Shed {
					n += k
				}
				shed = strconv.Itoa(n)
			}
			line(load, rate, r.Policy, r.sweepStats, shed)
			if len(r.Classes) < 2 {
				continue
			}
			for _, k := range orderClasses(slices.Collect(maps.Keys(r.Classes))) {
				shed := "-"
				if r.Shed != nil {
					shed = strconv.Itoa(r.Shed[k])
				}
				line("", "", "class "+k, r.Classes[k], shed)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write sweep table: %w", err)
	}
	if _, err := fmt.Fprintf(w, "\n%s\n%s (%s)\n", kneeRule, sloRule, msText(o.GoodputTTFTms)); err != nil {
		return fmt.Errorf("write sweep table: %w", err)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "curve\tknee\tknee limit\tp99 TTFT ms\treq/s\twithin SLO\tp99 TTFT ms\treq/s\t")
	at := func(k kneePoint) string {
		if k.Point < 0 {
			return "-\t-"
		}
		return fmt.Sprintf("%.0f\t%.2f", k.TTFTP99, k.RequestThroughput)
	}
	for _, k := range o.Knees {
		c := curve{policy: k.Policy, class: k.Class}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", c.name(), o.kneeText(k.Knee), msText(k.Knee.LimitMs), at(k.Knee),
			o.kneeText(k.WithinSLO), at(k.WithinSLO))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write sweep table: %w", err)
	}
	return nil
}

// Line styles of a policy's classes; the policy's total is solid.
func classDash(class string) string {
	switch class {
	case admission.Priority.String():
		return "2,2"
	case admission.Flex.String():
		return "7,4"
	}
	return "9,3,2,3"
}

// chart draws the sweep: p99 TTFT against throughput per curve, points
// labelled by load and knees ringed, beside goodput against offered load.
func (o sweepOutput) chart() chart.Chart {
	curves := o.curves()
	var lat, good []chart.Series
	colors := map[string]string{}
	var (
		knees, slos []string
		total       curve // the policy's, for its classes' throughput
	)
	for i, c := range curves {
		if c.class == "" {
			total = c
		}
		color, ok := colors[c.policy]
		if !ok {
			color = chart.Color(len(colors) % 6) // the palette's last, black, is the oracle's
			if c.policy == oracleName {
				color = chart.Color(6)
			}
			colors[c.policy] = color
		}
		ls := chart.Series{Name: c.name(), Color: color, Width: 2}
		if c.class != "" {
			ls.Dash, ls.Width = classDash(c.class), 1.6
		}
		gs := ls
		k := o.Knees[i]
		if k.Knee.Point >= 0 {
			ls.Marks, gs.Marks = []int{k.Knee.Point}, []int{k.Knee.Point}
		}
		knees = append(knees, fmt.Sprintf("%s %s (limit %s)", c.name(), o.kneeText(k.Knee), msText(k.Knee.LimitMs)))
		slos = append(slos, c.name()+" "+o.kneeText(k.WithinSLO))
		ys := c.p99s()
		for j, s := range c.stats {
			// A class sits at its policy's total throughput, so the
			// classes of one load line up.
			x := total.stats[j].RequestThroughput
			if o.XAxis == xTokens {
				x = total.stats[j].OutputThroughput
			}
			label := chart.FormatNumber(o.Points[j].offered())
			ls.Points = append(ls.Points, chart.Point{X: x, Y: ys[j], Label: label})
			gs.Points = append(gs.Points, chart.Point{X: o.Points[j].offered(), Y: s.Goodput, Label: label})
		}
		lat, good = append(lat, ls), append(good, gs)
	}

	xLabel := "completed requests/s"
	if o.XAxis == xTokens {
		xLabel = "output tokens/s"
	}
	if slices.ContainsFunc(curves, func(c curve) bool { return c.class != "" }) {
		xLabel += " (a class at its policy's total)"
	}
	offeredLabel, pointsAre := "offered load (x capacity estimate)", "offered load"
	if len(o.Points) > 0 && o.Points[0].Load == 0 {
		offeredLabel, pointsAre = "offered rate (req/s)", "offered rate"
	}
	title := "Latency-throughput"
	switch {
	case o.Mode == modeLive:
		title += " (live): " + o.Target
	case o.Workload != "":
		title += ": " + o.Workload
	}
	if o.Fleet != "" {
		title += " on " + o.Fleet
	}
	sub := fmt.Sprintf("p99 TTFT against throughput, one point per %s; goodput SLO TTFT <= %s, TPOT <= %s; seed %d",
		pointsAre, msText(o.GoodputTTFTms), msText(o.GoodputTPOTms), o.Seed)
	if o.CapacityEstimate > 0 {
		sub += fmt.Sprintf("; capacity estimate %.1f req/s", o.CapacityEstimate)
	}
	return chart.Chart{
		Title:    title,
		Subtitle: sub,
		Panels: []chart.Panel{
			{
				Title: "p99 TTFT vs throughput (points: " + pointsAre + ")", Span: 2,
				X:      chart.Axis{Label: xLabel, FromZero: true},
				Y:      chart.Axis{Label: "p99 TTFT (log scale)", Log: true, Format: msText},
				Series: lat,
				Lines:  []chart.Line{{Y: o.GoodputTTFTms, Label: "TTFT SLO " + msText(o.GoodputTTFTms)}},
			},
			{
				Title: "Goodput vs " + pointsAre, Span: 1,
				X:      chart.Axis{Label: offeredLabel, FromZero: true},
				Y:      chart.Axis{Label: "goodput (req/s within SLO)", FromZero: true},
				Series: good,
			},
		},
		MarkLabel: "knee: the last " + pointsAre + " before p99 TTFT exceeds 2x the fleet's low-load p99 (the best any policy reached at the lowest load)",
		Notes: []string{
			"knee (" + pointsAre + "): " + strings.Join(knees, "; "),
			"p99 TTFT within the SLO up to: " + strings.Join(slos, "; "),
		},
	}
}

// msText formats milliseconds for axis ticks and labels: "50 ms", "2 s".
// Three significant digits at most: ticks are round, limits need not be.
func msText(v float64) string {
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	if v >= 1000 {
		return chart.FormatNumber(v/1000) + " s"
	}
	return chart.FormatNumber(v) + " ms"
}
