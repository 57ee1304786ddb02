package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/sluice-llm/sluice/configs"
)

// The baselines a knowledgeable operator would configure, which the
// default policy is held against: least_request, p2c and weighted with
// capacity-proportional weights (simulate sets them).
var baselinePolicies = []string{"least_request", "p2c", "weighted"}

// summarizeCmd runs "sluice-bench summarize FILE...": it reads simulate
// --json outputs and prints, per scenario, the default policy against the
// best baseline for each figure, the reference, and round robin.
func summarizeCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-bench summarize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench summarize FILE.json...

Reads "sluice-bench simulate --json" outputs and prints, per scenario, the
default policy (`+configs.DefaultPolicy+`) against the best baseline for each
figure (least_request, p2c, capacity-weighted weighted): p50 TTFT and
goodput (ratio to the best; at most 1.1 and at least 0.9 are within 10%),
p99 TTFT (below 1 is ahead), p99 TPOT, the reference (oracle) p99 TTFT, the
prefix-cache hit ratio against round_robin's, and the lowest fleet
utilization of any policy against round_robin's, naming that policy. A
file that is not a simulate output (a load or sweep report) is an error.
`)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	var runs []simOutput
	for _, name := range fs.Args() {
		run, err := readSimOutput(name)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench summarize: %v\n", err)
			return exitError
		}
		runs = append(runs, run)
	}
	if err := writeSummary(stdout, runs); err != nil {
		fmt.Fprintf(stderr, "sluice-bench summarize: %v\n", err)
		return exitError
	}
	return exitOK
}

// errNotSimOutput says what summarize reads, for a file that is not it.
var errNotSimOutput = errors.New(`not a "sluice-bench simulate --json" output: want a JSON object with "fleet" and a "results" row per policy`)

// readSimOutput reads one simulate --json output. Any JSON decodes into
// simOutput, so it also checks that the file has what summarize compares: a
// fleet and at least one policy row. Without the check a load or sweep
// output printed an empty row and passed.
func readSimOutput(name string) (simOutput, error) {
	var out simOutput
	b, err := os.ReadFile(name)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("%s: %w (%w)", name, errNotSimOutput, err)
	}
	if out.Fleet == "" || len(out.Results) == 0 || slices.ContainsFunc(out.Results, func(r simResult) bool { return r.Policy == "" }) {
		return out, fmt.Errorf("%s: %w", name, errNotSimOutput)
	}
	return out, nil
}

// summary is one scenario's comparison; NaN marks a figure with no row to
// compare against.
type summary struct {
	name                           string
	p50, p50Best                   float64
	p50By                          string
	goodput, goodputBest           float64
	goodputBy                      string
	p99, p99Best, p99Oracle        float64
	p99By                          string
	tpot99, tpot99Best             float64
	hit, hitRR                     float64
	util, utilRR, worstUtil        float64
	worstUtilBy                    string
	hasDefault, hasRR, hasBaseline bool
}

func summarizeRun(run simOutput) summary {
	s := summary{
		name:    fmt.Sprintf("%s, %s, load %.2f, seed %d, routers %d", run.Workload, run.Fleet, run.OfferedLoad, run.Seed, run.Routers),
		p50Best: math.Inf(1), p99Best: math.Inf(1), tpot99Best: math.Inf(1), goodputBest: math.Inf(-1),
		p99Oracle: math.NaN(), worstUtil: math.Inf(1),
	}
	for _, r := range run.Results {
		switch {
		case r.Policy == configs.DefaultPolicy:
			s.hasDefault = true
			s.p50, s.p99, s.tpot99, s.goodput, s.hit, s.util = r.TTFT.P50, r.TTFT.P99, r.TPOT.P99, r.Goodput, r.PrefixHitRatio, r.Utilization
		case r.Policy == oracleName:
			s.p99Oracle = r.TTFT.P99
		case r.Policy == "round_robin":
			s.hasRR = true
			s.hitRR, s.utilRR = r.PrefixHitRatio, r.Utilization
		}
		for _, b := range baselinePolicies {
			if r.Policy != b {
				continue
			}
			s.hasBaseline = true
			if r.TTFT.P50 < s.p50Best {
				s.p50Best, s.p50By = r.TTFT.P50, b
			}
			if r.TTFT.P99 < s.p99Best {
				s.p99Best, s.p99By = r.TTFT.P99, b
			}
			s.tpot99Best = min(s.tpot99Best, r.TPOT.P99)
			if r.Goodput > s.goodputBest {
				s.goodputBest, s.goodputBy = r.Goodput, b
			}
		}
		if r.Policy != oracleName && r.Utilization < s.worstUtil {
			s.worstUtil, s.worstUtilBy = r.Utilization, r.Policy
		}
	}
	return s
}

// writeSummary prints one row per run.
func writeSummary(w io.Writer, runs []simOutput) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tp50 TTFT / best\tgoodput / best\tp99 TTFT / best\tp99 TPOT / best\tp99 / oracle\thit / round_robin\tworst util / round_robin\t")
	ratio := func(a, b float64, ok bool) string {
		if !ok || math.IsNaN(a) || math.IsNaN(b) || b == 0 || math.IsInf(b, 0) {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, run := range runs {
		s := summarizeRun(run)
		d, bl := s.hasDefault, s.hasDefault && s.hasBaseline
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s (%s)\t%s (%s)\t%s\t%s\t%s\t%s (%s)\t\n", s.name,
			ratio(s.p50, s.p50Best, bl), s.p50By,
			ratio(s.goodput, s.goodputBest, bl), s.goodputBy,
			ratio(s.p99, s.p99Best, bl), s.p99By,
			ratio(s.tpot99, s.tpot99Best, bl),
			ratio(s.p99, s.p99Oracle, d),
			ratio(s.hit, s.hitRR, d && s.hasRR),
			ratio(s.worstUtil, s.utilRR, s.hasRR), s.worstUtilBy)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}
