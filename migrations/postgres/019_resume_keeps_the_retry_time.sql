-- jobctl event store on PostgreSQL, schema version 19: no table changes, a new meaning for `jobs.run_after_ms` after `resume_requested`.
--
-- A job paused while its retry waited (`attempt_failed`, its backoff or the server's Retry-After) and
-- resumed went back to the queue at once: `pause ID; resume ID` ran the next attempt without the wait,
-- sooner than the server had asked. A resumed job now keeps the retry's time, as it keeps its schedule;
-- a time already past runs at once, as before.
--
-- The event log does not change. The projection is rebuilt from it by the new fold in this same
-- transaction (PostgresMigrator.rebuildsProjection), so `jobctl replay --verify` holds afterwards.
SELECT 1;
