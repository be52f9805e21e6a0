-- jobctl event store, schema version 10: a running job's lease expiry is kept in its `jobs` row (the
-- SQLite twin of PostgreSQL's migration 11).
--
-- The lease's owner and token were already in the row (`lease_owner`, `lease_token`); only the expiry
-- lived in `leases`, one row per running job. So each claim inserted a lease row (the table, its
-- primary key and `leases_expiry`: three b-trees), each end of a run deleted it (three more), and the
-- fencing check of every report read it again. Now the claim's update of the job row sets
-- `lease_expires_at_ms`, the update that ends the run clears it, a heartbeat updates only this column
-- (no index holds it, so no index is touched), and the rescue finds expired jobs in `jobs` alone. A
-- running job has an expiry; a job that is not running has none.
--
-- The expiry is not an event's (heartbeats append none), so `jobctl replay --verify` does not compare
-- it, and a rewrite by `jobctl replay` keeps it for the jobs still running under the same token.
--
-- Only the lease of a running job whose token is the row's moves: a lease row left behind by a run
-- that ended, or one of an older token, is dropped. A running job left without an expiry is rescued by
-- the next worker, as a job whose lease row had vanished always was. Nothing reads or writes `leases`
-- any more, so it goes, its indexes with it.
--
-- `jobs_claim (state, queue, priority DESC, run_after_ms, seq)` keeps every job, not only queued ones:
-- the rescue, `stats`, `list --state`, the counts and the orphan sweep find running, paused and finished
-- jobs by state through it, and would scan the whole table with an index of queued jobs only.
ALTER TABLE jobs ADD COLUMN lease_expires_at_ms INTEGER;

UPDATE jobs SET lease_expires_at_ms = (SELECT leases.expires_at_ms FROM leases WHERE leases.job_id = jobs.id)
WHERE state = 'running'
  AND EXISTS (SELECT 1 FROM leases WHERE leases.job_id = jobs.id AND leases.token = jobs.lease_token);

DROP TABLE leases;
