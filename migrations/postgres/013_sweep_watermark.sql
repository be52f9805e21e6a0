-- jobctl event store on PostgreSQL, schema version 13: how far the leftover sweeps have read (the twin of
-- SQLite's migration 12).
--
-- Every worker, as it starts, sweeps the hidden files final jobs left on local disk (partial downloads,
-- `file://` upload sessions). Its first sweep read every final download-file job and every final upload
-- to `file://` the log ever held, a cost that grew with the log and that every worker process paid at
-- start. Only jobs that became final since the last complete sweep can have left anything new.
--
-- One row: a finish time (ms since 1970) up to which every final job that creates local files was looked
-- at by a sweep that completed — its start less a minute, since commits here do not come in seq order and
-- a final event may commit a little after the time it carries. It only grows; a worker's first sweep
-- reads from it. Worker roles may read, insert and update it (it is not the log).
--
-- Housekeeping, not history: not an event, so `jobctl replay` neither reads nor rewrites it.
CREATE TABLE IF NOT EXISTS sweep_watermark (
    id       integer PRIMARY KEY CHECK (id = 1),
    position bigint  NOT NULL
);
