#!/usr/bin/env bash
# What a batch costs interactive traffic, live (make bench-batch): real
# gpuworkers (H100S x h100-llama3-8b and L4S x l4-llama3-8b, one process each,
# at --speedup SPEEDUP) behind one real Sluice on loopback with admission on
# (per-backend budgets from the simulator, as bench-classes-live sets them),
# two tenants of one tier ("interactive" and "batch"), and the Batch API on
# (batch.enabled, data_dir in a temp dir). The interactive load is the Azure
# code trace at LOAD times the fleet's capacity estimate, streamed, for
# DURATION seconds of simulated time (sluice-bench load --time-scale SPEEDUP,
# so every figure is in simulated time). Runs, each on fresh workers and a
# fresh Sluice:
#   batch-alone  the batch with no interactive load and no batch_prefill
#                bound: the fleet's measured throughput for the batch's
#                requests
#   alone        the interactive load alone
#   batch        the interactive load, and at its start a Batch API batch of
#                N chat requests (uploaded with curl: POST /v1/files, then
#                POST /v1/batches), polled until it ends; its lines run as
#                flex in what the interactive load leaves
#   ordinary     the interactive load, and the same N requests sent as
#                ordinary default-class traffic by the batch tenant
#                (sluice-bench load, all due at once, --concurrency
#                batch.concurrency)
# The batch's prompt and output sizes are N rows drawn (seeded) from the
# trace; the batch is chat (/v1/chat/completions, one user message of
# random hex sized to the row's prompt, ignore_eos), the ordinary run sends
# the same rows as /v1/completions through sluice-bench.
# Prints one table: interactive completed/failed, TTFT p50/p99 (and p99
# relative to alone), goodput; batch completed/failed, duration, output
# tokens/s; the batch tenant's output tokens/s while the interactive load
# ran; and the fleet's spare throughput, estimated (capacity estimate minus
# the interactive offered rate) and measured (batch-alone's throughput
# minus the interactive offered rate).
#
# Builds nothing: run `make build` first. Knobs (environment): H100S=2 L4S=2
# SPEEDUP=2 LOAD=0.6 DURATION=480 (simulated seconds of interactive load:
# the whole trace at 0.6) N=20000 CONCURRENCY=64 (batch.concurrency,
# Sluice's default; ALONE_CONCURRENCY=512 in the batch-alone run, so that
# it measures the fleet's throughput) BATCH_PREFILL=<50ms / SPEEDUP> (admission.batch_prefill
# in wall time: the simulator's 50ms in simulated time; set empty for
# Sluice's default, -1ms for off) RUNS="batch-alone alone batch ordinary"
# TRACE=<azure code trace> BASE_PORT=19800 (workers BASE_PORT.., Sluice
# BASE_PORT-1) BIN=bin GOODPUT_TTFT=1s GOODPUT_TPOT=100ms
# BATCH_TIMEOUT=1800 (wall seconds a batch may run) PENDING=0
# (admission.max_pending_prompt_tokens; 0 = off) KEEP=1 (keep the files)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
BIN=${BIN:-bin}
H100S=${H100S:-2}
L4S=${L4S:-2}
SPEEDUP=${SPEEDUP:-2}
LOAD=${LOAD:-0.6}
DURATION=${DURATION:-480}
N=${N:-20000}
CONCURRENCY=${CONCURRENCY:-64}
ALONE_CONCURRENCY=${ALONE_CONCURRENCY:-512}
# The bound is wall time, the workers run SPEEDUP times faster: Sluice's
# default 50ms in simulated time, as simulate --admission runs it.
BATCH_PREFILL=${BATCH_PREFILL-$(awk -v s="$SPEEDUP" 'BEGIN { printf "%gms", 50 / s }')}
# admission.batch_reserve in the batch run (empty: Sluice's default, 0.125;
# -1 turns it off, as before 2026-12-02); the batch-alone run has none.
BATCH_RESERVE=${BATCH_RESERVE-}
RUNS=${RUNS:-batch-alone alone batch ordinary}
TRACE=${TRACE:-../shared/workloads/azure_llm_2023_code.csv}
BASE_PORT=${BASE_PORT:-19800}
GOODPUT_TTFT=${GOODPUT_TTFT:-1s}
GOODPUT_TPOT=${GOODPUT_TPOT:-100ms}
BATCH_TIMEOUT=${BATCH_TIMEOUT:-1800}
PENDING=${PENDING:-0}
MODEL=bench-model
FLEET="${H100S}xh100-llama3-8b,${L4S}xl4-llama3-8b"
WORKERS=$((H100S + L4S))
PORT=$((BASE_PORT - 1))
URL=http://127.0.0.1:$PORT

for b in sluice gpuworker sluice-bench; do
	[ -x "$BIN/$b" ] || { echo "bench-batch: $BIN/$b missing; run make build" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench-batch: needs python3" >&2; exit 2; }
[ -r "$TRACE" ] || { echo "bench-batch: no trace at $TRACE (set TRACE)" >&2; exit 2; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	trap - INT TERM EXIT
	stop_all
	if [ -n "${KEEP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

# Admission budgets for this fleet and workload, as `simulate --admission`
# prints them: "budget of requests in flight h100-llama3-8b 115, l4-llama3-8b 14;".
budgets=$("$BIN/sluice-bench" simulate --fleet "$FLEET" --trace "$TRACE" --load "$LOAD" \
	--policy default --admission --table compact 2>&1 >/dev/null | sed -n 's/.*budget of requests in flight \([^;]*\);.*/\1/p')
H100_BUDGET=$(sed -n 's/.*h100-llama3-8b \([0-9]*\).*/\1/p' <<<"$budgets")
L4_BUDGET=$(sed -n 's/.*l4-llama3-8b \([0-9]*\).*/\1/p' <<<"$budgets")
[ -n "$H100_BUDGET" ] && [ -n "$L4_BUDGET" ] || { echo "bench-batch: no budgets from the simulator ($budgets)" >&2; exit 1; }

INTERACTIVE_KEY=sk-bench-interactive-$$
BATCH_KEY=sk-bench-batch-$$

# The batch: N rows of the trace drawn with a fixed seed (sluice-bench
# batch-file); batch.jsonl for the Batch API and batch.csv (the same rows,
# Azure format) for the ordinary run.
"$BIN/sluice-bench" batch-file --trace "$TRACE" --lines "$N" --seed 7 --model "$MODEL" \
	--out "$tmp/batch.jsonl" --csv "$tmp/batch.csv"

config() { # data dir, batch_prefill (empty: Sluice's default), batch.concurrency, batch_reserve (empty: the default)
	cat <<EOF
listen: 127.0.0.1:$PORT
log:
  requests: false
tiers:
  - name: team
    classes: [priority, default, flex]
    default_class: default
tenants:
  - name: interactive
    tier: team
    api_keys:
      - $("$BIN/sluice" hash-key "$INTERACTIVE_KEY")
  - name: batch
    tier: team
    api_keys:
      - $("$BIN/sluice" hash-key "$BATCH_KEY")
batch:
  enabled: true
  data_dir: $1
  concurrency: $3
models:
  - name: $MODEL
    admission:
      max_in_flight_per_backend: $H100_BUDGET
      max_pending_prompt_tokens: $PENDING
$([ -n "$2" ] && echo "      batch_prefill: $2")
$([ -n "$4" ] && echo "      batch_reserve: $4")
    backends:
EOF
	local port=$BASE_PORT
	for _ in $(seq "$H100S"); do
		echo "      - url: http://127.0.0.1:$port"
		echo "        max_in_flight: $H100_BUDGET"
		port=$((port + 1))
	done
	for _ in $(seq "$L4S"); do
		echo "      - url: http://127.0.0.1:$port"
		echo "        max_in_flight: $L4_BUDGET"
		port=$((port + 1))
	done
}

start() { # run name: fresh workers and a fresh Sluice
	stop_all
	local port=$BASE_PORT i=0 profile
	for profile in $(printf 'h100-llama3-8b %.0s' $(seq "$H100S")) $(printf 'l4-llama3-8b %.0s' $(seq "$L4S")); do
		"$BIN/gpuworker" --listen "127.0.0.1:$port" --model "$MODEL" --profile "$profile" --speedup "$SPEEDUP" \
			--seed "$i" 2>>"$tmp/$1-workers.log" & pids+=($!)
		port=$((port + 1)) i=$((i + 1))
	done
	for p in $(seq "$BASE_PORT" $((BASE_PORT + WORKERS - 1))); do wait_for "http://127.0.0.1:$p/health"; done
	mkdir -p "$tmp/$1-data"
	# The batch alone measures the fleet's whole throughput for it: no
	# batch bound there and ALONE_CONCURRENCY lines at once (simulate
	# --batch's reference run sends them all).
	local bp=$BATCH_PREFILL conc=$CONCURRENCY reserve=$BATCH_RESERVE
	[ "$1" = batch-alone ] && bp=-1ms conc=$ALONE_CONCURRENCY reserve=-1
	config "$tmp/$1-data" "$bp" "$conc" "$reserve" >"$tmp/$1.yaml"
	"$BIN/sluice" serve --config "$tmp/$1.yaml" --watch 0 2>"$tmp/$1-sluice.log" & pids+=($!)
	wait_for "$URL/readyz"
	# Sluice's metrics once a second, each line stamped with the wall clock.
	(
		while :; do
			t=$(date +%s.%N)
			curl -s "$URL/metrics" | grep -E '^sluice_(tenant_tokens_total|batch_lines|admission_shed_total|admission_queued_requests|upstream_attempts_total|backend_prefill_tokens_per_second|upstream_pending_prompt_tokens|upstream_in_flight_requests|backend_decode_tokens_per_second)' |
				sed "s/^/$t /" || true
			sleep 1
		done
	) >"$tmp/$1-metrics.txt" & pids+=($!)
}

interactive() { # run name; in the background, its pid in $ipid
	"$BIN/sluice-bench" load --target "$URL" --model "$MODEL" --api-key "$INTERACTIVE_KEY" --trace "$TRACE" \
		--fleet "$FLEET" --load "$LOAD" --duration "${DURATION}s" --stream --quiet --time-scale "$SPEEDUP" \
		--goodput-ttft "$GOODPUT_TTFT" --goodput-tpot "$GOODPUT_TPOT" --json "$tmp/$1-interactive.json" \
		>/dev/null 2>"$tmp/$1-interactive.err" &
	ipid=$!
	pids+=($ipid)
}

upload() { # run name: upload batch.jsonl, print the file id
	curl -fsS "$URL/v1/files" -H "Authorization: Bearer $BATCH_KEY" -F purpose=batch -F "file=@$tmp/batch.jsonl" \
		>"$tmp/$1-file.json"
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$tmp/$1-file.json"
}

# batch RUN FILE_ID: create the batch, poll it every 0.5 s until it ends
# (or BATCH_TIMEOUT), one "wallclock json" line per poll in RUN-poll.txt,
# then fetch its output file.
batch() {
	local id status t0 out
	t0=$(date +%s.%N)
	curl -fsS "$URL/v1/batches" -H "Authorization: Bearer $BATCH_KEY" -H 'Content-Type: application/json' \
		-d "{\"input_file_id\":\"$2\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}" \
		>"$tmp/$1-batch.json"
	id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$tmp/$1-batch.json")
	echo "$t0 $(cat "$tmp/$1-batch.json" | tr -d '\n')" >"$tmp/$1-poll.txt"
	while :; do
		sleep 0.5
		out=$(curl -fsS "$URL/v1/batches/$id" -H "Authorization: Bearer $BATCH_KEY" | tr -d '\n') || continue
		echo "$(date +%s.%N) $out" >>"$tmp/$1-poll.txt"
		status=$(grep -o '"status": *"[a-z_]*"' <<<"$out" | head -n 1 | sed 's/.*"\([a-z_]*\)"$/\1/')
		case $status in completed | failed | expired | cancelled) break ;; esac
		if python3 -c "import sys,time; sys.exit(0 if time.time() - $t0 > $BATCH_TIMEOUT else 1)"; then
			echo "bench-batch: $1: batch $id still $status after ${BATCH_TIMEOUT}s wall; cancelling" >&2
			curl -fsS -X POST "$URL/v1/batches/$id/cancel" -H "Authorization: Bearer $BATCH_KEY" >/dev/null || true
			BATCH_TIMEOUT=$((BATCH_TIMEOUT + 60))
		fi
	done
	local ofile
	ofile=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("output_file_id") or "")' "$out")
	if [ -n "$ofile" ]; then
		curl -fsS "$URL/v1/files/$ofile/content" -H "Authorization: Bearer $BATCH_KEY" >"$tmp/$1-output.jsonl" || true
	fi
}

for r in $RUNS; do
	echo "bench-batch: $r" >&2
	start "$r"
	case $r in
	batch-alone)
		fid=$(upload "$r")
		batch "$r" "$fid"
		;;
	alone)
		echo "$(date +%s.%N)" >"$tmp/$r-t0"
		interactive "$r"
		wait "$ipid" || echo "bench-batch: $r: the interactive load exited with $?" >&2
		;;
	batch)
		fid=$(upload "$r")
		echo "$(date +%s.%N)" >"$tmp/$r-t0"
		interactive "$r"
		batch "$r" "$fid"
		wait "$ipid" || echo "bench-batch: $r: the interactive load exited with $?" >&2
		;;
	ordinary)
		echo "$(date +%s.%N)" >"$tmp/$r-t0"
		interactive "$r"
		"$BIN/sluice-bench" load --target "$URL" --model "$MODEL" --api-key "$BATCH_KEY" --trace "$tmp/batch.csv" \
			--rate 1000 --requests "$N" --concurrency "$CONCURRENCY" --stream --quiet --seed 9 --time-scale "$SPEEDUP" \
			--json "$tmp/$r-ordinary.json" >/dev/null 2>"$tmp/$r-ordinary.err"
		wait "$ipid" || echo "bench-batch: $r: the interactive load exited with $?" >&2
		;;
	*) echo "bench-batch: unknown run $r (batch-alone, alone, batch, ordinary)" >&2; exit 2 ;;
	esac
	echo "$(date +%s.%N)" >"$tmp/$r-t1"
	sleep 1.2 # one more metrics sample
	stop_all
done

echo "fleet $FLEET at speedup $SPEEDUP (figures in simulated time); admission budgets h100 $H100_BUDGET, l4 $L4_BUDGET;" \
	"batch.concurrency $CONCURRENCY (batch-alone $ALONE_CONCURRENCY); max_pending_prompt_tokens $PENDING; batch_prefill ${BATCH_PREFILL:-default}; batch_reserve ${BATCH_RESERVE:-default}"
echo "interactive: $(basename "$TRACE") at --load $LOAD for ${DURATION}s, streamed; batch: $N chat requests drawn from the trace"
echo
python3 - "$tmp" "$SPEEDUP" "$RUNS" <<'PY'
import collections, json, os, re, sys
d, speed, runs = sys.argv[1], float(sys.argv[2]), sys.argv[3].split()
def load(p):
    p = os.path.join(d, p)
    return json.load(open(p)) if os.path.exists(p) else None
def text(p):
    p = os.path.join(d, p)
    return open(p).read() if os.path.exists(p) else ""
def metrics(run):
    """[(wall, {series: value})] from RUN-metrics.txt"""
    out = collections.OrderedDict()
    for line in text(f"{run}-metrics.txt").splitlines():
        t, rest = line.split(" ", 1)
        series, v = rest.rsplit(" ", 1)
        out.setdefault(float(t), {})[series] = float(v)
    return list(out.items())
def val(sample, pat):
    return sum(v for k, v in sample.items() if re.search(pat, k))

batch_out = {}  # output tokens per line, by custom_id
for line in text("batch.jsonl").splitlines():
    j = json.loads(line)
    batch_out[j["custom_id"]] = j["body"]["max_tokens"]
mean_out = sum(batch_out.values()) / max(1, len(batch_out))

cap = offered = None
for run in runs:
    e = text(f"{run}-interactive.err")
    m = re.search(r"estimated capacity ([\d.]+) req/s", e)
    if m:
        cap = float(m.group(1))
    m = re.search(r"(\d+) requests over ([\d.]+)s \(([\d.]+) req/s\)", e)
    if m:
        offered = float(m.group(3))

rows, notes = [], []
alone = load("alone-interactive.json")
batch_alone_rps = None
for run in runs:
    it = load(f"{run}-interactive.json")
    t0 = float(text(f"{run}-t0") or 0) or None
    row = {"run": run}
    if it:
        row.update(ok=it["completed"], failed=it["failed"], p50=it["ttft_ms"]["p50"], p99=it["ttft_ms"]["p99"],
                   goodput=it.get("goodput"), rps=it["request_throughput"], idur=it["duration_s"])
        if alone and run != "alone" and alone["ttft_ms"]["p99"]:
            row["rel"] = it["ttft_ms"]["p99"] / alone["ttft_ms"]["p99"]
        if it.get("errors"):
            notes.append(f"{run}: interactive errors {it['errors']}")
    polls = [l.split(" ", 1) for l in text(f"{run}-poll.txt").splitlines()]
    if polls:
        first, last = float(polls[0][0]), json.loads(polls[-1][1])
        end = next((float(t) for t, j in polls if json.loads(j)["status"] in ("completed", "failed", "expired", "cancelled")), None)
        started = next((float(t) for t, j in polls if json.loads(j)["status"] != "validating"), None)
        rc = last["request_counts"]
        row.update(bok=rc["completed"], bfailed=rc["failed"], bstatus=last["status"])
        if end:
            dur = (end - first) * speed
            outtok = (last.get("usage") or {}).get("output_tokens") or 0
            row.update(bdur=dur, btok=outtok / dur if dur else 0, brps=rc["completed"] / dur if dur else 0)
            if started:
                row["bwait"] = (started - first) * speed
        errs = collections.Counter()
        for line in text(f"{run}-output.jsonl").splitlines():
            j = json.loads(line)
            code = (j.get("response") or {}).get("status_code")
            if code != 200:
                errs[code] += 1
        if errs:
            notes.append(f"{run}: batch output lines not 200: {dict(errs)}")
        if last.get("errors"):
            notes.append(f"{run}: batch errors {last['errors']}")
    o = load(f"{run}-ordinary.json")
    if o:
        row.update(bok=o["completed"], bfailed=o["failed"], bdur=o["duration_s"], btok=o["output_throughput"],
                   brps=o["request_throughput"], bp99=o["ttft_ms"]["p99"])
        if o.get("errors"):
            notes.append(f"{run}: ordinary errors {o['errors']}")
    # The batch tenant's output tokens while the interactive load ran, from Sluice's metrics.
    ms = metrics(run)
    # Sluice starts fresh for each run, so the counter is 0 at t0; it is
    # interpolated between the samples around the interactive load's end.
    if it and t0 and ms and run != "alone":
        t1 = t0 + it["duration_s"] / speed
        if row.get("bdur"):  # the batch ended first: its rate while both ran
            t1 = min(t1, t0 + row["bdur"] / speed)
        pat = r'^sluice_tenant_tokens_total\{.*kind="output".*tenant="batch"'
        pts = [(t, val(s, pat)) for t, s in ms]
        before = [p for p in pts if p[0] <= t1]
        after = [p for p in pts if p[0] > t1]
        if before and after:
            (ta, va), (tb, vb) = before[-1], after[0]
            row["bwin"] = (va + (vb - va) * (t1 - ta) / (tb - ta)) / ((t1 - t0) * speed)
    if ms:
        peak = lambda p: max(val(s, p) for _, s in ms)
        notes.append(f"{run}: peaks: batch lines in flight {peak(r'^sluice_batch_lines_in_flight'):.0f}, admission queue"
                     f" default {peak(r'^sluice_admission_queued_requests.*class=.default'):.0f},"
                     f" flex {peak(r'^sluice_admission_queued_requests.*class=.flex'):.0f}")
        last = ms[-1][1]
        shed = {k: v for k, v in last.items() if k.startswith("sluice_admission_shed_total") and v}
        if shed:
            label = lambda k: "/".join(re.findall(r'(?:class|reason)="([^"]+)"', k))
            notes.append(f"{run}: admission shed (class/reason) " + ", ".join(f"{label(k)} {v:.0f}" for k, v in shed.items()))
        attempts = collections.Counter()
        for k, v in last.items():
            if k.startswith("sluice_upstream_attempts_total") and v:
                attempts[re.sub(r'.*outcome="([^"]+)".*', r"\1", k)] += v
        if set(attempts) - {"ok"}:
            notes.append(f"{run}: upstream attempts by outcome " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(attempts.items())))
        lines = {re.sub(r'.*outcome="([^"]+)".*', r"\1", k): v for k, v in last.items() if k.startswith("sluice_batch_lines_total") and v}
        if lines:
            notes.append(f"{run}: sluice_batch_lines_total " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(lines.items())))
    if run == "batch-alone" and "brps" in row:
        batch_alone_rps = row["brps"]
    rows.append(row)

def f(v, fmt):
    return format(v, fmt) if v is not None else "-"
print(f"{'run':<12}{'int ok':>7}{'fail':>5}{'TTFT p50':>9}{'TTFT p99':>9}{'p99/alone':>10}{'goodput':>8}"
      f"{'batch ok':>9}{'fail':>5}{'dur s':>7}{'out tok/s':>10}{'req/s':>7}{'tok/s in window':>16}")
for r in rows:
    print(f"{r['run']:<12}{f(r.get('ok'), 'd'):>7}{f(r.get('failed'), 'd'):>5}{f(r.get('p50'), '.0f'):>9}{f(r.get('p99'), '.0f'):>9}"
          f"{f(r.get('rel'), '.2f'):>10}{f(r.get('goodput'), '.2f'):>8}{f(r.get('bok'), 'd'):>9}{f(r.get('bfailed'), 'd'):>5}"
          f"{f(r.get('bdur'), '.0f'):>7}{f(r.get('btok'), '.0f'):>10}{f(r.get('brps'), '.2f'):>7}{f(r.get('bwin'), '.0f'):>16}")
print("TTFT in ms; goodput in req/s (TTFT and TPOT within the SLO); batch dur from create to completed (batch) or first"
      " request to last answer (ordinary); 'tok/s in window': the batch tenant's output tokens per second while both"
      " the interactive load and the batch ran (Sluice's sluice_tenant_tokens_total)")
if cap and offered:
    spare = cap - offered
    print(f"spare throughput, estimated: capacity estimate {cap:.2f} req/s - interactive offered {offered:.2f} req/s"
          f" ({offered / cap:.2f}x) = {spare:.2f} req/s = {spare * mean_out:.0f} output tok/s at the batch's mean output"
          f" of {mean_out:.1f} tokens")
if batch_alone_rps is not None and offered is not None:
    spare = batch_alone_rps - offered
    print(f"spare throughput, measured: batch alone {batch_alone_rps:.2f} req/s - interactive offered {offered:.2f} req/s"
          f" = {spare:.2f} req/s = {spare * mean_out:.0f} output tok/s")
    for r in rows:
        if r["run"] in ("batch", "ordinary") and r.get("bwin") is not None and spare > 0:
            print(f"  {r['run']}: batch output in the interactive window {r['bwin']:.0f} tok/s = "
                  f"{r['bwin'] / (spare * mean_out):.2f}x the measured spare")
    if cap:
        # As "simulate --batch" counts it: the fleet's throughput for the
        # batch times the share of capacity the interactive load leaves.
        spare2 = batch_alone_rps * max(0.0, 1 - offered / cap)
        print(f"spare throughput, as simulate --batch counts it: batch alone {batch_alone_rps:.2f} req/s x (1 - {offered / cap:.2f})"
              f" = {spare2:.2f} req/s = {spare2 * mean_out:.0f} output tok/s")
        for r in rows:
            if r["run"] in ("batch", "ordinary") and r.get("bwin") is not None and spare2 > 0:
                print(f"  {r['run']}: {r['bwin'] / (spare2 * mean_out):.2f}x that spare in the interactive window;"
                      f" over the whole batch {r.get('brps', 0) / batch_alone_rps:.2f}x the batch-alone rate")
# Over the batch's whole run, as "simulate --batch" reports "vs spare": the
# batch's lines/s over the fleet's lines/s for it alone (measured by the
# batch-alone run, else the capacity estimate) times the share of capacity
# the interactive arrivals during the batch leave.
if cap:
    alone_rps, how = (batch_alone_rps, "measured") if batch_alone_rps else (cap, "estimated")
    for r in rows:
        if r["run"] not in ("batch", "ordinary") or not r.get("bdur") or r.get("ok") is None:
            continue
        arrived = (r["ok"] + r["failed"]) * min(1.0, r["bdur"] / r["idur"]) if r.get("idur") else 0
        share = max(0.0, 1 - arrived / r["bdur"] / cap)
        print(f"  {r['run']}: over the whole batch {r['brps']:.2f} lines/s = {r['brps'] / (alone_rps * share):.2f}x the"
              f" spare (batch alone {alone_rps:.2f} lines/s, {how}, x (1 - interactive load {1 - share:.2f} over the batch's"
              f" {r['bdur']:.0f} s))")
for n in notes:
    print("note: " + n)
PY
for r in $RUNS; do
	grep -E '"level":"(WARN|ERROR)"' "$tmp/$r-sluice.log" 2>/dev/null | sort | uniq -c | sort -rn | head -5 |
		sed "s/^/sluice log ($r): /" || true
done
