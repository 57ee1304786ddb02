// Command gpuworker serves one or more simulated GPU workers, each an
// OpenAI-compatible server with vLLM metrics on its own port.
//
//	gpuworker --listen 127.0.0.1:9001 --count 4 --model llama3-8b --profile h100-llama3-8b --speedup 10
//	gpuworker --list-profiles [--profiles extra.yaml]
//	gpuworker --model m --dialect sglang --error-rate 0.1 --added-latency 200ms --stall-after 50 --crash-after 1000
//
// --dialect picks the metric names on /metrics (vllm, sglang, tgi). The
// fault flags set gpuworker.Faults at start; PUT /admin/faults changes them
// on a live worker. --crash-after closes that worker's server abruptly
// (listener and connections) once it has had that many /v1 requests.
//
// Workers listen on consecutive ports starting at the --listen port. The
// process stops cleanly on SIGINT or SIGTERM. It only wires flags to package
// gpuworker and holds no simulation logic.
//
// As cmd/sluice, it exits 0 after -h, 2 for a wrong command line (an unknown
// flag, a bad value such as --speedup 0 or an unknown --profile) and 1 when
// a run fails (an unreadable --profiles file, a port it cannot bind).
package main
