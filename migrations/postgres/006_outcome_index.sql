-- jobctl event store, schema version 6: the outcome events of a big log found by time.
--
-- `jobctl stats` folds the outcome events (succeeded, failed, attempt_failed) of the last hour into
-- its last-minute and last-hour windows. Without an index on `at_ms` that read scans the whole log, so
-- its cost grew with the log (seconds at millions of events) instead of with the last hour's work.
-- The index is partial: it holds only outcome events (about one per job; `submitted`, `claimed`,
-- `started` and `progress` events stay out), so it adds a few bytes per job and nothing to the appends
-- of other events. Its WHERE clause is the stats query's, word for word, so the planner can use it.
--
-- Nothing is rewritten: the index is built from the events already in the log.

CREATE INDEX IF NOT EXISTS events_outcomes_at ON events (at_ms) WHERE type IN ('succeeded', 'failed', 'attempt_failed');
