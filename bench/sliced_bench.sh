# Sourced by bench/run.sh: `--only sliced` (issue 9, target 5).
#
# A SIZE_MIB (512; 64 with --quick; SLICED_MIB overrides) gs:// object downloaded to disk by
# `jobctl worker --drain`, sliced (--sliced-threshold 1MiB, --slices 4) against single-stream
# (--sliced-threshold off), interleaved in every run. The "GCS" is nginx serving the JSON API's two
# read paths as static files under STORAGE_EMULATOR_HOST: the object's metadata (size, generation,
# crc32c computed here) at /storage/v1/b/bench/o/big.bin and the media at /download/storage/v1/b/...
# (nginx honours Range; it ignores the ?alt=media&generation= query). The Python GCS emulator is
# single-threaded and would serialise the slices, so it is no speed reference. Both sides verify the
# CRC32C (sliced: per slice, combined); both write to the same disk and sync.
sliced_benchmark() {
  [ -n "$NGINX_PID" ] || start_nginx
  local s="$WORK/sliced" mib=${SLICED_MIB:-$SIZE_MIB} i mode db args tool
  local bytes=$((mib * 1024 * 1024)) mb
  mb=$(awk -v b="$bytes" 'BEGIN { printf "%.6f", b / 1e6 }')
  local media="$WWW/download/storage/v1/b/bench/o" meta="$WWW/storage/v1/b/bench/o"
  mkdir -p "$s/out" "$media" "$meta"
  echo "sliced_mib=$mib" >>"$META"
  log "creating a ${mib} MiB object for the sliced-download benchmark"
  head -c "$bytes" /dev/urandom >"$media/big.bin"
  "$PY" - "$media/big.bin" "$meta/big.bin" "$bytes" <<'EOF'
import base64, json, sys
import google_crc32c
path, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
crc = google_crc32c.Checksum()
with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        crc.update(chunk)
json.dump({"kind": "storage#object", "bucket": "bench", "name": "big.bin", "size": str(size), "generation": "1",
           "metageneration": "1", "crc32c": base64.b64encode(crc.digest()).decode()}, open(out, "w"))
EOF
  for i in $(seq 1 "$RUNS"); do
    for mode in single sliced; do
      log "sliced run $i/$RUNS: $mode"
      rm -f "$s/out"/*; sync
      db="$s/$mode-$i.db"
      printf -- '- {kind: download-file, source: gs://bench/big.bin, destination: %s/out/big.bin}\n' "$s" >"$s/job.yaml"
      if [ "$mode" = sliced ]; then args="--sliced-threshold 1MiB --slices 4"; else args="--sliced-threshold off"; fi
      if STORAGE_EMULATOR_HOST="http://127.0.0.1:$NGINX_PORT" "$JOBCTL" --no-color --db "$db" submit "$s/job.yaml" >"$s/submit.out" 2>"$s/submit.err"; then
        # shellcheck disable=SC2086
        if STORAGE_EMULATOR_HOST="http://127.0.0.1:$NGINX_PORT" run_worker_timed "sliced-download" "$db" "$s/$mode-$i" 1 $args; then
          if [ "$(size_of "$s/out/big.bin")" = "$bytes" ]; then
            if [ "$mode" = sliced ]; then tool=jobctl; else tool=jobctl-single-stream; fi
            record "sliced-download" "$tool" mbps "$(rate "$mb" "$ELAPSED")"
          else fail "sliced-download" "jobctl-$mode" "the file has $(size_of "$s/out/big.bin") bytes"; fi
        fi
      else fail "sliced-download" "jobctl-$mode" "submit failed: $(tail_msg "$s/submit.err")"; fi
      rm -f "$db" "$db"-*
    done
  done
  rm -rf "$s" "$WWW/download" "$WWW/storage"
}
