// Command gpuworker serves one or more simulated GPU workers, each an
// OpenAI-compatible server with vLLM metrics on its own port.
//
//	gpuworker --listen 127.0.0.1:9001 --count 4 --model llama3-8b --profile h100-llama3-8b --speedup 10
//	gpuworker --list-profiles
//
// Workers listen on consecutive ports starting at the --listen port. The
// process stops cleanly on SIGINT or SIGTERM. It only wires flags to package
// gpuworker and holds no simulation logic.
package main
