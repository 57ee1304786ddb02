package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// maxMooncakeLine bounds one JSONL record; the longest real record (374 hash
// ids) is a few kilobytes.
const maxMooncakeLine = 16 << 20

// mooncakeRecord is one line of a Mooncake trace. Pointers tell a missing
// field from a zero.
type mooncakeRecord struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []int    `json:"hash_ids"`
}

// ReadMooncake reads a Mooncake trace: JSON Lines with timestamp (ms from the
// start of the trace), input_length, output_length and hash_ids (one id per
// BlockTokens-token block of the prompt). Arrival is the timestamp minus the
// first record's. Blank lines are skipped; records must be sorted by
// timestamp. Errors name the line.
func ReadMooncake(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMooncakeLine)
	var (
		reqs   []Request
		t0     float64
		prevMs float64
		line   int
	)
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec mooncakeRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("mooncake trace line %d: %w", line, err)
		}
		if err := rec.check(); err != nil {
			return nil, fmt.Errorf("mooncake trace line %d: %w", line, err)
		}
		ts := *rec.Timestamp
		if len(reqs) == 0 {
			t0, prevMs = ts, ts
		}
		if ts < prevMs {
			return nil, fmt.Errorf("mooncake trace line %d: timestamp %v is before the previous record; records must be sorted", line, ts)
		}
		prevMs = ts
		var ids []int
		if len(rec.HashIDs) > 0 {
			ids = rec.HashIDs
		}
		reqs = append(reqs, Request{
			Arrival:      time.Duration(math.Round((ts - t0) * float64(time.Millisecond))),
			PromptTokens: *rec.InputLength,
			OutputTokens: *rec.OutputLength,
			HashIDs:      ids,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mooncake trace line %d: %w", line+1, err)
	}
	return reqs, nil
}

// check validates the fields of one record.
func (r *mooncakeRecord) check() error {
	var errs []error
	switch {
	case r.Timestamp == nil:
		errs = append(errs, errors.New("missing timestamp"))
	case *r.Timestamp < 0 || math.IsNaN(*r.Timestamp) || math.IsInf(*r.Timestamp, 0):
		errs = append(errs, fmt.Errorf("timestamp %v is not a non-negative number", *r.Timestamp))
	}
	switch {
	case r.InputLength == nil:
		errs = append(errs, errors.New("missing input_length"))
	case *r.InputLength < 1:
		errs = append(errs, fmt.Errorf("input_length %d is below 1", *r.InputLength))
	}
	switch {
	case r.OutputLength == nil:
		errs = append(errs, errors.New("missing output_length"))
	case *r.OutputLength < 1:
		errs = append(errs, fmt.Errorf("output_length %d is below 1", *r.OutputLength))
	}
	for _, id := range r.HashIDs {
		if id < 0 {
			errs = append(errs, fmt.Errorf("hash id %d is negative", id))
			break
		}
	}
	return errors.Join(errs...)
}
