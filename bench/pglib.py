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

def ceiling_lines(values):
    """What the peer's CPU per job allows on this machine's cores, and jobctl's distance from it."""
    peer = values("pgdrain", "peer-4", "cpu_ms_per_job")
    ours = values("pgdrain", "postgres-4", "cpu_ms_per_job")
    if not peer:
        return []
    cores = os.cpu_count() or 1
    peer_ms = statistics.median(peer)
    out = ["", f"Ceiling: the peer spends {peer_ms:.3f} ms of CPU per job (4 clients, client + server), so "
               f"{cores} cores allow at most ~{cores * 1000 / peer_ms:,.0f} jobs/s"
               f" ({cores * 1000 / peer_ms / 10000:.0%} of the 10,000 jobs/s aim)"]
    if ours:
        ours_ms = statistics.median(ours)
        out[-1] += (f"; jobctl with 4 processes spends {ours_ms:.3f} ms, {ours_ms / peer_ms:.1f}× the peer, "
                    f"which allows ~{cores * 1000 / ours_ms:,.0f} jobs/s")
        server, peer_server = values("pgdrain", "postgres-4", "server_ms_per_job"), values("pgdrain", "peer-4", "server_ms_per_job")
        if server and peer_server:
            out[-1] += (f"; server CPU per job {statistics.median(server):.3f} ms against the peer's "
                        f"{statistics.median(peer_server):.3f} ms")
    out[-1] += "."
    return out


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
                        ("postgres-2", "PostgreSQL, 2 worker processes"), ("postgres-4", "PostgreSQL, 4 worker processes"),
                        ("peer-1", "ceiling peer: minimal SQL, 1 pgbench client"),
                        ("peer-4", "ceiling peer: minimal SQL, 4 pgbench clients")):
        jobs = values("pgdrain", tool, "jobs_per_s")
        if not jobs and tool != "sqlite-1":
            continue
        ratio = f"{statistics.median(jobs) / base_median:.2f}×" if jobs and base_median else "—"
        wcpu, scpu = values("pgdrain", tool, "worker_cpu_s"), values("pgdrain", tool, "server_cpu_s")
        per_job = values("pgdrain", tool, "cpu_ms_per_job")
        server_per_job = values("pgdrain", tool, "server_ms_per_job")
        rows.append(f"| {label} | {cell(jobs, 'jobs/s')} | {ratio} | {cell(values('pgdrain', tool, 'events_per_s'), 'events/s')} "
                    f"| {fmt(statistics.median(wcpu), 's') if wcpu else '—'} | {fmt(statistics.median(scpu), 's') if scpu else '—'} "
                    f"| {f'{statistics.median(server_per_job):.3f} ms' if server_per_job else '—'} "
                    f"| {f'{statistics.median(per_job):.3f} ms' if per_job else '—'} |")
    if not any(bench in ("pgdrain", "pglatency") for bench, _, _ in samples):
        return []
    lines = ["## PostgreSQL", "",
             "Drain of the same download-memory jobs (64-byte `file://` objects), `jobctl worker --drain --concurrency 16` "
             "per process; ratio = jobs/s ÷ SQLite's of the same run. CPU: user + system seconds of all worker "
             "processes, and of the PostgreSQL server (postmaster, its backends and helpers) during the drain; "
             "per job: both together, divided by the jobs.", "",
             "The ceiling peer does the least durable SQL for the same jobs (bench/pg_peer_drain.pgbench: "
             "claim 16 with FOR UPDATE SKIP LOCKED, then claimed / started / succeeded as event rows and job-row "
             "updates, three synchronous commits per batch); its worker CPU is pgbench's.", "",
             "| drain | jobs/s | vs SQLite | events/s | worker CPU | server CPU | server CPU per job | CPU per job |",
             "|---|---|---|---|---|---|---|---|"]
    lines += rows
    lines += ceiling_lines(values)
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
