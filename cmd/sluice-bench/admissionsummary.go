package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/sluice-llm/sluice/configs"
)

// summarizeAdmissionCmd runs "sluice-bench summarize-admission": it reads
// "simulate --admission --json" outputs, each named by the figure it is
// for, and prints the admission issue's targets as ratios beside them.
func summarizeAdmissionCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-bench summarize-admission", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f admissionFiles
	fs.Func("reference", "a `file` of simulate --admission --oracle (repeat for each load): the policy's p50 and p99 TTFT and goodput over the reference's", func(s string) error {
		f.reference = append(f.reference, s)
		return nil
	})
	fs.StringVar(&f.classesLight, "classes-light", "", "`file` of simulate --admission --mix at a light load (e.g. 0.5)")
	fs.StringVar(&f.classesOver, "classes-over", "", "`file` of the same at an overload (e.g. 1.3): priority's p99 TTFT over the light load's, shed per class, flex's rate while requests wait over the spare capacity")
	fs.StringVar(&f.tenantsBeside, "tenants", "", "`file` of simulate --admission --tenants at an overload")
	fs.StringVar(&f.tenantAlone, "tenant-alone", "", "`file` of the same with --only-tenant: the tenant's p99 TTFT beside the others over alone")
	fs.StringVar(&f.tenant, "tenant", "light", "the tenant --tenant-alone ran alone")
	fs.StringVar(&f.policy, "policy", configs.DefaultPolicy, "the policy row to read (as simulate names it)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice-bench summarize-admission [flags]

Reads "sluice-bench simulate --admission --json" outputs, each given by the
figure it is for, and prints the service-class targets of the admission
issue beside each measured ratio (deploy/bench-admission.sh runs them all).

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 || f.empty() {
		fs.Usage()
		return exitUsage
	}
	rows, err := f.rows()
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench summarize-admission: %v\n", err)
		return exitError
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmeasured\ttarget")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.figure, r.measured, r.target)
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "sluice-bench summarize-admission: %v\n", err)
		return exitError
	}
	return exitOK
}

// admissionFiles are the simulate outputs summarize-admission reads, by
// figure.
type admissionFiles struct {
	reference                  []string
	classesLight, classesOver  string
	tenantsBeside, tenantAlone string
	tenant, policy             string
}

func (f *admissionFiles) empty() bool {
	return len(f.reference) == 0 && f.classesLight == "" && f.classesOver == "" && f.tenantsBeside == "" && f.tenantAlone == ""
}

// admissionRow is one printed figure.
type admissionRow struct{ figure, measured, target string }

// rows reads the files and computes each figure they allow.
func (f *admissionFiles) rows() ([]admissionRow, error) {
	var rows []admissionRow
	for _, name := range f.reference {
		run, pol, err := f.read(name)
		if err != nil {
			return nil, err
		}
		ref, ok := resultFor(run, oracleName)
		if !ok {
			return nil, fmt.Errorf("%s: no %s row (run simulate with --oracle)", name, oracleName)
		}
		rows = append(rows, admissionRow{
			figure: fmt.Sprintf("load %.2f, seed %d: p50 / p99 TTFT / goodput over the reference's", run.OfferedLoad, run.Seed),
			measured: fmt.Sprintf("%s / %s / %s", ratioOf(pol.TTFT.P50, ref.TTFT.P50), ratioOf(pol.TTFT.P99, ref.TTFT.P99),
				ratioOf(pol.Goodput, ref.Goodput)),
			target: "<=1.15 / <=1.15 / >=0.9",
		})
	}
	if f.classesLight != "" || f.classesOver != "" {
		if f.classesLight == "" || f.classesOver == "" {
			return nil, errors.New("--classes-light and --classes-over go together")
		}
		r, err := f.classRows()
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if f.tenantsBeside != "" || f.tenantAlone != "" {
		if f.tenantsBeside == "" || f.tenantAlone == "" {
			return nil, errors.New("--tenants and --tenant-alone go together")
		}
		r, err := f.tenantRow()
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// classRows are priority's p99 growth from the light load to the
// overload, what was shed there, and flex's rate while requests waited
// against the capacity estimate less priority's rate then (the fleet's
// spare capacity). Both rates count the requests bound after waiting
// (saturationStat): where priority binds on arrival (a loose bound of its
// own) its rate reads low and the spare high.
func (f *admissionFiles) classRows() ([]admissionRow, error) {
	light, lp, err := f.read(f.classesLight)
	if err != nil {
		return nil, err
	}
	over, op, err := f.read(f.classesOver)
	if err != nil {
		return nil, err
	}
	lpr, ok1 := lp.Classes["priority"]
	opr, ok2 := op.Classes["priority"]
	if !ok1 || !ok2 {
		return nil, errors.New("no priority class in the classes runs (run simulate with --mix priority=...)")
	}
	seed := fmt.Sprintf("seed %d", over.Seed)
	rows := []admissionRow{{
		figure: fmt.Sprintf("%s: priority p99 TTFT at load %.2f over at %.2f", seed, over.OfferedLoad, light.OfferedLoad),
		measured: fmt.Sprintf("%.0f / %.0f ms = %s", opr.TTFT.P99, lpr.TTFT.P99,
			ratioOf(opr.TTFT.P99, lpr.TTFT.P99)),
		target: "<=1.25",
	}}
	var shed []string
	for _, c := range []string{"priority", "default", "flex"} {
		if n, ok := op.Shed[c]; ok {
			shed = append(shed, fmt.Sprintf("%s %d", c, n))
		}
	}
	rows = append(rows, admissionRow{
		figure:   fmt.Sprintf("%s: shed at load %.2f", seed, over.OfferedLoad),
		measured: strings.Join(shed, ", "),
		target:   "priority 0, only flex",
	})
	if s := op.Saturation; s != nil {
		spare := over.CapacityEstimate - s.Classes["priority"].RequestsPerS
		rows = append(rows, admissionRow{
			figure: fmt.Sprintf("%s: flex req/s while requests wait over the spare (capacity %.1f less priority's %.1f)", seed,
				over.CapacityEstimate, s.Classes["priority"].RequestsPerS),
			measured: fmt.Sprintf("%.1f / %.1f = %s", s.Classes["flex"].RequestsPerS, spare, ratioOf(s.Classes["flex"].RequestsPerS, spare)),
			target:   ">=0.9",
		})
	}
	return rows, nil
}

// tenantRow is the tenant's p99 TTFT beside the others over its run
// alone.
func (f *admissionFiles) tenantRow() (admissionRow, error) {
	beside, bp, err := f.read(f.tenantsBeside)
	if err != nil {
		return admissionRow{}, err
	}
	_, ap, err := f.read(f.tenantAlone)
	if err != nil {
		return admissionRow{}, err
	}
	b, ok1 := bp.Tenants[f.tenant]
	a, ok2 := ap.Tenants[f.tenant]
	if !ok1 || !ok2 {
		return admissionRow{}, fmt.Errorf("no tenant %q in the tenants runs (run simulate with --tenants, and --only-tenant for the run alone)", f.tenant)
	}
	return admissionRow{
		figure:   fmt.Sprintf("seed %d: tenant %s's p99 TTFT at load %.2f beside the others over alone", beside.Seed, f.tenant, beside.OfferedLoad),
		measured: fmt.Sprintf("%.0f / %.0f ms = %s", b.TTFT.P99, a.TTFT.P99, ratioOf(b.TTFT.P99, a.TTFT.P99)),
		target:   "<=1.2",
	}, nil
}

// read reads a simulate output and its row for the policy.
func (f *admissionFiles) read(name string) (simOutput, simResult, error) {
	run, err := readSimOutput(name)
	if err != nil {
		return run, simResult{}, err
	}
	r, ok := resultFor(run, f.policy)
	if !ok {
		return run, r, fmt.Errorf("%s: no row for policy %q", name, f.policy)
	}
	return run, r, nil
}

// resultFor is run's row for policy.
func resultFor(run simOutput, policy string) (simResult, bool) {
	for _, r := range run.Results {
		if r.Policy == policy {
			return r, true
		}
	}
	return simResult{}, false
}

// ratioOf is a/b to two places, or "-" when b is not a positive number.
func ratioOf(a, b float64) string {
	if !(b > 0) || math.IsInf(b, 0) || math.IsNaN(a) {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}
