-- jobctl event store, schema version 9: conditions a worker's writes evaluate, as comparisons instead of
-- IN lists.
--
-- An IN list of more than two constants that SQLite evaluates outside a WHERE clause becomes a
-- temporary b-tree, built anew on every execution (OpenEphemeral: a fresh in-memory b-tree, two zeroed
-- pages, the names inserted one by one). Two conditions did that on the worker's path:
--
-- - the outcome index's condition, checked for every row inserted into `events` (three a job while a
--   worker drains);
-- - the CHECK on `jobs.state`, checked on every UPDATE that changes the state (the claim and the
--   outcome: two a job).
--
-- Together about a tenth of a download-memory job's instructions, on the store's executor thread. The
-- same conditions spelt as comparisons compile to a few jumps and accept exactly the same values.
--
-- The stats query names the outcome condition exactly as written here (`EventStore.recentOutcomesSQL`):
-- SQLite uses a partial index only for a query whose WHERE clause contains the index's condition.
--
-- A CHECK cannot be changed in place: `jobs` is rebuilt (same columns in the same order, same rowids,
-- same indexes), as https://www.sqlite.org/lang_altertable.html#otheralter describes. No trigger, view
-- or foreign key names `jobs`. `jobctl replay --verify` is unaffected: every stored value is copied.
DROP INDEX IF EXISTS events_outcomes_at;
CREATE INDEX events_outcomes_at ON events (at_ms) WHERE (type = 'succeeded' OR type = 'failed' OR type = 'attempt_failed');

CREATE TABLE jobs_009 (
    id               TEXT    PRIMARY KEY,
    seq              INTEGER NOT NULL,     -- seq of the submitted event (first come, first served)
    kind             TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'paused'
                                             OR state = 'succeeded' OR state = 'failed' OR state = 'cancelled'),
    queue            TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    run_after_ms     INTEGER NOT NULL,
    attempts         INTEGER NOT NULL,
    max_attempts     INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_token      INTEGER,
    bytes_done       INTEGER NOT NULL,
    bytes_total      INTEGER,
    resume_point     TEXT,                 -- JSON
    error            TEXT,                 -- JSON
    idempotency_key  TEXT    UNIQUE,
    pause_requested  INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL,
    version          INTEGER NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    started_at_ms    INTEGER,
    finished_at_ms   INTEGER,
    batch            TEXT
);
INSERT INTO jobs_009 (rowid, id, seq, kind, state, queue, priority, run_after_ms, attempts, max_attempts, lease_owner,
                      lease_token, bytes_done, bytes_total, resume_point, error, idempotency_key, pause_requested,
                      cancel_requested, version, created_at_ms, updated_at_ms, started_at_ms, finished_at_ms, batch)
    SELECT rowid, id, seq, kind, state, queue, priority, run_after_ms, attempts, max_attempts, lease_owner,
           lease_token, bytes_done, bytes_total, resume_point, error, idempotency_key, pause_requested,
           cancel_requested, version, created_at_ms, updated_at_ms, started_at_ms, finished_at_ms, batch
    FROM jobs ORDER BY rowid;
DROP TABLE jobs;
ALTER TABLE jobs_009 RENAME TO jobs;
CREATE INDEX jobs_claim ON jobs (state, queue, priority DESC, run_after_ms, seq);
CREATE INDEX jobs_created ON jobs (created_at_ms, seq);
CREATE INDEX jobs_finished ON jobs (finished_at_ms) WHERE finished_at_ms IS NOT NULL;
CREATE INDEX jobs_batch ON jobs (batch, created_at_ms, seq) WHERE batch IS NOT NULL;
CREATE INDEX jobs_finished_by_kind ON jobs (kind, finished_at_ms) WHERE finished_at_ms IS NOT NULL;
CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued';
