package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/sluice-llm/sluice/gpuworker"
)

// Ratio bounds every validation row must meet.
const (
	validateMinRatio = 0.7
	validateMaxRatio = 1.3
)

// validationRow compares one simulated metric with its published value.
type validationRow struct {
	Profile     string  `json:"profile"`
	Concurrency int     `json:"concurrency"`
	Metric      string  `json:"metric"`
	Simulated   float64 `json:"simulated"`
	Published   float64 `json:"published"`
	Ratio       float64 `json:"ratio"`
}

// requestsFor picks a closed-loop run long enough to reach steady state:
// every client sends at least eight requests.
func requestsFor(c int) int { return max(8*c, 40) }

// validateSeeds is the number of closed-loop runs, with different client
// start times, averaged per case.
const validateSeeds = 4

// averageRuns averages the metrics of closed-loop runs with seeds 1..n.
func averageRuns(p gpuworker.Profile, vc validationCase, n int) (closedLoopStats, error) {
	sum := closedLoopStats{}
	for seed := range uint64(n) {
		st, err := closedLoop(p, vc.concurrency, vc.prompt, vc.output, requestsFor(vc.concurrency), seed+1)
		if err != nil {
			return nil, err
		}
		for k, v := range st {
			sum[k] += v / float64(n)
		}
	}
	return sum, nil
}

// runValidation simulates every case and returns one row per published
// figure, in case order.
func runValidation(profiles gpuworker.ProfileSet, cases []validationCase) ([]validationRow, error) {
	var rows []validationRow
	for _, vc := range cases {
		p, err := profiles.Lookup(vc.profile)
		if err != nil {
			return nil, err
		}
		st, err := averageRuns(p, vc, validateSeeds)
		if err != nil {
			return nil, fmt.Errorf("%s c=%d: %w", vc.profile, vc.concurrency, err)
		}
		for _, f := range vc.figures {
			sim := st[f.metric]
			rows = append(rows, validationRow{
				Profile: vc.profile, Concurrency: vc.concurrency, Metric: f.metric,
				Simulated: sim, Published: f.value, Ratio: sim / f.value,
			})
		}
	}
	return rows, nil
}

// inBounds reports whether a row's ratio is within the validation bounds.
func (r validationRow) inBounds() bool {
	return r.Ratio >= validateMinRatio && r.Ratio <= validateMaxRatio
}

func validateCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-bench validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.String("json", "", "also write the rows as JSON to `file`")
	profilesFile := fs.String("profiles", "", "YAML `file` of extra or overriding profiles")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench validate [--json FILE] [--profiles FILE]

Runs the simulated engine in virtual time as a closed loop of C clients
(each sends its next request when the previous one finishes) for every
published benchmark point in GPU-FACTS §4 it reproduces, and prints
simulated against published values. Exits 1 if any row's ratio is
outside [0.7, 1.3]; such rows are marked OUT.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	var extra []gpuworker.Profile
	if *profilesFile != "" {
		f, err := os.Open(*profilesFile)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench validate: %v\n", err)
			return exitError
		}
		extra, err = gpuworker.LoadProfiles(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench validate: %s: %v\n", *profilesFile, err)
			return exitError
		}
	}
	rows, err := runValidation(gpuworker.NewProfileSet(extra), validationCases())
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench validate: %v\n", err)
		return exitError
	}
	if err := writeValidationTable(stdout, rows); err != nil {
		fmt.Fprintf(stderr, "sluice-bench validate: %v\n", err)
		return exitError
	}
	if *jsonOut != "" {
		if err := writeValidationJSON(*jsonOut, rows); err != nil {
			fmt.Fprintf(stderr, "sluice-bench validate: %v\n", err)
			return exitError
		}
	}
	for _, r := range rows {
		if !r.inBounds() {
			return exitError
		}
	}
	return exitOK
}

// writeValidationTable prints the rows as an aligned table, marking rows
// outside the bounds OUT.
func writeValidationTable(w io.Writer, rows []validationRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "profile\tconcurrency\tmetric\tsimulated\tpublished\tratio\t\t")
	for _, r := range rows {
		mark := ""
		if !r.inBounds() {
			mark = "OUT"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%.2f\t%.2f\t%s\t\n", r.Profile, r.Concurrency, r.Metric, r.Simulated, r.Published, r.Ratio, mark)
	}
	return tw.Flush()
}

func writeValidationJSON(path string, rows []validationRow) error {
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
