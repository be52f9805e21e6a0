-- jobctl event store, schema version 5: dependencies between jobs (`after:`).
--
-- A job's `submitted` event lists the ids it waits for (spec.after). `job_dependencies` holds one row
-- per dependency not yet met: written with the job's `submitted` event (none for a dependency that had
-- already succeeded), removed in the transaction of the dependency's `succeeded` event. So a queued job
-- is runnable only when it has no row here, which the claim query checks through the primary key; the
-- `depends_on` index finds a job's dependants when it succeeds (their rows go) or ends failed or
-- cancelled (they end cancelled, in the same transaction). `jobctl archive` removes the rows of the
-- jobs it archives. Replay rebuilds the table: a row for each listed dependency that is in the log and
-- has not succeeded.
--
-- No job logged before this version has a dependency, so the table starts empty and
-- `jobctl replay --verify` holds.

CREATE TABLE IF NOT EXISTS job_dependencies (
    job        TEXT NOT NULL,
    depends_on TEXT NOT NULL,
    PRIMARY KEY (job, depends_on)
);

CREATE INDEX IF NOT EXISTS job_dependencies_depends_on ON job_dependencies (depends_on);
