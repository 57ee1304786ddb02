package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-llm/sluice/gpuworker"
)

// Three profile parameters were fitted to particular published rows and
// are set on some profiles only: HostPerSeq (h100-llama3-8b-vllm021, from
// vLLM 0.21's plateau), WholePrefill (the TensorRT-LLM 70B profile, NIM's
// c=50 TTFT) and the H100's visible memory (85.5e9 bytes instead of the
// nominal 80e9, on the 70B FP8-KV profiles, NIM's saturation). The
// sensitivity runs rerun the rows with each one removed, varied, or
// applied to every profile, so the report shows which rows lean on it. The
// A100 profiles' measured prefill efficiency is reported the same way.

// sensitivityVariant is one change of one fitted parameter.
type sensitivityVariant struct {
	param   string
	variant string
	// adjust changes a profile in place. Profiles it leaves equal are not
	// rerun.
	adjust func(*gpuworker.Profile)
	// undoesFit marks the variants that take a fitted value back to what
	// it would be without the fit.
	undoesFit bool
}

// sensitivityRow pairs a row as validated with the same row rerun under a
// variant.
type sensitivityRow struct {
	base, varied validationRow
}

// sensitivityResult is every row a variant changed the profile of.
type sensitivityResult struct {
	variant sensitivityVariant
	rows    []sensitivityRow
}

// sensitivityVariants derives the variants from the profile set, so they
// follow the fitted values wherever the profiles define them.
func sensitivityVariants(profiles gpuworker.ProfileSet) ([]sensitivityVariant, error) {
	hostProf, err := profiles.Lookup(vllmH100)
	if err != nil {
		return nil, err
	}
	visibleProf, err := profiles.Lookup(nim70B)
	if err != nil {
		return nil, err
	}
	nominalProf, err := profiles.Lookup(h100)
	if err != nil {
		return nil, err
	}
	host, visible, nominal := hostProf.HostPerSeq, visibleProf.HBMBytes, nominalProf.HBMBytes
	a100Prof, err := profiles.Lookup(a100)
	if err != nil {
		return nil, err
	}
	isA100 := func(p *gpuworker.Profile) bool { return strings.Contains(p.GPU, "A100") }
	scaleHost := func(f float64) func(*gpuworker.Profile) {
		return func(p *gpuworker.Profile) {
			p.HostPerSeq = time.Duration(float64(p.HostPerSeq) * f)
		}
	}
	isH100 := func(p *gpuworker.Profile) bool { return strings.Contains(p.GPU, "H100") }
	return []sensitivityVariant{
		{"HostPerSeq", "removed where set", scaleHost(0), true},
		{"HostPerSeq", "x0.8 where set", scaleHost(0.8), false},
		{"HostPerSeq", "x1.2 where set", scaleHost(1.2), false},
		{"HostPerSeq", fmt.Sprintf("%v on every profile", host.Round(time.Microsecond)), func(p *gpuworker.Profile) {
			if p.HostPerSeq == 0 {
				p.HostPerSeq = host
			}
		}, false},
		{"WholePrefill", "off where set (chunked prefill)", func(p *gpuworker.Profile) { p.WholePrefill = false }, true},
		{"WholePrefill", "on for every profile", func(p *gpuworker.Profile) { p.WholePrefill = true }, false},
		{"H100 memory", fmt.Sprintf("nominal %.1f GB where %.1f GB is set", nominal/1e9, visible/1e9), func(p *gpuworker.Profile) {
			if isH100(p) && p.HBMBytes == visible {
				p.HBMBytes = nominal
			}
		}, true},
		{"H100 memory", fmt.Sprintf("%.1f GB on every H100 profile", visible/1e9), func(p *gpuworker.Profile) {
			if isH100(p) {
				p.HBMBytes = visible
			}
		}, false},
		{"A100 MFU", fmt.Sprintf("%.2f (the H100's) instead of %.2f", nominalProf.MFU, a100Prof.MFU), func(p *gpuworker.Profile) {
			if isA100(p) {
				p.MFU = nominalProf.MFU
			}
		}, true},
	}, nil
}

// runSensitivity reruns, for each variant, the cases whose profile the
// variant changes. base is runValidation's output for the same cases.
func runSensitivity(profiles gpuworker.ProfileSet, cases []validationCase, base []validationRow) ([]sensitivityResult, error) {
	variants, err := sensitivityVariants(profiles)
	if err != nil {
		return nil, err
	}
	out := make([]sensitivityResult, 0, len(variants))
	for _, v := range variants {
		res := sensitivityResult{variant: v}
		first := 0 // index in base of the case's first row
		for _, vc := range cases {
			p, err := profiles.Lookup(vc.profile)
			if err != nil {
				return nil, err
			}
			q := p
			v.adjust(&q)
			if q != p {
				rows, err := runValidation(profiles, []validationCase{vc}, v.adjust)
				if err != nil {
					return nil, fmt.Errorf("sensitivity %s %s: %w", v.param, v.variant, err)
				}
				for i, r := range rows {
					res.rows = append(res.rows, sensitivityRow{base: base[first+i], varied: r})
				}
			}
			first += len(vc.figures)
		}
		out = append(out, res)
	}
	return out, nil
}

// sensitivityMinDelta is the smallest ratio change the report lists.
const sensitivityMinDelta = 0.005

// writeSensitivity prints, per variant, how many rows it reran and how
// many stayed in bounds, then every row whose ratio moved.
func writeSensitivity(w io.Writer, results []sensitivityResult) error {
	fmt.Fprintf(w, "\nSensitivity of the fitted parameters (ratio as built -> with the change; rows that moved by %.3f or more):\n", sensitivityMinDelta)
	for _, res := range results {
		var inBefore, inAfter, moved int
		for _, r := range res.rows {
			if r.base.inBounds() {
				inBefore++
			}
			if r.varied.inBounds() {
				inAfter++
			}
			if math.Abs(r.varied.Ratio-r.base.Ratio) >= sensitivityMinDelta {
				moved++
			}
		}
		fmt.Fprintf(w, "\n%s %s: %d rows rerun, %d moved; within bounds %d -> %d\n",
			res.variant.param, res.variant.variant, len(res.rows), moved, inBefore, inAfter)
		if moved == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "profile\tsource\trun\tmetric\tpublished\tratio\tchanged\t\t")
		for _, r := range res.rows {
			if math.Abs(r.varied.Ratio-r.base.Ratio) < sensitivityMinDelta {
				continue
			}
			mark := ""
			if !r.varied.inBounds() {
				mark = "out"
			}
			b := r.base
			fmt.Fprintf(tw, "%s\t%s\t%s=%d\t%s\t%.2f\t%.2f\t%.2f\t%s\t\n",
				b.Profile, b.Source, b.Mode, b.Concurrency, b.Metric, b.Published, b.Ratio, r.varied.Ratio, mark)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
