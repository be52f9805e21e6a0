#!/usr/bin/env python3
"""The big log (`--only biglog`) and worker memory (`--only memory`) sections of
bench/results/latest.md, from the samples bench/biglog_bench.sh recorded."""
import statistics


def report_lines(samples, fmt):
    """Markdown lines for the two sections, or [] when `--only` left them out."""
    def one(bench, tool, metric):
        v = samples.get((bench, tool, metric))
        return statistics.median(v) if v else None

    lines = []
    for engine, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        bench = f"biglog-{engine}"
        tools = sorted({tool for b, tool, _ in samples if b == bench and tool.startswith("jobctl-")},
                       key=lambda t: int(t.split("-", 1)[1]))
        if not tools:
            continue
        base = one(bench, tools[0], "probe_jobs_per_s")
        lines += [f"## A big log on {label}", "",
                  "One log grown chunk by chunk (submit + `worker --drain --concurrency 64` of download-memory jobs); at each "
                  "size: the drain rate of 5,000 more jobs (vs the rate on an empty log) and the worker's CPU per probe job, the size per finished job, "
                  "then audit, replay --verify and stats with their peak RSS and their rate per second of jobctl's own CPU. Targets: audit ≥ 100,000 rows/s, replay "
                  "≥ 200,000 events/s, both < 64 MiB; drain within 20 % of the empty log's.", "",
                  "| finished jobs | events | bytes / job | probe drain jobs/s (vs empty) | audit --json rows/s (RSS) "
                  "| audit --csv rows/s (RSS) | audit table rows/s (RSS) | replay --verify events/s (RSS) | stats |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for tool in tools:
            probe = one(bench, tool, "probe_jobs_per_s")
            ratio = f" ({probe / base:.2f}×)" if probe and base else ""
            # The worker's CPU per probe job (µs): steadier than the wall clock on a shared machine.
            probe_cpu = one(bench, tool, "probe_cpu_us_per_job")
            if probe_cpu:
                base_cpu = one(bench, tools[0], "probe_cpu_us_per_job")
                ratio += f"; {fmt(probe_cpu)} µs of CPU per job" + (f" ({probe_cpu / base_cpu:.2f}×)" if base_cpu else "")

            def timed(label, unit):
                r, m = one(bench, tool, f"{label}_per_s"), one(bench, tool, f"{label}_rss_kib")
                if r is None:
                    return "failed / not run"
                # The rate per second of jobctl's own CPU (user + sys): steadier than the wall clock under load.
                c = one(bench, tool, f"{label}_per_cpu_s")
                per_cpu = f"; {fmt(c, unit)} of CPU" if c else ""
                return f"{fmt(r, unit)} ({fmt(m / 1024, 'MiB') if m else '?'}{per_cpu})"
            stats = one(bench, tool, "stats_s")
            lines.append(f"| {fmt(one(bench, tool, 'jobs'))} | {fmt(one(bench, tool, 'events'))} "
                         f"| {fmt(one(bench, tool, 'bytes_per_job'), 'B')} | {fmt(probe)}{ratio} "
                         f"| {timed('audit_json', 'rows/s')} | {timed('audit_csv', 'rows/s')} | {timed('audit_table', 'rows/s')} "
                         f"| {timed('replay', 'events/s')} | {fmt(stats * 1000, 'ms') if stats is not None else '—'} |")
        lines.append("")

    rows = []
    for tool, label, metric, unit in (("jobctl-download-memory", "download-memory of 5,000 × 64 B `file://` objects, concurrency 64", "jobs_per_s", "jobs/s"),
                                      ("jobctl-upload-file", "upload-file of 5,000 × 16 KiB files to `file://`, concurrency 64", "jobs_per_s", "jobs/s"),
                                      ("jobctl-1gib", "upload-file of one 1 GiB file to `file://`", "mbps", "MB/s")):
        rss = samples.get(("memory", tool, "rss_kib"))
        if not rss:
            continue
        rate = one("memory", tool, metric)
        rows.append(f"| {label} | {fmt(statistics.median(rss) / 1024, 'MiB')} (max {fmt(max(rss) / 1024, 'MiB')}, n={len(rss)}) "
                    f"| {fmt(rate, unit) if rate else '—'} | < 64 MiB |")
    if rows:
        lines += ["## Worker memory", "", "| worker | peak RSS | rate | target |", "|---|---|---|---|"] + rows + [""]
    return lines
