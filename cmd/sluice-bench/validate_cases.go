package main

import "math"

// Published serving measurements that "sluice-bench validate" reproduces,
// taken from ../shared/GPU-FACTS.md §4 and §6. Each case is one benchmark
// point: a profile, fixed prompt and output lengths, and either a closed
// loop of clients (a serving benchmark) or one batch run to completion (an
// offline benchmark). Rows GPU-FACTS lists that no built-in profile can
// reproduce are in validationExclusions with the reason.

// Metric names, as printed and in JSON.
const (
	metricTTFT      = "ttft_ms"      // mean time to first token
	metricTTFTP50   = "ttft_p50_ms"  // median time to first token
	metricITL       = "itl_ms"       // mean over requests of (e2e-ttft)/(output-1)
	metricTPOTP50   = "tpot_p50_ms"  // median of the same per-request figure
	metricOutputTok = "output_tok_s" // aggregate output tokens per second
	metricBatchE2E  = "batch_e2e_ms" // batch mode: until the last request finishes
)

// runMode is how a case drives the engine.
type runMode uint8

const (
	// closedLoop: concurrency clients, each sending its next request the
	// moment the previous one finishes (llmperf, vLLM benchmark_serving
	// with --max-concurrency, NIM's genai-perf).
	closedLoopMode runMode = iota
	// staticBatch: concurrency requests submitted together and run to
	// completion, as an offline LLM.generate call does.
	staticBatchMode
)

func (m runMode) String() string {
	if m == staticBatchMode {
		return "batch"
	}
	return "c"
}

// published is one figure a source reports.
type published struct {
	metric string
	value  float64
	// out, when set, says why the row is known to fall outside the bounds.
	// validate accepts such a row and fails once it comes back in bounds,
	// so the reason cannot go stale.
	out string
}

// validationCase is one benchmark point to simulate.
type validationCase struct {
	profile        string
	source         string // key of a validationSource
	mode           runMode
	prompt, output int
	concurrency    int // clients, or the batch size in staticBatchMode
	figures        []published
}

// validationSource is one publication the cases cite, printed under the
// table.
type validationSource struct {
	key   string
	setup string // engine, GPU, model and workload as the source states them
	where string // GPU-FACTS section and the source's address
}

// validationExclusion is a GPU-FACTS row that validate does not run.
type validationExclusion struct {
	setup  string
	reason string
}

// Source keys.
const (
	srcNIM70B   = "nim70b"
	srcVLLM021  = "vllm021"
	srcVLLM023  = "vllm023"
	srcVLLM053  = "vllm053"
	srcLLMIB    = "llmib"
	srcGPUStack = "gpustack"
	srcLLMPerf  = "llmperf"
)

func validationSources() []validationSource {
	return []validationSource{
		{srcNIM70B, "NVIDIA NIM 1.8.0 (TensorRT-LLM), Llama-3.3-70B-Instruct FP8, TP2 on 2xH100 80GB; 5,000/500 and 500/2,000 tokens",
			"GPU-FACTS §4; docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance"},
		{srcVLLM021, "vLLM 0.21.0, Llama-3.1-8B-Instruct fp16, 1xH100 80GB, \"chatbot-short\" (lengths not stated)",
			"GPU-FACTS §4; yobitelcomm.github.io/bench/recipes/concurrency-sweep/"},
		{srcVLLM023, "vLLM 0.23.0, Llama-3.1-8B-Instruct BF16, 1xA100 40GB, 1,024/128 tokens, ignore-eos",
			"GPU-FACTS §4; johnmusgrave.com/p/vllm-throughput-latency-sweep-on"},
		{srcVLLM053, "vLLM v0.5.3, Llama-3-8B, 1xH100, light load: ~13 ms per token, 62% of it on the host",
			"GPU-FACTS §4; vllm-project.github.io _posts/2024-09-05-perf-update.md"},
		{srcLLMIB, "LLM-Inference-Bench, vLLM (2024) offline, Llama-3-8B 16-bit, 1xH100 and 1xA100; one batch of equal requests, ignore-eos",
			"GPU-FACTS §6; github.com/argonne-lcf/LLM-Inference-Bench Plots/All_results.csv, Plots/Fig_21/all_results_TTFT.csv"},
		{srcGPUStack, "gpustack performance lab, vLLM 0.11.0, Qwen3-8B BF16 (a proxy), 1xH100 SXM, ShareGPT, concurrency 4",
			"GPU-FACTS §6; gpustack docs/performance-lab/qwen3-8b/h100-latency.md"},
		{srcLLMPerf, "llmperf, vLLM 0.4.3, Llama-3-8B-Instruct FP16, 1xA10G 24GB, ~550/150 tokens, concurrency 1-64",
			"GPU-FACTS §6 (repository not recorded [U])"},
	}
}

// Profiles the cases run.
const (
	// nim70B runs Llama-3.3-70B the way NIM's TensorRT-LLM backend does,
	// without chunked prefill (see the profile). NIM's tok/s is aggregate
	// output tokens/s: 5 x 500 / (0.547 + 499 x 0.02183) = 218.
	nim70B = "2xh100-llama3-70b-fp8kv-trtllm"
	// vllmH100 is the H100 8B profile with vLLM 0.21's per-sequence host
	// cost, derived from that source's plateau throughput; the source's
	// c=16 and c=64 points are usable only through it.
	vllmH100 = "h100-llama3-8b-vllm021"
	h100     = "h100-llama3-8b"
	a100     = "a100-40gb-llama3-8b"
	a10g     = "a10g-llama3-8b"
)

// assumedChatPrompt and assumedChatOutput stand in for chat workloads
// whose sources state no lengths ("chatbot-short", ShareGPT, "light
// load"). Only TPOT and ITL rows use them: at one to four sequences the
// decode step is dominated by reading the weights, so those hardly depend
// on the lengths. TTFT (which scales with the prompt) and throughput
// (which includes client gaps the sources do not report: vllm021 gives
// 122 tok/s at c=1 against 1/6.48 ms = 154) are left out.
const (
	assumedChatPrompt = 512
	assumedChatOutput = 256
)

// outA10GPrefill is why the A10G TTFT rows are out.
const outA10GPrefill = "the source's c=1 TTFT (550 tokens in 137 ms) needs 65 TFLOPS in the model's FLOP count, " +
	"93% of the A10G's ~70 [U]; at MFU 0.5 that is a 130 TFLOPS part, above even the A10's 125, which the A10G " +
	"does not reach (GPU-FACTS §1); the spec and this source [U] disagree, so the profile is kept"

// validationCases returns the benchmark points, a fresh slice on each call.
func validationCases() []validationCase {
	closed := func(profile, src string, prompt, output, c int, figs ...published) validationCase {
		return validationCase{profile: profile, source: src, mode: closedLoopMode,
			prompt: prompt, output: output, concurrency: c, figures: figs}
	}
	batch := func(profile, src string, prompt, output, b int, figs ...published) validationCase {
		return validationCase{profile: profile, source: src, mode: staticBatchMode,
			prompt: prompt, output: output, concurrency: b, figures: figs}
	}
	fig := func(metric string, v float64) published { return published{metric: metric, value: v} }
	out := func(metric string, v float64, why string) published { return published{metric, v, why} }
	nim := func(c int, ttft, itl, tok float64) validationCase {
		return closed(nim70B, srcNIM70B, 5000, 500, c, fig(metricTTFT, ttft), fig(metricITL, itl), fig(metricOutputTok, tok))
	}
	chat := func(profile string, c int, tpot float64) validationCase {
		return closed(profile, srcVLLM021, assumedChatPrompt, assumedChatOutput, c, fig(metricTPOTP50, tpot))
	}
	llmperf := func(c int, ttft, itl, tok float64, itlOut string) validationCase {
		return closed(a10g, srcLLMPerf, 550, 150, c, out(metricTTFT, ttft, outA10GPrefill),
			published{metricITL, itl, itlOut}, fig(metricOutputTok, tok))
	}
	return []validationCase{
		// 70B FP8 on 2xH100 (GPU-FACTS §4).
		nim(1, 406.77, 18.58, 51.7),
		nim(5, 546.7, 21.83, 218),
		nim(25, 688.69, 38.75, 623),
		nim(50, 834.51, 59.73, 814),
		nim(100, 7996, 92.91, 917),
		nim(150, 34794, 92.86, 921),
		nim(200, 61680, 93.06, 921),
		nim(250, 88605, 93.2, 920),
		closed(nim70B, srcNIM70B, 500, 2000, 1, fig(metricTTFT, 47.77), fig(metricITL, 18.91), fig(metricOutputTok, 52.9)),

		// 8B on one H100, the generic profile. Decode against concurrency:
		// vLLM 0.21 where its stack is GPU-bound (c=1, 4), LLM-Inference-Bench
		// batches of 1 and 64, gpustack at c=4. Prefill: LLM-Inference-Bench's
		// batch of 16 1,024-token prompts with one output token each, the
		// figure the source calls TTFT (two 8,192-token steps in the model).
		chat(h100, 1, 6.48),
		chat(h100, 4, 6.59),
		batch(h100, srcLLMIB, 128, 128, 1, fig(metricBatchE2E, 990)),
		batch(h100, srcLLMIB, 1024, 1024, 1, fig(metricBatchE2E, 8100)),
		batch(h100, srcLLMIB, 2048, 2048, 1, fig(metricBatchE2E, 16300)),
		batch(h100, srcLLMIB, 128, 128, 64, fig(metricBatchE2E, 1690)),
		batch(h100, srcLLMIB, 1024, 1024, 64, fig(metricBatchE2E, 18800)),
		batch(h100, srcLLMIB, 2048, 2048, 64, fig(metricBatchE2E, 48200)),
		batch(h100, srcLLMIB, 1024, 1, 16, fig(metricBatchE2E, 426)),
		// Qwen3-8B stands in for Llama-3-8B (GPU-FACTS calls it a proxy);
		// only its TPOT at c=4, set by reading the weights, is kept.
		closed(h100, srcGPUStack, assumedChatPrompt, assumedChatOutput, 4, fig(metricITL, 7.38)),
		closed(h100, srcVLLM053, assumedChatPrompt, assumedChatOutput, 1, out(metricITL, 13,
			"vLLM v0.5.3 was host-bound at light load (33% API server, 29% scheduling, 38% GPU per the source); "+
				"the generic profile models a tuned engine and no profile models that stack")),

		// The same source's host-bound points need vLLM 0.21's host cost.
		chat(vllmH100, 1, 6.48),
		chat(vllmH100, 4, 6.59),
		chat(vllmH100, 16, 10.94),
		chat(vllmH100, 64, 46.91),

		// 8B on A100: vLLM 0.23 at c=1 and c=8 ("6.6x throughput by c=8"),
		// and LLM-Inference-Bench's prefill batch (its A100 form factor is
		// not stated; prefill depends on FLOPS, the same for 40GB and 80GB).
		closed(a100, srcVLLM023, 1024, 128, 1, fig(metricOutputTok, 75)),
		closed(a100, srcVLLM023, 1024, 128, 8, fig(metricOutputTok, 6.6*75)),
		batch(a100, srcLLMIB, 1024, 1, 16, fig(metricBatchE2E, 1042)),

		// 8B on A10G, the GDDR6 card closest to the L4 with a published
		// sweep (GPU-FACTS has no L4 sweep). Its c=64 point is not a
		// 64-client closed loop (see the exclusions).
		llmperf(1, 137, 30.7, 31.9, ""),
		llmperf(4, 171, 33.9, 111, ""),
		llmperf(16, 303, 42.7, 290, "every other client's 550-token prefill stalls decoding for ~250 ms in the profile, "+
			"about twice what the source's TTFT implies (the A10G prefill reason); by Little's law the source's own "+
			"figures put 12.9 requests in flight, not 16"),
	}
}

// validationExclusions lists the GPU-FACTS rows validate does not run,
// each with its reason.
func validationExclusions() []validationExclusion {
	return []validationExclusion{
		{"NIM 1.8.0 Llama-3.1-8B on H100 (§4)",
			"its c=1 ITL of 4.63 ms is below the one-GPU BF16 floor (4.79 ms), so FP8 or TP>=2, and its prompt and output lengths were not retrieved; no profile models that engine"},
		{"TensorRT-LLM performance.md v0.5, LLaMA-7B batch 1 (§6)",
			"H100 and L40S rows are FP8 engines (no FP8 8B profile, no L40S profile); the A100 FP16 row is a proxy model (LLaMA-7B); its 2,048-token TTFT of 133 ms is cited for the A100 MFU"},
		{"TensorRT-LLM perf-overview, Llama-3.1-8B FP8 on H100 (§6)",
			"an FP8 engine at offline maximum throughput with engine-tuned batch sizes; no profile models it"},
		{"vLLM PR 18566, ShareGPT at rate inf (§6)", "the GPU is not stated"},
		{"TGI docs conceptual/chunking, 1xL4 (§6)",
			"request lengths and output lengths not stated [U], vLLM version and settings unknown; vLLM's L4 KV cache there (\"barely 10k\" tokens; TGI's 30k) brackets the L4 profile's 27k"},
		{"gpustack Qwen3-8B TTFT and throughput (§6)",
			"ShareGPT lengths not stated, and the three engines' TTFTs differ 2.3x on the same GPU; only the weight-bound TPOT is run"},
		{"vLLM 0.21 chatbot-short TTFT and throughput (§4)", "lengths and client gaps not stated; only TPOT is run"},
		{"LLM-Inference-Bench tok/s (§6)", "the same measurement as its E2E rows ((in+out) tokens / E2E)"},
		{"8 x A10G llm-d prefix routing, Qwen2.5-7B (§4)",
			"a fleet routing experiment with a proxy model and unstated prefix lengths, not one engine"},
		{"llmperf A10G at concurrency 64 (§6)",
			"not a 64-client closed loop: by Little's law its own figures (301 tok/s, E2E 1,080 + 149 x 61.7 ms = 10.3 s, 150 tokens) put 21 requests in flight"},
		{"llm-d Qwen-32B TP2 KV tokens (§4)",
			"no Qwen-32B profile; it brackets the 85.5 GB visible memory (see --sensitivity)"},
	}
}

// bracketCheck compares a figure of a generic profile at concurrency 1
// with a range GPU-FACTS derives from published figures by arithmetic
// ([D], not a measurement). validate prints them; they do not set its
// exit code.
type bracketCheck struct {
	profile        string
	prompt, output int
	metric         string
	lo, hi         float64 // hi may be +Inf
	basis          string
}

const l4 = "l4-llama3-8b"

func bracketChecks() []bracketCheck {
	const long = 12288
	return []bracketCheck{
		{h100, long, 1, metricTTFT, long / 30e3 * 1e3, long / 20e3 * 1e3,
			"§6: H100 BF16 prefill of long prompts at ~20-30k tokens/s"},
		{h100, 2048, 1, metricTTFT, 36, math.Inf(1),
			"§6: TensorRT-LLM 0.5 prefilled 2,048 tokens of LLaMA-7B in FP8 in 36 ms; BF16 Llama-3-8B cannot be faster"},
		{h100, assumedChatPrompt, assumedChatOutput, metricITL, 7.4, 8,
			"§6: H100 batch-1 decode 7.4-8 ms per token"},
		{l4, assumedChatPrompt, assumedChatOutput, metricITL, 53.5, 53.5 / 0.87,
			"§6: L4 floor 16 GB / 300 GB/s = 53.5 ms; ~60 ms likely if it reaches the A10G's ~87% of bandwidth"},
	}
}
