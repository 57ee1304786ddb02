#!/usr/bin/env bash
# Routing policies compared in simulation (make bench-policies).
#
# Runs `sluice-bench simulate --table compact` for every registered policy
# plus the reference scheduler (row "oracle") on each scenario below, prints
# one table per scenario, then `sluice-bench summarize` of them all: the
# default policy against the best of the baselines an operator would
# configure (least_request, p2c, and weighted with capacity-proportional
# weights) on each figure, against the reference, and round_robin's
# prefix-cache hit ratio and fleet utilization.
#
# Scenarios, each with the SLO its goodput column counts (TTFT, TPOT), taken
# from published per-application targets before any tuning:
#   azure     Azure code trace (code completion), 4xH100 + 8xL4, at 0.6 and
#             0.8 x capacity: 500 ms, 150 ms (guidellm's "code generation")
#   mooncake  Mooncake trace (long-context chat), 8xH100, trace timing:
#             3 s, 100 ms (NVIDIA's RAG sizing guide's chatbot TTFT, guidellm's
#             RAG ITL)
#   shared    shared-prefix generator (a 2,048-token system prompt), 8xH100,
#             0.6 and 0.8: 200 ms, 50 ms (guidellm's "chat applications")
#   multi     multi-turn generator (conversations resending their history),
#             8xH100, 0.6 and 0.8: 200 ms, 50 ms (chat)
#   longdoc   long-doc generator (8k-32k-token documents), 8xH100, 0.6 and
#             0.8: 3 s, 100 ms (long-context chat, as mooncake)
#   three     three GPU types, 2xH100 + 4xA100-80GB + 8xL4, Azure code trace
#             at 0.6 and 0.8: 500 ms, 150 ms
#   herding   Azure 0.8 and Mooncake with 2 and 4 independent router replicas
# The policies were tuned on seed 1; report other seeds (SEEDS=2 or 3).
#
# Builds nothing: run `make build` first. Knobs (environment):
# SEEDS="1" (space-separated; each seed runs every scenario) SCENARIOS="azure
# mooncake shared multi longdoc three herding" POLICIES=all (comma-separated;
# NAME:{k: v} passes params) BIN=bin AZURE=<azure code trace>
# MOONCAKE=<mooncake trace> SCRAPE=100ms OUT=<dir for the JSON files, default
# a temporary one>
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
SEEDS=${SEEDS:-1}
SCENARIOS=${SCENARIOS:-azure mooncake shared multi longdoc three herding}
POLICIES=${POLICIES:-all}
AZURE=${AZURE:-../shared/workloads/azure_llm_2023_code.csv}
MOONCAKE=${MOONCAKE:-../shared/workloads/mooncake_fast25_synthetic.jsonl}
SCRAPE=${SCRAPE:-100ms}
MIXED=4xh100-llama3-8b,8xl4-llama3-8b
H100S=8xh100-llama3-8b
THREE=2xh100-llama3-8b,4xa100-80gb-llama3-8b,8xl4-llama3-8b

[ -x "$BIN/sluice-bench" ] || { echo "bench-policies: $BIN/sluice-bench missing; run make build" >&2; exit 2; }
if [ -z "${OUT:-}" ]; then
	OUT=$(mktemp -d)
	trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"

n=0
files=()
sim() { # simulate flags...
	n=$((n + 1))
	local json
	json=$(printf '%s/%03d.json' "$OUT" "$n")
	"$BIN/sluice-bench" simulate --table compact --scrape-interval "$SCRAPE" --json "$json" "$@" 2>/dev/null
	files+=("$json")
}
code=(--goodput-ttft 500ms --goodput-tpot 150ms)
chat=(--goodput-ttft 200ms --goodput-tpot 50ms)
long=(--goodput-ttft 3s --goodput-tpot 100ms)

echo "# Routing policies in simulation ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null || echo nogit), seeds: $SEEDS)"
for seed in $SEEDS; do
	for sc in $SCENARIOS; do
		case $sc in
		azure)
			for l in 0.6 0.8; do
				sim --seed "$seed" --fleet "$MIXED" --trace "$AZURE" --load "$l" "${code[@]}" --policy "$POLICIES" --oracle
			done ;;
		mooncake)
			sim --seed "$seed" --fleet "$H100S" --trace "$MOONCAKE" "${long[@]}" --policy "$POLICIES" --oracle ;;
		shared)
			for l in 0.6 0.8; do
				sim --seed "$seed" --fleet "$H100S" --synthetic --workload shared-prefix --requests 20000 --load "$l" "${chat[@]}" --policy "$POLICIES" --oracle
			done ;;
		multi)
			for l in 0.6 0.8; do
				sim --seed "$seed" --fleet "$H100S" --synthetic --workload multi-turn --requests 40000 --load "$l" "${chat[@]}" --policy "$POLICIES" --oracle
			done ;;
		longdoc)
			for l in 0.6 0.8; do
				sim --seed "$seed" --fleet "$H100S" --synthetic --workload long-doc --requests 4000 --load "$l" "${long[@]}" --policy "$POLICIES" --oracle
			done ;;
		three)
			for l in 0.6 0.8; do
				sim --seed "$seed" --fleet "$THREE" --trace "$AZURE" --load "$l" "${code[@]}" --policy "$POLICIES" --oracle
			done ;;
		herding)
			for r in 2 4; do
				sim --seed "$seed" --fleet "$MIXED" --trace "$AZURE" --load 0.8 "${code[@]}" --policy "$POLICIES" --routers "$r"
				sim --seed "$seed" --fleet "$H100S" --trace "$MOONCAKE" "${long[@]}" --policy "$POLICIES" --routers "$r"
			done ;;
		*)
			echo "bench-policies: unknown scenario $sc" >&2
			exit 2 ;;
		esac
	done
done

echo
echo "# The default policy against the best baseline (least_request, p2c, capacity-weighted weighted) on each figure"
"$BIN/sluice-bench" summarize "${files[@]}"
