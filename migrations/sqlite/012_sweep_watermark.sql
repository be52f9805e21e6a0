-- jobctl event store, schema version 12: how far the leftover sweeps have read.
--
-- Every worker, as it starts, sweeps the hidden files final jobs left on local disk (partial downloads,
-- `file://` upload sessions). Its first sweep read every final download-file job and every final upload
-- to `file://` the log ever held: an `lstat` or a JSON read a job, so 100,000 finished downloads added
-- ~1 s to each worker's start, a cost that grew with the log and that every worker process paid again.
-- Only jobs that became final since the last complete sweep can have left anything new.
--
-- One row: the seq of the newest event the last complete sweep's snapshot held (the highest any sweep
-- reached: it only grows). SQLite commits one writer at a time, in seq order, so every job that was final
-- there was looked at, and one that becomes final later has an event above it: a worker's first sweep
-- reads the jobs with an event above it instead of every final job. `jobctl orphans` still reads them all.
--
-- Housekeeping, not history: not an event, so `jobctl replay` neither reads nor rewrites it.
CREATE TABLE IF NOT EXISTS sweep_watermark (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    position INTEGER NOT NULL
);
