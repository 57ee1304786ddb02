#!/usr/bin/env bash
# Measures what Sluice adds: the same sluice-bench load run straight to one
# gpuworker and through Sluice in front of it, back to back in one run, then
# the two reports side by side. Assumes `make build`.
#   PROFILE=instant RATE=300 DURATION=15s ./deploy/overhead.sh   (pure overhead)
#   PROFILE=h100-llama3-8b RATE=10 DURATION=20s ./deploy/overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
PROFILE=${PROFILE:-instant}
RATE=${RATE:-300}
DURATION=${DURATION:-15s}
WPORT=${WPORT:-9601}
SPORT=${SPORT:-8601}
tmp=$(mktemp -d)
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

cat > "$tmp/sluice.yaml" <<YAML
listen: 127.0.0.1:$SPORT
models:
  - name: llama-3-8b
    backends:
      - url: http://127.0.0.1:$WPORT
YAML
"$BIN/gpuworker" --listen "127.0.0.1:$WPORT" --model llama-3-8b --profile "$PROFILE" 2>"$tmp/worker.log" & pids+=($!)
"$BIN/sluice" serve --config "$tmp/sluice.yaml" 2>"$tmp/sluice.log" & pids+=($!)
for url in "http://127.0.0.1:$WPORT/health" "http://127.0.0.1:$SPORT/readyz"; do
	wait_for "$url" || true
done

args=(--model llama-3-8b --rate "$RATE" --duration "$DURATION" --stream --quiet --seed 7)
[ "$PROFILE" = instant ] && args+=(--prompt-mean 128 --output-mean 16)
"$BIN/sluice-bench" load --target "http://127.0.0.1:$WPORT" "${args[@]}" --json "$tmp/direct.json" >/dev/null
"$BIN/sluice-bench" load --target "http://127.0.0.1:$SPORT" "${args[@]}" --json "$tmp/sluice.json" >/dev/null

echo "profile $PROFILE, $RATE req/s for $DURATION, streaming"
python3 - "$tmp/direct.json" "$tmp/sluice.json" <<'PY'
import json, sys
d, s = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'metric':<22}{'direct':>12}{'via sluice':>12}{'added':>10}")
for k in ("completed", "failed", "request_throughput", "output_throughput"):
    print(f"{k:<22}{d[k]:>12.2f}{s[k]:>12.2f}")
for k in ("ttft_ms", "e2el_ms", "itl_ms"):
    for q in ("mean", "p50", "p99"):
        a, b = d[k][q], s[k][q]
        print(f"{k+' '+q:<22}{a:>12.3f}{b:>12.3f}{b-a:>+10.3f}")
PY
