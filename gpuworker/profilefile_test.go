package gpuworker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadProfilesOverridesAndAdds(t *testing.T) {
	doc := `
profiles:
  - name: h100-llama3-8b
    eta_bw: 0.6
    step_overhead: 2ms
  - name: h200-llama3-8b
    base: h100-llama3-8b
    gpu: H200 SXM
    hbm_bytes: 141e9
    bandwidth_bytes_per_s: 4.8e12
  - name: custom
    hbm_bytes: 24e9
    bandwidth_bytes_per_s: 300e9
    flops: 121e12
    weight_bytes: 16e9
    kv_bytes_per_token: 131072
    params: 8e9
    layers: 32
    hidden: 4096
`
	ps, err := LoadProfiles(strings.NewReader(doc))
	require.NoError(t, err)
	require.Len(t, ps, 3)

	builtin, err := LookupProfile("h100-llama3-8b")
	require.NoError(t, err)
	assert.InDelta(t, 0.6, ps[0].EtaBW, 1e-9)
	assert.Equal(t, 2*time.Millisecond, ps[0].StepOverhead)
	assert.Equal(t, builtin.MFU, ps[0].MFU, "unset fields keep the built-in value")

	assert.Equal(t, "H200 SXM", ps[1].GPU)
	assert.InDelta(t, 0.6, ps[1].EtaBW, 1e-9, "base is the overridden profile from earlier in the file")
	assert.Greater(t, ps[1].KVTokens(), builtin.KVTokens())

	assert.Equal(t, 256, ps[2].MaxNumSeqs, "new profiles get vLLM defaults")
	assert.Equal(t, 1, ps[2].TP)

	set := NewProfileSet(ps)
	got, err := set.Lookup("h100-llama3-8b")
	require.NoError(t, err)
	assert.InDelta(t, 0.6, got.EtaBW, 1e-9, "file profile replaces the built-in")
	_, err = set.Lookup("custom")
	require.NoError(t, err)
	assert.Len(t, set.All(), len(Profiles())+2)
	_, err = set.Lookup("nope")
	assert.ErrorIs(t, err, ErrUnknownProfile)

	orig, _ := NewProfileSet(nil).Lookup("h100-llama3-8b")
	assert.Equal(t, builtin, orig, "sets do not share state")
}

func TestLoadProfilesErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", "profiles:\n  - name: a\n    eta: 1\n", "eta"},
		{"missing name", "profiles:\n  - eta_bw: 0.5\n", "name is required"},
		{"eta out of range", "profiles:\n  - name: h100-llama3-8b\n    eta_bw: 1.5\n", "eta_bw"},
		{"mfu zero", "profiles:\n  - name: h100-llama3-8b\n    mfu: 0\n", "mfu"},
		{"tp", "profiles:\n  - name: h100-llama3-8b\n    tp: 0\n", "tp"},
		{"budget", "profiles:\n  - name: h100-llama3-8b\n    max_batched_tokens: 0\n", "max_batched_tokens"},
		{"no hardware", "profiles:\n  - name: fresh\n", "hbm_bytes"},
		{"does not fit", "profiles:\n  - name: l4-llama3-8b\n    weight_bytes: 100e9\n", "weight_bytes"},
		{"bad base", "profiles:\n  - name: a\n    base: nope\n", "base"},
		{"duplicate", "profiles:\n  - name: h100-llama3-8b\n  - name: h100-llama3-8b\n", "duplicate"},
		{"bad duration", "profiles:\n  - name: h100-llama3-8b\n    step_overhead: soon\n", "line 3"},
		{"negative overhead", "profiles:\n  - name: h100-llama3-8b\n    step_overhead: -1ms\n", "step_overhead"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadProfiles(strings.NewReader(tt.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoadProfilesEmpty(t *testing.T) {
	ps, err := LoadProfiles(strings.NewReader(""))
	require.NoError(t, err)
	assert.Empty(t, ps)
}

func TestLoadProfilesHostFields(t *testing.T) {
	ps, err := LoadProfiles(strings.NewReader("profiles:\n  - name: h\n    base: h100-llama3-8b\n    host_per_seq: 700us\n    whole_prefill: true\n"))
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, 700*time.Microsecond, ps[0].HostPerSeq)
	assert.True(t, ps[0].WholePrefill)
	_, err = LoadProfiles(strings.NewReader("profiles:\n  - name: h\n    base: h100-llama3-8b\n    host_per_seq: -1ms\n"))
	assert.ErrorContains(t, err, "host_per_seq")
}
