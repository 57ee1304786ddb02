package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sluice-llm/sluice/cmd/sluice-bench/report"
	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/admission"
)

// simOutcomesHeader names the columns of simulate --outcomes, and
// loadOutcomesHeader those of load --outcomes.
var (
	simOutcomesHeader = []string{"policy", "request", "arrival_s", "class", "tenant", "worker", "profile",
		"prompt_tokens", "output_tokens", "ok", "ttft_ms", "e2e_ms", "held_ms", "expected_ttft_ms", "quickest_ttft_ms"}
	loadOutcomesHeader = []string{"request", "arrival_s", "class", "tenant", "prompt_tokens", "output_tokens",
		"ok", "error", "ttft_ms", "e2e_ms"}
)

// outcomesFile writes one CSV line per request (and, for simulate, per
// policy row), so that a figure (a tail, say) can be traced to the
// requests that make it.
type outcomesFile struct {
	f *os.File
	w *csv.Writer // buffered
}

func createOutcomes(path string, header []string) (*outcomesFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create outcomes: %w", err)
	}
	o := &outcomesFile{f: f, w: csv.NewWriter(f)}
	if err := o.w.Write(header); err != nil {
		f.Close()
		return nil, fmt.Errorf("write outcomes: %w", err)
	}
	return o, nil
}

func (o *outcomesFile) write(row []string) error {
	if err := o.w.Write(row); err != nil {
		return fmt.Errorf("write outcomes: %w", err)
	}
	return nil
}

// close flushes and closes the file; a second call does nothing.
func (o *outcomesFile) close() error {
	if o.f == nil {
		return nil
	}
	defer func() { o.f = nil }()
	o.w.Flush()
	err := o.w.Error()
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write outcomes: %w", err)
	}
	return nil
}

func msField(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// addSim writes the requests of one simulated policy row. The estimates
// are empty where none was recorded (the reference row, or before a
// worker's prefill rate was first measured).
func (o *outcomesFile) addSim(label string, spec fleet.Spec, reqs []workload.Request, res *fleet.Result) error {
	profiles := spec.Profiles()
	est := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return msField(d)
	}
	row := make([]string, 0, len(simOutcomesHeader))
	for i, out := range res.Requests {
		profile := ""
		if out.Worker >= 0 && out.Worker < len(profiles) {
			profile = profiles[out.Worker].Name
		}
		row = append(row[:0], label, strconv.Itoa(i), strconv.FormatFloat(reqs[i].Arrival.Seconds(), 'f', 3, 64),
			out.Class.String(), out.Tenant, strconv.Itoa(out.Worker), profile,
			strconv.Itoa(out.PromptTokens), strconv.Itoa(out.OutputTokens), strconv.FormatBool(out.OK),
			msField(out.TTFT), msField(out.E2E), msField(out.Held), est(out.ExpectedTTFT), est(out.QuickestTTFT))
		if err := o.write(row); err != nil {
			return err
		}
	}
	return nil
}

// writeLoadOutcomes writes load --outcomes: one line per request sent, with
// its class and tenant when the run drew them (classes and tenantOf follow
// the workload's order, as the samples do).
func writeLoadOutcomes(path string, reqs []workload.Request, classes []admission.Class, tenantOf []string, samples []report.Sample) error {
	o, err := createOutcomes(path, loadOutcomesHeader)
	if err != nil {
		return err
	}
	row := make([]string, 0, len(loadOutcomesHeader))
	for i, s := range samples {
		class, tenant := "", ""
		if i < len(classes) {
			class = classes[i].String()
		}
		if i < len(tenantOf) {
			tenant = tenantOf[i]
		}
		row = append(row[:0], strconv.Itoa(i), strconv.FormatFloat(reqs[i].Arrival.Seconds(), 'f', 3, 64), class, tenant,
			strconv.Itoa(s.PromptTokens), strconv.Itoa(s.OutputTokens), strconv.FormatBool(s.OK), s.Err,
			msField(s.TTFT), msField(s.E2E))
		if err := o.write(row); err != nil {
			o.close()
			return err
		}
	}
	return o.close()
}
