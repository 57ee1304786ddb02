package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// classFlags are the flags load and simulate share to give requests a
// service class (OpenAI's service_tier) and a tenant, and to split the
// report by them.
type classFlags struct {
	mix, tenants string
	onlyTenant   string

	mixShares, tenantShares []share // parsed by validate
}

// share is one NAME=WEIGHT item of --mix or --tenants.
type share struct {
	name   string
	weight float64
}

// Streams of the seeded draws, so --mix and --tenants draw independently of
// each other and of the workload.
const (
	mixStream    = 0x6d6978
	tenantStream = 0x74656e
)

func (c *classFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.mix, "mix", "", "service classes (OpenAI service_tier: priority, default, flex) drawn at random per request in these `shares`, e.g. priority=0.3,flex=0.7 (seeded by --seed); the report is then split by class. Shares are weights normalized to their sum, so priority=0.3 alone makes every request priority (write priority=0.3,default=0.7 for the rest to be default). Empty: every request is default")
	fs.StringVar(&c.tenants, "tenants", "", "tenants of one tier drawn at random per request so that their token shares are in these `proportions`, e.g. heavy=10,light=1 (seeded by --seed; equal weights); the report is then split by tenant")
	fs.StringVar(&c.onlyTenant, "only-tenant", "", "with --tenants, only this `tenant`'s requests, at the times and sizes they have beside the others: the tenant's run alone")
}

// validate parses --mix and --tenants.
func (c *classFlags) validate() error {
	var errs []error
	if c.mix != "" {
		shares, err := parseShares(c.mix)
		if err != nil {
			errs = append(errs, fmt.Errorf("--mix: %w", err))
		}
		for _, s := range shares {
			if _, ok := admission.ParseClass(s.name); !ok {
				errs = append(errs, fmt.Errorf("--mix: unknown class %q: want priority, default or flex", s.name))
			}
		}
		c.mixShares = shares
	}
	if c.tenants != "" {
		shares, err := parseShares(c.tenants)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tenants: %w", err))
		}
		c.tenantShares = shares
	}
	if c.onlyTenant != "" && len(errs) == 0 && !slices.Contains(c.tenantNames(), c.onlyTenant) {
		errs = append(errs, fmt.Errorf("--only-tenant %q: --tenants names no such tenant", c.onlyTenant))
	}
	return errors.Join(errs...)
}

// parseShares reads NAME=WEIGHT,... with distinct names and positive,
// finite weights.
func parseShares(s string) ([]share, error) {
	var out []share
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		name, v, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=WEIGHT", item)
		}
		w, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%q: the weight must be a positive number", item)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q named twice", name)
		}
		seen[name] = true
		out = append(out, share{name, w})
	}
	return out, nil
}

// draw returns n indices into shares drawn at random in proportion to
// their weights.
func draw(shares []share, n int, seed, stream uint64) []int {
	var total float64
	for _, s := range shares {
		total += s.weight
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	out := make([]int, n)
	for i := range out {
		u := rng.Float64() * total
		k := 0
		for k < len(shares)-1 && u >= shares[k].weight {
			u -= shares[k].weight
			k++
		}
		out[i] = k
	}
	return out
}

// classes returns each of n requests' class, or nil without --mix.
func (c *classFlags) classes(n int, seed uint64) []admission.Class {
	if c.mixShares == nil {
		return nil
	}
	byShare := make([]admission.Class, len(c.mixShares))
	for i, s := range c.mixShares {
		byShare[i], _ = admission.ParseClass(s.name)
	}
	out := make([]admission.Class, n)
	for i, k := range draw(c.mixShares, n, seed, mixStream) {
		out[i] = byShare[k]
	}
	return out
}

// tenantsOf returns each of n requests' tenant, or nil without --tenants.
// Requests are drawn independently of their sizes, so each tenant's share
// of the tokens is its share of the requests.
func (c *classFlags) tenantsOf(n int, seed uint64) []string {
	if c.tenantShares == nil {
		return nil
	}
	out := make([]string, n)
	for i, k := range draw(c.tenantShares, n, seed, tenantStream) {
		out[i] = c.tenantShares[k].name
	}
	return out
}

// draws returns each of n requests' class and tenant (nil without --mix,
// --tenants), keeping with --only-tenant that tenant's requests only, at
// their arrival times.
func (c *classFlags) draws(reqs []workload.Request, seed uint64) ([]workload.Request, []admission.Class, []string) {
	classes, tenantOf := c.classes(len(reqs), seed), c.tenantsOf(len(reqs), seed)
	if c.onlyTenant == "" {
		return reqs, classes, tenantOf
	}
	var kr []workload.Request
	var kc []admission.Class
	for i, t := range tenantOf {
		if t != c.onlyTenant {
			continue
		}
		kr = append(kr, reqs[i])
		if classes != nil {
			kc = append(kc, classes[i])
		}
	}
	kt := make([]string, len(kr))
	for i := range kt {
		kt[i] = c.onlyTenant
	}
	return kr, kc, kt
}

// tenantNames lists --tenants' names in the order given; nil without it.
func (c *classFlags) tenantNames() []string {
	if c.tenantShares == nil {
		return nil
	}
	names := make([]string, len(c.tenantShares))
	for i, s := range c.tenantShares {
		names[i] = s.name
	}
	return names
}

// classReport is one class's or tenant's part of a report: the load
// report's keys plus goodput, over the whole run's duration.
type classReport struct {
	report.Report
	Goodput float64 `json:"goodput"`
}

// splitReports summarizes the samples whose key (keyOf(i)) is each of
// keys, over the run's elapsed time.
func splitReports(samples []report.Sample, keys []string, keyOf func(i int) string, elapsed, ttft, tpot time.Duration) map[string]classReport {
	parts := make(map[string][]report.Sample, len(keys))
	for _, k := range keys {
		parts[k] = nil
	}
	for i, s := range samples {
		k := keyOf(i)
		if _, ok := parts[k]; ok {
			parts[k] = append(parts[k], s)
		}
	}
	out := make(map[string]classReport, len(keys))
	for k, ss := range parts {
		out[k] = classReport{Report: report.Summarize(ss, elapsed), Goodput: report.Goodput(ss, elapsed, ttft, tpot)}
	}
	return out
}

// classNames lists the names of the classes that occur in classes, best
// first; all three when classes is nil and all is set.
func classNames(classes []admission.Class) []string {
	var seen [admission.NumClasses]bool
	for _, c := range classes {
		seen[c] = true
	}
	var out []string
	for c := range admission.NumClasses {
		if seen[c] {
			out = append(out, c.String())
		}
	}
	return out
}

// writeSplit prints a table of a report split by class or tenant, in
// order, with the shed counts when shed is not nil, after a blank line.
func writeSplit(w io.Writer, by string, order []string, parts map[string]classReport, shed map[string]int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw)
	head := by + "\tok\tfailed\t"
	if shed != nil {
		head += "shed\t"
	}
	fmt.Fprintln(tw, head+"req/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\tTPOT p99 ms\tE2E p99 ms\tgoodput req/s\t")
	for _, k := range order {
		r, ok := parts[k]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t", k, r.Completed, r.Failed)
		if shed != nil {
			fmt.Fprintf(tw, "%d\t", shed[k])
		}
		fmt.Fprintf(tw, "%.2f\t%.1f\t%.0f\t%.0f\t%.1f\t%.0f\t%.2f\t\n",
			r.RequestThroughput, r.OutputThroughput, r.TTFT.P50, r.TTFT.P99, r.TPOT.P99, r.E2EL.P99, r.Goodput)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write %s table: %w", by, err)
	}
	return nil
}
