# jobctl on PostgreSQL: drain throughput with 1, 2 and 4 worker processes against SQLite's figure of
# the same run, and claim / idle pickup latency on both engines. Sourced by bench/run.sh (`--only pg`);
# uses its helpers (log, record, fail, jctl, now_ns, secs, rate, tail_msg, $WORK, $PY, $JOBCTL, $RUNS,
# $JOBS, $DRAIN_CONCURRENCY, $LATENCY_SUBMITS, $LATENCY_GAP_MS).
#
# PostgreSQL is started as the tests start it: Debian's newest server binaries, `initdb` into a fresh
# directory under /tmp (as the unprivileged `postgres` user when run as root, since initdb refuses
# root; --no-sync for the throw-away cluster's setup), one server listening only on 127.0.0.1 on a free
# port with fsync=on, shared_buffers=32MB, stopped and removed at the end. The password is random,
# reaches jobctl through PGPASSWORD and is never printed.
#
# PG_BENCH_STATEMENTS=1 also loads pg_stat_statements and, for every PostgreSQL drain, records the
# statements and commits per job (pgdrain … statements_per_job, commits_per_job) and logs the most
# frequent statements with their calls per job: the round-trip breakdown in BENCHMARKS.md. It costs the
# server a little time per statement, so figures from such a run are not the drain rates.

PG_DIR=""
PG_PID=""
PG_PORT=""
PG_AS=()
PG_BIN=""
PG_DRAIN_PROCESSES="1 2 4"
PG_PEER_CLIENTS="${PG_PEER_CLIENTS:-1 4}"

start_postgres() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (make test-deps installs them)"
  PG_DIR=$(mktemp -d /tmp/jobctl-bench-pg.XXXXXX)
  chmod 755 "$PG_DIR"
  mkdir -p "$PG_DIR/socket"
  PGPASSWORD=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  export PGPASSWORD
  printf '%s\n' "$PGPASSWORD" >"$PG_DIR/pwfile"
  PG_AS=()
  PG_EXTRA=()
  [ "${PG_BENCH_STATEMENTS:-0}" = 1 ] && PG_EXTRA=(-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=1000 -c pg_stat_statements.track_planning=on)
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "run as root, PostgreSQL needs the unprivileged postgres user (Debian's postgresql package creates it)"
    chown -R postgres:postgres "$PG_DIR"
    PG_AS=(/usr/bin/setpriv --reuid=postgres --regid=postgres --init-groups --)
  fi
  chmod 700 "$PG_DIR/socket"
  "${PG_AS[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U jobctl_bench --pwfile="$PG_DIR/pwfile" \
    --auth-host=scram-sha-256 --auth-local=trust -E UTF8 --locale=C --no-sync --no-instructions \
    >"$WORK/initdb.log" 2>&1 || die "initdb failed: $(tail_msg "$WORK/initdb.log")"
  rm -f "$PG_DIR/pwfile"
  PG_PORT=$("$PY" "$BENCH/benchlib.py" freeport)
  "${PG_AS[@]}" "$PG_BIN/postgres" -D "$PG_DIR/data" -c listen_addresses=127.0.0.1 -c "port=$PG_PORT" \
    -c "unix_socket_directories=$PG_DIR/socket" -c fsync=on -c max_connections=100 -c shared_buffers=32MB \
    -c logging_collector=off -c log_min_messages=warning "${PG_EXTRA[@]}" >"$WORK/postgres.log" 2>&1 &
  PG_PID=$!
  local i
  for i in $(seq 1 150); do
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null && break
    kill -0 "$PG_PID" 2>/dev/null || break
    sleep 0.2
  done
  "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null || die "PostgreSQL did not start: $(tail_msg "$WORK/postgres.log")"
  if [ "${PG_BENCH_STATEMENTS:-0}" = 1 ]; then pg_psql "CREATE EXTENSION pg_stat_statements" >/dev/null; fi
  echo "postgres=$("$PG_BIN/postgres" --version | sed 's/^postgres (PostgreSQL) //')" >>"$META"
  log "PostgreSQL on 127.0.0.1:$PG_PORT"
}

stop_postgres() {  # fast shutdown (SIGINT), wait up to 30 s, then remove the cluster
  [ -n "$PG_PID" ] || return 0
  kill -INT "$PG_PID" 2>/dev/null || true
  local i
  for i in $(seq 1 300); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$PG_PID" 2>/dev/null || true
  wait "$PG_PID" 2>/dev/null || true
  PG_PID=""
  [ -n "$PG_DIR" ] && rm -rf "$PG_DIR"
  PG_DIR=""
}

pg_psql() {  # pg_psql SQL: as the cluster's superuser over its unix socket
  "${PG_AS[@]}" "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR/socket" -p "$PG_PORT" -U jobctl_bench -d postgres -c "$1"
}

pg_psql_db() {  # pg_psql_db DB SQL: as pg_psql, in database DB
  "${PG_AS[@]}" "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR/socket" -p "$PG_PORT" -U jobctl_bench -d "$1" -c "$2"
}

pg_new_database() {  # pg_new_database NAME: prints the URL of a new, empty database (no password in it)
  pg_psql "CREATE DATABASE $1" >/dev/null || return 1
  echo "postgres://jobctl_bench@127.0.0.1:$PG_PORT/$1?sslmode=disable"
}

pg_cpu() { "$PY" "$BENCH/pglib.py" pg-cpu "$PG_PID"; }

pg_commits() {  # pg_commits DB: transactions committed in database DB so far
  pg_psql "SELECT pg_stat_force_next_flush(); SELECT xact_commit FROM pg_stat_database WHERE datname = '$1'" | tail -n 1
}

# pg_statements_start DB / pg_statements_report DB TOOL: with PG_BENCH_STATEMENTS=1, the statements and
# commits of one drain, per job (records them and logs the ten most frequent statements).
pg_statements_start() {
  [ "${PG_BENCH_STATEMENTS:-0}" = 1 ] || return 0
  pg_psql "SELECT pg_stat_statements_reset()" >/dev/null
  PG_COMMITS0=$(pg_commits "$1")
}
pg_statements_report() {
  [ "${PG_BENCH_STATEMENTS:-0}" = 1 ] || return 0
  local db=$1 tool=$2 where calls commits
  where="dbid = (SELECT oid FROM pg_database WHERE datname = '$db')"
  calls=$(pg_psql "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE $where")
  commits=$(( $(pg_commits "$db") - PG_COMMITS0 ))
  record pgdrain "$tool" statements_per_job "$(awk -v c="$calls" -v n="$JOBS" 'BEGIN { printf "%.2f", c / n }')"
  record pgdrain "$tool" commits_per_job "$(awk -v c="$commits" -v n="$JOBS" 'BEGIN { printf "%.2f", c / n }')"
  log "  $tool: $calls statements, $commits commits; per job, most frequent first:"
  pg_psql "SELECT to_char(calls::numeric / $JOBS, 'FM990.00') || E'\\t' || to_char(total_exec_time / calls, 'FM990.000') || E' ms\\t'
             || to_char(plans::numeric / calls, 'FM990.00') || E' plans/call\\t'
             || left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
           FROM pg_stat_statements WHERE $where ORDER BY calls DESC LIMIT 14" | sed 's/^/    /'
}

# pg_drain BENCH TOOL DB N PREFIX: N `jobctl worker --drain` processes at once; records jobs/s, events/s
# and the CPU seconds the workers and the database server spent, unless a worker fails or fewer than
# $JOBS jobs succeeded.
pg_drain() {
  local bench=$1 tool=$2 db=$3 n=$4 prefix=$5 k pids=() rc=0 t0 t1 c0 c1 elapsed ok total=0 events
  c0=$( [ "$tool" = sqlite-1 ] && echo 0 || pg_cpu )
  t0=$(now_ns)
  for k in $(seq 1 "$n"); do
    timeout 600 /usr/bin/time -v -o "$prefix-$k.time" "$JOBCTL" --no-color --db "$db" worker --drain --json \
      --concurrency "$DRAIN_CONCURRENCY" >"$prefix-$k.out" 2>"$prefix-$k.err" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || rc=$?; done
  t1=$(now_ns)
  c1=$( [ "$tool" = sqlite-1 ] && echo 0 || pg_cpu )
  elapsed=$(secs "$t0" "$t1")
  if [ "$rc" != 0 ]; then fail "$bench" "$tool" "a worker exited $rc: $(tail_msg "$prefix-1.err")"; return 1; fi
  for k in $(seq 1 "$n"); do
    ok=$("$PY" "$BENCH/benchlib.py" summary-succeeded <"$prefix-$k.out")
    total=$((total + ok))
  done
  if [ "$total" != "$JOBS" ]; then fail "$bench" "$tool" "workers succeeded $total of $JOBS jobs: $(tail_msg "$prefix-1.err")"; return 1; fi
  local wcpu scpu=0
  record "$bench" "$tool" jobs_per_s "$(rate "$JOBS" "$elapsed")"
  wcpu=$("$PY" "$BENCH/pglib.py" cpu-secs "$prefix"-*.time)
  record "$bench" "$tool" worker_cpu_s "$wcpu"
  [ "$tool" = sqlite-1 ] || scpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')
  [ "$tool" = sqlite-1 ] || record "$bench" "$tool" server_cpu_s "$scpu"
  [ "$tool" = sqlite-1 ] || record "$bench" "$tool" server_ms_per_job "$(awk -v s="$scpu" -v n="$JOBS" 'BEGIN { printf "%.3f", s * 1000 / n }')"
  # CPU per job of workers and server together: what two shared cores divide among jobs, steadier
  # under other load than the rate.
  record "$bench" "$tool" cpu_ms_per_job "$(awk -v w="$wcpu" -v s="$scpu" -v n="$JOBS" 'BEGIN { printf "%.3f", (w + s) * 1000 / n }')"
  events=$("$PY" "$BENCH/pglib.py" summary-events "$prefix"-*.out)
  [ -n "$events" ] && record "$bench" "$tool" events_per_s "$(rate "$events" "$elapsed")"
  log "  $tool: $JOBS jobs in $elapsed s"
  return 0
}

# pg_peer_drain TOOL N PREFIX: the ceiling peer (bench/pg_peer_schema.sql, bench/pg_peer_drain.pgbench):
# $JOBS jobs inserted untimed, then drained by N pgbench clients in batches of $DRAIN_CONCURRENCY, each
# batch claimed (FOR UPDATE SKIP LOCKED), started and succeeded in three durable commits. Records what
# pg_drain records for jobctl (pgbench's CPU in the workers' place), unless a job is left undone.
pg_peer_drain() {
  local tool=$1 n=$2 prefix=$3 db="peer_$RANDOM" per_client rounds=0 left t0 t1 c0 c1 elapsed wcpu scpu
  pg_psql "CREATE DATABASE $db" >/dev/null || { fail pgdrain "$tool" "CREATE DATABASE failed"; return 1; }
  if ! "${PG_AS[@]}" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR/socket" -p "$PG_PORT" -U jobctl_bench -d "$db" \
      -f - <"$BENCH/pg_peer_schema.sql" >"$prefix.schema.log" 2>&1; then
    fail pgdrain "$tool" "schema failed: $(tail_msg "$prefix.schema.log")"; pg_psql "DROP DATABASE $db" >/dev/null 2>&1; return 1
  fi
  "${PG_AS[@]}" "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PG_DIR/socket" -p "$PG_PORT" -U jobctl_bench -d "$db" -c "
    INSERT INTO peer_jobs (id, state, priority, run_after_ms, attempts, version, spec, updated_at_ms)
    SELECT g, 'queued', 0, 0, 0, 1, '{\"kind\":\"download-memory\",\"max_size\":1024,\"source\":\"file:///tmp/objects/o' || g || '.bin\"}', 0
    FROM generate_series(1, $JOBS) g;
    INSERT INTO peer_events (job_id, version, type, at_ms, data) SELECT id, 1, 'submitted', 0, spec FROM peer_jobs;
    ANALYZE peer_jobs; ANALYZE peer_events; CHECKPOINT;" >"$prefix.load.log" 2>&1 \
    || { fail pgdrain "$tool" "loading the jobs failed: $(tail_msg "$prefix.load.log")"; pg_psql "DROP DATABASE $db" >/dev/null 2>&1; return 1; }
  per_client=$(( (JOBS + DRAIN_CONCURRENCY * n - 1) / (DRAIN_CONCURRENCY * n) + 1 ))
  : >"$prefix.pgbench.log"
  c0=$(pg_cpu); t0=$(now_ns)
  left=$JOBS
  while [ "$left" -gt 0 ] && [ "$rounds" -lt 5 ]; do   # SKIP LOCKED may leave a few for another round
    rounds=$((rounds + 1))
    timeout 600 /usr/bin/time -v -o "$prefix-$rounds.time" "$PG_BIN/pgbench" -n -M prepared -f "$BENCH/pg_peer_drain.pgbench" \
      -D "batch=$DRAIN_CONCURRENCY" -c "$n" -j "$n" -t "$per_client" -h 127.0.0.1 -p "$PG_PORT" -U jobctl_bench "$db" \
      >>"$prefix.pgbench.log" 2>&1 || { fail pgdrain "$tool" "pgbench failed: $(tail_msg "$prefix.pgbench.log")"; break; }
    left=$(pg_psql_db "$db" "SELECT count(*) FROM peer_jobs WHERE state <> 'succeeded'")
    per_client=1
  done
  t1=$(now_ns); c1=$(pg_cpu)
  elapsed=$(secs "$t0" "$t1")
  local events
  events=$(pg_psql_db "$db" "SELECT count(*) FROM peer_events WHERE type IN ('claimed', 'started', 'succeeded')")
  pg_psql "DROP DATABASE $db" >/dev/null 2>&1 || true
  if [ "$left" != 0 ] || [ "$events" != $((3 * JOBS)) ]; then
    fail pgdrain "$tool" "$left jobs left undone, $events events of $((3 * JOBS)): $(tail_msg "$prefix.pgbench.log")"; return 1
  fi
  wcpu=$("$PY" "$BENCH/pglib.py" cpu-secs "$prefix"-*.time)
  scpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')
  record pgdrain "$tool" jobs_per_s "$(rate "$JOBS" "$elapsed")"
  record pgdrain "$tool" events_per_s "$(rate "$events" "$elapsed")"
  record pgdrain "$tool" worker_cpu_s "$wcpu"
  record pgdrain "$tool" server_cpu_s "$scpu"
  record pgdrain "$tool" server_ms_per_job "$(awk -v s="$scpu" -v n="$JOBS" 'BEGIN { printf "%.3f", s * 1000 / n }')"
  record pgdrain "$tool" cpu_ms_per_job "$(awk -v w="$wcpu" -v s="$scpu" -v n="$JOBS" 'BEGIN { printf "%.3f", (w + s) * 1000 / n }')"
  log "  $tool: $JOBS jobs in $elapsed s ($rounds pgbench rounds)"
  return 0
}

# pg_pickup TOOL DB DIR: an idle worker, then $LATENCY_SUBMITS single-job submits $LATENCY_GAP_MS apart;
# records submit → claimed and submit → started of each probe (from its history).
pg_pickup() {
  local tool=$1 db=$2 d=$3 k id ids done_count=0 claimed started
  mkdir -p "$d/bucket" "$d/hist"
  if ! jctl "$db" migrate >/dev/null 2>"$d/migrate.err"; then fail pglatency "$tool" "migrate failed: $(tail_msg "$d/migrate.err")"; return 1; fi
  timeout 300 "$JOBCTL" --no-color --db "$db" worker --concurrency 4 >"$d/worker.out" 2>"$d/worker.err" &
  WORKER_PID=$!
  sleep 1
  if ! kill -0 "$WORKER_PID" 2>/dev/null; then
    fail pglatency "$tool" "idle worker exited: $(tail_msg "$d/worker.err")"; WORKER_PID=""; return 1
  fi
  : >"$d/ids"
  for k in $(seq 1 "$LATENCY_SUBMITS"); do
    printf 'jobs:\n  - kind: download-memory\n    source: "file://%s/o%s.bin"\n    max_size: 1KiB\n' "$QUEUE_OBJECTS" "$k" >"$d/one.yaml"
    jctl "$db" submit "$d/one.yaml" >>"$d/ids" 2>"$d/submit.err" || fail pglatency "$tool" "submit failed: $(tail_msg "$d/submit.err")"
    sleep "$(awk -v ms="$LATENCY_GAP_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"
  done
  for k in $(seq 1 150); do
    done_count=$(jctl "$db" list --state succeeded --limit 0 --json 2>/dev/null | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null || echo 0)
    [ "$done_count" -ge "$LATENCY_SUBMITS" ] && break
    sleep 0.2
  done
  stop_pid "$WORKER_PID"; WORKER_PID=""
  [ "$done_count" -ge "$LATENCY_SUBMITS" ] || fail pglatency "$tool" "only $done_count of $LATENCY_SUBMITS probes succeeded within 30 s: $(tail_msg "$d/worker.err")"
  mapfile -t ids <"$d/ids"
  for id in "${ids[@]}"; do
    [ -n "$id" ] && { jctl "$db" history "$id" --json >"$d/hist/$id.json" 2>/dev/null || true; }
  done
  "$PY" "$BENCH/pglib.py" pickup "$d/hist" "${ids[@]}" >"$d/lat" 2>"$d/lat.err" || true
  [ -s "$d/lat" ] || { fail pglatency "$tool" "no submitted/claimed/started events in the probes' histories: $(tail_msg "$d/lat.err")"; return 1; }
  while read -r claimed started; do
    record pglatency "$tool" claim_ms "$claimed"
    record pglatency "$tool" start_ms "$started"
  done <"$d/lat"
}

pg_benchmark() {
  local p="$WORK/pg" i n db url s t0 t1 rc
  mkdir -p "$p"
  start_postgres
  QUEUE_OBJECTS="$p/objects"
  "$PY" "$BENCH/pglib.py" objects "$QUEUE_OBJECTS" "$JOBS"
  "$PY" "$BENCH/pglib.py" memory-manifest "$JOBS" "$QUEUE_OBJECTS" >"$p/jobs.yaml"
  for i in $(seq 1 "$RUNS"); do
    log "pg run $i/$RUNS ($JOBS download-memory jobs of 64-byte file:// objects)"
    # SQLite: the same jobs, one worker process
    db="$p/sqlite-$i.db"
    if jctl "$db" submit "$p/jobs.yaml" >"$p/submit.out" 2>"$p/submit.err"; then
      pg_drain pgdrain sqlite-1 "$db" 1 "$p/sqlite-$i" || true
    else fail pgdrain sqlite-1 "submit failed: $(tail_msg "$p/submit.err")"; fi
    rm -f "$db" "$db"-*
    # PostgreSQL: a fresh database for each number of worker processes
    for n in $PG_DRAIN_PROCESSES; do
      url=$(pg_new_database "bench_${i}_$n") || { fail pgdrain "postgres-$n" "CREATE DATABASE failed"; continue; }
      t0=$(now_ns); rc=0
      jctl "$url" submit "$p/jobs.yaml" >"$p/submit.out" 2>"$p/submit.err" || rc=$?
      t1=$(now_ns)
      if [ "$rc" = 0 ] && [ "$(wc -l <"$p/submit.out")" = "$JOBS" ]; then
        record pgenqueue postgres jobs_per_s "$(rate "$JOBS" "$(secs "$t0" "$t1")")"
        pg_statements_start "bench_${i}_$n"
        pg_drain pgdrain "postgres-$n" "$url" "$n" "$p/pg-$i-$n" || true
        pg_statements_report "bench_${i}_$n" "postgres-$n"
      else fail pgdrain "postgres-$n" "submit exited $rc: $(tail_msg "$p/submit.err")"; fi
      pg_psql "DROP DATABASE bench_${i}_$n" >/dev/null 2>&1 || true
    done
    # The ceiling: the least durable SQL for the same jobs, by pgbench clients (PG_PEER_CLIENTS)
    for n in $PG_PEER_CLIENTS; do pg_peer_drain "peer-$n" "$n" "$p/peer-$i-$n" || true; done
    # Claim and idle pickup latency, both engines
    log "pg latency run $i/$RUNS ($LATENCY_SUBMITS submits ${LATENCY_GAP_MS} ms apart)"
    url=$(pg_new_database "latency_$i") && pg_pickup postgres "$url" "$p/lat-pg-$i" || true
    pg_psql "DROP DATABASE latency_$i" >/dev/null 2>&1 || true
    pg_pickup sqlite "$p/lat-sqlite-$i/jobctl.db" "$p/lat-sqlite-$i" || true
    rm -rf "$p/lat-pg-$i" "$p/lat-sqlite-$i"
  done
  stop_postgres
  rm -rf "$p"
}
