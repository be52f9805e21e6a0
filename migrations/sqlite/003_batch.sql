-- jobctl event store, schema version 3: the batch a job was expanded in.
--
-- One manifest entry naming a folder, a glob or a prefix becomes one job per file or object, all
-- sharing a batch id recorded in each job's `submitted` event (spec.batch.id). `jobs.batch` is that id,
-- so `list`, `audit`, `watch` and the control commands can select a batch (`--batch ID`).
--
-- The event log does not change, and no job logged before this version has a batch: the column starts
-- NULL for every existing row, which is what the fold gives them, so `jobctl replay --verify` holds.

ALTER TABLE jobs ADD COLUMN batch TEXT;

CREATE INDEX jobs_batch ON jobs (batch, created_at_ms, seq) WHERE batch IS NOT NULL;
