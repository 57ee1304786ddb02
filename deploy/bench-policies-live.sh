#!/usr/bin/env bash
# Routing policies compared live (make bench-policies-live): the scaled-down
# twin of bench-policies with real processes on loopback.
#
# For each policy: starts fresh gpuworkers (H100 x H100S and L4 x L4S at
# --speedup SPEEDUP, so every run begins with cold caches and empty queues)
# and a real bin/sluice with a config generated for that policy, replays the
# first REQUESTS requests of the Azure code trace through Sluice with
# `sluice-bench load --fleet ... --load LOAD --time-scale SPEEDUP` (latencies
# reported in the workers' simulated time), stops everything, and finally
# prints one table with the bench-policies columns, followed by
# `sluice-bench simulate` of the same fleet, slice and load for comparison,
# and how well the two rankings by p99 TTFT agree (Spearman's rank
# correlation; policies the simulation cannot tell apart tie).
#
# The Sluice config gives each backend the capacity-proportional weight the
# simulation uses (what an operator who benchmarked each GPU type would
# write), so `weighted` is the same baseline live and simulated, and goodput
# counts the code-completion SLO of bench-policies (TTFT 500 ms, TPOT
# 150 ms).
#
# Builds nothing: run `make build` first. Knobs (environment): H100S=2 L4S=4
# SPEEDUP=3 LOAD=0.6 REQUESTS=1500 POLICIES=<every registered policy>
# TRACE=<azure code trace> BASE_PORT=19500 (workers BASE_PORT.., Sluice
# BASE_PORT-1) BIN=bin GOODPUT_TTFT=500ms GOODPUT_TPOT=150ms
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
H100S=${H100S:-2}
L4S=${L4S:-4}
SPEEDUP=${SPEEDUP:-3}
LOAD=${LOAD:-0.6}
REQUESTS=${REQUESTS:-1500}
TRACE=${TRACE:-../shared/workloads/azure_llm_2023_code.csv}
BASE_PORT=${BASE_PORT:-19500}
MODEL=bench-model
ROUTER_PORT=$((BASE_PORT - 1))
FLEET="${H100S}xh100-llama3-8b,${L4S}xl4-llama3-8b"
WORKERS=$((H100S + L4S))
GOODPUT_TTFT=${GOODPUT_TTFT:-500ms}
GOODPUT_TPOT=${GOODPUT_TPOT:-150ms}
slo=(--goodput-ttft "$GOODPUT_TTFT" --goodput-tpot "$GOODPUT_TPOT")

for b in sluice gpuworker sluice-bench; do
	[ -x "$BIN/$b" ] || { echo "bench-policies-live: $BIN/$b missing; run make build" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench-policies-live: needs python3 to print the table" >&2; exit 2; }
if [ -z "${POLICIES:-}" ]; then
	# Every registered policy: the simulator lists them.
	POLICIES=$("$BIN/sluice-bench" simulate --fleet h100-llama3-8b --synthetic --requests 1 --policy all \
		--table compact 2>/dev/null | awk 'NR > 3 { print $1 }' | paste -sd, -)
fi

# The simulator's capacity-proportional weights for this fleet and slice:
# "... would write them): h100-llama3-8b 96, l4-llama3-8b 10".
weights=$("$BIN/sluice-bench" simulate --fleet "$FLEET" --trace "$TRACE" --requests "$REQUESTS" --load "$LOAD" \
	--policy round_robin --table compact 2>&1 >/dev/null | sed -n 's/.*would write them)://p')
H100_WEIGHT=$(sed -n 's/.*h100-llama3-8b \([0-9]*\).*/\1/p' <<<"$weights")
L4_WEIGHT=$(sed -n 's/.*l4-llama3-8b \([0-9]*\).*/\1/p' <<<"$weights")
[ -n "$H100_WEIGHT" ] && [ -n "$L4_WEIGHT" ] || { echo "bench-policies-live: no weights from the simulator ($weights)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	trap - INT TERM EXIT
	stop_all
	rm -rf "$tmp"
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

# shellcheck source=deploy/lib.sh
. deploy/lib.sh

run_policy() { # policy
	local policy=$1
	"$BIN/gpuworker" --listen "127.0.0.1:$BASE_PORT" --count "$H100S" --model "$MODEL" \
		--profile h100-llama3-8b --speedup "$SPEEDUP" >"$tmp/h100.log" 2>&1 &
	pids+=($!)
	"$BIN/gpuworker" --listen "127.0.0.1:$((BASE_PORT + H100S))" --count "$L4S" --model "$MODEL" \
		--profile l4-llama3-8b --speedup "$SPEEDUP" >"$tmp/l4.log" 2>&1 &
	pids+=($!)
	{
		echo "listen: 127.0.0.1:$ROUTER_PORT"
		echo "models:"
		echo "  - name: $MODEL"
		echo "    policy: $policy"
		echo "    backends:"
		for i in $(seq 0 $((WORKERS - 1))); do
			echo "      - url: http://127.0.0.1:$((BASE_PORT + i))"
			if [ "$i" -lt "$H100S" ]; then
				echo "        weight: $H100_WEIGHT"
			else
				echo "        weight: $L4_WEIGHT"
			fi
		done
	} >"$tmp/sluice.yaml"
	for i in $(seq 0 $((WORKERS - 1))); do
		wait_for "http://127.0.0.1:$((BASE_PORT + i))/health"
	done
	"$BIN/sluice" serve --config "$tmp/sluice.yaml" --log-level warn >"$tmp/sluice.log" 2>&1 &
	pids+=($!)
	wait_for "http://127.0.0.1:$ROUTER_PORT/readyz"
	local start=$SECONDS
	"$BIN/sluice-bench" load --target "http://127.0.0.1:$ROUTER_PORT" --model "$MODEL" --stream --quiet \
		--trace "$TRACE" --requests "$REQUESTS" --fleet "$FLEET" --load "$LOAD" --time-scale "$SPEEDUP" "${slo[@]}" \
		--json "$tmp/live-$policy.json" >"$tmp/live-$policy.txt"
	echo "bench-policies-live: $policy done in $((SECONDS - start))s wall" >&2
	stop_all
}

echo "bench-policies-live: $FLEET at --speedup $SPEEDUP behind Sluice (weights H100 $H100_WEIGHT, L4 $L4_WEIGHT), first $REQUESTS requests of $(basename "$TRACE") at --load $LOAD; policies: $POLICIES" >&2
IFS=, read -r -a list <<<"$POLICIES"
for p in "${list[@]}"; do
	run_policy "$p"
done

# The same slice in simulation, for the ranking side by side.
"$BIN/sluice-bench" simulate --table compact --fleet "$FLEET" --trace "$TRACE" --requests "$REQUESTS" \
	--load "$LOAD" --policy "$POLICIES" --oracle "${slo[@]}" --json "$tmp/sim.json" 2>/dev/null

python3 - "$tmp" "$FLEET" "$REQUESTS" "$LOAD" "$SPEEDUP" "$GOODPUT_TTFT" "$GOODPUT_TPOT" "${list[@]}" <<'PY'
import json, os, sys
tmp, fleet, n, load, speedup, gttft, gtpot, policies = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8:]
print(f"\n== LIVE fleet {fleet} at --speedup {speedup} behind bin/sluice | azure code trace, first {n} requests (--requests) | --load {load} | latencies in simulated time | goodput: TTFT<={gttft}, TPOT<={gtpot}")
cols = ("policy", "ok", "failed", "TTFT p50 ms", "TTFT p99 ms", "E2E p99 ms", "out tok/s", "goodput req/s")
print("".join(f"{c:>16}" for c in cols))
live = {}
for p in policies:
    r = json.load(open(os.path.join(tmp, f"live-{p}.json")))
    live[p] = r["ttft_ms"]["p99"]
    print(f"{p:>16}{r['completed']:>16}{r['failed']:>16}{r['ttft_ms']['p50']:>16.0f}{r['ttft_ms']['p99']:>16.0f}"
          f"{r['e2el_ms']['p99']:>16.0f}{r['output_throughput']:>16.1f}{r['goodput']:>16.2f}")
sim = {r["policy"]: r["ttft_ms"]["p99"] for r in json.load(open(os.path.join(tmp, "sim.json")))["results"]}

def ranks(v):
    # average ranks, ties (equal values) sharing the mean of their positions
    order = sorted(policies, key=lambda p: v[p])
    out, i = {}, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for p in order[i:j + 1]:
            out[p] = (i + j) / 2 + 1
        i = j + 1
    return out

def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra.values()) / len(ra), sum(rb.values()) / len(rb)
    cov = sum((ra[p] - ma) * (rb[p] - mb) for p in policies)
    va = sum((ra[p] - ma) ** 2 for p in policies) ** 0.5
    vb = sum((rb[p] - mb) ** 2 for p in policies) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")

print("\np99 TTFT, live / simulated (ms):")
for p in sorted(policies, key=lambda p: sim[p]):
    print(f"{p:>16}{live[p]:>12.0f}{sim[p]:>12.0f}")
if "oracle" in sim:
    print(f"{'oracle':>16}{'':>12}{sim['oracle']:>12.0f}")
print("live ranking:      " + " < ".join(sorted(policies, key=lambda p: live[p])))
print("simulated ranking: " + " < ".join(sorted(policies, key=lambda p: sim[p])))
if len(policies) > 1:
    print(f"Spearman rank correlation, live vs simulated: {spearman(live, sim):.2f}")
PY
