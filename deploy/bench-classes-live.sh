#!/usr/bin/env bash
# Service classes live (make bench-classes-live): real gpuworkers behind a
# real Sluice on loopback, a synthetic Poisson workload with 30% priority and
# 70% flex requests (service_tier set by `sluice-bench load --mix`), at a
# light load and at an overload, with admission (budgets per backend from
# the simulator's capacity model, as `simulate --admission` prints them) and
# without (the same Sluice with no budgets: every request binds on arrival).
# Prints per run the priority and flex rows and the shed counts, then the
# same three scenarios simulated.
#
# RUNS="tenants tenants-alone" runs the two-tenant case instead of classes:
# tenants heavy and light of one tier sending their tokens in the shares of
# TENANTS (heavy=10,light=1) at the overload, with admission, and then the
# light tenant's same requests alone (sluice-bench load --only-tenant),
# each beside its simulation; it prints the tenants' rows.
#
# With REPLICAS=3 the Sluice runs are that many processes sharing the
# admission budgets through Redis at REDIS_URL, and the load is spread over
# them in turn.
#
# Builds nothing: run `make build` first. Knobs (environment): H100S=1 L4S=2
# SPEEDUP=1 LIGHT=0.5 OVER=1.3 REQUESTS=2000 MIX=priority=0.3,flex=0.7
# TENANTS=heavy=10,light=1 H100_BUDGET= L4_BUDGET= (both set: these budgets
# instead of the simulator's) PENDING_PREFILL= (admission.max_pending_prefill,
# and simulate's --max-pending-prefill, e.g. 50ms, in simulated time: the
# router's is this over SPEEDUP, since it measures prefill rates in wall time;
# empty: the router's default, 500ms, or none with STEP_BUDGETS; negative:
# off) PRIORITY_PREFILL= (priority's own bound, the same way:
# admission.max_pending_prefill_by_class.priority and simulate's
# --max-pending-prefill-by-class priority=; empty: PENDING_PREFILL's)
# BELOW_SHARE= (the bound of a tenant under its share of the requests in
# flight, the same way: admission.max_pending_prefill_below_share and
# simulate's --max-pending-prefill-below-share; empty: off) ABOVE_SHARE=
# (the bound on the prompts not yet in an engine step for a tenant at or
# over its share beside another, the same way:
# admission.max_pending_prefill_above_share and simulate's
# --max-pending-prefill-above-share; empty: the router's default, 10ms;
# negative: off) WORSE_CLASS= (the bound on the prompts not yet in an
# engine step for a class behind a better one with requests in flight,
# the same way: admission.max_pending_prefill_worse_class and simulate's
# --max-pending-prefill-worse-class; empty: the router's default, 10ms;
# negative: off) DETOUR= (the
# detour a tenant under its share waits for, the same way:
# admission.max_detour_below_share and simulate's
# --max-detour-below-share; empty: the router's default, 250ms; negative:
# off) BETTER_DETOUR= (the detour a class ahead of a worse one in flight
# waits for: admission.max_detour_better_class and simulate's
# --max-detour-better-class; empty: off, the router's default)
# UNTIL_STEP= (1: admission.pending_until_step, and simulate's
# --release-at-step) QUICKEST= (1: the scored policy's quickest_classes:
# [priority], in the config and the simulation) STEP_BUDGETS= (1: each
# backend's max_pending_prompt_tokens at its engine's step token budget,
# 8192 on an H100 and 2048 on an L4, and the simulation's --prefill-steps 1;
# empty: neither, as the router's defaults) TRACE= (a trace file, e.g. the
# Azure code trace, replayed instead of the synthetic Poisson workload)
# The simulation beside each run binds as the router does (simulate's
# defaults are the router's): the step bound only with STEP_BUDGETS.
# REPLICAS=1 REDIS_URL=redis://127.0.0.1:6379/0 RUNS="light over over-noadm"
# BASE_PORT=19600 BIN=bin KEEP=1 (keep the run's files, with each load's
# per-request outcomes, NAME-outcomes.csv)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
H100S=${H100S:-1}
L4S=${L4S:-2}
SPEEDUP=${SPEEDUP:-1}
LIGHT=${LIGHT:-0.5}
OVER=${OVER:-1.3}
REQUESTS=${REQUESTS:-2000}
MIX=${MIX:-priority=0.3,flex=0.7}
TENANTS=${TENANTS:-heavy=10,light=1}
BASE_PORT=${BASE_PORT:-19600}
REPLICAS=${REPLICAS:-1}
if [ -n "${UNTIL_STEP:-}" ] && [ -n "${STEP_BUDGETS:-}" ] && [ -z "${PENDING_PREFILL:-}" ]; then
	echo "bench-classes-live: UNTIL_STEP with STEP_BUDGETS needs PENDING_PREFILL: it changes how long a prompt counts toward that bound" >&2
	exit 2
fi
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
workload=(--synthetic)
[ -n "${TRACE:-}" ] && workload=(--trace "$TRACE")
# A step bound only where configured; without one, max_pending_prefill's
# default (500ms of simulated time, written out in wall time for the router).
steps=()
[ -n "${STEP_BUDGETS:-}" ] && steps=(--prefill-steps 1)
[ -z "${STEP_BUDGETS:-}" ] && PENDING_PREFILL=${PENDING_PREFILL:-500ms}
DETOUR=${DETOUR:-250ms}
ABOVE_SHARE=${ABOVE_SHARE:-10ms}
WORSE_CLASS=${WORSE_CLASS:-10ms}
BETTER_DETOUR=${BETTER_DETOUR:-}
MODEL=bench-model
FLEET="${H100S}xh100-llama3-8b,${L4S}xl4-llama3-8b"
ROUTER_PORT=$((BASE_PORT - 1))
tmp=$(mktemp -d)
pids=()
stop_all() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null
	pids=()
}
trap 'stop_all; [ -n "${KEEP:-}" ] && echo "kept $tmp" >&2 || rm -rf "$tmp"' EXIT

if [ -n "${H100_BUDGET:-}" ] && [ -n "${L4_BUDGET:-}" ]; then
	budgets="h100-llama3-8b $H100_BUDGET, l4-llama3-8b $L4_BUDGET" # given
else
	budgets=$("$BIN/sluice-bench" simulate --fleet "$FLEET" "${workload[@]}" --requests "$REQUESTS" --load "$OVER" \
		--policy default --admission --mix "$MIX" --table compact 2>&1 >/dev/null | sed -n 's/.*budget of requests in flight \([^;]*\);.*/\1/p')
	H100_BUDGET=$(sed -n 's/.*h100-llama3-8b \([0-9]*\).*/\1/p' <<<"$budgets")
	L4_BUDGET=$(sed -n 's/.*l4-llama3-8b \([0-9]*\).*/\1/p' <<<"$budgets")
fi
[ -n "$H100_BUDGET" ] && [ -n "$L4_BUDGET" ] || { echo "bench-classes-live: no budgets from the simulator ($budgets)" >&2; exit 1; }

config() { # admission on|off, router port, tenants (yes|no)
	echo "listen: 127.0.0.1:$2"
	if [ "${3:-no}" = yes ]; then
		# One tier with room for everything: only the fleet limits.
		echo "tiers:"
		echo "  - name: bench"
		echo "    requests_per_minute: 100000000"
		echo "    input_tokens_per_minute: 10000000000"
		echo "    output_tokens_per_minute: 10000000000"
		echo "    concurrent_requests: 100000"
		echo "tenants:"
		for t in $(tenant_names); do
			echo "  - name: $t"
			echo "    tier: bench"
			echo "    api_keys: [\"$("$BIN/sluice" hash-key "sk-$t" | grep -o 'sha256:[0-9a-f]*')\"]"
		done
	fi
	if [ "$REPLICAS" -gt 1 ]; then
		echo "limits:"
		echo "  redis_url: $REDIS_URL"
		echo "  key_prefix: bench-classes-$$"
	fi
	echo "models:"
	echo "  - name: $MODEL"
	if [ -n "${QUICKEST:-}" ]; then
		echo "    policy: scored"
		echo "    params: {quickest_classes: [priority]}"
	fi
	if [ "$REPLICAS" -gt 1 ] || [ -n "${PENDING_PREFILL:-}" ] || [ -n "${PRIORITY_PREFILL:-}" ] || [ -n "${BELOW_SHARE:-}" ] || [ -n "${UNTIL_STEP:-}" ] || [ -n "$DETOUR" ] || [ -n "$ABOVE_SHARE" ]; then
		echo "    admission:"
		if [ "$REPLICAS" -gt 1 ]; then echo "      replicas: $REPLICAS"; fi
		if [ -n "${PENDING_PREFILL:-}" ]; then echo "      max_pending_prefill: $(wall_time "$PENDING_PREFILL")"; fi
		if [ -n "${PRIORITY_PREFILL:-}" ]; then echo "      max_pending_prefill_by_class: {priority: $(wall_time "$PRIORITY_PREFILL")}"; fi
		if [ -n "${BELOW_SHARE:-}" ]; then echo "      max_pending_prefill_below_share: $(wall_time "$BELOW_SHARE")"; fi
		echo "      max_pending_prefill_above_share: $(wall_time "$ABOVE_SHARE")"
		echo "      max_pending_prefill_worse_class: $(wall_time "$WORSE_CLASS")"
		echo "      max_detour_below_share: $(wall_time "$DETOUR")"
		if [ -n "$BETTER_DETOUR" ]; then echo "      max_detour_better_class: $(wall_time "$BETTER_DETOUR")"; fi
		if [ -n "${UNTIL_STEP:-}" ]; then echo "      pending_until_step: true"; fi
	fi
	echo "    backends:"
	local port=$BASE_PORT
	for _ in $(seq "$H100S"); do
		echo "      - url: http://127.0.0.1:$port"
		[ "$1" = on ] && echo "        max_in_flight: $H100_BUDGET"
		[ "$1" = on ] && [ -n "${STEP_BUDGETS:-}" ] && echo "        max_pending_prompt_tokens: 8192"
		port=$((port + 1))
	done
	for _ in $(seq "$L4S"); do
		echo "      - url: http://127.0.0.1:$port"
		[ "$1" = on ] && echo "        max_in_flight: $L4_BUDGET"
		[ "$1" = on ] && [ -n "${STEP_BUDGETS:-}" ] && echo "        max_pending_prompt_tokens: 2048"
		port=$((port + 1))
	done
}

# wall_time DURATION: a duration in simulated time as the wall-clock one at
# SPEEDUP, in microseconds (e.g. 35ms at SPEEDUP=0.5: 70000us).
wall_time() {
	python3 - "$1" "$SPEEDUP" <<'PY'
import re, sys
m = re.fullmatch(r"(-?[0-9.]+)(us|ms|s)", sys.argv[1])
if not m:
    sys.exit(f"bench-classes-live: cannot read duration {sys.argv[1]!r} (use e.g. 35ms)")
us = float(m[1]) * {"us": 1, "ms": 1e3, "s": 1e6}[m[2]] / float(sys.argv[2])
print(f"{round(us)}us")
PY
}

tenant_names() { tr ',' '\n' <<<"$TENANTS" | cut -d= -f1; }
tenant_keys() { tenant_names | sed 's/.*/&=sk-&/' | paste -sd,; }

run() { # name, admission on|off, load[, extra load and simulate flags]
	local name=$1 adm=$2 load=$3
	shift 3
	local shares=(--mix "$MIX") tenants=no
	if [ $# -gt 0 ]; then
		shares=("$@")
		tenants=yes
	fi
	stop_all
	"$BIN/gpuworker" --listen "127.0.0.1:$BASE_PORT" --count "$H100S" --model "$MODEL" --profile h100-llama3-8b \
		--speedup "$SPEEDUP" 2>>"$tmp/workers.log" & pids+=($!)
	"$BIN/gpuworker" --listen "127.0.0.1:$((BASE_PORT + H100S))" --count "$L4S" --model "$MODEL" --profile l4-llama3-8b \
		--speedup "$SPEEDUP" 2>>"$tmp/workers.log" & pids+=($!)
	for p in $(seq "$BASE_PORT" $((BASE_PORT + H100S + L4S - 1))); do wait_for "http://127.0.0.1:$p/health"; done
	targets=()
	for i in $(seq 0 $((REPLICAS - 1))); do
		port=$((ROUTER_PORT - i))
		config "$adm" "$port" "$tenants" >"$tmp/$name-$i.yaml"
		"$BIN/sluice" serve --config "$tmp/$name-$i.yaml" --watch 0 2>"$tmp/$name-$i.log" & pids+=($!)
		wait_for "http://127.0.0.1:$port/readyz"
		targets+=("http://127.0.0.1:$port")
	done
	local keys=()
	[ "$tenants" = yes ] && keys=(--api-keys "$(tenant_keys)")
	local trace=()
	[ -n "${TRACE:-}" ] && trace=(--trace "$TRACE")
	"$BIN/sluice-bench" load --target "$(IFS=,; echo "${targets[*]}")" --model "$MODEL" --fleet "$FLEET" --load "$load" "${trace[@]}" \
		--requests "$REQUESTS" --duration 24h "${shares[@]}" "${keys[@]}" --stream --quiet --seed 2 --time-scale "$SPEEDUP" \
		--json "$tmp/$name.json" --outcomes "$tmp/$name-outcomes.csv" >/dev/null
	local policy=default
	[ -n "${QUICKEST:-}" ] && policy='scored:{quickest_classes: [priority]}'
	"$BIN/sluice-bench" simulate --fleet "$FLEET" "${workload[@]}" --requests "$REQUESTS" --load "$load" "${shares[@]}" --seed 2 \
		--policy "$policy" $([ "$adm" = on ] && echo --admission --budget "h100-llama3-8b=$H100_BUDGET,l4-llama3-8b=$L4_BUDGET" \
			"${steps[@]}" \
			${PENDING_PREFILL:+--max-pending-prefill "$PENDING_PREFILL"} ${PRIORITY_PREFILL:+--max-pending-prefill-by-class "priority=$PRIORITY_PREFILL"} \
			${BELOW_SHARE:+--max-pending-prefill-below-share "$BELOW_SHARE"} --max-pending-prefill-above-share "$ABOVE_SHARE" \
			--max-pending-prefill-worse-class "$WORSE_CLASS" \
			--max-detour-below-share "$DETOUR" ${BETTER_DETOUR:+--max-detour-better-class "$BETTER_DETOUR"} \
			${UNTIL_STEP:+--release-at-step}) \
		--json "$tmp/$name-sim.json" >/dev/null 2>&1
}
RUNS=${RUNS:-light over over-noadm}
for r in $RUNS; do
	case $r in
	light) run light on "$LIGHT" ;;
	over) run over on "$OVER" ;;
	over-noadm) run over-noadm off "$OVER" ;;
	tenants) run tenants on "$OVER" --tenants "$TENANTS" ;;
	tenants-alone) run tenants-alone on "$OVER" --tenants "$TENANTS" --only-tenant "$(tenant_names | tail -1)" ;;
	esac
done
stop_all

wl_name=synthetic
[ -n "${TRACE:-}" ] && wl_name=$(basename "$TRACE")
echo "fleet $FLEET at speedup $SPEEDUP, $REQUESTS $wl_name requests, $MIX (or tenants $TENANTS); admission budgets: h100 $H100_BUDGET, l4 $L4_BUDGET; max_pending_prefill ${PENDING_PREFILL:-none}${PRIORITY_PREFILL:+, priority $PRIORITY_PREFILL}${QUICKEST:+, priority to the quickest backend}${BELOW_SHARE:+, below share $BELOW_SHARE}; max_pending_prefill_above_share $ABOVE_SHARE; max_pending_prefill_worse_class $WORSE_CLASS; max_detour_below_share $DETOUR${BETTER_DETOUR:+; max_detour_better_class $BETTER_DETOUR}${UNTIL_STEP:+ until the next step}${STEP_BUDGETS:+; max_pending_prompt_tokens per backend at its step budget}; $REPLICAS Sluice replica(s)"
python3 - "$tmp" <<'PY'
import json, os, sys
d = sys.argv[1]
def rows(name):
    r = json.load(open(os.path.join(d, name + ".json")))
    r = r["results"][0] if "results" in r else r
    return r
if any(os.path.exists(os.path.join(d, r + ".json")) for r in ("light", "over", "over-noadm")):
    print(f"{'run':<32}{'class':<10}{'ok':>6}{'shed':>6}{'TTFT p50 ms':>13}{'TTFT p99 ms':>13}{'req/s':>8}")
for run, label in (("light", "light load, admission"), ("over", "overload, admission"), ("over-noadm", "overload, no admission")):
    for src in ("", "-sim"):
        if not os.path.exists(os.path.join(d, run + src + ".json")):
            continue
        r = rows(run + src)
        for cls in ("priority", "flex"):
            c = r.get("classes", {}).get(cls)
            if not c:
                continue
            shed = r.get("shed", {}).get(cls, 0)
            print(f"{label + (' (sim)' if src else ' (live)'):<32}{cls:<10}{c['completed']:>6}{shed:>6}"
                  f"{c['ttft_ms']['p50']:>13.0f}{c['ttft_ms']['p99']:>13.0f}{c['request_throughput']:>8.2f}")
tenant_runs = [r for r in ("tenants", "tenants-alone") if os.path.exists(os.path.join(d, r + ".json"))]
if tenant_runs:
    print(f"{'run':<32}{'tenant':<10}{'ok':>6}{'failed':>7}{'TTFT p50 ms':>12}{'TTFT p99 ms':>13}{'req/s':>8}")
for run, label in (("tenants", "two tenants, admission"), ("tenants-alone", "last tenant alone")):
    for src in ("", "-sim"):
        if not os.path.exists(os.path.join(d, run + src + ".json")):
            continue
        r = rows(run + src)
        for name, c in r.get("tenants", {}).items():
            if not c["completed"]:
                continue
            print(f"{label + (' (sim)' if src else ' (live)'):<32}{name:<10}{c['completed']:>6}{c['failed']:>7}"
                  f"{c['ttft_ms']['p50']:>12.0f}{c['ttft_ms']['p99']:>13.0f}{c['request_throughput']:>8.2f}"
                  f"  tokens/s {c.get('total_token_throughput', 0):.0f}")
PY
