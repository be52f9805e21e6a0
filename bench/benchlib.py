#!/usr/bin/env python3
"""Small helpers for bench/run.sh where bash is awkward.

Subcommands (all output on stdout):
  freeport                              a free TCP port on 127.0.0.1
  manifest N DEST_DIR [PREFIX]          a manifest of N tiny upload-data jobs to file://DEST_DIR/PREFIXk.txt
  memory-manifest N SRC_DIR             N 64-byte objects in SRC_DIR and a manifest of N download-memory jobs of them
  transfer-manifest KIND SOURCE DEST    a manifest of one upload-file / download-file job
  summary-succeeded                     reads `jobctl worker --json` output, prints the succeeded count
  count-events DB                       rows in the events table of a jobctl database
  latency ID...                         reads `jobctl history ID --json` files named ID.json in $HISTORY_DIR,
                                        prints one claimed - submitted latency (ms) per line
  rss-kib FILE                          "Maximum resident set size" from a `/usr/bin/time -v` report
  cpu-seconds FILE                      user + system CPU seconds from a `/usr/bin/time -v` report
  report SAMPLES META OUT               renders the Markdown results from the raw samples
"""
import json
import os
import socket
import sqlite3
import statistics
import sys
from datetime import datetime


def freeport():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def yaml_quote(text):
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def manifest(n, dest_dir, prefix="job-"):
    out = ["jobs:"]
    for k in range(int(n)):
        out.append("  - kind: upload-data")
        out.append(f"    data: {yaml_quote(f'payload {k}')}")
        out.append(f"    destination: {yaml_quote('file://' + os.path.join(dest_dir, f'{prefix}{k:06d}.txt'))}")
    sys.stdout.write("\n".join(out) + "\n")


def memory_manifest(n, src_dir):
    os.makedirs(src_dir, exist_ok=True)
    out = ["jobs:"]
    for k in range(int(n)):
        path = os.path.join(src_dir, f"o-{k:06d}.bin")
        with open(path, "wb") as f:
            f.write((f"object {k:06d} " * 8)[:64].encode())
        out.append("  - kind: download-memory")
        out.append(f"    source: {yaml_quote('file://' + path)}")
    sys.stdout.write("\n".join(out) + "\n")


def transfer_manifest(kind, source, dest):
    sys.stdout.write(
        "jobs:\n"
        f"  - kind: {kind}\n"
        f"    source: {yaml_quote(source)}\n"
        f"    destination: {yaml_quote(dest)}\n"
        "    max_attempts: 1\n"
    )


def summary_succeeded():
    text = sys.stdin.read().strip()
    try:
        # the summary is the last JSON object printed
        start = text.rfind("{")
        print(int(json.loads(text[start:]).get("succeeded", -1)))
    except (ValueError, AttributeError):
        print(-1)


def count_events(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        print(con.execute("select count(*) from events").fetchone()[0])
    finally:
        con.close()


def parse_time(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000.0


def event_ms(event):
    """An event's time in milliseconds: `history --json` gives `at_ms` (and `at` as RFC 3339 text)."""
    if "at_ms" in event:
        return float(event["at_ms"])
    return parse_time(event["at"])


def latency(ids):
    folder = os.environ["HISTORY_DIR"]
    for job_id in ids:
        with open(os.path.join(folder, job_id + ".json")) as f:
            events = json.load(f)
        submitted = next((e for e in events if e["type"] == "submitted"), None)
        claimed = next((e for e in events if e["type"] == "claimed"), None)
        if submitted is None or claimed is None:
            print(f"{job_id}: no submitted/claimed pair", file=sys.stderr)
            continue
        print(f"{event_ms(claimed) - event_ms(submitted):.1f}")


def rss_kib(path):
    with open(path) as f:
        for line in f:
            if "Maximum resident set size" in line:
                print(line.rsplit(":", 1)[1].strip())
                return
    print("")


def cpu_seconds(path):
    total = 0.0
    found = 0
    with open(path) as f:
        for line in f:
            if "User time (seconds)" in line or "System time (seconds)" in line:
                total += float(line.rsplit(":", 1)[1].strip())
                found += 1
    print(f"{total:.3f}" if found == 2 else "")


# ---------------------------------------------------------------- report

def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def fmt(x, unit=""):
    if x is None or x != x:
        return "—"
    if abs(x) >= 1000:
        s = f"{x:,.0f}"
    elif abs(x) >= 100:
        s = f"{x:.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}"
    return s + (" " + unit if unit else "")


def workerstart_lines(samples):
    """The `--only workerstart` section: a worker's start and exit on logs of finished download-file jobs,
    each size against the empty log of the same run; [] when it did not run."""
    sizes = sorted({int(tool.split("-", 1)[1]) for bench, tool, _ in samples
                    if bench == "workerstart" and tool.startswith("jobctl-")})
    if not sizes:
        return []

    def med(size, metric):
        v = samples.get(("workerstart", f"jobctl-{size}", metric))
        return (statistics.median(v), len(v)) if v else (None, 0)

    base, _ = med(sizes[0], "start_s")
    lines = ["## A worker's start on a log of finished downloads", "",
             "`jobctl worker --drain` with nothing queued, on one log grown with download-file jobs (its first leftover sweep "
             "looks at final jobs that create local files): wall clock and CPU from exec to exit, medians. Target: the start "
             "does not grow with the log.", "",
             "| finished download-file jobs | start → exit | vs empty log | CPU (user + sys) |",
             "|---|---|---|---|"]
    for size in sizes:
        wall, n = med(size, "start_s")
        cpu, _ = med(size, "cpu_s")
        if wall is None:
            lines.append(f"| {size:,} | failed / not run | — | — |")
            continue
        # GNU time counts CPU in steps of 10 ms.
        cpu_text = "< 10 ms" if cpu is not None and cpu < 0.01 else (f"{cpu * 1000:.0f} ms" if cpu is not None else "—")
        lines.append(f"| {size:,} | {wall * 1000:.1f} ms (n={n}) | {wall / base:.2f}× | {cpu_text} |" if base
                     else f"| {size:,} | {wall * 1000:.1f} ms (n={n}) | — | {cpu_text} |")
    lines.append("")
    return lines


def report(samples_path, meta_path, out_path):
    samples = {}   # (bench, tool, metric) -> [values]
    failures = []
    with open(samples_path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            bench, tool, metric, value = parts[:4]
            if metric == "FAILED":
                failures.append(f"{bench} / {tool}: {value}")
                continue
            try:
                samples.setdefault((bench, tool, metric), []).append(float(value))
            except ValueError:
                pass
    meta = {}
    with open(meta_path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v

    def med(bench, tool, metric):
        v = samples.get((bench, tool, metric))
        return statistics.median(v) if v else None

    def n(bench, tool, metric):
        return len(samples.get((bench, tool, metric), []))

    def spread(bench, tool, metric):
        v = samples.get((bench, tool, metric))
        if not v:
            return ""
        return f"{fmt(min(v))}–{fmt(max(v))}"

    def ratio(a, b):
        if a is None or b is None or b == 0:
            return "—"
        return f"{a / b:.2f}×"

    size = meta.get("size_mib", "?")
    jobs = meta.get("jobs", "?")
    rows = []

    def row(what, unit, bench, jm, peer, pm=None, better="higher"):
        pm = pm or jm
        j = med(bench, "jobctl", jm)
        p = med(bench, peer, pm)
        rows.append("| {} | {} | {} | {} | {} | {} |".format(
            what,
            f"{fmt(j, unit)} <sub>({spread(bench, 'jobctl', jm)}, n={n(bench, 'jobctl', jm)})</sub>" if j is not None else "failed / not run",
            peer,
            f"{fmt(p, unit)} <sub>({spread(bench, peer, pm)}, n={n(bench, peer, pm)})</sub>" if p is not None else "failed / not run",
            ratio(j, p),
            better,
        ))

    row(f"HTTP download {size} MiB (GET from nginx)", "MB/s", "download", "mbps", "curl")
    row(f"HTTP download {size} MiB (GET from nginx)", "MB/s", "download", "mbps", "rclone")
    row(f"HTTP download {size} MiB to disk, synced", "MB/s", "download-disk", "mbps", "curl+fsync")
    row(f"HTTP upload {size} MiB (PUT to nginx)", "MB/s", "upload", "mbps", "curl")
    row(f"HTTP upload {size} MiB (PUT to nginx)", "MB/s", "upload", "mbps", "rclone")
    row(f"Local upload {size} MiB to file://", "MB/s", "local", "mbps", "cp")
    row(f"Local upload {size} MiB to file://", "MB/s", "local", "mbps", "cp+fsync")
    row(f"Enqueue {jobs} jobs", "jobs/s", "enqueue", "jobs_per_s", "huey")
    row(f"Drain {jobs} jobs", "jobs/s", "drain", "jobs_per_s", "huey")
    row(f"Drain {jobs} download-memory jobs (64 B file://), 1 worker × 64", "jobs/s", "drain-memory", "jobs_per_s", "huey")
    row(f"Drain {jobs} download-memory jobs (64 B file://), 4 workers × 16", "jobs/s", "drain-memory4", "jobs_per_s", "huey")
    row("Idle pickup latency, median", "ms", "latency", "median_ms", "huey", better="lower")
    row("Idle pickup latency, p90", "ms", "latency", "p90_ms", "huey", better="lower")
    row("2,000 × 16 KiB upload-file to nginx (PUT), concurrency 16", "files/s", "smallfiles-up", "files_per_s", "curl")
    row("2,000 × 16 KiB download-file from nginx, concurrency 16", "files/s", "smallfiles-down", "files_per_s", "curl")
    row(f"gs:// download {meta.get('sliced_mib', size)} MiB to disk, 4 slices vs one stream (nginx serving the JSON API)", "MB/s", "sliced-download", "mbps",
        "jobctl-single-stream")

    extra = []
    for bench, label in (("download", "HTTP download"), ("upload", "HTTP upload"), ("local", "local upload"),
                         ("smallfiles-up", "small-file uploads"), ("smallfiles-down", "small-file downloads")):
        v = samples.get((bench, "jobctl", "rss_kib"))
        if v:
            extra.append(f"| jobctl worker peak RSS, {label} {size} MiB | {fmt(statistics.median(v) / 1024, 'MiB')} "
                         f"(max {fmt(max(v) / 1024, 'MiB')}, n={len(v)}) | < 64 MiB |")
    ev = samples.get(("drain", "jobctl", "events_per_s"))
    if ev:
        extra.append(f"| jobctl events written per second while draining | {fmt(statistics.median(ev), 'events/s')} "
                     f"({spread('drain', 'jobctl', 'events_per_s')}, n={len(ev)}) | — |")
    epj = samples.get(("drain", "jobctl", "events_per_job"))
    if epj:
        extra.append(f"| jobctl events per job (whole history) | {fmt(statistics.median(epj))} | ≥ 3 |")
    # Issue 9 target 1: four worker processes drain no less than one. Each run drains with one worker,
    # then right after with four: a run's own ratio leaves out the machine's drift between runs.
    one = samples.get(("drain-memory", "jobctl", "jobs_per_s"))
    four = samples.get(("drain-memory4", "jobctl", "jobs_per_s"))
    if one and four:
        extra.append(f"| 4 workers × 16 ÷ 1 worker × 64, medians | {statistics.median(four) / statistics.median(one):.2f} | ≥ 1 |")
        if len(one) == len(four):
            own = [b / a for a, b in zip(one, four)]
            extra.append(f"| 4 workers × 16 ÷ 1 worker × 64, each run's own ratio | median {statistics.median(own):.2f} "
                         f"({min(own):.2f}–{max(own):.2f}, n={len(own)}) | ≥ 1 |")
    mepj = samples.get(("drain-memory", "jobctl", "events_per_job"))
    if mepj:
        extra.append(f"| jobctl events per download-memory job (whole history) | {fmt(statistics.median(mepj))} | ≥ 4 |")
    mcpu = samples.get(("drain-memory", "jobctl", "cpu_us_per_job"))
    if mcpu:
        extra.append(f"| jobctl worker CPU (user + sys) per download-memory job, 1 worker | {fmt(statistics.median(mcpu), 'µs')} "
                     f"({spread('drain-memory', 'jobctl', 'cpu_us_per_job')}, n={len(mcpu)}) | — |")
    lat = samples.get(("latency", "jobctl", "sample_ms"))
    if lat:
        extra.append(f"| jobctl idle pickup, all samples pooled | median {fmt(statistics.median(lat), 'ms')}, "
                     f"p90 {fmt(percentile(lat, 0.9), 'ms')}, max {fmt(max(lat), 'ms')} (n={len(lat)}) | ≤ 50 ms |")
    hl = samples.get(("latency", "huey", "sample_ms"))
    if hl:
        extra.append(f"| huey idle pickup, all samples pooled | median {fmt(statistics.median(hl), 'ms')}, "
                     f"p90 {fmt(percentile(hl, 0.9), 'ms')}, max {fmt(max(hl), 'ms')} (n={len(hl)}) | — |")

    lines = []
    lines.append(f"# jobctl benchmark results ({meta.get('mode', '?')} run)")
    lines.append("")
    lines.append(f"Run {meta.get('started', '?')} → {meta.get('finished', '?')} by `bench/run.sh{' --quick' if meta.get('mode') == 'quick' else ''}`"
                 f" on `{meta.get('jobctl_version', '?')}` (commit {meta.get('commit', '?')}).")
    if meta.get("runs", "5").isdigit() and int(meta.get("runs", "5")) < 5:
        lines.append("**Fewer than 5 runs: a trial, not a result.**")
        lines.append("")
    lines.append(f"{meta.get('runs', '?')} runs per benchmark, jobctl and its peer interleaved in every run; "
                 "cells are medians with (min–max, number of successful runs). MB = 10^6 bytes.")
    lines.append("")
    lines.append("| benchmark | jobctl | peer | peer result | ratio jobctl/peer | better |")
    lines.append("|---|---|---|---|---|---|")
    lines.extend(rows)
    lines.append("")
    if extra:
        lines.append("| jobctl only | result | target |")
        lines.append("|---|---|---|")
        lines.extend(extra)
        lines.append("")
    import pglib  # bench/pglib.py: the PostgreSQL section (`--only pg`)
    lines.extend(pglib.report_lines(samples, fmt, percentile))
    import bigloglib  # bench/bigloglib.py: the big log and memory sections (`--only biglog,memory`)
    lines.extend(bigloglib.report_lines(samples, fmt))
    lines.extend(workerstart_lines(samples))
    if failures:
        lines.append("## Failures")
        lines.append("")
        seen = []
        for item in failures:
            if item not in seen:
                seen.append(item)
        for item in seen:
            lines.append(f"- {item}")
        lines.append("")
    lines.append("## Machine")
    lines.append("")
    lines.append("Shared and noisy: other work may run on the same cores during a run; compare ratios, not absolutes.")
    lines.append("")
    for key, label in (("nproc", "CPUs (nproc)"), ("cpu", "CPU model"), ("memory", "memory"), ("kernel", "kernel"),
                       ("os", "OS"), ("load_start", "load average at start"), ("load_end", "load average at end"),
                       ("swift", "swift"), ("curl", "curl"), ("nginx", "nginx"), ("rclone", "rclone"),
                       ("huey", "huey"), ("python", "python"), ("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        lines.append(f"- {label}: {meta.get(key, '?')}")
    lines.append("")
    lines.append("## Raw samples")
    lines.append("")
    lines.append("| benchmark | tool | metric | values (run order) |")
    lines.append("|---|---|---|---|")
    for (bench, tool, metric), values in samples.items():
        if metric == "sample_ms":
            continue
        lines.append(f"| {bench} | {tool} | {metric} | {', '.join(fmt(v) for v in values)} |")
    lines.append("")
    text = "\n".join(lines)
    with open(out_path, "w") as f:
        f.write(text)
    print(text)


def main(argv):
    if not argv:
        print(__doc__)
        return 64
    cmd, args = argv[0], argv[1:]
    if cmd == "freeport":
        freeport()
    elif cmd == "manifest":
        manifest(*args)
    elif cmd == "memory-manifest":
        memory_manifest(*args)
    elif cmd == "transfer-manifest":
        transfer_manifest(*args)
    elif cmd == "summary-succeeded":
        summary_succeeded()
    elif cmd == "count-events":
        count_events(args[0])
    elif cmd == "latency":
        latency(args)
    elif cmd == "rss-kib":
        rss_kib(args[0])
    elif cmd == "cpu-seconds":
        cpu_seconds(args[0])
    elif cmd == "report":
        report(*args)
    else:
        print(f"unknown subcommand {cmd}", file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
