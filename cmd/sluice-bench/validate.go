package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
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
	Profile      string  `json:"profile"`
	Source       string  `json:"source"`
	Mode         string  `json:"mode"` // "c": closed-loop clients; "batch": one batch run to completion
	Concurrency  int     `json:"concurrency"`
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Metric       string  `json:"metric"`
	Simulated    float64 `json:"simulated"`
	Published    float64 `json:"published"`
	Ratio        float64 `json:"ratio"`
	// KnownOut is why the row is expected outside the bounds, if it is.
	KnownOut string `json:"known_out,omitempty"`
}

// requestsFor picks a closed-loop run long enough to reach steady state:
// every client sends at least eight requests.
func requestsFor(c int) int { return max(8*c, 40) }

// validateSeeds is the number of closed-loop runs, with different client
// start times, averaged per case.
const validateSeeds = 4

// simulateCase runs one case: the average of validateSeeds closed-loop
// runs, or the one deterministic batch.
func simulateCase(p gpuworker.Profile, vc validationCase) (closedLoopStats, error) {
	if vc.mode == staticBatchMode {
		return staticBatch(p, vc.concurrency, vc.prompt, vc.output)
	}
	sum := closedLoopStats{}
	for seed := range uint64(validateSeeds) {
		st, err := closedLoop(p, vc.concurrency, vc.prompt, vc.output, requestsFor(vc.concurrency), seed+1)
		if err != nil {
			return nil, err
		}
		for k, v := range st {
			sum[k] += v / validateSeeds
		}
	}
	return sum, nil
}

// runValidation simulates every case and returns one row per published
// figure, in case order. adjust, if not nil, changes each profile before
// it runs (the sensitivity runs use it).
func runValidation(profiles gpuworker.ProfileSet, cases []validationCase, adjust func(*gpuworker.Profile)) ([]validationRow, error) {
	var rows []validationRow
	for _, vc := range cases {
		p, err := profiles.Lookup(vc.profile)
		if err != nil {
			return nil, err
		}
		if adjust != nil {
			adjust(&p)
		}
		st, err := simulateCase(p, vc)
		if err != nil {
			return nil, fmt.Errorf("%s %s=%d: %w", vc.profile, vc.mode, vc.concurrency, err)
		}
		for _, f := range vc.figures {
			sim := st[f.metric]
			rows = append(rows, validationRow{
				Profile: vc.profile, Source: vc.source, Mode: vc.mode.String(), Concurrency: vc.concurrency,
				PromptTokens: vc.prompt, OutputTokens: vc.output, Metric: f.metric,
				Simulated: sim, Published: f.value, Ratio: sim / f.value, KnownOut: f.out,
			})
		}
	}
	return rows, nil
}

// inBounds reports whether a row's ratio is within the validation bounds.
func (r validationRow) inBounds() bool {
	return r.Ratio >= validateMinRatio && r.Ratio <= validateMaxRatio
}

// status is what the table prints for a row: empty when it passes, "OUT"
// when it is out of bounds unexpectedly, "known out" when its KnownOut
// reason covers it, and "STALE" when a known-out row came back in bounds.
func (r validationRow) status() string {
	switch in := r.inBounds(); {
	case in && r.KnownOut == "":
		return ""
	case in:
		return "STALE"
	case r.KnownOut != "":
		return "known out"
	default:
		return "OUT"
	}
}

// failed reports whether the row makes validate exit 1.
func (r validationRow) failed() bool {
	st := r.status()
	return st == "OUT" || st == "STALE"
}

func validateCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-bench validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.String("json", "", "also write the rows as JSON to `file`")
	profilesFile := fs.String("profiles", "", "YAML `file` of extra or overriding profiles")
	sensitivity := fs.Bool("sensitivity", false, "also rerun the rows with each fitted parameter removed, varied, or applied to every profile")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench validate [--json FILE] [--profiles FILE] [--sensitivity]

Simulates, in virtual time, every benchmark point of GPU-FACTS §4 and §6
that a built-in profile covers (closed loops of C clients, each sending
its next request when the previous one finishes, or one batch run to
completion for offline benchmarks) and prints simulated against published
values, the sources, the rows not run with the reason, and single-request
figures against the ranges GPU-FACTS §6 derives. Exits 1 if any row's
ratio is outside [0.7, 1.3] (marked OUT) unless the row is known to be out
for a stated reason, or if such a known-out row is back in bounds (marked
STALE).

--sensitivity adds, for each parameter fitted to particular rows
(HostPerSeq, WholePrefill, the H100's visible memory, the A100's MFU), how
the ratios move when it is removed, varied, or applied to every profile.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, done := parseArgs(fs, args, stderr); done {
		return code
	}
	profiles := gpuworker.NewProfileSet(nil)
	if *profilesFile != "" {
		f, err := os.Open(*profilesFile)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench validate: %v\n", err)
			return exitError
		}
		extra, err := gpuworker.LoadProfiles(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "sluice-bench validate: %s: %v\n", *profilesFile, err)
			return exitError
		}
		profiles = gpuworker.NewProfileSet(extra)
	}
	rows, err := runValidation(profiles, validationCases(), nil)
	if err == nil {
		err = writeValidation(stdout, rows)
	}
	if err == nil {
		var br []bracketResult
		if br, err = runBrackets(profiles); err == nil {
			err = writeBrackets(stdout, br)
		}
	}
	if err == nil && *sensitivity {
		var sens []sensitivityResult
		if sens, err = runSensitivity(profiles, validationCases(), rows); err == nil {
			err = writeSensitivity(stdout, sens)
		}
	}
	if err == nil && *jsonOut != "" {
		err = writeValidationJSON(*jsonOut, rows)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench validate: %v\n", err)
		return exitError
	}
	for _, r := range rows {
		if r.failed() {
			return exitError
		}
	}
	return exitOK
}

// writeValidation prints the rows as an aligned table, then the sources,
// the reasons of known-out rows and the rows not run.
func writeValidation(w io.Writer, rows []validationRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "profile\tsource\trun\tin/out\tmetric\tsimulated\tpublished\tratio\t\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s=%d\t%d/%d\t%s\t%.2f\t%.2f\t%.2f\t%s\t\n", r.Profile, r.Source, r.Mode, r.Concurrency,
			r.PromptTokens, r.OutputTokens, r.Metric, r.Simulated, r.Published, r.Ratio, r.status())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var in, known int
	for _, r := range rows {
		switch r.status() {
		case "":
			in++
		case "known out":
			known++
		}
	}
	fmt.Fprintf(w, "\n%d rows: %d within [%.1f, %.1f], %d known out, %d failing.\n",
		len(rows), in, validateMinRatio, validateMaxRatio, known, len(rows)-in-known)
	fmt.Fprintln(w, "\nrun: c=N is N closed-loop clients; batch=N is N requests submitted together and run to completion.")
	fmt.Fprintln(w, "\nSources:")
	for _, s := range validationSources() {
		fmt.Fprintf(w, "  %-9s %s\n  %-9s %s\n", s.key, s.setup, "", s.where)
	}
	seen := map[string]bool{}
	fmt.Fprintln(w, "\nKnown out of bounds:")
	for _, r := range rows {
		if r.KnownOut == "" || seen[r.KnownOut] {
			continue
		}
		seen[r.KnownOut] = true
		fmt.Fprintf(w, "  %s %s %s: %s\n", r.Profile, r.Source, r.Metric, r.KnownOut)
	}
	fmt.Fprintln(w, "\nNot run:")
	for _, x := range validationExclusions() {
		fmt.Fprintf(w, "  %s: %s\n", x.setup, x.reason)
	}
	return nil
}

// bracketResult is a bracketCheck with the profile's figure.
type bracketResult struct {
	bracketCheck
	simulated float64
}

func (b bracketResult) status() string {
	switch {
	case b.simulated < b.lo:
		return "below"
	case b.simulated > b.hi:
		return "above"
	}
	return "in"
}

// runBrackets simulates every bracket check at concurrency 1.
func runBrackets(profiles gpuworker.ProfileSet) ([]bracketResult, error) {
	checks := bracketChecks()
	out := make([]bracketResult, 0, len(checks))
	for _, c := range checks {
		p, err := profiles.Lookup(c.profile)
		if err != nil {
			return nil, err
		}
		st, err := simulateCase(p, validationCase{mode: closedLoopMode, prompt: c.prompt, output: c.output, concurrency: 1})
		if err != nil {
			return nil, fmt.Errorf("%s at concurrency 1: %w", c.profile, err)
		}
		out = append(out, bracketResult{bracketCheck: c, simulated: st[c.metric]})
	}
	return out, nil
}

// writeBrackets prints the bracket checks as a table.
func writeBrackets(w io.Writer, res []bracketResult) error {
	fmt.Fprintln(w, "\nConcurrency 1 against ranges GPU-FACTS derives from published figures ([D], informational):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  profile\tin/out\tmetric\tsimulated\trange\t\tbasis")
	for _, b := range res {
		rng := fmt.Sprintf(">= %.1f", b.lo)
		if !math.IsInf(b.hi, 1) {
			rng = fmt.Sprintf("%.1f-%.1f", b.lo, b.hi)
		}
		fmt.Fprintf(tw, "  %s\t%d/%d\t%s\t%.1f\t%s\t%s\t%s\n", b.profile, b.prompt, b.output, b.metric, b.simulated, rng, b.status(), b.basis)
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
