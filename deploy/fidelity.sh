#!/usr/bin/env bash
# Fidelity (make fidelity): does `sluice-bench simulate` reproduce a live run
# of the same fleet behind a real Sluice?
#
# The gpuworkers run the same engine code as the simulator, so this does NOT
# check that the GPU model matches real GPUs (that is `make validate`). It
# checks what the simulator adds around that engine: that the wall-clock load
# driver, the HTTP and streaming path, the router's signals (in-flight counts,
# scraped load, measured TTFT and prefill rate) and the policy's decisions on
# them give the latencies and the request split the simulation predicts.
#
# Each case is FLEET:POLICY:SPEEDUP. For each, the script starts one
# gpuworker process per fleet group (--speedup SPEEDUP) and a Sluice with
# a generated config (one replica, the policy, scrape.interval SCRAPE_MS),
# replays the first REQUESTS requests of TRACE through it with
# `sluice-bench load --time-scale SPEEDUP` (the report is in the workers'
# simulated time), reads the requests each backend got from Sluice's
# /metrics, stops everything, then runs `sluice-bench simulate` with the same
# fleet, requests, policy, one router replica and the same scrape interval
# in simulated time (SCRAPE_MS x SPEEDUP). It prints mean, p50, p90 and p99
# TTFT and E2E live and simulated with their ratio, and the requests per GPU
# type. The bar: mean and p90 TTFT and E2E within 15% (0.85-1.15) in every
# case; the exit status is 1 otherwise.
#
# Default cases: 2xl4-llama3-8b with least_request at --speedup 10,
# 2xh100-llama3-8b with least_request and 2xh100-llama3-8b,2xl4-llama3-8b
# with Sluice's default policy (POLICY=default: no policy in the config;
# `simulate --policy default`) at --speedup 1. The router is not sped up:
# every millisecond of wall-clock scheduling delay (four workers, Sluice and
# the driver sharing a few cores) costs SPEEDUP milliseconds of simulated
# time, which the L4s' multi-second latencies absorb but the H100s' 100 ms
# ones do not; and the default policy's ttft scorer adds a fixed 1 s to
# expected TTFTs it measures in wall-clock time, S seconds of simulated time
# at --speedup S. A case at speed-up 1 takes the trace's own duration: about
# 4 minutes for 300 requests, 5 for 800.
#
# Builds nothing: run `make build` first, and keep the three binaries from
# one build of one tree, or the workers and the simulator no longer share
# their engine. Every process it starts is stopped before the next case and
# on exit. Knobs (environment): CASES="F:P[:S] ..." (space-separated; S
# defaults to 1), or FLEET and POLICY for one case at speed-up 1 (COUNT and
# PROFILE still make FLEET=COUNTxPROFILE); SPEEDUP (overrides every case's)
# REQUESTS=800 TRACE=<azure code trace> MAX_CONTEXT=8192 SCRAPE_MS=100 (the
# live scrape interval, wall clock; Sluice's default) BASE_PORT=19400
# (workers BASE_PORT.., Sluice BASE_PORT-1) BIN=bin
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
REQUESTS=${REQUESTS:-800}
TRACE=${TRACE:-../shared/workloads/azure_llm_2023_code.csv}
MAX_CONTEXT=${MAX_CONTEXT:-8192}
SCRAPE_MS=${SCRAPE_MS:-100}
BASE_PORT=${BASE_PORT:-19400}
MODEL=fidelity-model
ROUTER_PORT=$((BASE_PORT - 1))
DEFAULT_CASES="2xl4-llama3-8b:least_request:10 2xh100-llama3-8b:least_request:1 2xh100-llama3-8b,2xl4-llama3-8b:default:1"

if [ -n "${FLEET:-}${POLICY:-}${COUNT:-}${PROFILE:-}" ]; then
	one_fleet=${FLEET:-${COUNT:-2}x${PROFILE:-l4-llama3-8b}}
	one_policy=${POLICY:-least_request}
	CASES="$one_fleet:$one_policy:1"
fi
CASES=${CASES:-$DEFAULT_CASES}

for b in sluice gpuworker sluice-bench; do
	[ -x "$BIN/$b" ] || { echo "fidelity: $BIN/$b missing; run make build" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "fidelity: needs python3 to compare the JSON reports" >&2; exit 2; }
command -v curl >/dev/null || { echo "fidelity: needs curl" >&2; exit 2; }
[ "$SCRAPE_MS" -ge 10 ] || { echo "fidelity: SCRAPE_MS must be at least 10 (Sluice's minimum scrape interval)" >&2; exit 2; }

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

cat <<EOF
Fidelity: live gpuworkers behind a real Sluice vs \`sluice-bench simulate\` of the same case.
  Checks: that the wall-clock load driver, the HTTP/SSE path, the router's signals (in-flight,
    scraped load, measured TTFT and prefill rate) and the policy reproduce the simulation:
    same fleet, requests, policy, 1 router replica, scrape interval; latencies and request split.
  Does NOT check: that the GPU model matches real GPUs. The workers run the simulator's own
    engine, so both sides share its errors; that is \`make validate\` (GPU-FACTS.md).
  Bar: mean and p90 TTFT and E2E within 15% of the simulation (p50, p99 and the split: info).
EOF

# loadavg: the 1-minute load average, or "?" where /proc/loadavg is missing;
# the live side is only as good as the CPU it gets.
loadavg() {
	if [ -r /proc/loadavg ]; then
		cut -d' ' -f1 /proc/loadavg
	else
		echo '?'
	fi
}

# run_case N FLEET POLICY SPEEDUP: writes $tmp/N/{live.json,sim.json,metrics.txt,groups}
run_case() {
	local n=$1 fleet=$2 policy=$3 speedup=$4
	local dir="$tmp/$n" port=$BASE_PORT groups group count profile
	mkdir -p "$dir"
	: >"$dir/groups"
	IFS=, read -r -a groups <<<"$fleet"
	for group in "${groups[@]}"; do
		if [[ $group =~ ^([0-9]+)x(.+)$ ]]; then
			count=${BASH_REMATCH[1]} profile=${BASH_REMATCH[2]}
		else
			count=1 profile=$group
		fi
		"$BIN/gpuworker" --listen "127.0.0.1:$port" --count "$count" --model "$MODEL" \
			--profile "$profile" --speedup "$speedup" >"$dir/workers-$port.log" 2>&1 &
		pids+=($!)
		echo "$profile $count $port" >>"$dir/groups"
		port=$((port + count))
	done
	{
		echo "listen: 127.0.0.1:$ROUTER_PORT"
		echo "scrape:"
		echo "  interval: ${SCRAPE_MS}ms"
		echo "models:"
		echo "  - name: $MODEL"
		# "default" leaves the policy to Sluice's own default.
		[ "$policy" = default ] || echo "    policy: $policy"
		echo "    backends:"
		for p in $(seq "$BASE_PORT" $((port - 1))); do
			echo "      - url: http://127.0.0.1:$p"
		done
	} >"$dir/sluice.yaml"
	for p in $(seq "$BASE_PORT" $((port - 1))); do
		wait_for "http://127.0.0.1:$p/health"
	done
	"$BIN/sluice" serve --config "$dir/sluice.yaml" --log-level warn >"$dir/sluice.log" 2>&1 &
	pids+=($!)
	wait_for "http://127.0.0.1:$ROUTER_PORT/readyz"

	local common=(--trace "$TRACE" --requests "$REQUESTS" --max-context "$MAX_CONTEXT")
	local start=$SECONDS
	{ nproc 2>/dev/null || echo '?'; } >"$dir/host"
	loadavg >>"$dir/host"
	echo "fidelity: case $n live: $fleet at --speedup $speedup behind Sluice ($policy), $REQUESTS requests" >&2
	"$BIN/sluice-bench" load --target "http://127.0.0.1:$ROUTER_PORT" --model "$MODEL" --stream --quiet \
		--time-scale "$speedup" "${common[@]}" --json "$dir/live.json" >"$dir/live.txt"
	curl -fsS "http://127.0.0.1:$ROUTER_PORT/metrics" >"$dir/metrics.txt"
	echo "$((SECONDS - start))" >>"$dir/host"
	loadavg >>"$dir/host"
	echo "fidelity: case $n live run took $((SECONDS - start))s wall" >&2
	stop_all

	# The live scrape interval in the workers' simulated time.
	local sim_scrape
	sim_scrape=$(awk -v ms="$SCRAPE_MS" -v s="$speedup" 'BEGIN { printf "%.3fms", ms * s }')
	echo "fidelity: case $n simulated (scrape interval $sim_scrape of virtual time)" >&2
	"$BIN/sluice-bench" simulate --fleet "$fleet" --policy "$policy" --routers 1 --scrape-interval "$sim_scrape" \
		"${common[@]}" --json "$dir/sim.json" >"$dir/sim.txt" 2>"$dir/sim.err" || { cat "$dir/sim.err" >&2; return 1; }
}

cat >"$tmp/compare.py" <<'PY'
import json, re, sys

d, case, fleet, policy, speedup, scrape_ms = sys.argv[1:7]
live = json.load(open(f"{d}/live.json"))
simdoc = json.load(open(f"{d}/sim.json"))
sim = simdoc["results"][0]
speedup = float(speedup)
print(f"\n== case {case}: {fleet} | policy {policy} (simulate: {sim['policy']}) | --speedup {speedup:g} | "
      f"{simdoc['requests']} requests | {simdoc['routers']} router replica | "
      f"scrape {scrape_ms}ms wall = {float(scrape_ms) * speedup:g}ms simulated")
m = re.search(r"\(([\d.]+) req/s, ([\d.]+)x capacity\)", open(f"{d}/sim.err").read())
if m:
    print(f"trace timing: {m.group(1)} req/s of simulated time, {m.group(2)} x the fleet's estimated capacity"
          f" ({simdoc['capacity_estimate']:.2f} req/s)")
if policy in ("default", "scored") and speedup != 1:
    print(f"note: the ttft scorer's fixed 1 s is wall-clock time live, {speedup:g} s of simulated time here;"
          " routing differs from the simulation by design (use SPEEDUP=1)")
cpus, before, wall, after = open(f"{d}/host").read().split()
print(f"live run: {wall} s wall on {cpus} CPUs, 1-minute load average {before} before, {after} after")
print(f"completed: live {live['completed']} (failed {live['failed']}), simulated {sim['completed']} (failed {sim['failed']})")
print(f"{'metric':<12}{'live ms':>12}{'sim ms':>12}{'live/sim':>10}")
worst = 0.0
for key, name in (("ttft_ms", "TTFT"), ("e2el_ms", "E2E"), ("tpot_ms", "TPOT")):
    for stat in ("mean", "p50", "p90", "p99"):
        if key == "tpot_ms" and stat in ("p50", "p99"):
            continue
        a, b = live[key][stat], sim[key][stat]
        ratio = a / b if b else float("inf")
        gated = key != "tpot_ms" and stat in ("mean", "p90")
        if gated:
            worst = max(worst, abs(ratio - 1))
        print(f"{stat + ' ' + name:<12}{a:>12.1f}{b:>12.1f}{ratio:>10.3f}{'' if gated else '  (info)'}")

# Requests per fleet group: live from Sluice's attempts counter, simulated
# from the dispatch counts.
groups = []
for line in open(f"{d}/groups"):
    profile, count, first = line.split()
    groups.append((profile, int(count), int(first)))
attempts, ok = [0] * len(groups), [0] * len(groups)
pat = re.compile(r'^sluice_upstream_attempts_total\{(.*)\}\s+(\S+)$')
for line in open(f"{d}/metrics.txt"):
    m = pat.match(line.strip())
    if not m:
        continue
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    port = int(re.search(r":(\d+)/?$", labels["backend"]).group(1))
    for i, (_, count, first) in enumerate(groups):
        if first <= port < first + count:
            attempts[i] += int(float(m.group(2)))
            if labels.get("outcome") == "ok":
                ok[i] += int(float(m.group(2)))
live_total, sim_total = sum(attempts) or 1, sum(g["requests"] for g in sim["groups"]) or 1
print(f"{'requests to':<22}{'live':>8}{'share':>8}{'sim':>8}{'share':>8}")
for i, (profile, count, _) in enumerate(groups):
    g = sim["groups"][i]
    if g["profile"] != profile:
        sys.exit(f"fidelity: group {i} is {profile} live but {g['profile']} simulated")
    extra = f"  ({attempts[i] - ok[i]} attempts not ok)" if attempts[i] != ok[i] else ""
    print(f"{f'{count} x {profile}':<22}{attempts[i]:>8}{attempts[i] / live_total:>8.1%}"
          f"{g['requests']:>8}{g['requests'] / sim_total:>8.1%}{extra}")
verdict = "within" if worst <= 0.15 else "OUTSIDE"
print(f"worst mean/p90 TTFT/E2E deviation: {worst:.1%} ({verdict} the 15% bar)")
with open(sys.argv[7], "a") as f:
    f.write(f"{case}\t{fleet}\t{policy}\t{speedup:g}\t{worst:.1%}\t{verdict}\n")
sys.exit(0 if worst <= 0.15 else 1)
PY

status=0
n=0
read -r -a cases <<<"$CASES"
for c in "${cases[@]}"; do
	n=$((n + 1))
	IFS=: read -r fleet policy speedup <<<"$c"
	if [ -z "$fleet" ] || [ -z "${policy:-}" ]; then
		echo "fidelity: case \"$c\": want FLEET:POLICY[:SPEEDUP]" >&2
		exit 2
	fi
	speedup=${SPEEDUP:-${speedup:-1}}
	run_case "$n" "$fleet" "$policy" "$speedup"
	python3 "$tmp/compare.py" "$tmp/$n" "$n" "$fleet" "$policy" "$speedup" "$SCRAPE_MS" "$tmp/summary" || status=1
done

echo
echo "== summary (bar: mean and p90 TTFT and E2E within 15%)"
printf '%-6s%-36s%-16s%-9s%-8s%s\n' case fleet policy speedup worst verdict
while IFS=$'\t' read -r c f p s w v; do
	printf '%-6s%-36s%-16s%-9s%-8s%s\n' "$c" "$f" "$p" "$s" "$w" "$v"
done <"$tmp/summary"
if [ "$status" -ne 0 ]; then exit 1; fi
