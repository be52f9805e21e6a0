import Foundation
import JobModel
import StorePort

extension EventStore {
    /// Final download-file jobs and final jobs that write a `file://` object or its sidecar (uploads,
    /// update-metadata, fetch-url: the jobs that create local temporary files)
    /// that finished at or after `finishedSince` (nil: all), oldest first, and the resume points of all
    /// unfinished jobs — read in one snapshot. Specs are not decoded: only the destination is read.
    public func leftoverCandidates(finishedSince: Int64?) throws(StoreError) -> LeftoverCandidates {
        let since = finishedSince ?? Int64.min
        return try readTransaction { (connection) throws(StoreError) -> LeftoverCandidates in
            LeftoverCandidates(finished: try Self.finishedTransfers(connection, Self.finishedLeftoverSQL,
                                                                    [.integer(Int64.min), .integer(since)]),
                               unfinishedResumePoints: try Self.unfinishedResumePoints(connection))
        }
    }

    /// The final jobs that create local files and became final after the event `position` (a seq; nil:
    /// every such job), the resume points of all unfinished jobs, and the newest seq — in one snapshot.
    /// SQLite commits one writer at a time, in seq order, so every event a later commit adds has a higher
    /// seq: a job that becomes final after this snapshot is found by the next read from the seq returned
    /// here, and one final now is not found again. `now` is not needed here. The jobs in `skipping` are
    /// passed over before their `submitted` event is read.
    ///
    /// Through the jobs' `finished_seq` (schema 14), the seq of a final job's last event: no event is
    /// read to find them. Before it, every sweep from a position scanned all the events after it for the
    /// earliest final event's time (a draining worker's last sweep: the whole drain's events, ~10 ms for
    /// 10,000 download-memory jobs that leave no file) and probed each job finished since then.
    public func leftoversSince(position: Int64?, now: Int64, skipping: Set<String>) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) {
        let skipped = skipping.isEmpty ? nil : try StoreJSON.encode(Array(skipping))
        return try readTransaction { (connection) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) in
            let finished: [FinishedTransferRecord]
            if let position {
                finished = if let skipped {
                    try Self.finishedTransfers(connection, Self.changedLeftoverSkippingSQL, [.integer(position), .text(skipped)])
                } else {
                    try Self.finishedTransfers(connection, Self.changedLeftoverSQL, [.integer(position)])
                }
            } else {
                finished = try Self.finishedTransfers(connection, Self.finishedLeftoverSQL, [.integer(Int64.min), .integer(Int64.min)])
            }
            let newest = try connection.first("SELECT coalesce(max(seq), 0) FROM events") { row in row.int64(0) } ?? 0
            return (LeftoverCandidates(finished: finished, unfinishedResumePoints: try Self.unfinishedResumePoints(connection)),
                    max(newest, position ?? 0))
        }
    }

    /// `host`'s sweep watermark (schema 13): the seq up to which the leftover sweeps on that host have
    /// looked, or nil before the first complete sweep there.
    public func sweepWatermark(host: String) throws(StoreError) -> Int64? {
        try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.first("SELECT position FROM sweep_watermarks WHERE host = ?", [.text(host)]) { row in row.int64(0) }
        }
    }

    /// Raises `host`'s sweep watermark to `position`; a lower value leaves it as it is. Not synced on its own
    /// (the next synced commit carries it): a raise lost in a crash only makes the next worker's first
    /// sweep read again what this one read, and a draining worker's last sweep waited ~1–2 ms here for a
    /// sync of its own.
    public func raiseSweepWatermark(host: String, to position: Int64) throws(StoreError) {
        try writeTransaction(syncing: false) { (connection) throws(StoreError) in
            try connection.run("""
                INSERT INTO sweep_watermarks (host, position) VALUES (?, ?)
                ON CONFLICT (host) DO UPDATE SET position = max(position, excluded.position)
                """, [.text(host), .integer(position)])
        }
    }

    /// The rows of `sql` (the columns of `finishedLeftoverSQL`) as records.
    private static func finishedTransfers(_ connection: SQLiteConnection, _ sql: String,
                                          _ values: [SQLiteValue]) throws(StoreError) -> [FinishedTransferRecord] {
        do throws(StoreError) {
            return try finishedTransferRows(connection, sql, values)
        } catch {
            throw MalformedPayload.described(error, on: connection, locate: malformedSubmittedSQL, [])
        }
    }

    /// The first final job of the kinds the leftover reads look at whose `submitted` event, which they
    /// read its destination from, is not JSON: its seq and the job's id.
    static let malformedSubmittedSQL = """
        SELECT submitted.seq, jobs.id FROM jobs JOIN events submitted ON submitted.seq = jobs.seq
        WHERE jobs.kind IN ('download-file', 'upload-file', 'upload-data', 'update-metadata', 'fetch-url')
          AND jobs.state IN ('succeeded', 'failed', 'cancelled') AND json_valid(submitted.data) = 0
        ORDER BY submitted.seq LIMIT 1
        """

    private static func finishedTransferRows(_ connection: SQLiteConnection, _ sql: String,
                                             _ values: [SQLiteValue]) throws(StoreError) -> [FinishedTransferRecord] {
        try connection.query(sql, values) { (row) throws(StoreError) -> FinishedTransferRecord in
            let id = row.text(0)
            guard let state = JobState(rawValue: row.text(1)), let kind = JobKind(rawValue: row.text(2)) else {
                throw StoreError.corrupt("job \(id) has an unknown state '\(row.text(1))' or kind '\(row.text(2))'")
            }
            return FinishedTransferRecord(
                id: id, state: state, kind: kind, destination: row.optionalText(3),
                resumePoint: try StoreJSON.decodeOptional(ResumePoint.self, row.optionalText(4), what: "job \(id) resume_point"),
                finishedAtMs: row.optionalInt64(5) ?? 0, leaseTokens: FinishedTransferRecord.leaseTokens(fromList: row.optionalText(6)))
        }
    }

    private static func unfinishedResumePoints(_ connection: SQLiteConnection) throws(StoreError) -> [ResumePoint] {
        try connection.query(Self.unfinishedResumePointsSQL) { (row) throws(StoreError) -> ResumePoint in
            try StoreJSON.decode(ResumePoint.self, row.text(1), what: "job \(row.text(0)) resume_point")
        }
    }

    /// The finished jobs that create local files, finished at or after the second `?` (a time; the first
    /// is `Int64.min`): searched through `jobs_finished_seq_by_kind` (schema 14) by kind, so a log of a
    /// million other finished jobs (download-memory, uploads to `gs://`) costs nothing. The destination
    /// (fetch-url: its source) comes from the job's `submitted` event (its seq is `jobs.seq`): the spec is stored there only
    /// (schema 8).
    static let finishedLeftoverSQL = finishedLeftoverSelection + """

          AND jobs.finished_at_ms >= ?
        ORDER BY jobs.finished_at_ms, jobs.seq
        """

    /// The final jobs that create local files and whose last event — the final one — comes after the
    /// event `?` (a seq): one range of `jobs_finished_seq_by_kind` a kind, so neither the jobs of other
    /// kinds that finished meanwhile nor any event is read. A job with several final events after the
    /// position (cancelled, retried, cancelled) comes once; one final before the position does not come,
    /// even when it finished later than a job that became final after it. In no particular order:
    /// sorting the rows cost a drain's last sweep over 2,000 downloads ~1.5 ms.
    static let changedLeftoverSQL = finishedLeftoverSelection

    /// `changedLeftoverSQL` without the jobs whose ids the JSON array (the second `?`) holds. A condition
    /// on the job's own row is tested before the `submitted` event it is joined to is looked up, so a
    /// skipped job costs its row and one probe of the array's ephemeral index (built once a statement).
    /// A draining worker's last sweep over 2,000 downloads it had finished itself read ~600 pages (~14 ms)
    /// and looked for 2,000 partial files (~11 ms) before it skipped them.
    static let changedLeftoverSkippingSQL = finishedLeftoverSelection + """

          AND jobs.id NOT IN (SELECT value FROM json_each(?))
        """

    /// What the reads above select, and the conditions they share: the jobs of the kinds that leave
    /// files whose `finished_seq` is above the first `?` (`Int64.min`: every final one) — downloads to a
    /// file, and the jobs that write a `file://` object or its sidecar (uploads, update-metadata; fetch-url,
    /// whose object is its source), these with the lease tokens of their claims (through the log's
    /// UNIQUE (job_id, version) index: the job's own events), which name their sidecar temporaries and upload sessions,
    /// and a download's attempts' own partial files (read only for a download claimed more than once).
    private static let finishedLeftoverSelection = """
        SELECT jobs.id, jobs.state, jobs.kind,
               json_extract(submitted.data, CASE jobs.kind WHEN 'fetch-url' THEN '$.spec.source' ELSE '$.spec.destination' END)
                   AS destination,
               jobs.resume_point, jobs.finished_at_ms,
               CASE WHEN jobs.kind = 'download-file' AND jobs.attempts <= 1 THEN NULL
                    ELSE (SELECT group_concat(claims.lease) FROM events claims
                          WHERE claims.job_id = jobs.id AND claims.type = 'claimed') END AS tokens
        FROM jobs LEFT JOIN events submitted
             ON submitted.seq = jobs.seq AND submitted.job_id = jobs.id AND submitted.type = 'submitted'
        WHERE jobs.kind IN ('download-file', 'upload-file', 'upload-data', 'update-metadata', 'fetch-url')
          AND jobs.finished_seq > ?
          AND jobs.state IN ('succeeded', 'failed', 'cancelled')
          AND (jobs.kind = 'download-file' OR destination LIKE 'file:%')
        """

    /// The resume points of the unfinished jobs, through `jobs_resume_points` (schema 11), which holds
    /// only the jobs that have one: through `jobs_claim` every queued job was read to find the few
    /// (~1.3 ms of each worker's start with 10,000 queued). The states are named, not excluded, and the
    /// index is named as the claim names its own: the condition must stay written exactly so.
    static let unfinishedResumePointsSQL = """
        SELECT id, resume_point FROM jobs INDEXED BY jobs_resume_points
        WHERE state IN ('queued', 'running', 'paused') AND resume_point IS NOT NULL
        """
}
