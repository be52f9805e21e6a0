-- jobctl event store on PostgreSQL, schema version 8: each job's spec and result are stored once, in
-- the log (the twin of SQLite's migration 8).
--
-- The `jobs` projection repeated the spec (from the job's `submitted` event) and the result (from its
-- `succeeded` event). Both are now read from those events (`jobs.seq` is the `submitted` event's seq;
-- `succeeded` is a job's last event, at `jobs.version`), so the columns go; the events already hold
-- the JSON.
ALTER TABLE jobs DROP COLUMN result, DROP COLUMN spec;
