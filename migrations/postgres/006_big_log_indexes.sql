-- jobctl event store, schema version 6: a big log read by index, not by scanning.
--
-- `jobctl stats` folds the outcome events (succeeded, failed, attempt_failed) of the last hour into
-- its last-minute and last-hour windows. Without an index on `at_ms` that read scans the whole log, so
-- its cost grew with the log (seconds at millions of events) instead of with the last hour's work.
-- The index is partial: it holds only outcome events (about one per job; `submitted`, `claimed`,
-- `started` and `progress` events stay out), so it adds a few bytes per job and nothing to the appends
-- of other events. Its WHERE clause is the stats query's, word for word, so the planner can use it.
--
-- The orphan sweep (at every worker's start, every 5 minutes, and before a draining worker exits) reads
-- the finished jobs that create local files (download-file; uploads to `file://`) and the resume points
-- of unfinished jobs. It walked every finished job (and every job) to find them: at a million finished
-- jobs every worker start stalled the store for seconds. `jobs_finished_by_kind` finds the finished jobs
-- of those kinds by kind and time; the unfinished jobs come from `jobs_claim`, whose first column is
-- the state.
--
-- Nothing is rewritten: the indexes are built from the rows already in the log.

CREATE INDEX IF NOT EXISTS events_outcomes_at ON events (at_ms) WHERE type IN ('succeeded', 'failed', 'attempt_failed');

CREATE INDEX IF NOT EXISTS jobs_finished_by_kind ON jobs (kind, finished_at_ms) WHERE finished_at_ms IS NOT NULL;
