-- The ceiling peer of bench/pg_bench.sh: the least a durable PostgreSQL queue must write for one job,
-- on the same server and with the same durability as jobctl (synchronous_commit on, fsync on).
--
-- A job row with its state, lease token and version (as River and graphile-worker keep them), the
-- queued jobs' claim order as a partial index, and an append-only event log with the per-job version
-- unique, as jobctl's `events`. No triggers, no projection columns beyond what the claim needs, no
-- lease table, no blobs: whatever jobctl spends above this is its own.
CREATE SEQUENCE peer_tokens AS bigint MINVALUE 1 NO CYCLE;
CREATE TABLE peer_jobs (
    id             bigint PRIMARY KEY,
    state          text   NOT NULL,
    priority       bigint NOT NULL,
    run_after_ms   bigint NOT NULL,
    attempts       bigint NOT NULL,
    version        bigint NOT NULL,
    lease_token    bigint,
    spec           text   NOT NULL,
    updated_at_ms  bigint NOT NULL
);
CREATE INDEX peer_jobs_queued ON peer_jobs (priority DESC, run_after_ms, id) WHERE state = 'queued';
CREATE TABLE peer_events (
    seq     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id  bigint  NOT NULL,
    version integer NOT NULL,
    type    text    NOT NULL,
    at_ms   bigint  NOT NULL,
    lease   bigint,
    data    text    NOT NULL,
    UNIQUE (job_id, version)
);
CREATE FUNCTION peer_now_ms() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
