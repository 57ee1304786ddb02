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

# shellcheck source=deploy/lib.sh
. deploy/lib.sh
busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in 8080 8081 9001 9002 9101 9102; do
	if busy "$port"; then
		echo "make run: port $port is already in use (another make run?); stop what holds it and try again" >&2
		exit 1
	fi
done

# One process per worker, so that one dying (or killed, to watch failover)
# leaves Sluice and the others running.
worker_pids=()
for spec in 9001:h100-llama3-8b 9002:h100-llama3-8b 9101:l4-llama3-8b 9102:l4-llama3-8b; do
	"$BIN/gpuworker" --listen "127.0.0.1:${spec%%:*}" --model "$MODEL" --profile "${spec#*:}" --store-responses 10000 & pids+=($!)
	worker_pids+=($!)
done
for port in 9001 9002 9101 9102; do
	wait_for "http://127.0.0.1:$port/health" || true
done

# The admin API and live status page on 127.0.0.1:8081 (SLUICE_ADMIN_TOKEN
# from the environment, else a demo token).
export SLUICE_ADMIN_TOKEN=${SLUICE_ADMIN_TOKEN:-demo-admin}
"$BIN/sluice" serve --config configs/demo.yaml & sluice_pid=$!
pids+=($sluice_pid)
if ! wait_for http://127.0.0.1:8080/readyz; then
	echo "make run: Sluice did not come up on 127.0.0.1:8080 (see its log above)" >&2
	exit 1
fi
cat <<MSG

Sluice is up on http://127.0.0.1:8080 in front of 4 simulated GPU workers.
Demo tenants (configs/demo.yaml): sk-demo-free (60 requests/min), sk-demo-pro, sk-demo-enterprise. Try:
  curl -s http://127.0.0.1:8080/v1/models -H 'Authorization: Bearer sk-demo-free'
  curl -sN http://127.0.0.1:8080/v1/chat/completions -H 'Authorization: Bearer sk-demo-free' \\
    -H 'Content-Type: application/json' \\
    -d '{"model":"$MODEL","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'
or any OpenAI client: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=sk-demo-free
Live status page: http://127.0.0.1:8081/status#token=$SLUICE_ADMIN_TOKEN
Admin API: curl -s http://127.0.0.1:8081/admin/backends -H 'Authorization: Bearer $SLUICE_ADMIN_TOKEN'
Ctrl-C stops everything.
Workers run one per process (pids ${worker_pids[*]}): kill one to watch Sluice route around it.

MSG
# Run until Sluice exits (or Ctrl-C); a worker that dies is reported and the
# demo goes on without it.
while kill -0 "$sluice_pid" 2>/dev/null; do
	for i in "${!worker_pids[@]}"; do
		if ! kill -0 "${worker_pids[$i]}" 2>/dev/null; then
			echo "make run: worker pid ${worker_pids[$i]} exited; Sluice routes around it" >&2
			unset 'worker_pids[$i]'
		fi
	done
	sleep 1
done
echo "make run: Sluice exited; stopping the workers" >&2
