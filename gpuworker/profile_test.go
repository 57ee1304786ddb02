package gpuworker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProfilesMatchGPUFacts(t *testing.T) {
	// KV tokens from GPU-FACTS §3 (util 0.9, A = 2 GB), within 2%.
	tests := []struct {
		name     string
		kvTokens float64
	}{
		{"h100-llama3-8b", 412e3},
		{"a100-80gb-llama3-8b", 412e3},
		{"a100-40gb-llama3-8b", 137e3},
		{"l4-llama3-8b", 27e3},
		{"a10g-llama3-8b", 27e3},
		{"2xh100-llama3-70b", 205e3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := LookupProfile(tt.name)
			require.NoError(t, err)
			require.NoError(t, p.Validate())
			assert.InEpsilon(t, tt.kvTokens, float64(p.KVTokens()), 0.02)
			assert.Equal(t, p.KVTokens()/BlockSize, p.KVBlocks())
			assert.Greater(t, p.DecodeCeiling(), 10.0)
			assert.Less(t, p.DecodeCeiling(), 300.0)
		})
	}
}

func TestLookupProfile(t *testing.T) {
	_, err := LookupProfile("tpu-v9")
	assert.ErrorIs(t, err, ErrUnknownProfile)

	p, err := LookupProfile(InstantProfile)
	require.NoError(t, err)
	assert.Zero(t, p.StepTime(10_000, 1_000_000))
	// Room for deploy/memory.sh's 100 prompts of 36,000 tokens at once,
	// with a bound on what its prefix cache keeps.
	assert.GreaterOrEqual(t, p.KVTokens(), 2*100*36_000)
	assert.LessOrEqual(t, p.KVTokens(), 1<<23)

	a := Profiles()
	a[0].Name = "changed"
	assert.NotEqual(t, "changed", Profiles()[0].Name, "Profiles returns a fresh slice")
}

func TestOutputLength(t *testing.T) {
	assert.Equal(t, 50, outputLength(123, 0, 50, true))
	for h := range uint64(200) {
		n := outputLength(h, 7, 50, false)
		assert.GreaterOrEqual(t, n, 1)
		assert.LessOrEqual(t, n, 50)
		assert.Equal(t, n, outputLength(h, 7, 50, false), "deterministic")
	}
	assert.Equal(t, 1, CountTokens(""))
	assert.Equal(t, 3, CountTokens("0123456789"))
	assert.Equal(t, 1+2+2*ChatTokensPerMessage, CountChatTokens([]string{"hi", "there"}))
}

func TestHostPerSeqCeiling(t *testing.T) {
	p, err := LookupProfile("h100-llama3-8b-vllm021")
	require.NoError(t, err)
	base, err := LookupProfile("h100-llama3-8b")
	require.NoError(t, err)
	// One sequence: the GPU dominates, as without a host cost.
	assert.Equal(t, base.StepTime(1, 600), p.StepTime(1, 600))
	// 64 decoding sequences: the host sets the step, 64 * HostPerSeq.
	var w StepWork
	for range 64 {
		w.add(1, 600)
	}
	assert.Equal(t, 64, w.Seqs)
	assert.Equal(t, 64*p.HostPerSeq, p.StepDuration(w))
	assert.Greater(t, p.StepDuration(w), base.StepDuration(w))
	// The ceiling is the source's plateau rate.
	assert.InEpsilon(t, float64(vllm021SaturationTokS), 64/p.StepDuration(w).Seconds(), 0.01)
}

func TestA100PrefillEfficiency(t *testing.T) {
	for _, p := range Profiles() {
		if strings.Contains(p.GPU, "A100") {
			assert.Equal(t, a100MFU, p.MFU, p.Name)
		}
	}
	p, err := LookupProfile("a100-80gb-llama3-8b")
	require.NoError(t, err)
	// A compute-bound prefill step runs at MFU x peak.
	var w StepWork
	w.add(8192, 0)
	flops := 2*p.Params*8192 + 2*float64(p.Layers)*float64(p.Hidden)*w.AttnWork
	assert.InEpsilon(t, flops/(a100MFU*p.FLOPS), (p.StepDuration(w) - p.StepOverhead).Seconds(), 1e-6)
}
