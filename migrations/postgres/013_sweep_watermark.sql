-- jobctl event store on PostgreSQL, schema version 13: how far back the leftover sweeps have looked (the
-- twin of SQLite's migration 12).
--
-- Every worker, as it starts, sweeps the hidden files final jobs left on local disk (partial downloads,
-- `file://` upload sessions). Its first sweep looked at every final download-file job and every final
-- upload to `file://` the log ever held, a cost that grew with the log and that every worker process
-- paid at start. Only jobs finished since the last complete sweep can have left anything new.
--
-- One row: every final job that creates local files and finished before `finished_before_ms` (ms since
-- 1970) was looked at by a sweep that completed. A sweep that completes raises it (never lowers it) to
-- its own start less the minute sweeps overlap by; a worker's first sweep starts there. Worker roles get
-- it with the projection's privileges (it is not the log).
--
-- Housekeeping, not history: not an event, so `jobctl replay` neither reads nor rewrites it.
CREATE TABLE IF NOT EXISTS sweep_watermark (
    id                 integer PRIMARY KEY CHECK (id = 1),
    finished_before_ms bigint  NOT NULL
);
