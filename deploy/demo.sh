#!/usr/bin/env bash
# Starts the demo fleet behind Sluice, as `make run` does:
#   2 fast workers (h100-llama3-8b) on 127.0.0.1:9001-9002
#   2 slow workers (l4-llama3-8b)   on 127.0.0.1:9101-9102
#   Sluice on 127.0.0.1:8080 with configs/demo.yaml
# Ctrl-C (or SIGTERM) stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
MODEL=llama-3-8b

pids=()
stop() {
	trap - INT TERM EXIT
	if [ ${#pids[@]} -gt 0 ]; then
		kill -TERM "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

"$BIN/gpuworker" --listen 127.0.0.1:9001 --count 2 --model "$MODEL" --profile h100-llama3-8b & pids+=($!)
"$BIN/gpuworker" --listen 127.0.0.1:9101 --count 2 --model "$MODEL" --profile l4-llama3-8b & pids+=($!)

# shellcheck source=deploy/lib.sh
. deploy/lib.sh
for port in 9001 9002 9101 9102; do
	wait_for "http://127.0.0.1:$port/health" || true
done

"$BIN/sluice" serve --config configs/demo.yaml & pids+=($!)
wait_for http://127.0.0.1:8080/readyz || true
cat <<MSG

Sluice is up on http://127.0.0.1:8080 in front of 4 simulated GPU workers.
Demo tenants (configs/demo.yaml): sk-demo-free (60 requests/min), sk-demo-pro, sk-demo-enterprise. Try:
  curl -s http://127.0.0.1:8080/v1/models -H 'Authorization: Bearer sk-demo-free'
  curl -sN http://127.0.0.1:8080/v1/chat/completions -H 'Authorization: Bearer sk-demo-free' \\
    -H 'Content-Type: application/json' \\
    -d '{"model":"$MODEL","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'
or any OpenAI client: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=sk-demo-free
Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
echo "a process of the demo exited; stopping the rest" >&2
