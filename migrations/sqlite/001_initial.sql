-- jobctl event store, schema version 1.
-- The event log is the truth; `jobs` is a projection that `jobctl replay` rebuilds from it.

-- The append-only log: one row per fact, numbered globally (seq) and per job (version).
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY,
    job_id  TEXT    NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    type    TEXT    NOT NULL,
    at_ms   INTEGER NOT NULL,
    actor   TEXT    NOT NULL,
    lease   INTEGER,               -- the fencing token the appending worker held
    data    TEXT    NOT NULL,      -- JSON (EventData, sorted keys)
    UNIQUE (job_id, version)
);

CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE is refused');
END;

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE is refused');
END;

-- The projection: exactly one serialised JobRecord per job.
CREATE TABLE jobs (
    id               TEXT    PRIMARY KEY,
    seq              INTEGER NOT NULL,     -- seq of the submitted event (first come, first served)
    kind             TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'paused', 'succeeded', 'failed', 'cancelled')),
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
    result           TEXT,                 -- JSON
    spec             TEXT    NOT NULL,     -- JSON
    idempotency_key  TEXT    UNIQUE,
    pause_requested  INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL,
    version          INTEGER NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    started_at_ms    INTEGER,
    finished_at_ms   INTEGER
);

CREATE INDEX jobs_claim ON jobs (state, queue, priority DESC, run_after_ms, seq);
CREATE INDEX jobs_created ON jobs (created_at_ms, seq);
CREATE INDEX jobs_finished ON jobs (finished_at_ms) WHERE finished_at_ms IS NOT NULL;

-- Live leases. Heartbeats extend expires_at_ms without appending events, so the expiry is kept
-- here rather than in the verified projection. No foreign key: replay may rewrite `jobs`.
CREATE TABLE leases (
    job_id        TEXT    PRIMARY KEY,
    owner         TEXT    NOT NULL,
    token         INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);

CREATE INDEX leases_expiry ON leases (expires_at_ms);

-- Fencing tokens only grow, across all jobs and all processes.
CREATE TABLE lease_counter (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    last_token INTEGER NOT NULL
);

INSERT INTO lease_counter (id, last_token) VALUES (1, 0);

-- Content-addressed, immutable bytes (download-memory results), referenced by sha256 from events.
CREATE TABLE blobs (
    sha256 TEXT    PRIMARY KEY,
    size   INTEGER NOT NULL,
    data   BLOB    NOT NULL
);

CREATE TRIGGER blobs_refuse_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'blobs are immutable: UPDATE is refused');
END;
