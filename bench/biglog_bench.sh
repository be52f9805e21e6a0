# jobctl on a big log (`--only biglog`) and the worker's memory (`--only memory`). Sourced by
# bench/run.sh; uses its helpers (log, record, fail, jctl, now_ns, secs, rate, tail_msg,
# run_worker_timed, $WORK, $PY, $JOBCTL, $RUNS) and, for PostgreSQL, bench/pg_bench.sh's.
#
# How the big log is made: only with the product's own code paths. Manifests of 50,000 download-memory
# jobs (distinct 64-byte `file://` objects) are submitted with `jobctl submit` and drained by one
# `jobctl worker --drain --concurrency 64`, chunk after chunk, until the log holds each size of
# BIGLOG_SIZES finished jobs — every job has its real history (submitted, claimed, started, succeeded)
# and its blob, and `replay --verify` must accept the log. The database stays on disk (under $WORK,
# not tmpfs): its size and its syncs are what is measured. At each size (and at 0):
#   - the drain rate of 5,000 more jobs (the probe) — the target is within 20 % of the rate at 0 — and
#     the worker's CPU time per probe job (probe_cpu_us_per_job: steadier than the wall clock);
#   - the database size per finished job (SQLite: the file after a WAL checkpoint; PostgreSQL:
#     pg_database_size), also what `jobctl stats` reports;
#   - `audit --since 1d` as --json, --csv and a table: rows/s and peak RSS;
#   - `replay --verify`: events/s and peak RSS (exit 0 required: the log must verify);
#   - `stats --json`: seconds.
# Runs are not repeated (one pass per size; `--runs` is ignored here): building the log is the cost.
# BIGLOG_KEEP=PATH keeps the SQLite database of the last size there (moved, not removed) so that other
# binaries can be timed on the same log afterwards; PATH must not exist.

BIGLOG_CHUNK=50000
BIGLOG_PROBE=5000
BIGLOG_CONCURRENCY=64

# biglog_timed BENCH TOOL LABEL ROWS DB ARGS...: runs `jobctl ARGS` (stdout thrown away) under GNU time;
# records LABEL_per_s (ROWS ÷ seconds), LABEL_s, LABEL_rss_kib, and the process's own CPU time
# (user + sys) as LABEL_cpu_s and LABEL_per_cpu_s (ROWS ÷ CPU seconds: steadier than the wall clock on a
# loaded machine; on PostgreSQL the server's CPU is not in it); returns 1 on a non-zero exit.
biglog_timed() {
  local bench=$1 tool=$2 label=$3 rows=$4 db=$5; shift 5
  local out="$WORK/biglog/$label.time" t0 t1 rc=0 s cpu
  t0=$(now_ns)
  timeout 1800 /usr/bin/time -f '%U %S %M' -o "$out" "$JOBCTL" --no-color --db "$db" "$@" >/dev/null 2>"$WORK/biglog/$label.err" || rc=$?
  t1=$(now_ns)
  s=$(secs "$t0" "$t1")
  if [ "$rc" != 0 ]; then fail "$bench" "$tool" "$label exited $rc: $(tail_msg "$WORK/biglog/$label.err")"; return 1; fi
  [ "$rows" -gt 0 ] && record "$bench" "$tool" "${label}_per_s" "$(rate "$rows" "$s")"
  record "$bench" "$tool" "${label}_s" "$s"
  record "$bench" "$tool" "${label}_rss_kib" "$(tail -n 1 "$out" | awk '{ print $3 }')"
  cpu=$(tail -n 1 "$out" | awk '{ printf "%.2f", $1 + $2 }')
  record "$bench" "$tool" "${label}_cpu_s" "$cpu"
  if [ "$rows" -gt 0 ] && awk -v c="$cpu" 'BEGIN { exit !(c > 0) }'; then
    record "$bench" "$tool" "${label}_per_cpu_s" "$(rate "$rows" "$cpu")"
  fi
}

# biglog_add ENGINE DB N: submits N new download-memory jobs (chunks of BIGLOG_CHUNK) and drains them;
# sets ELAPSED to the drain time of the last chunk.
biglog_add() {
  local engine=$1 db=$2 n=$3 left chunk dir
  left=$n
  while [ "$left" -gt 0 ]; do
    chunk=$(( left < BIGLOG_CHUNK ? left : BIGLOG_CHUNK ))
    BIGLOG_SERIAL=$((BIGLOG_SERIAL + 1))
    dir="$WORK/biglog/objects-$BIGLOG_SERIAL"
    "$PY" "$BENCH/pglib.py" objects "$dir" "$chunk"
    "$PY" "$BENCH/pglib.py" memory-manifest "$chunk" "$dir" >"$WORK/biglog/chunk.yaml"
    jctl "$db" submit "$WORK/biglog/chunk.yaml" >/dev/null 2>"$WORK/biglog/submit.err" \
      || { fail "biglog-$engine" jobctl "submit failed: $(tail_msg "$WORK/biglog/submit.err")"; return 1; }
    sync
    run_worker_timed "biglog-$engine" "$db" "$WORK/biglog/drain" "$chunk" --concurrency "$BIGLOG_CONCURRENCY" || return 1
    rm -rf "$dir"
    left=$((left - chunk))
  done
}

# biglog_measure ENGINE DB JOBS: the probe drain, size, audit, replay and stats at JOBS finished jobs.
biglog_measure() {
  local engine=$1 db=$2 jobs=$3 tool bytes events
  tool="jobctl-$jobs"
  log "biglog $engine: probe drain of $BIGLOG_PROBE jobs on a log of $jobs finished jobs"
  biglog_add "$engine" "$db" "$BIGLOG_PROBE" || return 1
  record "biglog-$engine" "$tool" probe_jobs_per_s "$(rate "$BIGLOG_PROBE" "$ELAPSED")"
  # The worker's own CPU (user + sys, from GNU time -v) per probe job: steadier than the wall clock on a
  # shared machine, so the drain at size can be compared with the drain on the empty log.
  local probe_cpu
  probe_cpu=$("$PY" "$BENCH/benchlib.py" cpu-seconds "$WORK/biglog/drain.time")
  record "biglog-$engine" "$tool" probe_cpu_s "$probe_cpu"
  record "biglog-$engine" "$tool" probe_cpu_us_per_job "$(awk -v c="$probe_cpu" -v n="$BIGLOG_PROBE" 'BEGIN { printf "%.0f", c * 1e6 / n }')"
  jobs=$((jobs + BIGLOG_PROBE))
  if [ "$engine" = sqlite ]; then
    "$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=60); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "$db"
    bytes=$(( $(size_of "$db") + $(size_of "$db-wal") ))
    events=$("$PY" "$BENCH/benchlib.py" count-events "$db")
  else
    bytes=$(pg_psql "SELECT pg_database_size('$BIGLOG_PGDB')")
    events=$("${PG_AS[@]}" "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR/socket" -p "$PG_PORT" -U jobctl_bench \
      -d "$BIGLOG_PGDB" -c "SELECT count(*) FROM events")
  fi
  record "biglog-$engine" "$tool" jobs "$jobs"
  record "biglog-$engine" "$tool" events "$events"
  record "biglog-$engine" "$tool" db_bytes "$bytes"
  record "biglog-$engine" "$tool" bytes_per_job "$(rate "$bytes" "$jobs")"
  log "biglog $engine: $jobs jobs, $events events, $bytes bytes; audit, replay --verify, stats"
  biglog_timed "biglog-$engine" "$tool" audit_json "$jobs" "$db" audit --since 1d --json
  biglog_timed "biglog-$engine" "$tool" audit_csv "$jobs" "$db" audit --since 1d --csv
  biglog_timed "biglog-$engine" "$tool" audit_table "$jobs" "$db" audit --since 1d
  biglog_timed "biglog-$engine" "$tool" replay "$events" "$db" replay --verify
  biglog_timed "biglog-$engine" "$tool" stats 0 "$db" stats --json
  return 0
}

biglog_benchmark() {
  local engine db have size
  mkdir -p "$WORK/biglog"
  BIGLOG_SERIAL=0
  for engine in $BIGLOG_ENGINES; do
    if [ "$engine" = postgres ]; then
      [ -n "$PG_PID" ] || start_postgres
      BIGLOG_PGDB="biglog_$$"
      db=$(pg_new_database "$BIGLOG_PGDB") || { fail biglog-postgres jobctl "could not create a database"; continue; }
    else
      db="$WORK/biglog/jobctl.db"
      rm -f "$db" "$db"-*
    fi
    jctl "$db" migrate >/dev/null 2>"$WORK/biglog/migrate.err" || { fail "biglog-$engine" jobctl "migrate failed: $(tail_msg "$WORK/biglog/migrate.err")"; continue; }
    have=0
    for size in 0 $BIGLOG_SIZES; do
      if [ "$size" -gt "$have" ]; then
        log "biglog $engine: growing the log from $have to $size finished jobs"
        biglog_add "$engine" "$db" "$((size - have))" || break
        have=$size
      fi
      biglog_measure "$engine" "$db" "$have" || break
      have=$((have + BIGLOG_PROBE))
    done
    if [ "$engine" = sqlite ] && [ -n "${BIGLOG_KEEP:-}" ] && [ ! -e "$BIGLOG_KEEP" ]; then
      "$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=60); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "$db"
      mv "$db" "$BIGLOG_KEEP" && log "biglog sqlite: the database is kept at $BIGLOG_KEEP"
    fi
    [ "$engine" = sqlite ] && rm -f "$db" "$db"-*
  done
  rm -rf "$WORK/biglog"
}

# ------------------------------------------------------------------ the worker's memory
# One worker at concurrency 64 over small files (download-memory of 64-byte objects; upload-file of
# 16 KiB files into a file:// bucket), and one 1 GiB upload-file into a file:// bucket: peak RSS of the
# worker process (GNU time), target < 64 MiB whatever the number or size of the files.
memory_benchmark() {
  local m="$WORK/memory" i db
  mkdir -p "$m"
  "$PY" "$BENCH/pglib.py" objects "$m/objects" "$MEMORY_SMALL_FILES"
  "$PY" "$BENCH/pglib.py" memory-manifest "$MEMORY_SMALL_FILES" "$m/objects" >"$m/memory.yaml"
  mkdir -p "$m/src"
  "$PY" - "$m/src" "$MEMORY_SMALL_FILES" "$m/bucket" >"$m/upload.yaml" <<'PY'
import json, os, sys
folder, n, bucket = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print("jobs:")
for k in range(n):
    path = os.path.join(folder, f"f{k}.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(16384))
    print("  - kind: upload-file")
    print(f"    source: {json.dumps(path)}")
    print(f"    destination: {json.dumps('file://' + os.path.join(bucket, f'f{k}.bin'))}")
PY
  head -c $((1024 * 1024 * 1024)) /dev/urandom >"$m/big.bin"
  "$PY" "$BENCH/benchlib.py" transfer-manifest upload-file "$m/big.bin" "file://$m/bucket-big/big.bin" >"$m/big.yaml"
  for i in $(seq 1 "$RUNS"); do
    log "memory run $i/$RUNS"
    db="$m/memory-$i.db"; jctl "$db" submit "$m/memory.yaml" >/dev/null
    if run_worker_timed memory "$db" "$m/w" "$MEMORY_SMALL_FILES" --concurrency 64; then
      record memory jobctl-download-memory rss_kib "$RSS_KIB"
      record memory jobctl-download-memory jobs_per_s "$(rate "$MEMORY_SMALL_FILES" "$ELAPSED")"
    fi
    rm -f "$db" "$db"-*
    db="$m/upload-$i.db"; rm -rf "$m/bucket"; jctl "$db" submit "$m/upload.yaml" >/dev/null
    if run_worker_timed memory "$db" "$m/w" "$MEMORY_SMALL_FILES" --concurrency 64; then
      record memory jobctl-upload-file rss_kib "$RSS_KIB"
      record memory jobctl-upload-file jobs_per_s "$(rate "$MEMORY_SMALL_FILES" "$ELAPSED")"
    fi
    rm -f "$db" "$db"-*
    db="$m/big-$i.db"; rm -rf "$m/bucket-big"; jctl "$db" submit "$m/big.yaml" >/dev/null; sync
    if run_worker_timed memory "$db" "$m/w" 1; then
      record memory jobctl-1gib rss_kib "$RSS_KIB"
      record memory jobctl-1gib mbps "$(rate 1073.741824 "$ELAPSED")"
    fi
    rm -f "$db" "$db"-*; rm -rf "$m/bucket-big"
  done
  rm -rf "$m"
}
