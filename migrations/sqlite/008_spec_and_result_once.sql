-- jobctl event store, schema version 8: each job's spec and result are stored once, in the log.
--
-- The `jobs` projection repeated the spec (from the job's `submitted` event) and the result (from its
-- `succeeded` event) as JSON text: about a fifth of a finished download-memory job's bytes. Both are
-- now read from those events (`jobs.seq` is the `submitted` event's seq; `succeeded` is a job's last
-- event, at `jobs.version`), so the columns go. The events already hold the JSON, so nothing is lost
-- and `jobctl replay --verify` keeps comparing every column the projection still stores.
--
-- Neither column is indexed, constrained or named by a trigger, so DROP COLUMN (SQLite 3.35) applies.
-- The freed pages return to the file's free list; `VACUUM` gives them back to the file system.
ALTER TABLE jobs DROP COLUMN result;
ALTER TABLE jobs DROP COLUMN spec;
