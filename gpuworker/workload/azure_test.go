package workload

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const workloadsDir = "../../../shared/workloads/"

func TestReadAzureCSV(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:17:03.9799600,4808,10\n" +
		"2023-11-16 18:17:04.0319600,3180,8\n" +
		"2023-11-16 18:17:05.5,7,1"
	reqs, err := ReadAzureCSV(strings.NewReader(in))
	require.NoError(t, err)
	assert.Equal(t, []Request{
		{Arrival: 0, PromptTokens: 4808, OutputTokens: 10},
		{Arrival: 52 * time.Millisecond, PromptTokens: 3180, OutputTokens: 8},
		{Arrival: 1520040 * time.Microsecond, PromptTokens: 7, OutputTokens: 1},
	}, reqs)
}

func TestReadAzureCSVColumnOrder(t *testing.T) {
	in := "GeneratedTokens,Extra,TIMESTAMP,ContextTokens\n5,x,2023-11-16 18:17:03.0,100\n"
	reqs, err := ReadAzureCSV(strings.NewReader(in))
	require.NoError(t, err)
	assert.Equal(t, []Request{{PromptTokens: 100, OutputTokens: 5}}, reqs)
}

func TestReadAzureCSVErrors(t *testing.T) {
	const h = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", "empty input"},
		{"missing column", "TIMESTAMP,ContextTokens\n", `missing column "GeneratedTokens"`},
		{"bad time", h + "2023-11-16 18:17:03.0,1,1\nyesterday,1,1\n", "line 3: TIMESTAMP"},
		{"bad prompt", h + "2023-11-16 18:17:03.0,abc,1\n", "line 2: ContextTokens: not an integer"},
		{"zero output", h + "2023-11-16 18:17:03.0,5,0\n", "line 2: GeneratedTokens: 0 is below 1"},
		{"unsorted", h + "2023-11-16 18:17:03.0,5,1\n2023-11-16 18:17:02.0,5,1\n", "line 3: TIMESTAMP 2023-11-16 18:17:02 is before"},
		{"short row", h + "2023-11-16 18:17:03.0,5\n", "wrong number of fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAzureCSV(strings.NewReader(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestReadAzureCSVRealTrace checks the figures the workloads README gives.
func TestReadAzureCSVRealTrace(t *testing.T) {
	f, err := os.Open(workloadsDir + "azure_llm_2023_code.csv")
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	defer f.Close()
	reqs, err := ReadAzureCSV(f)
	require.NoError(t, err)

	s := Summarize(reqs)
	assert.Equal(t, 8819, s.Requests)
	assert.InDelta(t, 2047.8, s.PromptMean, 0.05)
	assert.InDelta(t, 27.9, s.OutputMean, 0.05)
	assert.EqualValues(t, 18_059_974, s.PromptTotal)
	assert.EqualValues(t, 245_896, s.OutputTotal)
	assert.InDelta(t, 3435.9, s.Duration.Seconds(), 0.05)
	assert.InDelta(t, 2.57, s.RatePerSec, 0.005)
	assert.Equal(t, 7437, s.PromptMaxLen)
	assert.Zero(t, s.HashBlocks)
	assert.Zero(t, reqs[0].Arrival)
}

func TestSummarizeEmpty(t *testing.T) {
	assert.Equal(t, Summary{}, Summarize(nil))
	assert.False(t, math.IsNaN(Summarize([]Request{{PromptTokens: 1, OutputTokens: 1}}).RatePerSec))
}
