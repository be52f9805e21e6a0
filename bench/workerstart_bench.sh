# A worker's start on a log of finished downloads (`--only workerstart`). Sourced by bench/run.sh; uses
# its helpers (log, record, fail, jctl, now_ns, secs, $WORK, $SHM, $PY, $JOBCTL, $RUNS).
#
# A worker's first leftover sweep looks at the final jobs that create local files (download-file, uploads
# to file://). The log is grown with download-file jobs of 64-byte `file://` objects into a folder on
# tmpfs (submit, then `worker --drain --concurrency 64`, chunk after chunk) to each size of
# WORKERSTART_SIZES finished jobs (and 0); at each size, RUNS times, one `jobctl worker --drain
# --concurrency 16` is timed on it with nothing queued: it opens the log, sweeps, finds nothing to run,
# and exits. Recorded: seconds of wall clock and of the process's CPU (user + sys). Target: the start does
# not grow with the log (each size against 0, same run).
WORKERSTART_SIZES=${WORKERSTART_SIZES:-20000 100000}
WORKERSTART_CHUNK=50000

workerstart_benchmark() {
  local w="$WORK/workerstart" db have=0 size chunk serial=0 i t0 t1 dir
  mkdir -p "$w"
  db="$w/start.db"
  jctl "$db" migrate >/dev/null 2>"$w/migrate.err" || { fail workerstart jobctl "migrate failed: $(tail_msg "$w/migrate.err")"; return 1; }
  for size in 0 $WORKERSTART_SIZES; do
    while [ "$have" -lt "$size" ]; do
      chunk=$(( size - have < WORKERSTART_CHUNK ? size - have : WORKERSTART_CHUNK ))
      serial=$((serial + 1))
      dir="$w/objects-$serial"
      log "workerstart: growing the log to $((have + chunk)) finished download-file jobs"
      "$PY" "$BENCH/pglib.py" objects "$dir" "$chunk"
      "$PY" - "$dir" "$chunk" "$SHM/workerstart-out-$serial" >"$w/chunk.yaml" <<'PYEOF'
import json, os, sys
folder, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print("jobs:")
for k in range(count):
    print(f"  - {{kind: download-file, source: {json.dumps('file://' + os.path.join(folder, f'o{k}.bin'))}, "
          f"destination: {json.dumps(os.path.join(out, f'o{k}.bin'))}}}")
PYEOF
      jctl "$db" submit "$w/chunk.yaml" >/dev/null 2>"$w/submit.err" \
        || { fail workerstart jobctl "submit failed: $(tail_msg "$w/submit.err")"; return 1; }
      jctl "$db" worker --drain --concurrency 64 >/dev/null 2>"$w/drain.err" \
        || { fail workerstart jobctl "the drain growing the log failed: $(tail_msg "$w/drain.err")"; return 1; }
      rm -rf "$dir" "$SHM/workerstart-out-$serial"
      have=$((have + chunk))
    done
    sync
    for i in $(seq 1 "$RUNS"); do
      t0=$(now_ns)
      if ! timeout 600 /usr/bin/time -f '%U %S' -o "$w/start.time" "$JOBCTL" --no-color --db "$db" worker --drain \
          --concurrency 16 >/dev/null 2>"$w/start.err"; then
        fail workerstart "jobctl-$size" "the worker exited with an error: $(tail_msg "$w/start.err")"; continue
      fi
      t1=$(now_ns)
      record workerstart "jobctl-$size" start_s "$(secs "$t0" "$t1")"
      record workerstart "jobctl-$size" cpu_s "$(tail -n 1 "$w/start.time" | awk '{ printf "%.3f", $1 + $2 }')"
    done
    log "workerstart: $size finished download-file jobs timed"
  done
  rm -rf "$w"
}
