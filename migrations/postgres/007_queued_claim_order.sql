-- jobctl event store on PostgreSQL, schema version 7: nothing to change.
--
-- SQLite's migration 7 adds the partial index of queued jobs in claim order that PostgreSQL has had
-- since migration 002 (`jobs_queued_claim_order`); the engines keep their version numbers in step, so
-- this one only makes sure the index is there.
CREATE INDEX IF NOT EXISTS jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued';
