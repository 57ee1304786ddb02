#!/usr/bin/env bash
# Fidelity check: does `sluice-bench simulate` predict what live workers do?
#
# Starts COUNT gpuworkers (PROFILE, --speedup SPEEDUP) and Sluice on loopback
# ports with a generated config, replays the first REQUESTS requests of TRACE
# through Sluice with `sluice-bench load --time-scale SPEEDUP` (so the report is
# in the workers' simulated time), simulates the same fleet, trace, policy and
# requests with `sluice-bench simulate`, and prints mean and p90 TTFT and E2E
# side by side. The issue's bar: every ratio within 15% (0.85-1.15).
#
# Builds nothing: run `make build` first. Every process it starts is stopped on
# exit. Knobs (environment): COUNT=2 PROFILE=l4-llama3-8b SPEEDUP=10
# REQUESTS=800 POLICY=least_request TRACE=<azure code trace> MAX_CONTEXT=8192
# BASE_PORT=19400 (workers BASE_PORT.., Sluice BASE_PORT-1) BIN=bin
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
COUNT=${COUNT:-2}
PROFILE=${PROFILE:-l4-llama3-8b}
SPEEDUP=${SPEEDUP:-10}
REQUESTS=${REQUESTS:-800}
POLICY=${POLICY:-least_request}
TRACE=${TRACE:-../shared/workloads/azure_llm_2023_code.csv}
MAX_CONTEXT=${MAX_CONTEXT:-8192}
BASE_PORT=${BASE_PORT:-19400}
MODEL=fidelity-model
ROUTER_PORT=$((BASE_PORT - 1))

for b in sluice gpuworker sluice-bench; do
	[ -x "$BIN/$b" ] || { echo "fidelity: $BIN/$b missing; run make build" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "fidelity: needs python3 to compare the JSON reports" >&2; exit 2; }

tmp=$(mktemp -d)
pids=()
stop() {
	trap - INT TERM EXIT
	if [ ${#pids[@]} -gt 0 ]; then
		kill -TERM "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

# shellcheck source=deploy/lib.sh
. deploy/lib.sh

"$BIN/gpuworker" --listen "127.0.0.1:$BASE_PORT" --count "$COUNT" --model "$MODEL" \
	--profile "$PROFILE" --speedup "$SPEEDUP" >"$tmp/workers.log" 2>&1 &
pids+=($!)
{
	echo "listen: 127.0.0.1:$ROUTER_PORT"
	echo "models:"
	echo "  - name: $MODEL"
	echo "    policy: $POLICY"
	echo "    backends:"
	for i in $(seq 0 $((COUNT - 1))); do
		echo "      - url: http://127.0.0.1:$((BASE_PORT + i))"
	done
} >"$tmp/sluice.yaml"
for i in $(seq 0 $((COUNT - 1))); do
	wait_for "http://127.0.0.1:$((BASE_PORT + i))/health"
done
"$BIN/sluice" serve --config "$tmp/sluice.yaml" --log-level warn >"$tmp/sluice.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$ROUTER_PORT/readyz"

common=(--trace "$TRACE" --requests "$REQUESTS" --max-context "$MAX_CONTEXT")
echo "fidelity: live run, ${COUNT}x$PROFILE at --speedup $SPEEDUP behind Sluice ($POLICY), $REQUESTS requests" >&2
"$BIN/sluice-bench" load --target "http://127.0.0.1:$ROUTER_PORT" --model "$MODEL" --stream --quiet \
	--time-scale "$SPEEDUP" "${common[@]}" --json "$tmp/live.json" >"$tmp/live.txt"
echo "fidelity: simulated run" >&2
"$BIN/sluice-bench" simulate --fleet "${COUNT}x$PROFILE" --policy "$POLICY" \
	"${common[@]}" --json "$tmp/sim.json" >"$tmp/sim.txt"

python3 - "$tmp/live.json" "$tmp/sim.json" <<'PY'
import json, sys
live = json.load(open(sys.argv[1]))
sim = json.load(open(sys.argv[2]))["results"][0]
print(f"completed: live {live['completed']} (failed {live['failed']}), simulated {sim['completed']} (failed {sim['failed']})")
print(f"{'metric':<16}{'live ms':>12}{'sim ms':>12}{'live/sim':>10}")
worst = 0.0
for key, name in (("ttft_ms", "TTFT"), ("e2el_ms", "E2E"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
    for stat in ("mean", "p90"):
        a, b = live[key][stat], sim[key][stat]
        ratio = a / b if b else float("inf")
        gated = key in ("ttft_ms", "e2el_ms")
        if gated:
            worst = max(worst, abs(ratio - 1))
        print(f"{stat + ' ' + name:<16}{a:>12.1f}{b:>12.1f}{ratio:>10.3f}{'' if gated else '  (info)'}")
print(f"worst TTFT/E2E deviation: {worst:.1%} ({'within' if worst <= 0.15 else 'OUTSIDE'} the 15% bar)")
sys.exit(0 if worst <= 0.15 else 1)
PY
