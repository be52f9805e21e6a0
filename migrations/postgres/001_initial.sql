-- jobctl event store on PostgreSQL, schema version 1: the SQLite schema (migrations/sqlite/, as of its
-- version 2) in PostgreSQL's terms. The event log is the truth; `jobs` is a projection that
-- `jobctl replay` rebuilds from it.
--
-- Differences from SQLite, and why:
-- * 64-bit columns are bigint; `pause_requested` / `cancel_requested` are boolean.
-- * Fencing tokens come from the sequence `lease_tokens` instead of a one-row counter table: a
--   sequence only grows, is never rolled back, and hands out values without a row lock.
-- * `events.data` stays text, not jsonb: jsonb reorders keys and rewrites spacing, and the log must
--   hold the exact bytes that were appended.
-- * `events.seq` is an identity column: unique and increasing in the order values are taken, but a
--   transaction that takes a smaller seq may commit after one that took a larger one, and a rolled
--   back append leaves a gap. Readers that follow the log by seq must allow for both.
-- * TRUNCATE is refused on `events` as well (SQLite has no TRUNCATE).

-- The append-only log: one row per fact, numbered globally (seq) and per job (version).
CREATE TABLE events (
    seq     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id  text    NOT NULL,
    version integer NOT NULL CHECK (version >= 1),
    type    text    NOT NULL,
    at_ms   bigint  NOT NULL,
    actor   text    NOT NULL,
    lease   bigint,                -- the fencing token the appending worker held
    data    text    NOT NULL,      -- JSON (EventData, sorted keys), byte for byte as appended
    UNIQUE (job_id, version)
);

CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: % is refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'the log is never changed; append a new event instead';
END;
$$;

CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();

CREATE TRIGGER events_refuse_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- The projection: exactly one serialised JobRecord per job.
CREATE TABLE jobs (
    id               text    PRIMARY KEY,
    seq              bigint  NOT NULL,     -- seq of the submitted event (first come, first served)
    kind             text    NOT NULL,
    state            text    NOT NULL CHECK (state IN ('queued', 'running', 'paused', 'succeeded', 'failed', 'cancelled')),
    queue            text    NOT NULL,
    priority         bigint  NOT NULL,
    run_after_ms     bigint  NOT NULL,
    attempts         bigint  NOT NULL,
    max_attempts     bigint  NOT NULL,
    lease_owner      text,
    lease_token      bigint,
    bytes_done       bigint  NOT NULL,
    bytes_total      bigint,
    resume_point     text,                 -- JSON
    error            text,                 -- JSON
    result           text,                 -- JSON
    spec             text    NOT NULL,     -- JSON
    idempotency_key  text    UNIQUE,
    pause_requested  boolean NOT NULL,
    cancel_requested boolean NOT NULL,
    version          bigint  NOT NULL,
    created_at_ms    bigint  NOT NULL,
    updated_at_ms    bigint  NOT NULL,
    started_at_ms    bigint,
    finished_at_ms   bigint
);

-- The claim order: priority (highest first), run_after, then submission order.
CREATE INDEX jobs_claim ON jobs (state, queue, priority DESC, run_after_ms, seq);
CREATE INDEX jobs_created ON jobs (created_at_ms, seq);
CREATE INDEX jobs_finished ON jobs (finished_at_ms) WHERE finished_at_ms IS NOT NULL;

-- Live leases. Heartbeats extend expires_at_ms without appending events, so the expiry is kept
-- here rather than in the verified projection. No foreign key: replay may rewrite `jobs`.
CREATE TABLE leases (
    job_id        text   PRIMARY KEY,
    owner         text   NOT NULL,
    token         bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);

CREATE INDEX leases_expiry ON leases (expires_at_ms);

-- Fencing tokens only grow, across all jobs, processes and machines (NO CYCLE: running out is an
-- error, never a wrap-around).
CREATE SEQUENCE lease_tokens AS bigint MINVALUE 1 START WITH 1 NO CYCLE;

-- Content-addressed, immutable bytes (download-memory results), referenced by sha256 from events.
CREATE TABLE blobs (
    sha256 text   PRIMARY KEY,
    size   bigint NOT NULL CHECK (size = octet_length(data)),
    data   bytea  NOT NULL
);

CREATE FUNCTION blobs_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'blobs are immutable: UPDATE is refused'
        USING ERRCODE = 'restrict_violation',
              HINT = 'store the new bytes as a new blob under their own sha256';
END;
$$;

CREATE TRIGGER blobs_refuse_update BEFORE UPDATE ON blobs
    FOR EACH ROW EXECUTE FUNCTION blobs_refuse_update();
