/// SQL that takes a current SQLite log back to what an older jobctl made, for tests of upgrades: each
/// undoes one migration that cannot be applied twice, so a test that also removes the ledger's rows from
/// that version on sees the upgrade apply it again.
public enum OlderSQLiteSchema {
    /// Undoes migration 19 (the flag of jobs waiting for another, its triggers and the claim indexes it
    /// rebuilt): `ALTER TABLE … ADD COLUMN waits_for_jobs` fails on a log that still has the column.
    public static let beforeWaitFlag = """
        DROP TRIGGER job_dependencies_wait_added;
        DROP TRIGGER job_dependencies_wait_removed;
        DROP INDEX jobs_queued_claim_order;
        DROP INDEX jobs_claim;
        ALTER TABLE jobs DROP COLUMN waits_for_jobs;
        CREATE INDEX jobs_claim ON jobs (state, queue, priority DESC, run_after_ms, seq);
        CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued';
        """
}
