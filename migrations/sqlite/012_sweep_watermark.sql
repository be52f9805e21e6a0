-- jobctl event store, schema version 12: how far back the leftover sweeps have looked.
--
-- Every worker, as it starts, sweeps the hidden files final jobs left on local disk (partial downloads,
-- `file://` upload sessions). Its first sweep looked at every final download-file job and every final
-- upload to `file://` the log ever held: an `lstat` or a JSON read a job, so 20,000 finished downloads
-- added ~170 ms to each worker's start, a cost that grew with the log and that every worker process paid
-- again. Only jobs finished since the last complete sweep can have left anything new.
--
-- One row: every final job that creates local files and finished before `finished_before_ms` (ms since
-- 1970) was looked at by a sweep that completed. A sweep that completes raises it (never lowers it) to
-- its own start less the minute sweeps overlap by; a worker's first sweep starts there instead of at the
-- beginning of the log. `jobctl orphans` still looks at every final job.
--
-- Housekeeping, not history: not an event, so `jobctl replay` neither reads nor rewrites it.
CREATE TABLE IF NOT EXISTS sweep_watermark (
    id                 INTEGER PRIMARY KEY CHECK (id = 1),
    finished_before_ms INTEGER NOT NULL
);
