#!/usr/bin/env bash
# What admission.batch_reserve buys interactive requests beside a running
# batch, and what it costs the batch (README, "Admission"): two gpuworkers
# (h100-llama3-8b, real time) behind one Sluice with a budget of 16 per
# backend and the Batch API on. For each reserve in RESERVES, on fresh
# workers and a fresh Sluice: 30 streamed priority requests (20 output
# tokens, CONC at a time) idle, then a 600-line batch (400 output tokens a
# line, ignore_eos) is uploaded and created, and 30 priority and 30 default
# requests run beside it; then, again fresh, the batch alone, timed from
# creation to completed. Prints the time to first token median / p90 / max
# per phase and the batch's duration.
#
# Builds nothing: run `make build` first. Knobs: RESERVES="-1 0.0625 0.125"
# CONC=2 BASE_PORT=19700. About 5 minutes for the three reserves.
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh
BIN=${BIN:-bin}
RESERVES=${RESERVES:--1 0.0625 0.125}
CONC=${CONC:-2}
BASE_PORT=${BASE_PORT:-19700}
PORT=$((BASE_PORT + 10))
URL="http://127.0.0.1:$PORT"
KEY=sk-reserve-bench
tmp=$(mktemp -d)
pids=()
trap 'stop_all; rm -rf "$tmp"' EXIT

for i in $(seq 0 599); do
	printf '{"custom_id":"r%04d","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3-8b","max_tokens":400,"ignore_eos":true,"messages":[{"role":"user","content":"Line %d %s"}]}}\n' \
		"$i" "$i" "$(printf 'lorem %.0s' $(seq 1 20))"
done >"$tmp/batch.jsonl"

cat >"$tmp/ttft.py" <<'EOF'
import json, statistics, sys, threading, time, urllib.request
url, key, n, tier, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
ttfts, errors = [], []
def one(i):
    body = {"model": "llama-3-8b", "stream": True, "max_tokens": 20, "service_tier": tier,
            "messages": [{"role": "user", "content": "interactive %d %s" % (i, "word " * 100)}]}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    start = time.time()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                if line.startswith(b"data: ") and b'"content"' in line:
                    ttfts.append(time.time() - start)
                    break
            for _ in r:
                pass
    except Exception as e:  # counted, not fatal
        errors.append(str(e))
sem = threading.Semaphore(conc)
def run(i):
    with sem:
        one(i)
threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
    time.sleep(0.05)
for t in threads:
    t.join()
ttfts.sort()
print("%-8s n %d errors %d  ttft p50 %.0f ms  p90 %.0f ms  max %.0f ms" % (tier, len(ttfts), len(errors),
      1000 * statistics.median(ttfts), 1000 * ttfts[int(len(ttfts) * 0.9) - 1], 1000 * ttfts[-1]))
EOF

start() { # reserve
	stop_all
	"$BIN/gpuworker" --listen "127.0.0.1:$BASE_PORT" --count 2 --model llama-3-8b --profile h100-llama3-8b \
		2>>"$tmp/workers.log" & pids+=($!)
	wait_for "http://127.0.0.1:$BASE_PORT/health"
	wait_for "http://127.0.0.1:$((BASE_PORT + 1))/health"
	rm -rf "$tmp/data"
	cat >"$tmp/sluice.yaml" <<EOF
listen: 127.0.0.1:$PORT
log:
  requests: false
models:
  - name: llama-3-8b
    admission:
      max_in_flight_per_backend: 16
      batch_reserve: $1
    backends:
      - url: http://127.0.0.1:$BASE_PORT
      - url: http://127.0.0.1:$((BASE_PORT + 1))
tiers:
  - name: std
    classes: [priority, default, flex]
tenants:
  - name: bench
    tier: std
    api_keys: ["$("$BIN/sluice" hash-key "$KEY")"]
batch:
  enabled: true
  data_dir: $tmp/data
  max_file_bytes: 2000000
  max_lines: 1000
EOF
	"$BIN/sluice" serve --config "$tmp/sluice.yaml" --watch 0 2>>"$tmp/sluice.log" & pids+=($!)
	wait_for "$URL/readyz"
}

create_batch() { # prints the batch id
	local file
	file=$(curl -fsS -H "Authorization: Bearer $KEY" -F purpose=batch -F "file=@$tmp/batch.jsonl" "$URL/v1/files" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	curl -fsS -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
		-d "{\"input_file_id\":\"$file\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}" \
		"$URL/v1/batches" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

for r in $RESERVES; do
	echo "== batch_reserve $r"
	start "$r"
	printf 'idle        '
	python3 "$tmp/ttft.py" "$URL" "$KEY" 30 priority "$CONC"
	create_batch >/dev/null
	sleep 3
	printf 'with batch  '
	python3 "$tmp/ttft.py" "$URL" "$KEY" 30 priority "$CONC"
	printf 'with batch  '
	python3 "$tmp/ttft.py" "$URL" "$KEY" 30 default "$CONC"
	start "$r"
	id=$(create_batch)
	t0=$(date +%s.%N)
	until curl -fsS -H "Authorization: Bearer $KEY" "$URL/v1/batches/$id" | grep -qE '"status":"(completed|failed|expired|cancelled)"'; do
		sleep 0.5
	done
	echo "batch alone: $(curl -fsS -H "Authorization: Bearer $KEY" "$URL/v1/batches/$id" |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], d["request_counts"]["completed"], "lines")') in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
done
