#!/usr/bin/env bash
# Memory and long prompts, measured in one run:
#   streams  STREAMS (10,000) streamed requests sent at RAMP/s (1,000) through
#            one Sluice (defaults) to four simulated workers (one gpuworker
#            process, --count 4) whose engine steps every 2 s: a stream gets
#            its first token about 2-4 s after it is sent, then one token
#            every 2 s, 15 in all, so it is open about 30 s and trickles
#            the whole time. About once a second: Sluice's VmRSS, its open
#            streams (the sum of sluice_upstream_in_flight_requests), its
#            file descriptors, goroutines, heap and stacks, and the workers'
#            running sequences and generated tokens. Sluice runs with
#            GODEBUG=gctrace=1, so its log also gives the live heap after
#            each GC (RSS also holds the garbage of the current GC cycle).
#   long     200 KB prompts (36,000 token ids: 204.8 KB of JSON per request,
#            checked on the wire below), streamed, 4 output tokens, straight
#            to an instant gpuworker and through Sluice (defaults, request
#            log on), at concurrency 100 (closed loop) and 1: TTFT p50/p99
#            added over direct, Sluice's CPU (utime+stime) per request and
#            its own time per request (the request log's overhead_ms).
#            Then "paced": Poisson arrivals at 100 / LONG_LATENCY per
#            second to an instant worker that answers after LONG_LATENCY
#            (4s), as a GPU queueing such prompts would: about 100 in flight
#            at 25 requests/s, which does not saturate the cores, so what
#            Sluice adds is not CPU queueing.
# Each open stream holds two file descriptors in Sluice (client and
# backend), so STREAMS open at once need 2 x STREAMS plus a few; the script
# raises the open-files limit as far as the hard limit allows and prints
# how many streams fit.
# Assumes `make build`; KEEP=DIR keeps the samples, reports and logs.
# STREAMS=0 skips the streams part (the long prompts alone take ~45 s).
#   STREAMS=10000 RAMP=1000 LONG_REQUESTS=1000 ./deploy/memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
STREAMS=${STREAMS:-10000}
RAMP=${RAMP:-1000}                   # stream arrivals per second
LONG_REQUESTS=${LONG_REQUESTS:-1000} # 200 KB-prompt requests per target at concurrency 100 (a third at 1)
LONG_LATENCY=${LONG_LATENCY:-4s}     # the paced worker's delay before it answers, in seconds ("4s")
SPORT=${SPORT:-8731}                 # Sluice for streams; SPORT+1 for long prompts; admin on +10, +11
WPORT=${WPORT:-9731}                 # trickle workers on WPORT..WPORT+3; the instant worker on WPORT+4
CPORT=${CPORT:-9739}                 # the body-size check's capture server
tmp=$(mktemp -d)
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	[ -n "${KEEP:-}" ] && cp -r "$tmp" "$KEEP"
	rm -rf "$tmp"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# --- streams -----------------------------------------------------------------
if [ "$STREAMS" -gt 0 ]; then
cat > "$tmp/profiles.yaml" <<'YAML'
profiles:
  - name: trickle      # no GPU time, a 2 s step: one token per running stream every 2 s
    base: instant
    step_overhead: 2s
YAML
"$BIN/gpuworker" --listen "127.0.0.1:$WPORT" --count 4 --model llama-3-8b \
	--profiles "$tmp/profiles.yaml" --profile trickle 2>"$tmp/trickle.log" & pids+=($!)
{
	echo "listen: 127.0.0.1:$SPORT"
	echo "admin:"
	echo "  listen: 127.0.0.1:$((SPORT + 10))"
	echo "models:"
	echo "  - name: llama-3-8b"
	echo "    backends:"
	for i in 0 1 2 3; do echo "      - url: http://127.0.0.1:$((WPORT + i))"; done
} > "$tmp/streams.yaml"
GODEBUG=gctrace=1 "$BIN/sluice" serve --config "$tmp/streams.yaml" 2>"$tmp/streams-sluice.log" & pids+=($!); spid=$!
for i in 0 1 2 3; do wait_for "http://127.0.0.1:$((WPORT + i))/health"; done
wait_for "http://127.0.0.1:$SPORT/readyz"

# One line a second: time, VmRSS (kB), fds, open streams, goroutines, heap in
# use, stacks in use (bytes), the workers' running sequences (prefilled, so
# their first token is out) and their generated tokens so far. A scrape that
# Sluice cannot answer gives -1 open streams.
(
	while :; do
		rss=$(awk '/^VmRSS/ {print $2}' "/proc/$spid/status")
		fds=$(find "/proc/$spid/fd" -mindepth 1 -maxdepth 1 | wc -l)
		go=$({ curl -s -m 2 "http://127.0.0.1:$SPORT/metrics" || true; } | awk '
			/^sluice_upstream_in_flight_requests/ {o += $NF}
			/^go_goroutines / {g = $NF} /^go_memstats_heap_inuse_bytes / {h = $NF} /^go_memstats_stack_inuse_bytes / {s = $NF}
			END {if (g == "") print "-1 0 0 0"; else printf "%d %d %d %d\n", o, g, h, s}')
		w=$(for i in 0 1 2 3; do curl -s -m 2 "http://127.0.0.1:$((WPORT + i))/metrics" || true; done | awk '
			/^vllm:num_requests_running/ {r += $NF} /^vllm:generation_tokens_total/ {t += $NF} END {printf "%d %d\n", r, t}')
		echo "$(date +%s.%N) $rss $fds $go $w"
		sleep 1
	done
) > "$tmp/samples.txt" & pids+=($!); sampler=$!
sleep 3 # idle samples
"$BIN/sluice-bench" load --target "http://127.0.0.1:$SPORT" --model llama-3-8b --stream \
	--rate "$RAMP" --requests "$STREAMS" --duration 10m --concurrency 0 \
	--prompt-mean 16 --prompt-sigma 0 --output-mean 15 --output-sigma 0 \
	--seed 1 --quiet --json "$tmp/streams.json" >/dev/null 2>&1
sleep 1
kill "$sampler" 2>/dev/null || true
fi

# --- long prompts ------------------------------------------------------------
# The body's size on the wire: one request to a server that records it.
python3 - "$CPORT" > "$tmp/capture.txt" 2>/dev/null <<'PY' & pids+=($!)
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        b = self.rfile.read(int(self.headers["Content-Length"]))
        print(len(b), len(json.loads(b)["prompt"]), flush=True)
        out = b'{"choices":[{"index":0,"text":"a","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
"$BIN/gpuworker" --listen "127.0.0.1:$((WPORT + 4))" --model llama-3-8b --profile instant 2>"$tmp/instant.log" & pids+=($!)
# The same, answering after a fixed LONG_LATENCY (as a GPU prefilling a long
# prompt would), so 100 requests in flight do not saturate the cores.
"$BIN/gpuworker" --listen "127.0.0.1:$((WPORT + 5))" --model paced --profile instant \
	--added-latency "$LONG_LATENCY" 2>"$tmp/paced.log" & pids+=($!)
cat > "$tmp/long.yaml" <<YAML
listen: 127.0.0.1:$((SPORT + 1))
admin:
  listen: 127.0.0.1:$((SPORT + 11))
models:
  - name: llama-3-8b
    backends:
      - url: http://127.0.0.1:$((WPORT + 4))
  - name: paced
    backends:
      - url: http://127.0.0.1:$((WPORT + 5))
YAML
"$BIN/sluice" serve --config "$tmp/long.yaml" 2>"$tmp/long-sluice.log" & pids+=($!); lpid=$!
wait_for "http://127.0.0.1:$((WPORT + 4))/health"
wait_for "http://127.0.0.1:$((WPORT + 5))/health"
wait_for "http://127.0.0.1:$((SPORT + 1))/readyz"
for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$CPORT/" && break; sleep 0.1; done
long=(--duration 10m --quiet
	--prompt-mean 36000 --prompt-sigma 0 --prompt-max 36000 --output-mean 4 --output-sigma 0)
"$BIN/sluice-bench" load --target "http://127.0.0.1:$CPORT" --model llama-3-8b --rate 100000 "${long[@]}" --requests 1 >/dev/null 2>&1
ticks() { read -ra f < "/proc/$lpid/stat"; echo $((f[13] + f[14])); }
run() { # run NAME TARGET CONCURRENCY REQUESTS SEED [MODEL [RATE]]
	local before after lines
	lines=$(wc -l < "$tmp/long-sluice.log")
	before=$(ticks)
	"$BIN/sluice-bench" load --target "$2" --model "${6:-llama-3-8b}" --rate "${7:-100000}" "${long[@]}" --stream \
		--concurrency "$3" --requests "$4" \
		--seed "$5" --json "$tmp/long-$1.json" >/dev/null 2>&1
	after=$(ticks)
	echo "$1 $((after - before)) $4" >> "$tmp/long-cpu.txt"
	# Sluice's request lines of this run: its own time per request (overhead_ms).
	tail -n +"$((lines + 1))" "$tmp/long-sluice.log" | grep '"msg":"request"' > "$tmp/long-$1-requests.jsonl" || true
}
direct="http://127.0.0.1:$((WPORT + 4))" sluice="http://127.0.0.1:$((SPORT + 1))"
run warm-direct "$direct" 100 200 100
run warm-sluice "$sluice" 100 200 101
run direct-100 "$direct" 100 "$LONG_REQUESTS" 102
run sluice-100 "$sluice" 100 "$LONG_REQUESTS" 103
run direct-1 "$direct" 1 $((LONG_REQUESTS / 3)) 104
run sluice-1 "$sluice" 1 $((LONG_REQUESTS / 3)) 105
paced="http://127.0.0.1:$((WPORT + 5))"
# Poisson arrivals at 100 / LONG_LATENCY per second: about 100 in flight,
# not sent in waves as a closed loop's would be.
rate=$(awk -v l="${LONG_LATENCY%s}" 'BEGIN { printf "%g", 100 / l }')
run direct-paced "$paced" 1000 "$LONG_REQUESTS" 106 paced "$rate"
run sluice-paced "$sluice" 1000 "$LONG_REQUESTS" 107 paced "$rate"

python3 - "$tmp" "$STREAMS" "$RAMP" "$(ulimit -n)" "$(cat /proc/sys/net/core/somaxconn)" "$(getconf CLK_TCK)" <<'PY'
import json, re, sys
tmp, n, ramp, nofile, somaxconn, hz = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
MiB = 2**20
if n > 0:
    # t rss_kB fds open goroutines heap stack running gen_tokens
    rows = [[float(x) for x in l.split()] for l in open(f"{tmp}/samples.txt")]
    rows = [r for r in rows if len(r) == 9]
    idle = rows[2]
    peak = max(rows, key=lambda r: r[1])
    at = max(rows, key=lambda r: r[3])
    i = rows.index(at)
    a, b = rows[max(i - 2, 0)], rows[min(i + 3, len(rows) - 1)]
    rate = (b[8] - a[8]) / (b[0] - a[0])
    live = [float(m) for m in re.findall(r"^gc \d+ .*?->\d+->(\d+) MB", open(f"{tmp}/streams-sluice.log").read(), re.M)]
    s = json.load(open(f"{tmp}/streams.json"))
    errs = "; ".join(f"{v} x {k}" for k, v in sorted((s.get("errors") or {}).items(), key=lambda kv: -kv[1])) or "none"
    added = (peak[1] - idle[1]) * 1024
    fit = (nofile - int(idle[2])) // 2
    print(f"streams: {n:,} streamed requests at {ramp}/s, 16-token prompts, 15 output tokens, one every 2 s (4 trickle workers)")
    print(f"  open-files limit {nofile:,} (about {fit:,} streams fit in Sluice), somaxconn {somaxconn}")
    print(f"  {'Sluice RSS idle':<34}{idle[1] * 1024 / MiB:>9.1f} MiB")
    print(f"  {'Sluice RSS peak':<34}{peak[1] * 1024 / MiB:>9.1f} MiB")
    print(f"  {'peak open streams':<34}{int(at[3]):>9,}   (Sluice fds {int(at[2]):,}; {rate:,.0f} tokens/s generated around the peak)")
    print(f"  {'of them past their first token':<34}{int(max(min(r[3], r[7]) for r in rows)):>9,}   (most at once: the workers' running sequences)")
    print(f"  {'per open stream':<34}{added / at[3] / 1024:>9.1f} KiB   (peak - idle) / peak open streams")
    print(f"  {'10,000 streams at that rate':<34}{(added / at[3] * 10000 + idle[1] * 1024) / 2**30:>9.2f} GiB   (target: under 1 GiB)")
    print(f"  {'live heap after GC, largest':<34}{max(live, default=0):>9.0f} MB    (gctrace; at the open peak: heap in use {at[5] / MiB:.0f} MiB, "
          f"stacks {at[6] / MiB:.0f} MiB, {int(at[4]):,} goroutines = {(at[4] - idle[4]) / at[3]:.1f} per stream)")
    print(f"  completed {s['completed']:,}, failed {s['failed']:,}: {errs}")
    print(f"  TTFT p50 {s['ttft_ms']['p50'] / 1000:.1f} s, p99 {s['ttft_ms']['p99'] / 1000:.1f} s; E2E p50 {s['e2el_ms']['p50'] / 1000:.1f} s")
size, toks = open(f"{tmp}/capture.txt").read().split()
cpu = {l.split()[0]: int(l.split()[1]) / hz * 1e6 / int(l.split()[2]) for l in open(f"{tmp}/long-cpu.txt")}
print(f"long prompts: {int(toks):,} token ids = {int(size):,} bytes of JSON per request, streamed, 4 output tokens")
def own(name):
    """p50 and p99 of Sluice's own time per request in a run (the request
    log's overhead_ms: arrival to the attempt, the body's arrival included)."""
    v = sorted(json.loads(l)["overhead_ms"] for l in open(f"{tmp}/long-{name}-requests.jsonl") if '"overhead_ms"' in l)
    if not v:
        return "", ""
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    return f"{q(0.5):.2f}", f"{q(0.99):.2f}"
print(f"  {'concurrency':<12}{'target':<8}{'completed':>10}{'failed':>7}{'TTFT p50 ms':>12}{'TTFT p99 ms':>12}{'req/s':>7}"
      f"{'p50 added':>10}{'p99 added':>10}{'Sluice CPU/req':>15}{'own p50 ms':>11}{'own p99 ms':>11}")
for c in ("100", "1", "paced"):
    d = json.load(open(f"{tmp}/long-direct-{c}.json"))
    for t in ("direct", "sluice"):
        x = json.load(open(f"{tmp}/long-{t}-{c}.json"))
        add = ("", "", "", "", "") if t == "direct" else (
            f"{x['ttft_ms']['p50'] - d['ttft_ms']['p50']:.2f}", f"{x['ttft_ms']['p99'] - d['ttft_ms']['p99']:.2f}", f"{cpu[f'sluice-{c}']:.0f} us",
            *own(f"sluice-{c}"))
        print(f"  {c:<12}{t:<8}{x['completed']:>10,}{x['failed']:>7}{x['ttft_ms']['p50']:>12.2f}{x['ttft_ms']['p99']:>12.2f}"
              f"{x['request_throughput']:>7.0f}{add[0]:>10}{add[1]:>10}{add[2]:>15}{add[3]:>11}{add[4]:>11}")
print("  (target: under 5 ms added at p99; client, worker and Sluice share the machine's cores; 'paced': about 100 in"
      " flight, Poisson arrivals, to a worker that answers after a fixed delay, so the cores are not saturated;"
      " 'own': Sluice's overhead_ms, from the request's arrival, its body's included, to the attempt on the worker)")
PY
[ "$STREAMS" -gt 0 ] && grep -m 3 'too many open files' "$tmp/streams-sluice.log" | cut -c1-300 | sed 's/^/sluice log: /' || true
