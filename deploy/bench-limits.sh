#!/usr/bin/env bash
# What tenant limits cost, in one run: the same sluice-bench load straight to
# one instant gpuworker, and through three Sluices in front of it: no
# tenants, tenants with the in-process store, tenants with Redis (limits
# high enough never to refuse, so every request pays a reserve and a
# settle). Two passes each: latency at a light rate, then throughput with 32
# in flight. Assumes `make build` and a Redis at $REDIS_URL.
#   RATE=50 DURATION=10s REDIS_URL=redis://127.0.0.1:6379/0 ./deploy/bench-limits.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
RATE=${RATE:-50}
MAXRATE=${MAXRATE:-3000}
DURATION=${DURATION:-10s}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
WPORT=${WPORT:-9611}
tmp=$(mktemp -d)
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

key=sk-bench-limits
hash=$("$BIN/sluice" hash-key "$key")
config() { # port, extra YAML
	cat <<YAML
listen: 127.0.0.1:$1
scrape:
  enabled: false
models:
  - name: llama-3-8b
    backends:
      - url: http://127.0.0.1:$WPORT
$2
YAML
}
tenants="tiers:
  - name: big
    requests_per_minute: 100000000
    input_tokens_per_minute: 10000000000
    output_tokens_per_minute: 10000000000
    concurrent_requests: 100000
    tokens_per_day: 1000000000000
tenants:
  - name: bench
    tier: big
    api_keys: [\"$hash\"]"
config 8611 "" > "$tmp/none.yaml"
config 8612 "$tenants" > "$tmp/memory.yaml"
config 8613 "$tenants
limits:
  redis_url: $REDIS_URL
  key_prefix: bench-$$" > "$tmp/redis.yaml"

"$BIN/gpuworker" --listen "127.0.0.1:$WPORT" --model llama-3-8b --profile instant 2>"$tmp/worker.log" & pids+=($!)
for v in none memory redis; do
	"$BIN/sluice" serve --config "$tmp/$v.yaml" 2>"$tmp/$v.log" & pids+=($!)
done
wait_for "http://127.0.0.1:$WPORT/health"
for p in 8611 8612 8613; do wait_for "http://127.0.0.1:$p/readyz"; done

run() { # name, target, extra args
	local name=$1 target=$2
	shift 2
	"$BIN/sluice-bench" load --target "$target" --model llama-3-8b --duration "$DURATION" --stream --quiet \
		--seed 7 --prompt-mean 128 --output-mean 16 --api-key "$key" "$@" --json "$tmp/$name.json" >/dev/null
}
for pass in light full; do
	args=(--rate "$RATE")
	[ $pass = full ] && args=(--rate "$MAXRATE" --concurrency 32)
	run "direct-$pass" "http://127.0.0.1:$WPORT" "${args[@]}"
	run "none-$pass" "http://127.0.0.1:8611" "${args[@]}"
	run "memory-$pass" "http://127.0.0.1:8612" "${args[@]}"
	run "redis-$pass" "http://127.0.0.1:8613" "${args[@]}"
done
grep -h "limit store\|tenants configured" "$tmp"/*.log | sed 's/^/# /' || true

echo "instant gpuworker, streaming; light: $RATE req/s, full: up to $MAXRATE req/s with 32 in flight, $DURATION each"
python3 - "$tmp" <<'PY'
import json, os, sys
d = sys.argv[1]
r = {n: json.load(open(os.path.join(d, n + ".json"))) for n in
     [f"{v}-{p}" for v in ("direct", "none", "memory", "redis") for p in ("light", "full")]}
print(f"{'':<26}{'direct':>10}{'no tenants':>12}{'in-process':>12}{'redis':>10}")
def row(label, f):
    print(f"{label:<26}" + "".join(f"{f(v):>{w}.3f}" for v, w in (("direct", 10), ("none", 12), ("memory", 12), ("redis", 10))))
row("failed (light+full)", lambda v: r[v + "-light"]["failed"] + r[v + "-full"]["failed"])
for q in ("p50", "p99"):
    row(f"TTFT {q} ms, light", lambda v, q=q: r[v + "-light"]["ttft_ms"][q])
    row(f"added TTFT {q} ms, light", lambda v, q=q: r[v + "-light"]["ttft_ms"][q] - r["direct-light"]["ttft_ms"][q])
row("req/s, 32 in flight", lambda v: r[v + "-full"]["request_throughput"])
row("req/s vs no tenants", lambda v: r[v + "-full"]["request_throughput"] / r["none-full"]["request_throughput"])
PY
