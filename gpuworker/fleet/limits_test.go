package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// TestTenantLimitsAreSimulated runs the live limit stage in virtual time:
// a tenant limited to 60 requests a minute (burst 10) gets 10 + 1 per
// second of the run, the unlimited one everything, and what the limited
// one is charged is what its requests used.
func TestTenantLimitsAreSimulated(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b")
	reqs, err := workload.Synthetic(workload.SyntheticOptions{
		Rate: 20, Count: 1200, Seed: 5,
		Prompt: workload.LengthDist{Mean: 256, Sigma: 0.3, Max: 1024},
		Output: workload.LengthDist{Mean: 32, Sigma: 0.3, Max: 128},
	})
	require.NoError(t, err)
	span := reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	res, err := Run(Options{Spec: spec, Pickers: pickers(t, roundrobin.New, 1), Tenants: []Tenant{
		{Name: "limited", Share: 1, Limits: quota.Limits{RequestsPerMinute: 60, RequestBurst: 10}},
		{Name: "open", Share: 1},
	}}, reqs)
	require.NoError(t, err)
	require.Len(t, res.Tenants, 2)
	lim, open := res.Tenants[0], res.Tenants[1]
	assert.Equal(t, len(reqs), lim.Requests+open.Requests)
	assert.InDelta(t, len(reqs)/2, lim.Requests, float64(len(reqs))/10, "shares deal about half each")
	assert.Empty(t, open.Limited)

	admitted := lim.Requests - lim.Limited[quota.DimRequests]
	want := 10 + span.Seconds() // burst + one a second
	assert.InDelta(t, want, float64(admitted), 2, "admitted over %v", span)

	var served, refused int
	var in, out int64
	for _, o := range res.Requests {
		switch {
		case strings.HasPrefix(o.Err, errLimited):
			refused++
		case o.OK:
			served++
		}
	}
	for _, st := range res.Tenants {
		in += st.InputTokens
		out += st.OutputTokens
	}
	assert.Equal(t, lim.Limited[quota.DimRequests], refused)
	assert.Equal(t, len(reqs)-refused, served, "every admitted request is served")
	var wantIn, wantOut int64
	for _, o := range res.Requests {
		if o.OK {
			wantIn += int64(o.PromptTokens)
			wantOut += int64(o.OutputTokens)
		}
	}
	assert.Equal(t, wantIn, in, "settled: charged what was used")
	assert.Equal(t, wantOut, out)
	assert.Greater(t, span, 50*time.Second)
}
