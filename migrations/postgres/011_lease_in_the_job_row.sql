-- jobctl event store on PostgreSQL, schema version 11: a running job's lease expiry is kept in its
-- `jobs` row (a PostgreSQL-only change; the migrator tolerates the gaps in the numbering).
--
-- The lease's owner and token were already in the row (`lease_owner`, `lease_token`); only the expiry
-- lived in `leases`, one row per running job. So each claim inserted a lease row (and its primary-key
-- entry), each end of a run deleted it, and every group commit read the lease rows of its jobs again
-- to fence its reports, although the row locks it had just taken return the same token. Now the
-- claim's update of the job row sets `lease_expires_at_ms`, the update that ends the run clears it,
-- a heartbeat updates only this column (not indexed: a HOT update), and the rescue finds expired
-- jobs in `jobs` alone. A running job has an expiry; a job that is not running has none.
--
-- `leases` is emptied and kept: nothing reads or writes its rows any more (`jobctl archive` still
-- deletes from it and `import` still requires it empty, which hold trivially).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS lease_expires_at_ms bigint;

UPDATE jobs SET lease_expires_at_ms = leases.expires_at_ms
FROM leases
WHERE leases.job_id = jobs.id AND jobs.state = 'running' AND leases.token = jobs.lease_token;

DELETE FROM leases;
