package gpuworker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// BlockSize is the number of tokens in one KV-cache block, vLLM's default.
const BlockSize = 16

// defaultActivationBytes is the per-GPU memory kept back for activations,
// CUDA graphs and non-torch allocations (GPU-FACTS §3, A ~ 1-3 GB).
const defaultActivationBytes = 2e9

// ErrUnknownProfile is returned by LookupProfile for a name it does not know.
var ErrUnknownProfile = errors.New("gpuworker: unknown profile")

// Profile describes one GPU (or tensor-parallel group) serving one model. It
// parameterises the roofline step-time model and the scheduler limits of an
// Engine. Byte and FLOP figures are totals across the TP group; the model
// divides them by TP itself.
type Profile struct {
	// Name identifies the profile, as in "h100-llama3-8b".
	Name string
	// GPU and Model are human-readable descriptions.
	GPU, Model string

	// TP is the tensor-parallel degree (number of GPUs). Zero means 1.
	TP int
	// HBMBytes is the memory of one GPU.
	HBMBytes float64
	// BandwidthBytes is the memory bandwidth of one GPU in bytes/s.
	BandwidthBytes float64
	// FLOPS is the dense peak of one GPU for the compute dtype.
	FLOPS float64
	// WeightBytes is the size of all weights (whole model, all GPUs).
	WeightBytes float64
	// KVBytesPerToken is the KV-cache size of one token (whole model).
	KVBytesPerToken float64
	// Params is the number of model parameters.
	Params float64
	// Layers and Hidden describe the model shape.
	Layers, Hidden int

	// MaxNumSeqs caps the running batch (vLLM max_num_seqs).
	MaxNumSeqs int
	// MaxBatchedTokens is the per-step token budget (vLLM max_num_batched_tokens).
	MaxBatchedTokens int
	// GPUUtil is the fraction of HBM the engine may use (vLLM gpu_memory_utilization).
	GPUUtil float64
	// ActivationBytes is per-GPU memory reserved outside weights and KV.
	ActivationBytes float64
	// EtaBW is the achieved fraction of peak bandwidth.
	EtaBW float64
	// MFU is the achieved fraction of peak FLOPS.
	MFU float64
	// StepOverhead is the fixed CPU/scheduler/launch cost of every step.
	StepOverhead time.Duration
	// HostPerSeq is the host-side (CPU) cost of one scheduled sequence in
	// one step: the API server's request and streaming work, the
	// scheduler's per-request bookkeeping and detokenization. It runs
	// overlapped with the GPU, so a step of B sequences takes
	// max(GPU step + StepOverhead, B*HostPerSeq): it sets a throughput
	// ceiling of 1/HostPerSeq tokens/s however fast the GPU is. Zero (the
	// default) models a host that always keeps up.
	HostPerSeq time.Duration
	// WholePrefill turns chunked prefill off, as in engines that run each
	// prompt in a single step (TensorRT-LLM without chunked context): a
	// waiting request is admitted only when its whole uncached prompt fits
	// in the step's remaining token budget, so prompts are never split
	// across steps. A prompt longer than MaxBatchedTokens, which could never
	// fit, is still chunked.
	WholePrefill bool

	// FixedKVTokens, when positive, replaces the KV capacity derived from
	// memory. The instant profile uses it.
	FixedKVTokens int
}

// tp returns the tensor-parallel degree, at least 1.
func (p Profile) tp() float64 {
	if p.TP < 1 {
		return 1
	}
	return float64(p.TP)
}

// KVTokens returns the KV-cache capacity in tokens:
// TP * (HBM*util - W/TP - A) / kv, never negative.
func (p Profile) KVTokens() int {
	if p.FixedKVTokens > 0 {
		return p.FixedKVTokens
	}
	if p.KVBytesPerToken <= 0 {
		return 0
	}
	perGPU := p.HBMBytes*p.GPUUtil - p.WeightBytes/p.tp() - p.ActivationBytes
	if perGPU <= 0 {
		return 0
	}
	return int(p.tp() * perGPU / p.KVBytesPerToken)
}

// KVBlocks returns the KV-cache capacity in BlockSize-token blocks.
func (p Profile) KVBlocks() int { return p.KVTokens() / BlockSize }

// StepWork sums the work of one engine step. The zero value is an empty
// step; add each scheduled sequence with add.
type StepWork struct {
	// Tokens is the number of tokens computed: prefill chunks plus one per
	// decoding sequence.
	Tokens int
	// ContextTokens is the sum over sequences of the tokens whose KV the
	// step reads or writes (tokens already cached plus the new ones).
	ContextTokens int
	// AttnWork is the sum over sequences of n*(n+2h) for n new tokens after
	// h cached ones; attention costs 2*L*d*AttnWork FLOPs.
	AttnWork float64
	// Seqs is the number of sequences in the step.
	Seqs int
}

// add counts one sequence computing n new tokens after h cached ones.
func (w *StepWork) add(n, h int) {
	w.Tokens += n
	w.Seqs++
	w.ContextTokens += h + n
	w.AttnWork += float64(n) * float64(n+2*h)
}

// StepDuration returns the duration of one engine step (GPU-FACTS §3):
//
//	t_mem  = (W + kv*ctx) / TP / (eta_bw*BW)
//	t_comp = (2*P*tokens + 2*L*d*sum(n*(n+2h))) / (TP*MFU*F)
//	t_gpu  = max(t_mem, t_comp) + t_fixed
//	t      = max(t_gpu, seqs*host_per_seq)
//
// The host term is zero unless HostPerSeq is set. A term whose hardware
// figure is zero counts as zero, so the instant profile costs nothing. It
// does not allocate.
func (p Profile) StepDuration(w StepWork) time.Duration {
	var tMem, tComp float64
	if bw := p.EtaBW * p.BandwidthBytes; bw > 0 {
		tMem = (p.WeightBytes + p.KVBytesPerToken*float64(w.ContextTokens)) / p.tp() / bw
	}
	if f := p.tp() * p.MFU * p.FLOPS; f > 0 {
		flops := 2*p.Params*float64(w.Tokens) + 2*float64(p.Layers)*float64(p.Hidden)*w.AttnWork
		tComp = flops / f
	}
	t := time.Duration(math.Max(tMem, tComp)*float64(time.Second)) + p.StepOverhead
	return max(t, time.Duration(w.Seqs)*p.HostPerSeq)
}

// StepTime returns the duration of a step of tokens tokens over contexts
// summing to contextTokens, without the attention term and counting every
// token as one sequence for the host term (exact for a decode-only step, an
// upper bound otherwise); StepDuration is the full model.
func (p Profile) StepTime(tokens, contextTokens int) time.Duration {
	return p.StepDuration(StepWork{Tokens: tokens, ContextTokens: contextTokens, Seqs: tokens})
}

// PrefillTime returns the duration of one step that prefills n prompt
// tokens after h cached ones, with nothing else in the batch.
func (p Profile) PrefillTime(n, h int) time.Duration {
	var w StepWork
	w.add(n, h)
	return p.StepDuration(w)
}

// DecodeCeiling returns the single-stream decode rate in tokens/s: one
// sequence with a short context, one token per step. Zero-cost profiles
// return +Inf.
func (p Profile) DecodeCeiling() float64 {
	d := p.StepTime(1, 0)
	if d <= 0 {
		return math.Inf(1)
	}
	return 1 / d.Seconds()
}

// Validate reports a profile the engine cannot run.
func (p Profile) Validate() error {
	switch {
	case p.MaxNumSeqs < 1:
		return fmt.Errorf("profile %q: MaxNumSeqs must be positive", p.Name)
	case p.MaxBatchedTokens < 1:
		return fmt.Errorf("profile %q: MaxBatchedTokens must be positive", p.Name)
	case p.KVBlocks() < 1:
		return fmt.Errorf("profile %q: model does not fit, no KV-cache blocks", p.Name)
	}
	return nil
}
