package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// azureTimeLayout accepts the trace's 7 fractional digits and any shorter
// fraction.
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// ReadAzureCSV reads an Azure LLM inference trace (columns TIMESTAMP,
// ContextTokens, GeneratedTokens, in any order, other columns ignored). Each
// row's Arrival is its TIMESTAMP minus the first row's. Rows must be sorted by
// time. Errors name the line.
func ReadAzureCSV(r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("azure trace: empty input, want a header row")
		}
		return nil, fmt.Errorf("azure trace header: %w", err)
	}
	col := map[string]int{"TIMESTAMP": -1, "ContextTokens": -1, "GeneratedTokens": -1}
	for i, name := range header {
		name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
		if _, ok := col[name]; ok {
			col[name] = i
		}
	}
	for name, i := range col {
		if i < 0 {
			return nil, fmt.Errorf("azure trace header: missing column %q", name)
		}
	}

	var (
		reqs []Request
		t0   time.Time
		prev time.Duration
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("azure trace: %w", err)
		}
		line, _ := cr.FieldPos(0)
		ts, err := time.Parse(azureTimeLayout, strings.TrimSpace(rec[col["TIMESTAMP"]]))
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: TIMESTAMP: %w", line, err)
		}
		prompt, err := positiveField(rec[col["ContextTokens"]])
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: ContextTokens: %w", line, err)
		}
		output, err := positiveField(rec[col["GeneratedTokens"]])
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: GeneratedTokens: %w", line, err)
		}
		if len(reqs) == 0 {
			t0 = ts
		}
		arrival := ts.Sub(t0)
		if arrival < prev {
			return nil, fmt.Errorf("azure trace line %d: TIMESTAMP %s is before the previous row; rows must be sorted by time", line, ts.Format(azureTimeLayout))
		}
		prev = arrival
		reqs = append(reqs, Request{Arrival: arrival, PromptTokens: prompt, OutputTokens: output})
	}
	return reqs, nil
}

// positiveField parses a token count that must be at least 1.
func positiveField(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("not an integer: %w", err)
	}
	if n < 1 {
		return 0, fmt.Errorf("%d is below 1", n)
	}
	return n, nil
}
