# Sourced by bench/run.sh: `--only smallfiles` (issue 9, target 2).
#
# SMALL_FILES × 16 KiB files uploaded to nginx (PUT) and downloaded back, concurrency 16:
#   curl:   one `curl --parallel --parallel-max 16 -K LIST` per direction (LIST: upload-file/url or
#           url/output pairs), keeping no state;
#   jobctl: one manifest of SMALL_FILES jobs submitted (untimed), then `jobctl worker --drain
#           --concurrency 16` timed, with its durable history (submitted, claimed, started, succeeded per
#           job) in a database on disk.
# What neither side syncs lives on tmpfs (nginx's root, curl's downloads). jobctl's downloads go to the
# same tmpfs as curl's, so its fsync per file costs what it costs there; its database stays on disk.
SMALL_FILES=${SMALL_FILES:-2000}
SMALL_BYTES=16384
SMALL_CONCURRENCY=16

smallfiles_benchmark() {
  [ -n "$NGINX_PID" ] || start_nginx
  local s="$WORK/small" src="$WORK/small/src" peers="$SHM/small-peers" ours="$SHM/small-jobctl"
  local url="http://127.0.0.1:$NGINX_PORT" i k t0 t1 rc db n
  mkdir -p "$src"
  log "creating $SMALL_FILES files of $SMALL_BYTES bytes"
  "$PY" - "$src" "$SMALL_FILES" "$SMALL_BYTES" <<'EOF'
import os, sys
folder, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k in range(count):
    with open(os.path.join(folder, "f%05d.bin" % k), "wb") as f:
        f.write(os.urandom(size))
EOF
  cat "$src"/* >/dev/null   # in the page cache for every tool
  # curl's lists and jobctl's manifests, once.
  : >"$s/curl-up.cfg"; : >"$s/curl-down.cfg"
  for k in $(seq -f '%05g' 0 $((SMALL_FILES - 1))); do
    printf 'upload-file = "%s/f%s.bin"\nurl = "%s/small-curl/f%s.bin"\n' "$src" "$k" "$url" "$k" >>"$s/curl-up.cfg"
    printf 'url = "%s/small-jobctl/f%s.bin"\noutput = "%s/f%s.bin"\n' "$url" "$k" "$peers" "$k" >>"$s/curl-down.cfg"
  done
  "$PY" - "$src" "$url" "$ours" "$SMALL_FILES" "$s" <<'EOF'
import sys
src, url, ours, count, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
with open(out + "/up.yaml", "w") as f:
    f.write("jobs:\n")
    for k in range(count):
        f.write(f'  - {{kind: upload-file, source: "{src}/f{k:05d}.bin", destination: "{url}/small-jobctl/f{k:05d}.bin"}}\n')
with open(out + "/down.yaml", "w") as f:
    f.write("jobs:\n")
    for k in range(count):
        f.write(f'  - {{kind: download-file, source: "{url}/small-jobctl/f{k:05d}.bin", destination: "{ours}/f{k:05d}.bin"}}\n')
EOF
  for i in $(seq 1 "$RUNS"); do
    log "smallfiles run $i/$RUNS ($SMALL_FILES × $SMALL_BYTES bytes, concurrency $SMALL_CONCURRENCY)"
    # upload: curl, then jobctl
    rm -rf "$WWW/small-curl" "$WWW/small-jobctl"; sync
    t0=$(now_ns); rc=0
    timeout 300 curl -sf --parallel --parallel-max "$SMALL_CONCURRENCY" -K "$s/curl-up.cfg" -o /dev/null >"$s/curl.out" 2>"$s/curl.err" || rc=$?
    t1=$(now_ns)
    n=$(find "$WWW/small-curl" -type f -size "${SMALL_BYTES}c" 2>/dev/null | wc -l)
    if [ "$rc" = 0 ] && [ "$n" = "$SMALL_FILES" ]; then
      record smallfiles-up curl files_per_s "$(rate "$SMALL_FILES" "$(secs "$t0" "$t1")")"
    else fail smallfiles-up curl "exit $rc, $n files stored: $(tail_msg "$s/curl.err")"; fi
    db="$s/up-$i.db"
    sync
    if jctl "$db" submit "$s/up.yaml" >"$s/submit.out" 2>"$s/submit.err"; then
      if run_worker_timed smallfiles-up "$db" "$s/up-$i" "$SMALL_FILES" --concurrency "$SMALL_CONCURRENCY"; then
        n=$(find "$WWW/small-jobctl" -type f -size "${SMALL_BYTES}c" 2>/dev/null | wc -l)
        if [ "$n" = "$SMALL_FILES" ]; then
          record smallfiles-up jobctl files_per_s "$(rate "$SMALL_FILES" "$ELAPSED")"
          if [ -n "$RSS_KIB" ]; then record smallfiles-up jobctl rss_kib "$RSS_KIB"; fi
        else fail smallfiles-up jobctl "jobs succeeded but nginx holds $n complete files"; fi
      fi
    else fail smallfiles-up jobctl "submit failed: $(tail_msg "$s/submit.err")"; fi
    rm -f "$db" "$db"-*
    # download (of jobctl's uploads): curl, then jobctl
    rm -rf "$peers" "$ours"; mkdir -p "$peers" "$ours"; sync
    t0=$(now_ns); rc=0
    timeout 300 curl -sf --parallel --parallel-max "$SMALL_CONCURRENCY" -K "$s/curl-down.cfg" >"$s/curl.out" 2>"$s/curl.err" || rc=$?
    t1=$(now_ns)
    n=$(find "$peers" -type f -size "${SMALL_BYTES}c" | wc -l)
    if [ "$rc" = 0 ] && [ "$n" = "$SMALL_FILES" ]; then
      record smallfiles-down curl files_per_s "$(rate "$SMALL_FILES" "$(secs "$t0" "$t1")")"
    else fail smallfiles-down curl "exit $rc, $n files: $(tail_msg "$s/curl.err")"; fi
    db="$s/down-$i.db"
    sync
    if jctl "$db" submit "$s/down.yaml" >"$s/submit.out" 2>"$s/submit.err"; then
      if run_worker_timed smallfiles-down "$db" "$s/down-$i" "$SMALL_FILES" --concurrency "$SMALL_CONCURRENCY"; then
        n=$(find "$ours" -type f -size "${SMALL_BYTES}c" | wc -l)
        if [ "$n" = "$SMALL_FILES" ] && { [ "$i" != 1 ] || cmp -s "$src/f00000.bin" "$ours/f00000.bin"; }; then
          record smallfiles-down jobctl files_per_s "$(rate "$SMALL_FILES" "$ELAPSED")"
          if [ -n "$RSS_KIB" ]; then record smallfiles-down jobctl rss_kib "$RSS_KIB"; fi
        else fail smallfiles-down jobctl "jobs succeeded but $n complete files were written, or they differ"; fi
      fi
    else fail smallfiles-down jobctl "submit failed: $(tail_msg "$s/submit.err")"; fi
    rm -f "$db" "$db"-*
  done
  rm -rf "$s" "$peers" "$ours" "$WWW/small-curl" "$WWW/small-jobctl"
  stop_pid "$NGINX_PID"; NGINX_PID=""
}
