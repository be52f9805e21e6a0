-- jobctl event store on PostgreSQL, schema version 21: jobs that wait for another job (`after:`) are
-- kept out of what a claim reads (SQLite's migration 19).
--
-- A queued job that still had a row in `job_dependencies` was in the claim's index all the same and
-- was skipped only after a lookup of its waits, so every claim and every `nextRunAfter` walked all the
-- blocked jobs ahead of the first runnable one: draining a chain of N jobs (each `after:` the one
-- before) read ~N²/2 rows.
--
-- `waits_for_jobs` is true while the job has a row in `job_dependencies`. Row triggers on that table
-- keep it, so every path that adds or removes a wait (a submit with `after:`, a dependency's success,
-- `archive`, `replay`'s rebuild of the table) keeps it without a statement of its own, and a job without
-- dependencies pays nothing: no trigger runs for it. The claim-order index holds only queued jobs that
-- wait for nothing. `jobctl replay --verify` compares the flag with the table.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS waits_for_jobs boolean NOT NULL DEFAULT false;

UPDATE jobs SET waits_for_jobs = true WHERE id IN (SELECT job FROM job_dependencies) AND NOT waits_for_jobs;

CREATE OR REPLACE FUNCTION job_dependencies_wait_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET waits_for_jobs = true WHERE id = NEW.job AND NOT waits_for_jobs;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION job_dependencies_wait_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET waits_for_jobs = false
    WHERE id = OLD.job AND waits_for_jobs AND NOT EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = OLD.job);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS job_dependencies_wait_added ON job_dependencies;
CREATE TRIGGER job_dependencies_wait_added AFTER INSERT ON job_dependencies
    FOR EACH ROW EXECUTE FUNCTION job_dependencies_wait_added();

DROP TRIGGER IF EXISTS job_dependencies_wait_removed ON job_dependencies;
CREATE TRIGGER job_dependencies_wait_removed AFTER DELETE ON job_dependencies
    FOR EACH ROW EXECUTE FUNCTION job_dependencies_wait_removed();

DROP INDEX IF EXISTS jobs_queued_claim_order;
CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued' AND NOT waits_for_jobs;
