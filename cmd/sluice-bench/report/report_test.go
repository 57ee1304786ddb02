package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	data := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		p    float64
		want float64
	}{
		// numpy.percentile(range(1, 11), p)
		{0, 1}, {50, 5.5}, {90, 9.1}, {99, 9.91}, {100, 10}, {25, 3.25},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.p), func(t *testing.T) {
			assert.InDelta(t, tt.want, Percentile(data, tt.p), 1e-9)
		})
	}
	assert.Zero(t, Percentile(nil, 50))
	assert.Equal(t, 7.0, Percentile([]float64{7}, 99))
}

func TestNewDist(t *testing.T) {
	ds := []time.Duration{40 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond}
	d := NewDist(ds)
	assert.InDelta(t, 25, d.Mean, 1e-9)
	assert.InDelta(t, 25, d.P50, 1e-9)
	assert.InDelta(t, 37, d.P90, 1e-9)
	assert.InDelta(t, 39.7, d.P99, 1e-9)
	assert.Equal(t, 40*time.Millisecond, ds[0], "NewDist must not reorder its input")
	assert.Equal(t, Dist{}, NewDist(nil))
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{OK: true, PromptTokens: 100, OutputTokens: 3, TTFT: 10 * ms, E2E: 30 * ms, ITL: []time.Duration{8 * ms, 12 * ms}},
		{OK: true, PromptTokens: 50, OutputTokens: 1, TTFT: 20 * ms, E2E: 20 * ms},
		{OK: false, Err: "boom"},
		{Cancelled: true, PromptTokens: 999},
	}
	r := Summarize(samples, 2*time.Second)
	assert.Equal(t, 2, r.Completed)
	assert.Equal(t, 1, r.Failed)
	assert.Equal(t, 1, r.Cancelled)
	assert.EqualValues(t, 150, r.TotalInputTokens)
	assert.EqualValues(t, 4, r.TotalOutputTokens)
	assert.InDelta(t, 1, r.RequestThroughput, 1e-9)
	assert.InDelta(t, 2, r.OutputThroughput, 1e-9)
	assert.InDelta(t, 15, r.TTFT.Mean, 1e-9)
	assert.InDelta(t, 10, r.TPOT.Mean, 1e-9, "only the 3-token request has a TPOT: (30-10)/2")
	assert.InDelta(t, 10, r.ITL.Mean, 1e-9)
	assert.InDelta(t, 25, r.E2EL.Mean, 1e-9)
	assert.Equal(t, map[string]int{"boom": 1}, r.Errors)
}

func TestSummarizeBoundsErrorKinds(t *testing.T) {
	var samples []Sample
	for i := range 25 {
		samples = append(samples, Sample{Err: fmt.Sprintf("error %d", i)})
	}
	r := Summarize(samples, 0)
	assert.Len(t, r.Errors, maxErrorKinds+1)
	assert.Equal(t, 15, r.Errors[otherErrors])
	assert.Zero(t, r.RequestThroughput, "no division by a zero duration")
}

func TestWriteJSONKeys(t *testing.T) {
	r := Summarize([]Sample{{OK: true, PromptTokens: 1, OutputTokens: 2, TTFT: time.Millisecond, E2E: 3 * time.Millisecond, ITL: []time.Duration{2 * time.Millisecond}}}, time.Second)
	var buf bytes.Buffer
	require.NoError(t, r.WriteJSON(&buf))

	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	for _, key := range []string{"completed", "failed", "request_throughput", "output_throughput", "duration_s", "total_input_tokens", "total_output_tokens"} {
		assert.Contains(t, got, key)
	}
	for _, key := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"} {
		require.Contains(t, got, key)
		obj, ok := got[key].(map[string]any)
		require.True(t, ok, "%s is an object", key)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		assert.Equal(t, []string{"mean", "p50", "p90", "p99"}, keys, key)
	}
	assert.NotContains(t, got, "errors", "errors is omitted when empty")
	assert.InDelta(t, 2.0, got["tpot_ms"].(map[string]any)["p99"], 1e-9)
}

func TestWriteTable(t *testing.T) {
	r := Summarize([]Sample{
		{OK: true, PromptTokens: 10, OutputTokens: 2, TTFT: time.Millisecond, E2E: 2 * time.Millisecond},
		{Err: "status 500"},
	}, time.Second)
	var buf bytes.Buffer
	require.NoError(t, r.WriteTable(&buf))
	out := buf.String()
	for _, want := range []string{
		"Successful requests:                    1\n",
		"Failed requests:                        1\n",
		"Request throughput (req/s):             1.00\n",
		"Median TTFT (ms):                       1.00\n",
		"P99 E2EL (ms):                          2.00\n",
		"     1  status 500\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "Cancelled")
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "=") || strings.HasPrefix(line, "-") {
			assert.Len(t, line, tableWidth+1, line)
		}
	}

	assert.Error(t, r.WriteTable(failingWriter{}))
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
