#!/usr/bin/env bash
# Routing policies compared in simulation (make bench-policies).
#
# Runs `sluice-bench simulate --table compact` for every registered policy
# plus the oracle (the ideal central scheduler) on the issue's scenarios and
# prints one table per scenario:
#   1. Azure code trace on 4xh100-llama3-8b,8xl4-llama3-8b at --load 0.8
#   2. the same at --load 0.95
#   3. the same at --load 0.25 (extra: the trace is so bursty that 0.8 of the
#      mean-rate capacity overloads every policy, the oracle included)
#   4. Mooncake trace on 8xh100-llama3-8b at its own timing
#   5. herding: the same Mooncake run and the Azure 0.8 run with --routers 1,
#      2 and 4 independent router replicas (no shared state)
# Whole traces, no --requests cap. Columns: TTFT p50/p99, E2E p99, output
# tokens/s, goodput (req/s with TTFT <= 1s and TPOT <= 100ms), prefix-cache
# hit ratio, and util spread (largest utilization gap between two workers of
# one group).
#
# Builds nothing: run `make build` first. Knobs (environment):
# POLICIES=all (comma-separated; NAME:{k: v} passes params) BIN=bin
# AZURE=<azure code trace> MOONCAKE=<mooncake trace> SCRAPE=100ms
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
POLICIES=${POLICIES:-all}
AZURE=${AZURE:-../shared/workloads/azure_llm_2023_code.csv}
MOONCAKE=${MOONCAKE:-../shared/workloads/mooncake_fast25_synthetic.jsonl}
SCRAPE=${SCRAPE:-100ms}
HETERO=4xh100-llama3-8b,8xl4-llama3-8b

[ -x "$BIN/sluice-bench" ] || { echo "bench-policies: $BIN/sluice-bench missing; run make build" >&2; exit 2; }

sim() { # simulate flags...
	"$BIN/sluice-bench" simulate --table compact --scrape-interval "$SCRAPE" "$@" 2>/dev/null
}

echo "# Routing policies in simulation ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null || echo nogit))"
sim --fleet "$HETERO" --trace "$AZURE" --load 0.8 --policy "$POLICIES" --oracle
sim --fleet "$HETERO" --trace "$AZURE" --load 0.95 --policy "$POLICIES" --oracle
sim --fleet "$HETERO" --trace "$AZURE" --load 0.25 --policy "$POLICIES" --oracle
sim --fleet 8xh100-llama3-8b --trace "$MOONCAKE" --policy "$POLICIES" --oracle

echo
echo "# Herding: independent router replicas, arrivals split round-robin, each with its own in-flight counts and scrape phase"
for r in 1 2 4; do
	sim --fleet 8xh100-llama3-8b --trace "$MOONCAKE" --policy "$POLICIES" --routers "$r"
done
for r in 1 2 4; do
	sim --fleet "$HETERO" --trace "$AZURE" --load 0.8 --policy "$POLICIES" --routers "$r"
done
