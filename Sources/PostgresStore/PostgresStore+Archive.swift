import Foundation
import JobLifecycle
import JobModel
import StorePort

extension PostgresStore {
    /// The final jobs that finished before `finishedBefore`, their events and their blobs, in one snapshot.
    public func archiveSelection(finishedBefore: Int64) throws(StoreError) -> ArchiveSelection {
        try readTransaction { (connection) throws(StoreError) -> ArchiveSelection in
            let finished = "state IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms < $1"
            let selected = try connection.rows(
                "SELECT id, version, state, finished_at_ms FROM jobs WHERE \(finished) ORDER BY finished_at_ms, seq",
                [.integer(finishedBefore)]) { (row) throws(StoreError) -> ArchivedJob in
                let id = try row.string(0)
                guard let state = JobState(rawValue: try row.string(2)) else {
                    throw StoreError.corrupt("job \(id) has unknown state '\(try row.string(2))'")
                }
                return ArchivedJob(id: id, version: Int(try row.integer(1)), state: state, finishedAtMs: try row.integer(3))
            }
            let waits = try connection.rows(
                "SELECT job, depends_on FROM job_dependencies WHERE depends_on IN (SELECT id FROM jobs WHERE \(finished))",
                [.integer(finishedBefore)]) { (row) throws(StoreError) in DependencyRow(job: try row.string(0), dependsOn: try row.string(1)) }
            let jobs = ArchiveRemovalRules.withoutAwaited(selected, waits: waits)
            let kept = jobs.count == selected.count ? nil : Set(jobs.map(\.id))
            var rows = try connection.rows(
                "SELECT seq, job_id, version, type, at_ms, actor, lease, data FROM events "
                    + "WHERE job_id IN (SELECT id FROM jobs WHERE \(finished)) ORDER BY seq",
                [.integer(finishedBefore)]) { (row) throws(StoreError) -> LogRow in
                LogRow(seq: try row.integer(0), jobID: try row.string(1), version: Int(try row.integer(2)), type: try row.string(3),
                       atMs: try row.integer(4), actor: try row.string(5), leaseToken: try row.optionalInteger(6),
                       data: try row.string(7))
            }
            if let kept { rows.removeAll { !kept.contains($0.jobID) } }
            var blobs: [ArchivedBlob] = []
            for digest in try ArchiveSelection.referencedBlobs(in: rows) {
                let data = try connection.row("SELECT data FROM blobs WHERE sha256 = $1", [.text(digest)]) { (row) throws(StoreError) -> Data in
                    do throws(PostgresError) { return try row.bytea(0) } catch { throw StoreError(error) }
                }
                // A blob already expired (--blobs-before) is not in the table: the file keeps its hash only.
                if let data { blobs.append(ArchivedBlob(sha256: digest, data: data)) }
            }
            return ArchiveSelection(beforeMs: finishedBefore, jobs: jobs, rows: rows, blobs: blobs,
                                    keptForDependants: selected.count - jobs.count)
        }
    }

    /// Removes an archived selection in one transaction (see `JobStore.removeArchived`).
    ///
    /// The selected jobs' rows are locked first (`FOR UPDATE`), so a concurrent retry either commits
    /// before (and the version check refuses) or waits for the removal (and finds no job).
    public func removeArchived(_ selection: ArchiveSelection, record: ArchiveRecord, actor: String, now: Int64,
                               beforeCommit: @escaping () -> Void) throws(StoreError) -> JobEvent {
        try writeTransaction { (connection) throws(StoreError) -> JobEvent in
            let ids = postgresTextArray(selection.jobs.map(\.id))
            var found: [String: (version: Int, state: String)] = [:]
            _ = try connection.rows("SELECT id, version, state FROM jobs WHERE id = ANY($1::text[]) FOR UPDATE", [ids]) { (row) throws(StoreError) in
                found[try row.string(0)] = (version: Int(try row.integer(1)), state: try row.string(2))
            }
            for job in selection.jobs {
                if let refusal = ArchiveRemovalRules.changed(job, now: found[job.id]) { throw refusal }
            }
            try connection.store("INSERT INTO archive_authorisations (job_id) SELECT pg_catalog.unnest($1::text[])", [ids])
            if let wait = try connection.row("""
                SELECT job, depends_on FROM job_dependencies
                WHERE depends_on IN (SELECT job_id FROM archive_authorisations)
                  AND job NOT IN (SELECT job_id FROM archive_authorisations) LIMIT 1
                """, [], { (row) throws(StoreError) in DependencyRow(job: try row.string(0), dependsOn: try row.string(1)) }) {
                throw ArchiveRemovalRules.awaited(wait)
            }
            let deleted = try connection.store("DELETE FROM events WHERE job_id IN (SELECT job_id FROM archive_authorisations)")
            guard deleted == selection.rows.count else {
                throw StoreError.corrupt("the archived jobs have \(deleted) events in the log but \(selection.rows.count) "
                    + "were written to the file; nothing was removed: run `jobctl archive` again")
            }
            try connection.store("DELETE FROM jobs WHERE id IN (SELECT job_id FROM archive_authorisations)")
            try connection.store("DELETE FROM leases WHERE job_id IN (SELECT job_id FROM archive_authorisations)")
            try connection.store("""
                DELETE FROM job_dependencies WHERE job IN (SELECT job_id FROM archive_authorisations)
                                                OR depends_on IN (SELECT job_id FROM archive_authorisations)
                """)
            try connection.store("DELETE FROM archive_authorisations")

            var removed = 0
            // Each blob's turn first (see `BlobTurns`), then its users read anew: a worker that stored
            // the same bytes for a job of its own meanwhile has committed, or waits for this removal.
            try connection.takeBlobTurns(selection.blobs.map(\.sha256), exclusive: true)
            for blob in selection.blobs {
                let stillUsed = try connection.row(
                    "SELECT 1 FROM jobs JOIN events final ON final.job_id = jobs.id AND final.version = jobs.version "
                        + "WHERE jobs.state = 'succeeded' AND \(Self.finalResultBlobSQL) = $1 LIMIT 1",
                    [.text(blob.sha256)]) { _ in true } ?? false
                if !stillUsed {
                    removed += try connection.store("DELETE FROM blobs WHERE sha256 = $1", [.text(blob.sha256)])
                }
            }
            var stored = record
            stored.blobsRemoved = removed
            let payload = EventPayload.archived(stored)
            // The log's pseudo job is serialised like any job: a second archive at once fails on
            // UNIQUE (job_id, version) and its whole transaction rolls back.
            let version = (try connection.row("SELECT coalesce(max(version), 0) FROM events WHERE job_id = $1",
                                              [.text(ArchiveRecord.logJobID)]) { (row) throws(StoreError) in Int(try row.integer(0)) } ?? 0) + 1
            let seq = try connection.insertEvent(jobID: ArchiveRecord.logJobID, version: version, type: .archived, atMs: now,
                                                 actor: actor, leaseToken: nil, data: try StoreJSON.encode(payload.wire))
            beforeCommit()
            return JobEvent(seq: seq, jobID: ArchiveRecord.logJobID, version: version, atMs: now, actor: actor, payload: payload)
        }
    }
}

extension PostgresStore {
    /// The blob hash of the result in a succeeded job's last event (`final`), read so that an event
    /// holding `\u0000` does not stop the server's JSON functions (`JobRecord.parsableJSONSQL`).
    private static let finalResultBlobSQL = "(\(JobRecord.parsableJSONSQL("final.data"))::json -> 'result' ->> 'blob')"

    /// The blobs only jobs that finished before `$1` produced, still stored. A result is stored only in
    /// the job's `succeeded` event, its last (schema 8).
    private static let expirableBlobsSQL = """
        SELECT b.sha256, b.size FROM blobs b
        WHERE b.sha256 IN (SELECT \(finalResultBlobSQL)
                           FROM jobs JOIN events final ON final.job_id = jobs.id AND final.version = jobs.version
                           WHERE jobs.state = 'succeeded' AND jobs.kind = 'download-memory' AND jobs.finished_at_ms < $1)
          AND NOT EXISTS (SELECT 1 FROM jobs JOIN events final ON final.job_id = jobs.id AND final.version = jobs.version
                          WHERE jobs.state = 'succeeded' AND jobs.finished_at_ms >= $1
                            AND \(finalResultBlobSQL) = b.sha256)
        ORDER BY b.sha256 COLLATE "C"
        """

    /// Removes (or lists, with `dryRun`) the blobs only old jobs produced (see `JobStore.expireBlobs`).
    public func expireBlobs(finishedBefore: Int64, now: Int64, dryRun: Bool) throws(StoreError) -> BlobExpiry {
        let body = { (connection: PostgresConnection) throws(StoreError) -> BlobExpiry in
            var found = try connection.rows(Self.expirableBlobsSQL + (dryRun ? "" : " FOR UPDATE OF b"), [.integer(finishedBefore)]) {
                (row) throws(StoreError) in (try row.string(0), try row.integer(1))
            }
            if !dryRun, !found.isEmpty {
                // The look above ran on the snapshot it began with, and a lock it waited for (a worker
                // storing the same bytes) does not refresh it: with each blob's turn taken (see
                // `BlobTurns`), the jobs that use it are read again, committed ones included.
                try connection.takeBlobTurns(found.map(\.0), exclusive: true)
                let still = Set(try connection.rows(Self.expirableBlobsSQL, [.integer(finishedBefore)]) { (row) throws(StoreError) in
                    try row.string(0)
                })
                found.removeAll { !still.contains($0.0) }
            }
            if !dryRun {
                for (digest, size) in found {
                    try connection.store("INSERT INTO expired_blobs (sha256, size, expired_at_ms) VALUES ($1, $2, $3) "
                                         + "ON CONFLICT (sha256) DO UPDATE SET size = excluded.size, expired_at_ms = excluded.expired_at_ms",
                                         [.text(digest), .integer(size), .integer(now)])
                    try connection.store("DELETE FROM blobs WHERE sha256 = $1", [.text(digest)])
                }
            }
            return BlobExpiry(digests: found.map(\.0), bytes: found.reduce(0) { $0 + $1.1 })
        }
        return dryRun ? try readTransaction(body) : try writeTransaction(body)
    }

    /// The expiry record of a blob no longer stored, or nil.
    public func expiredBlob(sha256: String) throws(StoreError) -> ExpiredBlob? {
        try withConnection { (connection) throws(StoreError) -> ExpiredBlob? in
            try connection.row("SELECT sha256, size, expired_at_ms FROM expired_blobs WHERE sha256 = $1 "
                               + "AND NOT EXISTS (SELECT 1 FROM blobs WHERE blobs.sha256 = expired_blobs.sha256)",
                               [.text(sha256.lowercased())]) { (row) throws(StoreError) in
                ExpiredBlob(sha256: try row.string(0), size: try row.integer(1), expiredAtMs: try row.integer(2))
            }
        }
    }
}

extension PostgresStore {
    /// The server's clock (`clock_timestamp()`, the time the statement runs) and the newest event's time.
    public func clockReading() throws(StoreError) -> StoreClockReading {
        try withConnection { (connection) throws(StoreError) -> StoreClockReading in
            try connection.row("""
                SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                       (SELECT at_ms FROM events ORDER BY seq DESC LIMIT 1)
                """) { (row) throws(StoreError) in
                StoreClockReading(databaseNowMs: try row.integer(0), newestEventAtMs: try row.optionalInteger(1))
            } ?? StoreClockReading(databaseNowMs: nil, newestEventAtMs: nil)
        }
    }
}

/// Turns on the bytes of one SHA-256 between the transactions that store a blob and those that remove
/// one. A worker's group commit stores a download-memory result with `INSERT … ON CONFLICT DO NOTHING`,
/// which neither waits for nor locks a row already there, and a removal (`archive`, `archive
/// --blobs-before`) decides from the jobs that reference a blob as its snapshot shows them: the job a
/// worker is finishing with the same bytes is not among them until it commits. So each side first
/// takes an advisory lock of the digest's bucket — a worker shared (workers never wait for each other),
/// a removal exclusive — and a removal reads the blob's users only once it holds the lock: a worker
/// that came first has committed and its job keeps the blob; one that comes later waits for the
/// removal's commit and then stores the bytes again. Advisory locks, not row locks: the worker role may
/// only insert into `blobs` (a row lock needs UPDATE). Buckets, not one lock per digest, for the
/// same reason as the submit's (`PostgresStore.submitLockBuckets`): the server's lock table is small.
enum BlobTurns {
    /// The second integer of the blobs' advisory locks is this tag ('job' and a zero byte) with the
    /// bucket in its low byte, apart from the submit's ('joc'); the first is the log's schema
    /// (`AdvisoryLockSpace`).
    static let lockTag: Int32 = 0x6A6F_6200
    /// The seed of the hash that puts a digest in its bucket.
    static let seed: Int64 = 0x626C_6F62_7331
    /// How many buckets the digests hash into (a power of two).
    static let buckets = 256

    /// The statement that takes the turns of the digests in `$1` (`text[]`), in bucket order.
    static func sql(exclusive: Bool) -> String {
        AdvisoryLockSpace.turnsSQL(exclusive ? "pg_catalog.pg_advisory_xact_lock" : "pg_catalog.pg_advisory_xact_lock_shared", tag: lockTag,
                                   buckets: buckets, bucketOf: "pg_catalog.hashtextextended(sha256, \(seed)::bigint)", from: "pg_catalog.unnest($1::text[]) AS sha256")
    }
    static let sharedSQL = sql(exclusive: false)
    static let exclusiveSQL = sql(exclusive: true)
}

extension PostgresConnection {
    /// Takes the turns of `digests` until the transaction ends (see `BlobTurns`).
    func takeBlobTurns(_ digests: [String], exclusive: Bool) throws(StoreError) {
        guard !digests.isEmpty else { return }
        _ = try store(exclusive ? BlobTurns.exclusiveSQL : BlobTurns.sharedSQL, [postgresTextArray(digests)])
    }
}
