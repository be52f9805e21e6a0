#!/usr/bin/env bash
# jobctl benchmarks against peers on 127.0.0.1; see BENCHMARKS.md.
#
#   bench/run.sh [--quick] [--runs N] [--only LIST]
#
#   --quick      64 MiB transfers and 2,000 queue jobs instead of 512 MiB and 10,000 (about 3 minutes)
#   --runs N     runs per benchmark (default 5; fewer is allowed for trying things out, not for results)
#   --only LIST  comma-separated subset of: download,upload,local,queue,latency,pg,smallfiles,sliced
#                (pg: PostgreSQL drain with 1, 2, 4 worker processes vs SQLite, claim/pickup latency;
#                smallfiles: 2,000 × 16 KiB up to and back from nginx at concurrency 16 vs curl --parallel;
#                sliced: a gs:// download sliced vs single-stream, nginx serving the JSON API's read paths)
#                biglog: audit, replay --verify, stats, size per job and drain rate on a log grown to
#                BIGLOG_SIZES finished jobs (default 100000 250000; --quick 20000) on BIGLOG_ENGINES
#                (default "sqlite postgres"); memory: worker peak RSS at concurrency 64 over small
#                files and for one 1 GiB file; workerstart: a worker's start on logs of WORKERSTART_SIZES
#                finished download-file jobs (default 20000 100000) against an empty one (not in the default
#                set: --only biglog,memory,workerstart)
#
# Uses .build/release/jobctl, or $JOBCTL_BIN. Starts its own nginx in a temporary directory, runs jobctl and
# its peer (curl, rclone, cp, huey) interleaved in every run, prints a Markdown table and writes it, with
# the machine's description, to bench/results/latest.md (raw samples: bench/results/latest-samples.tsv).
# Only 127.0.0.1 is used; every wait and every loop is bounded.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
MODE=full
RUNS=5
ONLY="download,upload,local,queue,latency,pg,smallfiles,sliced"

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) MODE=quick ;;
    --runs) shift; RUNS=${1:?--runs needs a number} ;;
    --only) shift; ONLY=${1:?--only needs a list} ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
  shift
done
case "$RUNS" in ''|*[!0-9]*) echo "run.sh: --runs expects a positive number" >&2; exit 64 ;; esac
[ "$RUNS" -ge 1 ] && [ "$RUNS" -le 50 ] || { echo "run.sh: --runs must be 1..50" >&2; exit 64; }

if [ "$MODE" = quick ]; then SIZE_MIB=64; JOBS=2000; else SIZE_MIB=512; JOBS=10000; fi
if [ "$MODE" = quick ]; then BIGLOG_SIZES=${BIGLOG_SIZES:-20000}; else BIGLOG_SIZES=${BIGLOG_SIZES:-100000 250000}; fi
BIGLOG_ENGINES=${BIGLOG_ENGINES:-sqlite postgres}
MEMORY_SMALL_FILES=5000
LATENCY_SUBMITS=20
LATENCY_GAP_MS=200
DRAIN_CONCURRENCY=16
MEMORY_CONCURRENCY=64   # the download-memory drain: one worker at 64, then 4 workers at 16 each
HUEY_WORKERS=4

JOBCTL=${JOBCTL_BIN:-$ROOT/.build/release/jobctl}
if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi

die() { echo "run.sh: $*" >&2; exit 1; }
[ -x "$JOBCTL" ] || die "no jobctl binary at ${JOBCTL#"$ROOT"/} (build it: make release, or set JOBCTL_BIN)"
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# Only what the chosen benchmarks run is required (`--only pg` needs neither nginx, rclone nor huey).
TOOLS="/usr/bin/time timeout"
if want download || want upload || want local; then TOOLS="$TOOLS curl nginx rclone"; fi
if want smallfiles; then TOOLS="$TOOLS curl nginx"; fi
if want sliced; then TOOLS="$TOOLS nginx"; fi
for tool in $TOOLS; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "$tool" ] || die "missing $tool (make bench installs it)"
done
if want queue || want latency; then
  "$PY" -c 'import huey' 2>/dev/null || die "python has no huey (make venv creates .venv with it)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobctl-bench.XXXXXX")
# What the peers write without syncing (nginx's root, curl's and rclone's downloads) goes to tmpfs: the
# disk throttles write-back after a few hundred MB and would swing their figures tenfold. jobctl's own
# files (its database, its synced downloads, file:// buckets) stay on disk: their syncs are the cost.
SHM_BASE=${BENCH_TMPFS:-/dev/shm}
[ -d "$SHM_BASE" ] || SHM_BASE="${TMPDIR:-/tmp}"
SHM=$(mktemp -d "$SHM_BASE/jobctl-bench-peers.XXXXXX")
SAMPLES="$WORK/samples.tsv"
META="$WORK/meta.txt"
NGINX_PID=""
WORKER_PID=""
CONSUMER_PID=""
: >"$SAMPLES"

stop_pid() {  # stop_pid PID: TERM, wait up to 10 s, then KILL
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop_pid "$WORKER_PID"; stop_pid "$CONSUMER_PID"; stop_pid "$NGINX_PID"; stop_postgres
  rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=bench/pg_bench.sh
. "$BENCH/pg_bench.sh"
# shellcheck source=bench/smallfiles_bench.sh
. "$BENCH/smallfiles_bench.sh"
# shellcheck source=bench/biglog_bench.sh
. "$BENCH/biglog_bench.sh"
# shellcheck source=bench/sliced_bench.sh
. "$BENCH/sliced_bench.sh"
# shellcheck source=bench/workerstart_bench.sh
. "$BENCH/workerstart_bench.sh"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$SAMPLES"; }
fail() {  # fail BENCH TOOL MESSAGE
  log "FAILED $1/$2: $3"
  record "$1" "$2" FAILED "$3"
}
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", (b - a) / 1e9 }'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.3f", n / s; else print "" }'; }
size_of() { stat -c %s "$1" 2>/dev/null || echo 0; }
tail_msg() { tail -n 3 "$1" 2>/dev/null | tr '\n' ' ' | sed 's#'"$WORK"'#<tmp>#g' | cut -c1-300; }

BYTES=$((SIZE_MIB * 1024 * 1024))
MB=$(awk -v b="$BYTES" 'BEGIN { printf "%.6f", b / 1e6 }')

# ------------------------------------------------------------------ machine description
{
  echo "mode=$MODE"
  echo "runs=$RUNS"
  echo "size_mib=$SIZE_MIB"
  echo "jobs=$(printf "%'d" "$JOBS" 2>/dev/null || echo "$JOBS")"
  echo "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nproc=$(nproc)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "memory=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "kernel=$(uname -r)"
  echo "os=$( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo unknown)"
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "swift=$(swift --version 2>&1 | grep -m1 -o 'Swift version [^ ]*' || echo unknown)"
  echo "curl=$(curl --version | head -1 | cut -d' ' -f1-2)"
  echo "nginx=$(nginx -v 2>&1 | sed 's/^nginx version: //')"
  echo "rclone=$(rclone version 2>/dev/null | head -1)"
  echo "huey=$("$PY" -c 'import huey; print(huey.__version__)')"
  echo "python=$("$PY" -c 'import sys; print(sys.version.split()[0])')"
  echo "sqlite=$(dpkg-query -W -f='${Version}' libsqlite3-0 2>/dev/null || echo unknown) (library jobctl links); $("$PY" -c 'import sqlite3; print(sqlite3.sqlite_version)') (Python's, huey)"
  echo "jobctl_version=$("$JOBCTL" --version 2>/dev/null | head -1 || echo unknown)"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$META"
log "jobctl benchmarks ($MODE): $RUNS runs, ${SIZE_MIB} MiB transfers, $JOBS queue jobs"

# ------------------------------------------------------------------ nginx
NGINX_DIR="$SHM/nginx"
WWW="$NGINX_DIR/www"
start_nginx() {
  mkdir -p "$WWW" "$NGINX_DIR/tmp" "$NGINX_DIR/logs"
  NGINX_PORT=$("$PY" "$BENCH/benchlib.py" freeport)
  local user_line=""
  [ "$(id -u)" = 0 ] && user_line="user root;"
  cat >"$NGINX_DIR/nginx.conf" <<EOF
$user_line
worker_processes 1;
pid $NGINX_DIR/nginx.pid;
error_log $NGINX_DIR/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $NGINX_DIR/tmp/body;
  proxy_temp_path $NGINX_DIR/tmp/proxy;
  fastcgi_temp_path $NGINX_DIR/tmp/fastcgi;
  uwsgi_temp_path $NGINX_DIR/tmp/uwsgi;
  scgi_temp_path $NGINX_DIR/tmp/scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $WWW;
    location / {
      dav_methods PUT DELETE;
      create_full_put_path on;
      client_max_body_size 0;
    }
  }
}
EOF
  nginx -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" -e "$NGINX_DIR/logs/error.log" -g 'daemon off;' \
    >"$NGINX_DIR/logs/stdout.log" 2>&1 &
  NGINX_PID=$!
  local i
  for i in $(seq 1 50); do
    curl -s -o /dev/null "http://127.0.0.1:$NGINX_PORT/" 2>/dev/null && break
    sleep 0.1
  done
  kill -0 "$NGINX_PID" 2>/dev/null || die "nginx did not start: $(tail_msg "$NGINX_DIR/logs/error.log")"
  log "nginx on 127.0.0.1:$NGINX_PORT"
}

# ------------------------------------------------------------------ jobctl helpers
# jctl DB ARGS...: jobctl with that database, storage settings cleared.
jctl() { local db=$1; shift; env -u STORAGE_EMULATOR_HOST -u JOBCTL_BUCKETS timeout 600 "$JOBCTL" --no-color --db "$db" "$@"; }

# run_worker_timed BENCH DB LOGPREFIX EXPECTED [WORKER ARGS...]: times `jobctl worker --drain --json`,
# under /usr/bin/time -v; sets ELAPSED and RSS_KIB; returns 1 (after recording the failure) unless exactly
# EXPECTED jobs succeeded.
run_worker_timed() {
  local bench=$1 db=$2 prefix=$3 expected=$4; shift 4
  local t0 t1 rc=0 ok
  t0=$(now_ns)
  timeout 600 /usr/bin/time -v -o "$prefix.time" "$JOBCTL" --no-color --db "$db" worker --drain --json "$@" \
    >"$prefix.out" 2>"$prefix.err" || rc=$?
  t1=$(now_ns)
  ELAPSED=$(secs "$t0" "$t1")
  RSS_KIB=$("$PY" "$BENCH/benchlib.py" rss-kib "$prefix.time" 2>/dev/null || true)
  if [ "$rc" != 0 ]; then
    fail "$bench" jobctl "worker exited $rc: $(tail_msg "$prefix.err")"
    return 1
  fi
  ok=$("$PY" "$BENCH/benchlib.py" summary-succeeded <"$prefix.out")
  if [ "$ok" != "$expected" ]; then
    local why
    why=$(jctl "$db" list --limit 3 --state failed,queued,paused 2>/dev/null | tail -n 3 | tr -s ' ' | cut -c1-200 | tr '\n' ' ')
    fail "$bench" jobctl "worker succeeded $ok of $expected jobs: $(tail_msg "$prefix.err") $why"
    return 1
  fi
  return 0
}

# cached FILE: reads FILE whole, untimed, so the tool timed next finds it in the page cache. rclone's local
# backend drops the pages of a file it has read (posix_fadvise DONTNEED): without this, the tool after it
# read the 512 MiB source from the disk (jobctl's first upload of a set at 350-490 MB/s, against 700-940
# once the untimed `cmp` of run 1 had read it back).
cached() { cat "$1" >/dev/null; }

# ------------------------------------------------------------------ 1. HTTP transfers and 2. local
transfer_benchmarks() {
  start_nginx
  local src="$WORK/src.bin" out="$WORK/out" peers="$SHM/out" t="$WORK/transfer"
  mkdir -p "$out" "$peers" "$t"
  log "creating a ${SIZE_MIB} MiB random file"
  head -c "$BYTES" /dev/urandom >"$src"
  cp "$src" "$WWW/big.bin"
  sync
  local url="http://127.0.0.1:$NGINX_PORT"
  local i t0 t1 rc db
  for i in $(seq 1 "$RUNS"); do
    if want download; then
      log "download run $i/$RUNS"
      # curl
      rm -f "$out"/* "$peers"/*; sync
      t0=$(now_ns); rc=0; timeout 300 curl -sf -o "$peers/curl.bin" "$url/big.bin" || rc=$?; t1=$(now_ns)
      if [ "$rc" = 0 ] && [ "$(size_of "$peers/curl.bin")" = "$BYTES" ]; then
        record download curl mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail download curl "exit $rc, $(size_of "$peers/curl.bin") bytes"; fi
      # rclone
      rm -f "$out"/* "$peers"/*; sync
      t0=$(now_ns); rc=0
      timeout 300 rclone copyurl "$url/big.bin" "$peers/rclone.bin" --config /dev/null -q >"$t/rclone.err" 2>&1 || rc=$?
      t1=$(now_ns)
      if [ "$rc" = 0 ] && [ "$(size_of "$peers/rclone.bin")" = "$BYTES" ]; then
        record download rclone mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail download rclone "exit $rc: $(tail_msg "$t/rclone.err")"; fi
      # jobctl, its destination beside curl's on tmpfs (its database on disk): unsynced writes compared alike
      rm -f "$out"/* "$peers"/*; sync
      db="$t/download-$i.db"
      "$PY" "$BENCH/benchlib.py" transfer-manifest download-file "$url/big.bin" "$peers/jobctl.bin" >"$t/download.yaml"
      if jctl "$db" submit "$t/download.yaml" >"$t/submit.out" 2>"$t/submit.err"; then
        if run_worker_timed download "$db" "$t/download-$i" 1; then
          if [ "$(size_of "$peers/jobctl.bin")" = "$BYTES" ] && { [ "$i" != 1 ] || cmp -s "$src" "$peers/jobctl.bin"; }; then
            record download jobctl mbps "$(rate "$MB" "$ELAPSED")"
            if [ -n "$RSS_KIB" ]; then record download jobctl rss_kib "$RSS_KIB"; fi
          else fail download jobctl "job succeeded but the file has $(size_of "$peers/jobctl.bin") bytes or differs"; fi
        fi
      else fail download jobctl "submit failed: $(tail_msg "$t/submit.err")"; fi
      rm -f "$db" "$db"-*
      # to disk: curl followed by an fsync of its file, against jobctl's durable download to the same disk
      rm -f "$out"/* "$peers"/*; sync
      t0=$(now_ns); rc=0; { timeout 300 curl -sf -o "$out/curl.bin" "$url/big.bin" && sync "$out/curl.bin"; } || rc=$?; t1=$(now_ns)
      if [ "$rc" = 0 ] && [ "$(size_of "$out/curl.bin")" = "$BYTES" ]; then
        record download-disk curl+fsync mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail download-disk curl+fsync "exit $rc, $(size_of "$out/curl.bin") bytes"; fi
      rm -f "$out"/*; sync
      db="$t/download-disk-$i.db"
      "$PY" "$BENCH/benchlib.py" transfer-manifest download-file "$url/big.bin" "$out/jobctl.bin" >"$t/download.yaml"
      if jctl "$db" submit "$t/download.yaml" >"$t/submit.out" 2>"$t/submit.err"; then
        if run_worker_timed download-disk "$db" "$t/download-disk-$i" 1; then
          if [ "$(size_of "$out/jobctl.bin")" = "$BYTES" ]; then
            record download-disk jobctl mbps "$(rate "$MB" "$ELAPSED")"
          else fail download-disk jobctl "job succeeded but the file has $(size_of "$out/jobctl.bin") bytes"; fi
        fi
      else fail download-disk jobctl "submit failed: $(tail_msg "$t/submit.err")"; fi
      rm -f "$db" "$db"-* "$out"/*
    fi

    if want upload; then
      log "upload run $i/$RUNS"
      # curl
      rm -f "$WWW"/up-*.bin; sync; cached "$src"
      t0=$(now_ns); rc=0; timeout 300 curl -sf -T "$src" "$url/up-curl.bin" -o /dev/null || rc=$?; t1=$(now_ns)
      if [ "$rc" = 0 ] && [ "$(size_of "$WWW/up-curl.bin")" = "$BYTES" ]; then
        record upload curl mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail upload curl "exit $rc, $(size_of "$WWW/up-curl.bin") bytes stored"; fi
      # rclone: one PUT through an on-the-fly webdav remote. nginx has no PROPFIND, so rclone's check after the
      # upload fails (exit 1, no retry); the upload counts when the stored object is complete.
      rm -f "$WWW"/up-*.bin; sync; cached "$src"
      t0=$(now_ns); rc=0
      timeout 300 rclone copyto "$src" ":webdav:up-rclone.bin" --webdav-url "$url/" --config /dev/null \
        --no-check-dest --retries 1 --low-level-retries 1 -q >"$t/rclone-up.err" 2>&1 || rc=$?
      t1=$(now_ns)
      if [ "$(size_of "$WWW/up-rclone.bin")" = "$BYTES" ] && { [ "$rc" = 0 ] || grep -q "405" "$t/rclone-up.err"; }; then
        record upload rclone mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail upload rclone "exit $rc: $(tail_msg "$t/rclone-up.err")"; fi
      # jobctl
      rm -f "$WWW"/up-*.bin; sync; cached "$src"
      db="$t/upload-$i.db"
      "$PY" "$BENCH/benchlib.py" transfer-manifest upload-file "$src" "$url/up-jobctl.bin" >"$t/upload.yaml"
      if jctl "$db" submit "$t/upload.yaml" >"$t/submit.out" 2>"$t/submit.err"; then
        if run_worker_timed upload "$db" "$t/upload-$i" 1; then
          if [ "$(size_of "$WWW/up-jobctl.bin")" = "$BYTES" ] && { [ "$i" != 1 ] || cmp -s "$src" "$WWW/up-jobctl.bin"; }; then
            record upload jobctl mbps "$(rate "$MB" "$ELAPSED")"
            if [ -n "$RSS_KIB" ]; then record upload jobctl rss_kib "$RSS_KIB"; fi
          else fail upload jobctl "job succeeded but the server holds $(size_of "$WWW/up-jobctl.bin") bytes or they differ"; fi
        fi
      else fail upload jobctl "submit failed: $(tail_msg "$t/submit.err")"; fi
      rm -f "$db" "$db"-*
    fi

    if want local; then
      log "local run $i/$RUNS"
      local bucket="$WORK/bucket"
      # cp
      rm -rf "$bucket"; mkdir -p "$bucket"; sync; cached "$src"
      t0=$(now_ns); rc=0; timeout 300 cp "$src" "$bucket/x" || rc=$?; t1=$(now_ns)
      if [ "$rc" = 0 ]; then record local cp mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail local cp "exit $rc"; fi
      # cp + fsync of the copy (what a durable transfer has to pay)
      rm -rf "$bucket"; mkdir -p "$bucket"; sync; cached "$src"
      t0=$(now_ns); rc=0; { timeout 300 cp "$src" "$bucket/x" && sync "$bucket/x"; } || rc=$?; t1=$(now_ns)
      if [ "$rc" = 0 ]; then record local cp+fsync mbps "$(rate "$MB" "$(secs "$t0" "$t1")")"
      else fail local cp+fsync "exit $rc"; fi
      # jobctl
      rm -rf "$bucket"; mkdir -p "$bucket"; sync; cached "$src"
      db="$t/local-$i.db"
      "$PY" "$BENCH/benchlib.py" transfer-manifest upload-file "$src" "file://$bucket/x" >"$t/local.yaml"
      if jctl "$db" submit "$t/local.yaml" >"$t/submit.out" 2>"$t/submit.err"; then
        if run_worker_timed local "$db" "$t/local-$i" 1; then
          if [ "$(size_of "$bucket/x")" = "$BYTES" ] && { [ "$i" != 1 ] || cmp -s "$src" "$bucket/x"; }; then
            record local jobctl mbps "$(rate "$MB" "$ELAPSED")"
            if [ -n "$RSS_KIB" ]; then record local jobctl rss_kib "$RSS_KIB"; fi
          else fail local jobctl "job succeeded but the bucket object has $(size_of "$bucket/x") bytes or differs"; fi
        fi
      else fail local jobctl "submit failed: $(tail_msg "$t/submit.err")"; fi
      rm -f "$db" "$db"-*
    fi
  done
  rm -rf "$out" "$peers" "$WORK/bucket" "$src" "$WWW"/*.bin
  stop_pid "$NGINX_PID"; NGINX_PID=""
}

# run_workers_timed BENCH DB LOGPREFIX EXPECTED N [WORKER ARGS...]: N `jobctl worker --drain --json`
# processes on one database, started together; times until the last exits. Sets ELAPSED; returns 1
# (after recording the failure) unless all exit 0 and EXPECTED jobs succeeded between them.
run_workers_timed() {
  local bench=$1 db=$2 prefix=$3 expected=$4 n=$5; shift 5
  local t0 t1 k rc=0 ok=0 one pids=()
  t0=$(now_ns)
  for k in $(seq 1 "$n"); do
    timeout 600 "$JOBCTL" --no-color --db "$db" worker --drain --json "$@" >"$prefix-$k.out" 2>"$prefix-$k.err" &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || rc=$?; done
  t1=$(now_ns)
  ELAPSED=$(secs "$t0" "$t1")
  if [ "$rc" != 0 ]; then fail "$bench" jobctl "a worker exited $rc: $(tail_msg "$prefix-1.err")"; return 1; fi
  for k in $(seq 1 "$n"); do
    one=$("$PY" "$BENCH/benchlib.py" summary-succeeded <"$prefix-$k.out")
    ok=$((ok + one))
  done
  if [ "$ok" != "$expected" ]; then fail "$bench" jobctl "workers succeeded $ok of $expected jobs"; return 1; fi
  return 0
}

# memory_drain N DIR RUN: the 10,000 download-memory jobs submitted to a fresh log, drained by N worker
# processes at once (1, or 4 at a quarter of the concurrency each); one worker's CPU and events per job too.
memory_drain() {
  local n=$1 q=$2 i=$3 bench db cpu events
  if [ "$n" = 1 ]; then bench=drain-memory; else bench=drain-memory$n; fi
  db="$q/$bench-$i.db"
  sync
  if jctl "$db" submit "$q/memory.yaml" >"$q/submit.out" 2>"$q/submit.err" && [ "$(wc -l <"$q/submit.out")" = "$JOBS" ]; then
    if [ "$n" = 1 ]; then
      if run_worker_timed "$bench" "$db" "$q/$bench-$i" "$JOBS" --concurrency "$MEMORY_CONCURRENCY"; then
        record "$bench" jobctl jobs_per_s "$(rate "$JOBS" "$ELAPSED")"
        cpu=$("$PY" "$BENCH/benchlib.py" cpu-seconds "$q/$bench-$i.time" 2>/dev/null || true)
        if [ -n "$cpu" ]; then record "$bench" jobctl cpu_us_per_job "$(awk -v c="$cpu" -v n="$JOBS" 'BEGIN { printf "%.1f", c * 1e6 / n }')"; fi
        events=$("$PY" "$BENCH/benchlib.py" count-events "$db" 2>"$q/count.err" || echo "")
        if [ -n "$events" ]; then record "$bench" jobctl events_per_job "$(rate "$events" "$JOBS")"; fi
      fi
    elif run_workers_timed "$bench" "$db" "$q/$bench-$i" "$JOBS" "$n" --concurrency "$((MEMORY_CONCURRENCY / n))"; then
      record "$bench" jobctl jobs_per_s "$(rate "$JOBS" "$ELAPSED")"
    fi
  else fail "$bench" jobctl "submit failed: $(tail_msg "$q/submit.err")"; fi
  rm -f "$db" "$db"-*
}

# ------------------------------------------------------------------ 3. queue throughput
queue_benchmark() {
  local q="$WORK/queue" i t0 t1 rc db hdb s events huey_drain
  mkdir -p "$q"
  "$PY" "$BENCH/benchlib.py" manifest "$JOBS" "$q/bucket" >"$q/jobs.yaml"
  "$PY" "$BENCH/benchlib.py" memory-manifest "$JOBS" "$q/objects" >"$q/memory.yaml"
  for i in $(seq 1 "$RUNS"); do
    log "queue run $i/$RUNS ($JOBS jobs)"
    # huey: enqueue, then drain with a 4-thread consumer (timed inside the Python process)
    hdb="$q/huey-$i.db"
    if s=$(timeout 300 "$PY" "$BENCH/huey_peer.py" enqueue "$hdb" "$JOBS" 2>"$q/huey.err"); then
      record enqueue huey jobs_per_s "$(rate "$JOBS" "$s")"
      if s=$(timeout 330 "$PY" "$BENCH/huey_peer.py" drain "$hdb" "$JOBS" "$HUEY_WORKERS" 2>"$q/huey.err"); then
        huey_drain=$(rate "$JOBS" "$s")
        # the same peer figure for every drain of this run
        record drain huey jobs_per_s "$huey_drain"
        record drain-memory huey jobs_per_s "$huey_drain"
        record drain-memory4 huey jobs_per_s "$huey_drain"
      else fail drain huey "$(tail_msg "$q/huey.err")"; fi
    else fail enqueue huey "$(tail_msg "$q/huey.err")"; fi
    rm -f "$hdb" "$hdb"-*
    # jobctl: submit the whole manifest (one process, one transaction), then drain it
    db="$q/jobctl-$i.db"
    rm -rf "$q/bucket"; sync
    t0=$(now_ns); rc=0; jctl "$db" submit "$q/jobs.yaml" >"$q/submit.out" 2>"$q/submit.err" || rc=$?; t1=$(now_ns)
    if [ "$rc" = 0 ] && [ "$(wc -l <"$q/submit.out")" = "$JOBS" ]; then
      record enqueue jobctl jobs_per_s "$(rate "$JOBS" "$(secs "$t0" "$t1")")"
      if run_worker_timed drain "$db" "$q/drain-$i" "$JOBS" --concurrency "$DRAIN_CONCURRENCY"; then
        record drain jobctl jobs_per_s "$(rate "$JOBS" "$ELAPSED")"
        events=$("$PY" "$BENCH/benchlib.py" count-events "$db" 2>"$q/count.err" || echo "")
        if [ -n "$events" ]; then
          # every job's `submitted` event was written by submit; the rest were written while draining
          record drain jobctl events_per_s "$(rate "$((events - JOBS))" "$ELAPSED")"
          record drain jobctl events_per_job "$(rate "$events" "$JOBS")"
        else fail drain jobctl "could not count events: $(tail_msg "$q/count.err")"; fi
      fi
    else fail enqueue jobctl "submit exited $rc with $(wc -l <"$q/submit.out") ids: $(tail_msg "$q/submit.err")"; fi
    rm -f "$db" "$db"-*
    # download-memory of 64-byte file:// objects: one worker and 4 workers on one database, each on a
    # fresh log; which goes first alternates from run to run, so that neither always follows the other
    # (the disk's write-back of the run before, the machine's drift) and the ratio of the two is fair.
    if [ $((i % 2)) = 1 ]; then memory_drain 1 "$q" "$i"; memory_drain 4 "$q" "$i"
    else memory_drain 4 "$q" "$i"; memory_drain 1 "$q" "$i"; fi
  done
  rm -rf "$q"
}

# ------------------------------------------------------------------ 4. idle pickup latency
latency_benchmark() {
  local l="$WORK/latency" i k db id ids v t
  mkdir -p "$l"
  for i in $(seq 1 "$RUNS"); do
    log "latency run $i/$RUNS ($LATENCY_SUBMITS submits ${LATENCY_GAP_MS} ms apart)"
    # huey, default consumer polling
    t="$l/huey-$i"
    "$PY" "$BENCH/huey_peer.py" consumer "$t.db" >/dev/null 2>"$t.consumer.err" &
    CONSUMER_PID=$!
    sleep 1
    if timeout 120 "$PY" "$BENCH/huey_peer.py" pickup "$t.db" "$LATENCY_SUBMITS" "$LATENCY_GAP_MS" "$t.lat" 2>"$t.err"; then
      mapfile -t ids <"$t.lat"
      for v in "${ids[@]}"; do record latency huey sample_ms "$v"; done
      printf '%s\n' "${ids[@]}" | "$PY" -c 'import sys,statistics as s; v=sorted(float(x) for x in sys.stdin if x.strip()); print(s.median(v)); k=(len(v)-1)*0.9; lo=int(k); hi=min(lo+1,len(v)-1); print(v[lo]+(v[hi]-v[lo])*(k-lo))' >"$t.stats"
      record latency huey median_ms "$(sed -n 1p "$t.stats")"
      record latency huey p90_ms "$(sed -n 2p "$t.stats")"
    else fail latency huey "$(tail_msg "$t.err")"; fi
    stop_pid "$CONSUMER_PID"; CONSUMER_PID=""

    # jobctl: an idle worker, then single-job submits
    db="$l/jobctl-$i.db"
    mkdir -p "$l/bucket-$i" "$l/hist-$i"
    if ! jctl "$db" migrate >/dev/null 2>"$l/migrate.err"; then
      fail latency jobctl "migrate failed: $(tail_msg "$l/migrate.err")"; continue
    fi
    timeout 300 "$JOBCTL" --no-color --db "$db" worker --concurrency 4 >"$l/worker-$i.out" 2>"$l/worker-$i.err" &
    WORKER_PID=$!
    sleep 1
    if ! kill -0 "$WORKER_PID" 2>/dev/null; then
      fail latency jobctl "idle worker exited: $(tail_msg "$l/worker-$i.err")"; WORKER_PID=""; continue
    fi
    : >"$l/ids-$i"
    for k in $(seq 1 "$LATENCY_SUBMITS"); do
      printf 'jobs:\n  - kind: upload-data\n    data: "probe %s"\n    destination: "file://%s/p%s.txt"\n' \
        "$k" "$l/bucket-$i" "$k" >"$l/one.yaml"
      jctl "$db" submit "$l/one.yaml" >>"$l/ids-$i" 2>"$l/submit.err" || fail latency jobctl "submit failed: $(tail_msg "$l/submit.err")"
      sleep "$(awk -v ms="$LATENCY_GAP_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"
    done
    # wait (at most 30 s) for every probe to finish
    local done_count=0
    for k in $(seq 1 150); do
      done_count=$(jctl "$db" list --state succeeded --limit 0 --json 2>/dev/null | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null || echo 0)
      [ "$done_count" -ge "$LATENCY_SUBMITS" ] && break
      sleep 0.2
    done
    stop_pid "$WORKER_PID"; WORKER_PID=""
    [ "$done_count" -ge "$LATENCY_SUBMITS" ] || fail latency jobctl "only $done_count of $LATENCY_SUBMITS probes succeeded within 30 s: $(tail_msg "$l/worker-$i.err")"
    mapfile -t ids <"$l/ids-$i"
    for id in "${ids[@]}"; do
      if [ -n "$id" ]; then jctl "$db" history "$id" --json >"$l/hist-$i/$id.json" 2>/dev/null || true; fi
    done
    HISTORY_DIR="$l/hist-$i" "$PY" "$BENCH/benchlib.py" latency "${ids[@]}" >"$l/lat-$i" 2>"$l/lat.err" || true
    if [ -s "$l/lat-$i" ]; then
      while read -r v; do record latency jobctl sample_ms "$v"; done <"$l/lat-$i"
      "$PY" -c 'import sys,statistics as s; v=sorted(float(x) for x in open(sys.argv[1]) if x.strip()); print(s.median(v)); k=(len(v)-1)*0.9; lo=int(k); hi=min(lo+1,len(v)-1); print(v[lo]+(v[hi]-v[lo])*(k-lo))' "$l/lat-$i" >"$l/stats-$i"
      record latency jobctl median_ms "$(sed -n 1p "$l/stats-$i")"
      record latency jobctl p90_ms "$(sed -n 2p "$l/stats-$i")"
    else fail latency jobctl "no claimed/submitted pairs in history: $(tail_msg "$l/lat.err")"; fi
    rm -f "$db" "$db"-*
  done
  rm -rf "$l"
}

START_NS=$(now_ns)
if want download || want upload || want local; then transfer_benchmarks; fi
if want queue; then queue_benchmark; fi
if want latency; then latency_benchmark; fi
if want pg; then pg_benchmark; fi
if want smallfiles; then smallfiles_benchmark; fi
if want biglog; then biglog_benchmark; fi
if want memory; then memory_benchmark; fi
if want sliced; then sliced_benchmark; fi
if want workerstart; then workerstart_benchmark; fi
{
  echo "finished=$(date -u +%Y-%m-%dT%H:%M:%SZ) ($(( ($(now_ns) - START_NS) / 1000000000 )) s)"
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
} >>"$META"

mkdir -p "$BENCH/results"
"$PY" "$BENCH/benchlib.py" report "$SAMPLES" "$META" "$BENCH/results/latest.md"
cp "$SAMPLES" "$BENCH/results/latest-samples.tsv"
log "results written to bench/results/latest.md"
