#!/usr/bin/env bash
# Admission and service classes in simulation (make bench-admission): the
# admission issue's targets, each as a ratio beside its target, from
# `sluice-bench simulate --admission` runs of the router's own queue code:
#   reference  the default policy with admission against the reference
#              scheduler (--oracle) at 0.8 and 0.95 load: p50 and p99 TTFT
#              and goodput
#   classes    30% priority + 70% flex at LIGHT (0.5) and OVER (1.3) load:
#              priority's p99 TTFT growth, what was shed, flex's requests/s
#              while requests wait over the spare capacity
#   tenants    two tenants of one tier, one sending 10x the other's tokens, at
#              OVER: the light tenant's p99 TTFT beside the heavy one over its
#              run alone (--only-tenant)
# then `sluice-bench summarize-admission` of each seed's runs.
#
# Workload: the Azure code trace over 4xH100 + 8xL4 (WORKLOAD=azure), the
# Poisson workload of the live runs over 1xH100 + 2xL4 (WORKLOAD=poisson,
# 4,000 requests), or the trace's first 2,000 requests over 1xH100 + 2xL4
# (WORKLOAD=small, as the live small-fleet runs); SLO 500 ms TTFT, 150 ms
# TPOT. Tuned on seeds 0-1: report
# on others (the default, SEEDS="2 3").
#
# Builds nothing: run `make build` first. Knobs (environment): SEEDS="2 3"
# WORKLOAD=azure RUNS="reference classes tenants" LIGHT=0.5 OVER=1.3
# POLICY=default (as simulate's --policy, e.g. "scored:{quickest_classes:
# [priority]}") EXTRA= (more simulate flags, e.g. "--max-pending-prefill
# 35ms") BIN=bin AZURE=<azure code trace> SCRAPE=100ms OUT=<dir for the JSON
# files, default a temporary one>
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
SEEDS=${SEEDS:-2 3}
WORKLOAD=${WORKLOAD:-azure}
RUNS=${RUNS:-reference classes tenants}
LIGHT=${LIGHT:-0.5}
OVER=${OVER:-1.3}
POLICY=${POLICY:-default}
EXTRA=${EXTRA:-}
AZURE=${AZURE:-../shared/workloads/azure_llm_2023_code.csv}
SCRAPE=${SCRAPE:-100ms}

[ -x "$BIN/sluice-bench" ] || { echo "bench-admission: $BIN/sluice-bench missing; run make build" >&2; exit 2; }
case $WORKLOAD in
azure) load=(--fleet 4xh100-llama3-8b,8xl4-llama3-8b --trace "$AZURE") ;;
poisson) load=(--fleet 1xh100-llama3-8b,2xl4-llama3-8b --synthetic --requests 4000) ;;
small) load=(--fleet 1xh100-llama3-8b,2xl4-llama3-8b --trace "$AZURE" --requests 2000) ;;
*) echo "bench-admission: WORKLOAD is azure, poisson or small, not $WORKLOAD" >&2; exit 2 ;;
esac
if [ -z "${OUT:-}" ]; then
	OUT=$(mktemp -d)
	trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"
row=$POLICY
[ "$POLICY" = default ] && row=scored # simulate names the default policy's row by its type
# shellcheck disable=SC2206 # EXTRA is flags, split on purpose
extra=($EXTRA)

sim() { # json-file simulate-flags...
	local json=$1
	shift
	"$BIN/sluice-bench" simulate --table compact --scrape-interval "$SCRAPE" "${load[@]}" \
		--goodput-ttft 500ms --goodput-tpot 150ms --policy "$POLICY" --admission "${extra[@]}" \
		--json "$json" "$@" >/dev/null 2>"$json.err" || { cat "$json.err" >&2; exit 1; }
}

echo "# Admission in simulation ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null || echo nogit); $WORKLOAD; policy $POLICY${EXTRA:+; $EXTRA})"
for seed in $SEEDS; do
	args=()
	for run in $RUNS; do
		case $run in
		reference)
			for l in 0.8 0.95; do
				sim "$OUT/ref-$seed-$l.json" --seed "$seed" --load "$l" --oracle
				args+=(--reference "$OUT/ref-$seed-$l.json")
			done ;;
		classes)
			sim "$OUT/cls-$seed-light.json" --seed "$seed" --load "$LIGHT" --mix priority=0.3,flex=0.7
			sim "$OUT/cls-$seed-over.json" --seed "$seed" --load "$OVER" --mix priority=0.3,flex=0.7
			args+=(--classes-light "$OUT/cls-$seed-light.json" --classes-over "$OUT/cls-$seed-over.json") ;;
		tenants)
			sim "$OUT/ten-$seed.json" --seed "$seed" --load "$OVER" --tenants heavy=10,light=1
			sim "$OUT/ten-$seed-alone.json" --seed "$seed" --load "$OVER" --tenants heavy=10,light=1 --only-tenant light
			args+=(--tenants "$OUT/ten-$seed.json" --tenant-alone "$OUT/ten-$seed-alone.json") ;;
		*)
			echo "bench-admission: unknown run $run" >&2
			exit 2 ;;
		esac
	done
	echo
	"$BIN/sluice-bench" summarize-admission --policy "$row" "${args[@]}"
done
