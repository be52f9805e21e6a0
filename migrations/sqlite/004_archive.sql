-- jobctl event store, schema version 4: `jobctl archive` may remove finished jobs from the log.
--
-- The log stays append-only for everything else. `events_refuse_delete` now lets a DELETE through only
-- for a job named in `archive_authorisations`, and `jobctl archive` is what writes that table: in one
-- transaction it names the jobs it has written (and fsynced) to an archive file, deletes their events,
-- projection rows and leases, empties the table again, and appends an `archived` event (to the log's
-- own pseudo job `log`) recording the file's name, sha256, range and counts. So between transactions
-- the table is always empty and every other DELETE is refused as before.
--
-- `expired_blobs` remembers blobs removed by `jobctl archive --blobs-before` (the event that produced
-- a blob keeps its hash), so `jobctl result` can say the blob expired rather than that it is missing.
--
-- Written to be applied again safely (IF NOT EXISTS): a ledger rewound by hand must not wedge it.

CREATE TABLE IF NOT EXISTS archive_authorisations (
    job_id TEXT PRIMARY KEY
);

DROP TRIGGER IF EXISTS events_refuse_delete;

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM archive_authorisations WHERE job_id = OLD.job_id)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE is refused (only `jobctl archive` removes finished jobs)');
END;

CREATE TABLE IF NOT EXISTS expired_blobs (
    sha256        TEXT    PRIMARY KEY,
    size          INTEGER NOT NULL,
    expired_at_ms INTEGER NOT NULL
);
