-- jobctl event store, schema version 13: the sweep watermark, one for each host.
--
-- Schema 12's one watermark said how far the leftover sweeps had read, whichever machine swept. The files a
-- sweep removes are on the disk of the machine it runs on: with workers on several machines sharing one
-- log (PostgreSQL), a sweep on one machine raised the watermark past jobs whose partial downloads lay on
-- another, and that machine's next worker started reading after them and never removed those files.
--
-- One row for each host (its name, as `hostname` prints it): where the last complete sweep on that host
-- stopped. A worker's first sweep reads from its own host's row, or every final job when its host has
-- none. Schema 12's row is dropped rather than given to a host: the migration cannot tell which one
-- swept, and a host without a row only reads every final job once, as every worker's start did before
-- schema 12.
--
-- Housekeeping, not history: not an event, so `jobctl replay` neither reads nor rewrites it.
CREATE TABLE IF NOT EXISTS sweep_watermarks (
    host     TEXT    PRIMARY KEY,
    position INTEGER NOT NULL
);

DROP TABLE IF EXISTS sweep_watermark;
