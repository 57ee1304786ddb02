#!/usr/bin/env bash
# Faults under steady load, measured: four gpuworkers (one process each)
# behind one Sluice with its defaults (default policy, breaker, retries),
# a non-streamed load at 0.45 and a streamed one at 0.15 of the fleet's
# estimated capacity (0.6 in all), and a fault on the second worker:
#   SCENARIO=kill  SIGKILL at 20 s, restarted at 35 s
#   SCENARIO=slow  +2 s before every answer starts, from 15 s (PUT /admin/faults)
#   SCENARIO=error every answer a 500, from 15 s
# It prints what each load saw, the breaker's timing for kill, and the
# faulty worker's share of attempts per 5 s window. Assumes `make build`.
#   SCENARIO=slow ./deploy/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
SCENARIO=${SCENARIO:-kill}
PROFILE=${PROFILE:-h100-llama3-8b}
DURATION=${DURATION:-50}
SPORT=${SPORT:-8711}
WPORT=${WPORT:-9711} # workers on WPORT..WPORT+3
case "$SCENARIO" in kill | slow | error) ;; *) echo "SCENARIO is kill, slow or error" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

{
	echo "listen: 127.0.0.1:$SPORT"
	echo "models:"
	echo "  - name: llama-3-8b"
	echo "    backends:"
	for i in 0 1 2 3; do echo "      - url: http://127.0.0.1:$((WPORT + i))"; done
} > "$tmp/sluice.yaml"
worker() { # worker I: start worker I, its pid in wpid[I]
	"$BIN/gpuworker" --listen "127.0.0.1:$((WPORT + $1))" --model llama-3-8b --profile "$PROFILE" \
		--seed "$1" 2>>"$tmp/worker$1.log" &
	wpid[$1]=$!
	pids+=($!)
}
declare -a wpid
for i in 0 1 2 3; do worker "$i"; done
"$BIN/sluice" serve --config "$tmp/sluice.yaml" 2>"$tmp/sluice.log" & pids+=($!)
for i in 0 1 2 3; do wait_for "http://127.0.0.1:$((WPORT + i))/health"; done
wait_for "http://127.0.0.1:$SPORT/readyz"
faulty="http://127.0.0.1:$((WPORT + 1))"

# Sample Sluice's metrics every 0.5 s: attempts by backend and outcome, breaker state.
(
	while :; do
		t=$(date +%s.%N)
		curl -s "http://127.0.0.1:$SPORT/metrics" |
			grep -E '^sluice_(upstream_attempts_total|breaker_open)' | sed "s/^/$t /" || true
		sleep 0.5
	done
) > "$tmp/metrics.txt" & pids+=($!)

t0=$(date +%s.%N)
common=(--target "http://127.0.0.1:$SPORT" --model llama-3-8b --fleet "4x$PROFILE" --duration "${DURATION}s" --quiet)
"$BIN/sluice-bench" load "${common[@]}" --load 0.45 --seed 11 --json "$tmp/plain.json" >/dev/null & plain=$!
"$BIN/sluice-bench" load "${common[@]}" --load 0.15 --seed 12 --stream --json "$tmp/stream.json" >/dev/null & stream=$!
at() { sleep "$(python3 -c "import time; print(max(0, $t0 + $1 - time.time()))")"; }
events=()
case "$SCENARIO" in
kill)
	at 20
	kill -9 "${wpid[1]}"
	events+=("kill $(date +%s.%N)")
	at 35
	worker 1
	events+=("restart $(date +%s.%N)")
	;;
slow)
	at 15
	curl -fsS -X PUT -d '{"added_latency":"2s"}' "$faulty/admin/faults" >/dev/null
	events+=("fault $(date +%s.%N)")
	;;
error)
	at 15
	curl -fsS -X PUT -d '{"error_rate":1}' "$faulty/admin/faults" >/dev/null
	events+=("fault $(date +%s.%N)")
	;;
esac
wait "$plain" "$stream"
sleep 1

echo "scenario $SCENARIO: 4x$PROFILE, load 0.45 non-streamed + 0.15 streamed for ${DURATION}s; the faulty worker is $faulty"
python3 - "$tmp" "$t0" "$faulty" "${events[@]}" <<'PY'
import collections, json, re, sys
tmp, t0, faulty, events = sys.argv[1], float(sys.argv[2]), sys.argv[3], dict(e.split() for e in sys.argv[4:])
events = {k: float(v) - t0 for k, v in events.items()}
for name in ("plain", "stream"):
    r = json.load(open(f"{tmp}/{name}.json"))
    errs = ", ".join(f"{k}: {v}" for k, v in sorted((r.get("errors") or {}).items())) or "none"
    print(f"{'non-streamed' if name == 'plain' else 'streamed':<13} completed {r['completed']:>5}  failed {r['failed']:>4}  "
          f"p50 TTFT {r['ttft_ms']['p50']:7.0f} ms  p99 TTFT {r['ttft_ms']['p99']:7.0f} ms  errors: {errs}")
samples = collections.defaultdict(lambda: collections.defaultdict(float))
breaker = {}
for line in open(f"{tmp}/metrics.txt"):
    t, rest = line.split(" ", 1)
    t = float(t) - t0
    m = re.search(r'backend="([^"]+)"(?:,outcome="([^"]+)")?\} (\S+)', rest)
    if not m:
        continue
    if rest.startswith("sluice_breaker_open"):
        if m.group(1) == faulty:
            breaker[t] = float(m.group(3))
    else:
        samples[t][m.group(1)] += float(m.group(3))
for k, v in events.items():
    print(f"{k} at {v:.1f} s")
if "kill" in events:
    opened = [t for t, v in sorted(breaker.items()) if t > events["kill"] and v == 1]
    if opened:
        print(f"breaker open at most {opened[0] - events['kill']:.2f} s after the kill (sampled every 0.5 s; the log line below is exact)")
    back = None
    ts = sorted(samples)
    for a, b in zip(ts, ts[1:]):
        if a >= events["restart"] and samples[b][faulty] > samples[a][faulty]:
            back = b
            break
    if back is not None:
        print(f"back in rotation at most {back - events['restart']:.2f} s after the restart (first attempt counted)")
ts = sorted(samples)
print("faulty worker's share of attempts per 5 s window:")
edge, prev, out = 0.0, None, []
for t in ts:
    if prev is None:
        prev = t
        continue
    if t - prev >= 5:
        tot = sum(samples[t].values()) - sum(samples[prev].values())
        mine = samples[t][faulty] - samples[prev][faulty]
        out.append(f"{prev:4.0f}-{t:<4.0f}s {mine / tot if tot else 0:5.2f}")
        prev = t
print("  " + "\n  ".join(out))
PY
grep -E 'breaker|reachable|stream cut' "$tmp/sluice.log" | head -8 | sed 's/^/sluice log: /'
