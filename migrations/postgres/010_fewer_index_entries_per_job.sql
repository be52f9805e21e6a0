-- jobctl event store on PostgreSQL, schema version 10: fewer index entries written per job (a
-- PostgreSQL-only change; PostgreSQL has no version 9, and the migrator tolerates the gap in the
-- numbering).
--
-- Each change of a row writes a new version of it. Unless the update is HOT (heap-only: no indexed
-- column changed and the new version fits on the same page), PostgreSQL adds an entry for the new
-- version to every index of the table; index maintenance was the largest share of the server's
-- executor time in the profile of a drain (BENCHMARKS.md, PostgreSQL).
--
-- * The idempotency key's uniqueness becomes a partial unique index of the jobs that have a key. The
--   UNIQUE constraint indexed every row version, NULL keys included, so each of a job's changes (most
--   jobs have no key) added an entry nobody can look up. The lookup `idempotency_key = $1` implies
--   `IS NOT NULL` and uses the partial index; two jobs with the same key are still refused.
-- * `leases_expiry` goes: no query reads it (the rescue finds running jobs through `jobs` and their
--   leases by primary key). Each claim wrote an entry in it, and because it indexed `expires_at_ms`,
--   no heartbeat could be a HOT update; now a heartbeat writes no index entry at all.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency_key_set ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_idempotency_key_key;
DROP INDEX IF EXISTS leases_expiry;
