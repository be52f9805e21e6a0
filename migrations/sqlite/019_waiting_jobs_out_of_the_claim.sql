-- jobctl event store, schema version 19: jobs that wait for another job (`after:`) are kept out of what
-- a claim reads.
--
-- A claim asks for the first runnable queued jobs in claim order. A queued job that still had a row in
-- `job_dependencies` was in the claim's index all the same and was skipped only after a lookup of its
-- waits, so every claim, every idle poll's `nextRunAfter` and every drain check walked all the blocked
-- jobs ahead of the first runnable one: draining a chain of N jobs (each `after:` the one before) read
-- ~N²/2 rows — 1,000 jobs 7.8 s, 10,000 jobs did not finish in two minutes.
--
-- `waits_for_jobs` is 1 while the job has a row in `job_dependencies`, else 0. Triggers on that table
-- keep it, so every path that adds or removes a wait (a submit with `after:`, a dependency's success,
-- `archive`, `replay`'s rebuild of the table) keeps it without a statement of its own, and a job without
-- dependencies pays nothing: no trigger runs for it. The claim-order index holds only queued jobs that
-- wait for nothing; `jobs_claim` (a claim with a queue filter) has the flag after the queue, so such a
-- claim seeks straight to them too. `jobctl replay --verify` compares the flag with the table.
--
-- The triggers name `jobs`: a later migration that rebuilds `jobs` (as 9 did: a new table renamed to
-- `jobs`) drops them first and creates them again after.
ALTER TABLE jobs ADD COLUMN waits_for_jobs INTEGER NOT NULL DEFAULT 0;

UPDATE jobs SET waits_for_jobs = 1 WHERE id IN (SELECT job FROM job_dependencies);

CREATE TRIGGER job_dependencies_wait_added AFTER INSERT ON job_dependencies BEGIN
    UPDATE jobs SET waits_for_jobs = 1 WHERE id = NEW.job AND waits_for_jobs = 0;
END;

CREATE TRIGGER job_dependencies_wait_removed AFTER DELETE ON job_dependencies BEGIN
    UPDATE jobs SET waits_for_jobs = 0
    WHERE id = OLD.job AND waits_for_jobs = 1 AND NOT EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = OLD.job);
END;

DROP INDEX IF EXISTS jobs_queued_claim_order;
CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued' AND waits_for_jobs = 0;

DROP INDEX IF EXISTS jobs_claim;
CREATE INDEX jobs_claim ON jobs (state, queue, waits_for_jobs, priority DESC, run_after_ms, seq);
