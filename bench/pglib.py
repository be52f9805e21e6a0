#!/usr/bin/env python3
"""Helpers for bench/pg_bench.sh (jobctl on PostgreSQL), and its section of the report.

Subcommands (all output on stdout):
  objects DIR N                 N distinct 64-byte files DIR/o0.bin … DIR/o{N-1}.bin
  memory-manifest N DIR         a manifest of N download-memory jobs, one per object of DIR
  pg-cpu PID                    CPU seconds (user + system) of the postmaster PID, its exited children
                                (backends of closed sessions) and its live children
  cpu-secs FILE...              user + system seconds summed over `/usr/bin/time -v` reports
  summary-events FILE...        events_written summed over `jobctl worker --json` outputs
  pickup HISTORY_DIR ID...      per probe: submitted → claimed and submitted → started, in ms
"""
import json
import os
import statistics
import sys


def objects(folder, n):
    os.makedirs(folder, exist_ok=True)
    for k in range(int(n)):
        with open(os.path.join(folder, f"o{k}.bin"), "wb") as f:
            f.write(f"object {k:010d} ".encode().ljust(64, b"."))


def memory_manifest(n, folder):
    out = ["jobs:"]
    for k in range(int(n)):
        out.append("  - kind: download-memory")
        out.append(f"    source: {json.dumps('file://' + os.path.join(folder, f'o{k}.bin'))}")
        out.append("    max_size: 1KiB")
    sys.stdout.write("\n".join(out) + "\n")


def _ticks(pid, with_children):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime, stime, cutime, cstime are fields 14-17.
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return utime + stime + (cutime + cstime if with_children else 0)


def pg_cpu(pid):
    total = _ticks(pid, True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == int(pid):
                total += _ticks(entry, False)
        except (OSError, ValueError):
            continue
    print(f"{total / os.sysconf('SC_CLK_TCK'):.2f}")


def cpu_secs(paths):
    total = 0.0
    for path in paths:
        with open(path) as f:
            for line in f:
                if "User time (seconds)" in line or "System time (seconds)" in line:
                    total += float(line.rsplit(":", 1)[1])
    print(f"{total:.2f}")


def summary_events(paths):
    total = 0
    for path in paths:
        text = open(path).read().strip()
        start = text.rfind("{")
        try:
            total += int(json.loads(text[start:]).get("events_written", 0))
        except ValueError:
            return
    print(total)


def pickup(folder, ids):
    for job_id in ids:
        with open(os.path.join(folder, job_id + ".json")) as f:
            events = json.load(f)
        first = {}
        for e in events:
            first.setdefault(e["type"], e)
        if not all(t in first for t in ("submitted", "claimed", "started")):
            print(f"{job_id}: no submitted/claimed/started events", file=sys.stderr)
            continue
        submitted = first["submitted"]["at_ms"]
        print(f"{first['claimed']['at_ms'] - submitted} {first['started']['at_ms'] - submitted}")


# ---------------------------------------------------------------- report

def report_lines(samples, fmt, percentile):
    """The PostgreSQL section of bench/results/latest.md, or [] when `--only` left it out."""
    def values(bench, tool, metric):
        return samples.get((bench, tool, metric), [])

    def cell(v, unit):
        if not v:
            return "failed / not run"
        return f"{fmt(statistics.median(v), unit)} <sub>({fmt(min(v))}–{fmt(max(v))}, n={len(v)})</sub>"

    base = values("pgdrain", "sqlite-1", "jobs_per_s")
    base_median = statistics.median(base) if base else None
    rows = []
    for tool, label in (("sqlite-1", "SQLite, 1 worker process"), ("postgres-1", "PostgreSQL, 1 worker process"),
                        ("postgres-2", "PostgreSQL, 2 worker processes"), ("postgres-4", "PostgreSQL, 4 worker processes")):
        jobs = values("pgdrain", tool, "jobs_per_s")
        if not jobs and tool != "sqlite-1":
            continue
        ratio = f"{statistics.median(jobs) / base_median:.2f}×" if jobs and base_median else "—"
        wcpu, scpu = values("pgdrain", tool, "worker_cpu_s"), values("pgdrain", tool, "server_cpu_s")
        per_job = values("pgdrain", tool, "cpu_ms_per_job")
        rows.append(f"| {label} | {cell(jobs, 'jobs/s')} | {ratio} | {cell(values('pgdrain', tool, 'events_per_s'), 'events/s')} "
                    f"| {fmt(statistics.median(wcpu), 's') if wcpu else '—'} | {fmt(statistics.median(scpu), 's') if scpu else '—'} "
                    f"| {f'{statistics.median(per_job):.3f} ms' if per_job else '—'} |")
    if not any(bench in ("pgdrain", "pglatency") for bench, _, _ in samples):
        return []
    lines = ["## PostgreSQL", "",
             "Drain of the same download-memory jobs (64-byte `file://` objects), `jobctl worker --drain --concurrency 16` "
             "per process; ratio = jobs/s ÷ SQLite's of the same run. CPU: user + system seconds of all worker "
             "processes, and of the PostgreSQL server (postmaster, its backends and helpers) during the drain; "
             "per job: both together, divided by the jobs.", "",
             "| drain | jobs/s | vs SQLite | events/s | worker CPU | server CPU | CPU per job |", "|---|---|---|---|---|---|---|"]
    lines += rows
    enq = values("pgenqueue", "postgres", "jobs_per_s")
    if enq:
        lines += ["", f"Submit into PostgreSQL (one `jobctl submit` of the whole manifest): {cell(enq, 'jobs/s')}."]
    lat_rows = []
    for tool in ("postgres", "sqlite"):
        for metric, label in (("claim_ms", "submit → claimed"), ("start_ms", "submit → started")):
            v = values("pglatency", tool, metric)
            if v:
                lat_rows.append(f"| {tool} | {label} | {fmt(statistics.median(v), 'ms')} | {fmt(percentile(v, 0.9), 'ms')} "
                                f"| {fmt(max(v), 'ms')} | {len(v)} |")
    if lat_rows:
        lines += ["", "Idle worker (`--concurrency 4`), one-job submits 200 ms apart, all runs' probes pooled:", "",
                  "| engine | latency | median | p90 | max | n |", "|---|---|---|---|---|---|"] + lat_rows
    lines.append("")
    return lines


def main(argv):
    if not argv:
        print(__doc__)
        return 64
    cmd, args = argv[0], argv[1:]
    if cmd == "objects":
        objects(*args)
    elif cmd == "memory-manifest":
        memory_manifest(*args)
    elif cmd == "pg-cpu":
        pg_cpu(args[0])
    elif cmd == "cpu-secs":
        cpu_secs(args)
    elif cmd == "summary-events":
        summary_events(args)
    elif cmd == "pickup":
        pickup(args[0], args[1:])
    else:
        print(f"unknown subcommand {cmd}", file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
