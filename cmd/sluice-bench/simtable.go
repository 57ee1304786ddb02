package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/policies"
)

// Output modes of --table.
const (
	tableFull    = "full"
	tableCompact = "compact"
	allPolicies  = "all"
)

// policyRow is one row to simulate: a registered policy with its params, or
// the oracle.
type policyRow struct {
	label  string // as written, e.g. "p2c" or "scored:{queue: 2}"
	name   string
	params map[string]any
	oracle bool
}

// policyRows expands --policy and --oracle into the rows to simulate.
// "default" is the configured default policy, "all" every registered one;
// NAME:{k: v} gives a policy params as a YAML flow map.
func (f *simFlags) policyRows(reg *policies.Registry) ([]policyRow, error) {
	var rows []policyRow
	for _, item := range splitTop(f.policies) {
		name, rawParams, hasParams := strings.Cut(item, ":")
		name = strings.TrimSpace(name)
		switch {
		case name == allPolicies && !hasParams:
			for _, n := range reg.Names() {
				rows = append(rows, policyRow{label: n, name: n})
			}
			continue
		case name == defaultPolicyAlias:
			name = configs.DefaultPolicy
		}
		row := policyRow{label: item, name: name}
		if !hasParams {
			row.label = name
		} else if err := yaml.Unmarshal([]byte(rawParams), &row.params); err != nil {
			return nil, fmt.Errorf("--policy %q: params: %w", item, err)
		}
		rows = append(rows, row)
	}
	if f.oracle {
		rows = append(rows, policyRow{label: oracleName, name: oracleName, oracle: true})
	}
	if len(rows) == 0 {
		return nil, errors.New("--policy names no policy")
	}
	return rows, nil
}

// splitTop splits s at commas outside braces and brackets, trimming each
// item and dropping empty ones, so "a,b:{x: 1, y: 2}" is two items.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	flush := func(end int) {
		if item := strings.TrimSpace(s[start:end]); item != "" {
			out = append(out, item)
		}
		start = end + 1
	}
	for i, c := range s {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				flush(i)
			}
		}
	}
	flush(len(s))
	return out
}

// scenario is the compact table's header line; offered is the workload's
// mean arrival rate over the capacity estimate.
func (f *simFlags) scenario(spec fleet.Spec, capacity, offered float64, requests int) string {
	src := "synthetic"
	if f.trace != "" {
		src = filepath.Base(f.trace)
	}
	how := "--load"
	if f.trace != "" && f.load == 0 {
		how = "trace timing"
	}
	limit := ""
	if f.requests > 0 {
		limit = fmt.Sprintf(" (first %d, --requests)", f.requests)
	}
	scrape := "off"
	if f.scrapeInterval > 0 {
		scrape = f.scrapeInterval.String()
	}
	return fmt.Sprintf("fleet %s | %s | %s: offered %.2fx est. capacity %.2f req/s | %d requests%s | routers %d | scrape %s | goodput: TTFT<=%v, TPOT<=%v",
		spec, src, how, offered, capacity, requests, limit, f.routers, scrape, f.goodTTFT, f.goodTPOT)
}

// writeCompact prints the scenario header and one line per policy with the
// columns policies are compared on, each followed by a line per class and
// per tenant ("  class priority") when the report is split, and a shed
// column with admission.
func writeCompact(w io.Writer, header string, rows []simResult, order splitOrder) error {
	if _, err := fmt.Fprintf(w, "\n== %s\n", header); err != nil {
		return fmt.Errorf("write compact table: %w", err)
	}
	shed := false
	for _, r := range rows {
		shed = shed || r.Shed != nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "policy\tok\tfailed\tTTFT p50 ms\tTTFT p99 ms\tTPOT p99 ms\tgoodput req/s\tE2E p99 ms\tprefix hit\tutil\tutil spread\t"
	if shed {
		head += "shed\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.2f\t%.0f\t%.4f\t%.3f\t%.3f\t",
			r.Policy, r.Completed, r.Failed, r.TTFT.P50, r.TTFT.P99, r.TPOT.P99, r.Goodput, r.E2EL.P99,
			r.PrefixHitRatio, r.Utilization, r.UtilSpread)
		if shed {
			n := 0
			for _, k := range r.Shed {
				n += k
			}
			fmt.Fprintf(tw, "%d\t", n)
		}
		fmt.Fprintln(tw)
		part := func(label string, p classReport, shedN string) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.2f\t%.0f\t-\t-\t-\t",
				label, p.Completed, p.Failed, p.TTFT.P50, p.TTFT.P99, p.TPOT.P99, p.Goodput, p.E2EL.P99)
			if shed {
				fmt.Fprintf(tw, "%s\t", shedN)
			}
			fmt.Fprintln(tw)
		}
		for _, k := range order.classes {
			if p, ok := r.Classes[k]; ok {
				n := "-"
				if r.Shed != nil {
					n = fmt.Sprint(r.Shed[k])
				}
				part("class "+k, p, n)
			}
		}
		for _, k := range order.tenants {
			if p, ok := r.Tenants[k]; ok {
				part("tenant "+k, p, "-")
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write compact table: %w", err)
	}
	return nil
}
