-- jobctl event store on PostgreSQL, schema version 14: the sweep watermark, one for each host (the twin
-- of SQLite's migration 13).
--
-- Schema 13's one watermark said how far the leftover sweeps had read, whichever machine swept. The files a
-- sweep removes are on the disk of the machine it runs on: with workers on several machines sharing this
-- log, a sweep on one machine raised the watermark past jobs whose partial downloads lay on another, and
-- that machine's next worker started reading after them and never removed those files.
--
-- One row for each host (its name, as `hostname` prints it): the finish time up to which the last
-- complete sweep on that host looked. A worker's first sweep reads from its own host's row, or every
-- final job when its host has none. Schema 13's row is dropped rather than given to a host: the migration
-- cannot tell which one swept, and a host without a row only reads every final job once, as every
-- worker's start did before schema 13. Worker roles may read, insert and update it (it is not the log).
--
-- Housekeeping, not history: not an event, so `jobctl replay` neither reads nor rewrites it.
CREATE TABLE IF NOT EXISTS sweep_watermarks (
    host     text   PRIMARY KEY,
    position bigint NOT NULL
);

DROP TABLE IF EXISTS sweep_watermark;
