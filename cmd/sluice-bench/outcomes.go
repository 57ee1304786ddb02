package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sluice-llm/sluice/gpuworker/fleet"
	"github.com/sluice-llm/sluice/gpuworker/workload"
)

// outcomesHeader names the columns of simulate --outcomes.
var outcomesHeader = []string{"policy", "request", "arrival_s", "class", "tenant", "worker", "profile",
	"prompt_tokens", "output_tokens", "ok", "ttft_ms", "e2e_ms", "held_ms", "expected_ttft_ms", "quickest_ttft_ms"}

// outcomesFile writes one CSV line per request and policy row, so that a
// figure (a tail, say) can be traced to the requests that make it.
type outcomesFile struct {
	f *os.File
	w *csv.Writer // buffered
}

func createOutcomes(path string) (*outcomesFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create outcomes: %w", err)
	}
	o := &outcomesFile{f: f, w: csv.NewWriter(f)}
	if err := o.w.Write(outcomesHeader); err != nil {
		f.Close()
		return nil, fmt.Errorf("write outcomes: %w", err)
	}
	return o, nil
}

// add writes the requests of one policy row. Times are in milliseconds;
// the estimates are empty where none was recorded (the reference row, or
// before a worker's prefill rate was first measured).
func (o *outcomesFile) add(label string, spec fleet.Spec, reqs []workload.Request, res *fleet.Result) error {
	profiles := spec.Profiles()
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	est := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return ms(d)
	}
	row := make([]string, len(outcomesHeader))
	for i, out := range res.Requests {
		profile := ""
		if out.Worker >= 0 && out.Worker < len(profiles) {
			profile = profiles[out.Worker].Name
		}
		row = append(row[:0], label, strconv.Itoa(i), strconv.FormatFloat(reqs[i].Arrival.Seconds(), 'f', 3, 64),
			out.Class.String(), out.Tenant, strconv.Itoa(out.Worker), profile,
			strconv.Itoa(out.PromptTokens), strconv.Itoa(out.OutputTokens), strconv.FormatBool(out.OK),
			ms(out.TTFT), ms(out.E2E), ms(out.Held), est(out.ExpectedTTFT), est(out.QuickestTTFT))
		if err := o.w.Write(row); err != nil {
			return fmt.Errorf("write outcomes: %w", err)
		}
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
