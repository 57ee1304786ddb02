package main

// Published serving measurements that "sluice-bench validate" reproduces
// (GPU-FACTS §4). Each case is one closed-loop benchmark point: a profile,
// fixed prompt and output lengths, and a concurrency.

// Metric names, as printed and in JSON.
const (
	metricTTFT      = "ttft_ms"      // mean time to first token
	metricTTFTP50   = "ttft_p50_ms"  // median time to first token
	metricITL       = "itl_ms"       // mean over requests of (e2e-ttft)/(output-1)
	metricTPOTP50   = "tpot_p50_ms"  // median of the same per-request figure
	metricOutputTok = "output_tok_s" // aggregate output tokens per second
)

// published is one figure a source reports.
type published struct {
	metric string
	value  float64
}

// validationCase is one benchmark point to simulate.
type validationCase struct {
	profile        string
	prompt, output int
	concurrency    int
	figures        []published
}

const (
	// nim70B: NVIDIA NIM 1.8.0 Llama-3.3-70B-Instruct, 2xH100, FP8, TP2
	// (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance). tok/s there
	// is aggregate output tokens/s: 5 x 500 / (0.547 + 499 x 0.02183) = 218.
	// NIM runs Llama-3.3-70B on H100 with TensorRT-LLM, without chunked
	// prefill (see the profile).
	nim70B = "2xh100-llama3-70b-fp8kv-trtllm"
	// vllmH100: vLLM 0.21.0 Llama-3.1-8B-Instruct fp16, 1xH100 80GB,
	// "chatbot-short" (yobitelcomm.github.io/bench/recipes/concurrency-sweep).
	// Its stack is host-bound from c=16 on; the profile adds vLLM 0.21's
	// per-sequence host cost, derived from the source's plateau throughput.
	vllmH100 = "h100-llama3-8b-vllm021"
	// a100: vLLM 0.23.0 Llama-3.1-8B-Instruct BF16, 1xA100 40GB, 1,024 in /
	// 128 out, ignore-eos (johnmusgrave.com/p/vllm-throughput-latency-sweep-on).
	a100 = "a100-40gb-llama3-8b"
)

// chatbotShort is the assumed shape of the "chatbot-short" workload, whose
// source states no lengths. Only TPOT rows are kept for it: at one to four
// sequences the decode step is dominated by reading the weights, so TPOT
// hardly depends on these lengths. TTFT (which scales with the prompt) and
// throughput (which the source measures with unreported client gaps: 122
// tok/s at c=1 against 1/6.48 ms = 154) are left out.
const (
	chatbotShortPrompt = 512
	chatbotShortOutput = 256
)

// validationCases returns the benchmark points, a fresh slice on each call.
func validationCases() []validationCase {
	nim := func(c int, ttft, itl, tok float64) validationCase {
		return validationCase{profile: nim70B, prompt: 5000, output: 500, concurrency: c, figures: []published{
			{metricTTFT, ttft}, {metricITL, itl}, {metricOutputTok, tok},
		}}
	}
	chat := func(c int, tpot float64) validationCase {
		return validationCase{profile: vllmH100, prompt: chatbotShortPrompt, output: chatbotShortOutput,
			concurrency: c, figures: []published{{metricTPOTP50, tpot}}}
	}
	return []validationCase{
		nim(1, 406.77, 18.58, 51.7),
		nim(5, 546.7, 21.83, 218),
		nim(25, 688.69, 38.75, 623),
		nim(50, 834.51, 59.73, 814),
		nim(100, 7996, 92.91, 917),
		{profile: nim70B, prompt: 500, output: 2000, concurrency: 1, figures: []published{
			{metricTTFT, 47.77}, {metricITL, 18.91}, {metricOutputTok, 52.9},
		}},
		chat(1, 6.48),
		chat(4, 6.59),
		chat(16, 10.94),
		chat(64, 46.91),
		{profile: a100, prompt: 1024, output: 128, concurrency: 1, figures: []published{
			{metricOutputTok, 75},
		}},
	}
}
