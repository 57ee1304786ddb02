package workload

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadMooncake(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 1000, "output_length": 6, "hash_ids": [0, 1]}

{"timestamp": 27, "input_length": 600, "output_length": 1, "hash_ids": [0, 2]}
{"timestamp": 27.5, "input_length": 13, "output_length": 3}
`
	reqs, err := ReadMooncake(strings.NewReader(in))
	require.NoError(t, err)
	assert.Equal(t, []Request{
		{Arrival: 0, PromptTokens: 1000, OutputTokens: 6, HashIDs: []int{0, 1}},
		{Arrival: 27 * time.Millisecond, PromptTokens: 600, OutputTokens: 1, HashIDs: []int{0, 2}},
		{Arrival: 27500 * time.Microsecond, PromptTokens: 13, OutputTokens: 3},
	}, reqs)
}

func TestReadMooncakeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"bad json", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n{oops\n", "line 2: invalid character"},
		{"missing field", `{"timestamp": 0, "output_length": 1}`, "line 1: missing input_length"},
		{"zero output", `{"timestamp": 0, "input_length": 4, "output_length": 0}`, "line 1: output_length 0 is below 1"},
		{"negative hash", `{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [-1]}`, "hash id -1 is negative"},
		{"unsorted", "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1}", "line 2: timestamp 4 is before"},
		{"negative time", `{"timestamp": -1, "input_length": 1, "output_length": 1}`, "timestamp -1 is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestReadMooncakeRealTrace checks the figures the workloads README gives.
func TestReadMooncakeRealTrace(t *testing.T) {
	f, err := os.Open(workloadsDir + "mooncake_fast25_synthetic.jsonl")
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	defer f.Close()
	reqs, err := ReadMooncake(f)
	require.NoError(t, err)

	s := Summarize(reqs)
	assert.Equal(t, 3993, s.Requests)
	assert.InDelta(t, 15325.5, s.PromptMean, 0.05)
	assert.InDelta(t, 149.1, s.OutputMean, 0.05)
	assert.EqualValues(t, 61_194_628, s.PromptTotal)
	assert.EqualValues(t, 595_432, s.OutputTotal)
	assert.Equal(t, 1_022_025*time.Millisecond, s.Duration)
	assert.Equal(t, 121_877, s.HashBlocks)
	assert.Equal(t, 191_378, s.PromptMaxLen)

	seen := map[int]bool{}
	repeats := 0
	for i, r := range reqs {
		require.Len(t, r.HashIDs, (r.PromptTokens+BlockTokens-1)/BlockTokens, "request %d", i)
		for _, id := range r.HashIDs {
			if seen[id] {
				repeats++
			}
			seen[id] = true
		}
	}
	assert.Len(t, seen, 43_924)
	assert.Equal(t, 77_953, repeats)
	assert.InDelta(t, 0.6512, IdealPrefixReuse(reqs), 0.0001, "an infinite cache serves about two thirds of the prompt tokens")

	_, dropped := DropLonger(reqs, 131_072)
	assert.Equal(t, 10, dropped)
}
