import Foundation
import JobLifecycle
import JobModel
import StorePort

extension EventStore {
    /// The final jobs that finished before `finishedBefore`, their events and their blobs, in one snapshot.
    public func archiveSelection(finishedBefore: Int64) throws(StoreError) -> ArchiveSelection {
        try readTransaction { (connection) throws(StoreError) -> ArchiveSelection in
            let finished = "state IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms < ?"
            let selected = try connection.query(
                "SELECT id, version, state, finished_at_ms FROM jobs WHERE \(finished) ORDER BY finished_at_ms, seq",
                [.integer(finishedBefore)]) { (row) throws(StoreError) -> ArchivedJob in
                guard let state = JobState(rawValue: row.text(2)) else {
                    throw StoreError.corrupt("job \(row.text(0)) has unknown state '\(row.text(2))'")
                }
                return ArchivedJob(id: row.text(0), version: row.int(1), state: state, finishedAtMs: row.int64(3))
            }
            let waits = try connection.query(
                "SELECT job, depends_on FROM job_dependencies WHERE depends_on IN (SELECT id FROM jobs WHERE \(finished))",
                [.integer(finishedBefore)]) { row in DependencyRow(job: row.text(0), dependsOn: row.text(1)) }
            let jobs = ArchiveRemovalRules.withoutAwaited(selected, waits: waits)
            let kept = jobs.count == selected.count ? nil : Set(jobs.map(\.id))
            var rows = try connection.query(
                "SELECT seq, job_id, version, type, at_ms, actor, lease, data FROM events "
                    + "WHERE job_id IN (SELECT id FROM jobs WHERE \(finished)) ORDER BY seq",
                [.integer(finishedBefore)]) { (row) throws(StoreError) in
                LogRow(seq: row.int64(0), jobID: row.text(1), version: row.int(2), type: row.text(3), atMs: row.int64(4),
                       actor: row.text(5), leaseToken: row.optionalInt64(6), data: row.text(7))
            }
            if let kept { rows.removeAll { !kept.contains($0.jobID) } }
            var blobs: [ArchivedBlob] = []
            for digest in try ArchiveSelection.referencedBlobs(in: rows) {
                // A blob already expired (--blobs-before) is not in the table: the file keeps its hash only.
                if let data = try connection.first("SELECT data FROM blobs WHERE sha256 = ?", [.text(digest)], { row in row.blob(0) }) {
                    blobs.append(ArchivedBlob(sha256: digest, data: data))
                }
            }
            return ArchiveSelection(beforeMs: finishedBefore, jobs: jobs, rows: rows, blobs: blobs,
                                    keptForDependants: selected.count - jobs.count)
        }
    }

    /// Removes an archived selection in one transaction (see `JobStore.removeArchived`).
    public func removeArchived(_ selection: ArchiveSelection, record: ArchiveRecord, actor: String, now: Int64,
                               beforeCommit: @escaping () -> Void) throws(StoreError) -> JobEvent {
        try writeTransaction { (connection) throws(StoreError) -> JobEvent in
            for job in selection.jobs {
                let found = try connection.first("SELECT version, state FROM jobs WHERE id = ?", [.text(job.id)]) { row in
                    (version: row.int(0), state: row.text(1))
                }
                if let refusal = ArchiveRemovalRules.changed(job, now: found) { throw refusal }
            }
            // `seq` is the rowid, and SQLite hands out max(rowid) + 1: with the newest events deleted it
            // would hand out their numbers again. The archived event takes the number after the highest
            // ever used and stays in the log (the log's pseudo job is never archived), so seq only grows.
            let highestSeq = try connection.first("SELECT max(seq) FROM events") { row in row.isNull(0) ? 0 : row.int64(0) } ?? 0
            for job in selection.jobs {
                try connection.run("INSERT INTO archive_authorisations (job_id) VALUES (?)", [.text(job.id)])
            }
            if let wait = try connection.first("""
                SELECT job, depends_on FROM job_dependencies
                WHERE depends_on IN (SELECT job_id FROM archive_authorisations)
                  AND job NOT IN (SELECT job_id FROM archive_authorisations) LIMIT 1
                """, [], { row in DependencyRow(job: row.text(0), dependsOn: row.text(1)) }) {
                throw ArchiveRemovalRules.awaited(wait)
            }
            // One job per statement, so that a statement's undo journal holds one job's rows: it spills to
            // a temporary file past `SQLiteConnection.statementJournalSpillBytes` (a statement of every
            // archived job's events got there at a few thousand jobs).
            var deletedEvents = 0
            for job in selection.jobs {
                try connection.run("DELETE FROM events WHERE job_id = ?", [.text(job.id)])
                deletedEvents += connection.changes
            }
            guard deletedEvents == selection.rows.count else {
                throw StoreError.corrupt("the archived jobs have \(deletedEvents) events in the log but \(selection.rows.count) "
                    + "were written to the file; nothing was removed: run `jobctl archive` again")
            }
            for job in selection.jobs {
                try connection.run("DELETE FROM jobs WHERE id = ?", [.text(job.id)])
                try connection.run("DELETE FROM job_dependencies WHERE job = ?", [.text(job.id)])
                try connection.run("DELETE FROM job_dependencies WHERE depends_on = ?", [.text(job.id)])
                try connection.run("DELETE FROM archive_authorisations WHERE job_id = ?", [.text(job.id)])
            }

            var removed = 0
            for blob in selection.blobs {
                let stillUsed = try connection.first(
                    "SELECT 1 FROM jobs JOIN events final ON final.job_id = jobs.id AND final.version = jobs.version "
                        + "WHERE jobs.state = 'succeeded' AND json_extract(final.data, '$.result.blob') = ? LIMIT 1",
                    [.text(blob.sha256)]) { _ in true } ?? false
                if !stillUsed {
                    try connection.run("DELETE FROM blobs WHERE sha256 = ?", [.text(blob.sha256)])
                    removed += connection.changes
                }
            }
            var stored = record
            stored.blobsRemoved = removed
            let payload = EventPayload.archived(stored)
            let version = (try connection.first("SELECT max(version) FROM events WHERE job_id = ?",
                                                [.text(ArchiveRecord.logJobID)]) { row in row.isNull(0) ? 0 : row.int(0) } ?? 0) + 1
            let seq = highestSeq + 1
            try connection.run("INSERT INTO events (seq, job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
                               [.integer(seq), .text(ArchiveRecord.logJobID), .int(version), .text(EventType.archived.rawValue),
                                .integer(now), .text(actor), .text(try StoreJSON.encode(payload.wire))])
            beforeCommit()
            return JobEvent(seq: seq, jobID: ArchiveRecord.logJobID, version: version, atMs: now, actor: actor, payload: payload)
        }
    }
}

extension EventStore {
    /// The blobs only jobs that finished before `finishedBefore` produced, still stored.
    /// A result is stored only in the job's `succeeded` event, its last (schema 8).
    private static let expirableBlobsSQL = """
        WITH produced AS (
            SELECT jobs.kind AS kind, jobs.finished_at_ms AS finished, json_extract(final.data, '$.result.blob') AS blob
            FROM jobs JOIN events final ON final.job_id = jobs.id AND final.version = jobs.version
            WHERE jobs.state = 'succeeded'
        )
        SELECT b.sha256, b.size FROM blobs b
        WHERE b.sha256 IN (SELECT blob FROM produced WHERE kind = 'download-memory' AND finished < ?1)
          AND b.sha256 NOT IN (SELECT blob FROM produced WHERE finished >= ?1 AND blob IS NOT NULL)
        ORDER BY b.sha256
        """

    /// Removes (or lists, with `dryRun`) the blobs only old jobs produced (see `JobStore.expireBlobs`).
    public func expireBlobs(finishedBefore: Int64, now: Int64, dryRun: Bool) throws(StoreError) -> BlobExpiry {
        let body = { (connection: SQLiteConnection) throws(StoreError) -> BlobExpiry in
            let found = try connection.query(Self.expirableBlobsSQL, [.integer(finishedBefore)]) { row in (row.text(0), row.int64(1)) }
            if !dryRun {
                for (digest, size) in found {
                    try connection.run("INSERT INTO expired_blobs (sha256, size, expired_at_ms) VALUES (?, ?, ?) "
                                       + "ON CONFLICT (sha256) DO UPDATE SET size = excluded.size, expired_at_ms = excluded.expired_at_ms",
                                       [.text(digest), .integer(size), .integer(now)])
                    try connection.run("DELETE FROM blobs WHERE sha256 = ?", [.text(digest)])
                }
            }
            return BlobExpiry(digests: found.map(\.0), bytes: found.reduce(0) { $0 + $1.1 })
        }
        return dryRun ? try readTransaction(body) : try writeTransaction(body)
    }

    /// The expiry record of a blob no longer stored, or nil.
    public func expiredBlob(sha256: String) throws(StoreError) -> ExpiredBlob? {
        try withConnection { (connection) throws(StoreError) -> ExpiredBlob? in
            try connection.first("SELECT sha256, size, expired_at_ms FROM expired_blobs WHERE sha256 = ? "
                                 + "AND sha256 NOT IN (SELECT sha256 FROM blobs)", [.text(sha256.lowercased())]) { row in
                ExpiredBlob(sha256: row.text(0), size: row.int64(1), expiredAtMs: row.int64(2))
            }
        }
    }
}

extension EventStore {
    /// The newest event's time; SQLite has no clock apart from this machine's.
    public func clockReading() throws(StoreError) -> StoreClockReading {
        try withConnection { (connection) throws(StoreError) -> StoreClockReading in
            let newest = try connection.first("SELECT at_ms FROM events ORDER BY seq DESC LIMIT 1") { row in row.int64(0) }
            return StoreClockReading(databaseNowMs: nil, newestEventAtMs: newest)
        }
    }
}
