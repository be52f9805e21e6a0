-- jobctl event store, schema version 18: no table changes, a new meaning for `jobs.error` after `succeeded`.
--
-- A job that failed an attempt and then succeeded on an automatic retry kept that attempt's error:
-- `list` showed `succeeded 2/3 … ERROR unknown`, `show` and the JSON views an `error` beside
-- `state: succeeded`, while a job reopened with `jobctl retry` that then succeeded had none. A job that
-- succeeded now has no error; its earlier attempts' errors stay in its history (`attempt_failed`).
--
-- The event log does not change. The projection is rebuilt from it by the new fold in this same
-- transaction (Migrator.rebuildsProjection), so `jobctl replay --verify` holds afterwards.
SELECT 1;
