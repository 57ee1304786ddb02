#!/usr/bin/env bash
# What a proxy costs per request, in one run: the same sluice-bench load
# straight to one instant gpuworker and through each proxy in front of it:
# a bare Go httputil.ReverseProxy (sluice-bench bareproxy, the Go floor),
# nginx and HAProxy (Debian packages, streaming-safe settings) and Sluice
# with its full pipeline (a tenant key, limits on the in-process store,
# admission, the default policy, metrics; tracing as configured: off
# unless OTEL_EXPORTER_OTLP_ENDPOINT is set), without a request log as
# nginx and HAProxy run here without an access log, and again with its
# JSON request log (sluice_log), and once bare (sluice_min: no tenants,
# no admission, round robin: what the pipeline's stages cost, by
# difference). Streamed and non-streamed:
#   latency   concurrency 1: p50 and p99 added over direct
#   capacity  concurrency 32: requests/s, and the proxy process's CPU
#             (utime+stime from /proc) per request
# Each run is split into ROUNDS rounds that visit every target in turn, and
# the report gives medians over the rounds, so that a shared machine's
# drift during the run does not fall on one target only.
# Assumes `make build`; nginx and haproxy are skipped if not installed
# (apt-get install nginx haproxy).
#   N1=10000 N32=20000 ROUNDS=5 ./deploy/overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
N1=${N1:-10000}   # requests per run at concurrency 1
N32=${N32:-20000} # requests per run at concurrency 32
ROUNDS=${ROUNDS:-5} # each run is split into this many rounds, interleaved across the targets
WPORT=${WPORT:-9621}
BARE=${BARE:-8621}
NGINX=${NGINX:-8622}
HAPROXY=${HAPROXY:-8623}
SLUICE=${SLUICE:-8624} # and SLUICE+1 for the one with the request log, SLUICE+2 for the bare one
tmp=$(mktemp -d)
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	[ -f "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

"$BIN/gpuworker" --listen "127.0.0.1:$WPORT" --model llama-3-8b --profile instant 2>"$tmp/worker.log" & pids+=($!)
wait_for "http://127.0.0.1:$WPORT/health"
declare -A pid url
url[direct]="http://127.0.0.1:$WPORT"

"$BIN/sluice-bench" bareproxy --listen "127.0.0.1:$BARE" --target "http://127.0.0.1:$WPORT" >/dev/null 2>"$tmp/bare.log" &
pids+=($!); pid[bare_go]=$!; url[bare_go]="http://127.0.0.1:$BARE"

if command -v nginx >/dev/null; then
	cat > "$tmp/nginx.conf" <<NGX
worker_processes auto;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log;
events { worker_connections 4096; }
http {
	access_log off;
	upstream worker { server 127.0.0.1:$WPORT; keepalive 64; }
	server {
		listen 127.0.0.1:$NGINX;
		location / {
			proxy_pass http://worker;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
			proxy_request_buffering off;
			proxy_read_timeout 300s;
		}
	}
}
NGX
	nginx -c "$tmp/nginx.conf" -p "$tmp" -e "$tmp/nginx-error.log"
	url[nginx]="http://127.0.0.1:$NGINX"
else
	echo "overhead: nginx is not installed (apt-get install nginx): its rows are left out" >&2
fi
if command -v haproxy >/dev/null; then
	cat > "$tmp/haproxy.cfg" <<HAP
global
	nbthread 2
defaults
	mode http
	timeout connect 2s
	timeout client 300s
	timeout server 300s
	option http-keep-alive
	option http-no-delay
frontend f
	bind 127.0.0.1:$HAPROXY
	default_backend b
backend b
	http-reuse always
	server w 127.0.0.1:$WPORT
HAP
	haproxy -f "$tmp/haproxy.cfg" -db 2>"$tmp/haproxy.log" & pids+=($!); pid[haproxy]=$!
	url[haproxy]="http://127.0.0.1:$HAPROXY"
else
	echo "overhead: haproxy is not installed (apt-get install haproxy): its rows are left out" >&2
fi

cat > "$tmp/sluice.yaml" <<YAML
listen: 127.0.0.1:$SLUICE
log:
  requests: false
tiers:
  - name: bench
    requests_per_minute: 100000000
    input_tokens_per_minute: 10000000000
    output_tokens_per_minute: 10000000000
    concurrent_requests: 1024
tenants:
  - name: bench
    tier: bench
    api_keys: ["$("$BIN/sluice" hash-key sk-bench | grep -o 'sha256:[0-9a-f]*')"]
models:
  - name: llama-3-8b
    admission:
      max_in_flight_per_backend: 64
    backends:
      - url: http://127.0.0.1:$WPORT
YAML
"$BIN/sluice" serve --config "$tmp/sluice.yaml" 2>"$tmp/sluice.log" & pids+=($!); pid[sluice]=$!
url[sluice]="http://127.0.0.1:$SLUICE"
grep -v '^  requests: false$' "$tmp/sluice.yaml" | sed "s/^listen: .*/listen: 127.0.0.1:$((SLUICE + 1))/; /^log:$/d" > "$tmp/sluice-log.yaml"
"$BIN/sluice" serve --config "$tmp/sluice-log.yaml" 2>"$tmp/sluice-log.log" & pids+=($!); pid[sluice_log]=$!
url[sluice_log]="http://127.0.0.1:$((SLUICE + 1))"
wait_for "${url[sluice]}/readyz"
cat > "$tmp/sluice-min.yaml" <<YAML
listen: 127.0.0.1:$((SLUICE + 2))
log:
  requests: false
models:
  - name: llama-3-8b
    policy: round_robin
    backends:
      - url: http://127.0.0.1:$WPORT
YAML
"$BIN/sluice" serve --config "$tmp/sluice-min.yaml" 2>"$tmp/sluice-min.log" & pids+=($!); pid[sluice_min]=$!
url[sluice_min]="http://127.0.0.1:$((SLUICE + 2))"
wait_for "${url[sluice_log]}/readyz"
wait_for "${url[sluice_min]}/readyz"
wait_for "${url[bare_go]}/health" # the worker's, through the proxy
[ -n "${url[nginx]:-}" ] && { wait_for "${url[nginx]}/health"; pid[nginx]=$(pgrep -d, -P "$(cat "$tmp/nginx.pid")"); }
[ -n "${url[haproxy]:-}" ] && wait_for "${url[haproxy]}/health"

cpu() { # cpu PIDS(comma-separated): utime+stime in clock ticks, summed
	local sum=0
	IFS=, read -ra ps <<< "$1"
	for p in "${ps[@]}"; do
		read -ra f < "/proc/$p/stat"
		sum=$((sum + f[13] + f[14]))
	done
	echo "$sum"
}
targets=(direct bare_go)
[ -n "${url[nginx]:-}" ] && targets+=(nginx)
[ -n "${url[haproxy]:-}" ] && targets+=(haproxy)
targets+=(sluice sluice_log sluice_min)
common=(--model llama-3-8b --rate 100000 --duration 10m --prompt-mean 128 --output-mean 16 --quiet --api-key sk-bench)
echo "target,mode,concurrency,round,completed,failed,rps,p50_ms,p99_ms,cpu_ticks" > "$tmp/results.csv"
for mode in plain stream; do
	flags=()
	[ "$mode" = stream ] && flags=(--stream)
	for c in 1 32; do
		n=$((N1 / ROUNDS))
		[ "$c" = 32 ] && n=$((N32 / ROUNDS))
		for ((round = 0; round < ROUNDS; round++)); do
			# Each round visits every target, starting one further along, so
			# that drift on a shared machine falls on all of them alike.
			for ((i = 0; i < ${#targets[@]}; i++)); do
				t=${targets[$(((i + round) % ${#targets[@]}))]}
				before=0
				[ -n "${pid[$t]:-}" ] && before=$(cpu "${pid[$t]}")
				"$BIN/sluice-bench" load --target "${url[$t]}" "${common[@]}" "${flags[@]}" --concurrency "$c" --requests "$n" \
					--seed "$((c + round))" --json "$tmp/r.json" >/dev/null
				after=0
				[ -n "${pid[$t]:-}" ] && after=$(cpu "${pid[$t]}")
				python3 - "$tmp/r.json" "$t" "$mode" "$c" "$round" "$((after - before))" >> "$tmp/results.csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t, mode, c, rnd, ticks = sys.argv[2:7]
lat = r["e2el_ms"] if mode == "plain" else r["ttft_ms"]
print(f"{t},{mode},{c},{rnd},{r['completed']},{r['failed']},{r['request_throughput']:.1f},{lat['p50']:.3f},{lat['p99']:.3f},{ticks}")
PY
			done
		done
	done
done
python3 - "$tmp/results.csv" "$(getconf CLK_TCK)" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]))); hz = int(sys.argv[2])
def get(t, m, c):
    """One target's rounds, folded: the median over rounds of p50, p99 and
    requests/s; CPU is all its ticks over all its completed requests."""
    rs = [r for r in rows if r["target"] == t and r["mode"] == m and r["concurrency"] == c]
    if not rs:
        return None
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    done = sum(int(r["completed"]) for r in rs)
    cpu = sum(int(r["cpu_ticks"]) for r in rs) / hz * 1e6 / done if done and t != "direct" else 0
    return {"p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"), "rps": med("rps"), "cpu_us_per_req": cpu,
            "failed": sum(int(r["failed"]) for r in rs)}
rounds = max(int(r["round"]) for r in rows) + 1
print(f"latency is e2e for non-streamed requests and TTFT for streamed ones; 'added' is over direct at concurrency 1;")
print(f"p50, p99 and req/s are medians over {rounds} interleaved rounds, CPU is over all of them")
print(f"{'mode':<7}{'target':<11}{'p50 added ms':>13}{'p99 added ms':>13}{'req/s c=32':>12}{'CPU us/req':>11}{'failed':>8}")
for m in ("plain", "stream"):
    d1 = get("direct", m, "1")
    for t in ("direct", "bare_go", "nginx", "haproxy", "sluice", "sluice_log", "sluice_min"):
        a, b = get(t, m, "1"), get(t, m, "32")
        if not a:
            continue
        p50 = a["p50_ms"] - d1["p50_ms"]
        p99 = a["p99_ms"] - d1["p99_ms"]
        print(f"{m:<7}{t:<11}{p50:>13.3f}{p99:>13.3f}{b['rps']:>12.0f}{b['cpu_us_per_req']:>11.1f}{a['failed'] + b['failed']:>8}")
    s, g = (get("sluice", m, "1"), get("sluice", m, "32")), (get("bare_go", m, "1"), get("bare_go", m, "32"))
    add = lambda r: (r["p50_ms"] - d1["p50_ms"], r["p99_ms"] - d1["p99_ms"])
    sp, gp = add(s[0]), add(g[0])
    print(f"  {m}: Sluice / bare Go proxy: CPU {s[1]['cpu_us_per_req'] / g[1]['cpu_us_per_req']:.2f}x (target <= 1.0), "
          f"added p50 {sp[0] / gp[0]:.2f}x, p99 {sp[1] / gp[1]:.2f}x (target <= 1.25), "
          f"throughput {s[1]['rps'] / g[1]['rps']:.2f}x (target >= 0.8)", end="")
    n = get("nginx", m, "32")
    if n:
        print(f"; CPU vs nginx {s[1]['cpu_us_per_req'] / n['cpu_us_per_req']:.2f}x", end="")
    print()
PY
[ -n "${KEEP:-}" ] && cp "$tmp/results.csv" "$KEEP"
exit 0
