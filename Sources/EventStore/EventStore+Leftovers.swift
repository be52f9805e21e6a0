import Foundation
import JobModel
import StorePort

extension EventStore {
    /// Final download-file jobs and final uploads to `file://` (the jobs that create local temporary files)
    /// that finished at or after `finishedSince` (nil: all), oldest first, and the resume points of all
    /// unfinished jobs — read in one snapshot. Specs are not decoded: only the destination is read.
    public func leftoverCandidates(finishedSince: Int64?) throws(StoreError) -> LeftoverCandidates {
        let since = finishedSince ?? Int64.min
        return try readTransaction { (connection) throws(StoreError) -> LeftoverCandidates in
            LeftoverCandidates(finished: try Self.finishedTransfers(connection, Self.finishedLeftoverSQL, [.integer(since)]),
                               unfinishedResumePoints: try Self.unfinishedResumePoints(connection))
        }
    }

    /// The final jobs that create local files and changed after the event `position` (a seq; nil: every
    /// such job), the resume points of all unfinished jobs, and the newest seq — in one snapshot. SQLite
    /// commits one writer at a time, in seq order, so every event a later commit adds has a higher seq:
    /// a job that becomes final after this snapshot is found by the next read from the seq returned here,
    /// and one final now is not found again. `now` is not needed here. The jobs in `skipping` are passed
    /// over before their `submitted` event or later final events are looked up.
    public func leftoversSince(position: Int64?, now: Int64, skipping: Set<String>) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) {
        let skipped = skipping.isEmpty ? nil : try StoreJSON.encode(Array(skipping))
        return try readTransaction { (connection) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) in
            let finished: [FinishedTransferRecord]
            if let position {
                // A job final now whose last final event comes after the position finished (its
                // `finished_at_ms` is that event's time) no earlier than the earliest final event after the
                // position: the jobs that create local files and finished since then, through their index
                // by kind and time, are the ones to look at — none of the others (a million finished
                // download-memory jobs are not read one by one) — and of them, those with a final event
                // after the position.
                let earliest = try connection.first(Self.earliestFinalEventSQL, [.integer(position)]) { row in row.optionalInt64(0) }
                if let since = earliest ?? nil {
                    finished = if let skipped {
                        try Self.finishedTransfers(connection, Self.changedLeftoverSkippingSQL,
                                                   [.integer(since), .text(skipped), .integer(position)])
                    } else {
                        try Self.finishedTransfers(connection, Self.changedLeftoverSQL, [.integer(since), .integer(position)])
                    }
                } else {
                    finished = []
                }
            } else {
                finished = try Self.finishedTransfers(connection, Self.finishedLeftoverSQL, [.integer(Int64.min)])
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
        try connection.query(sql, values) { (row) throws(StoreError) -> FinishedTransferRecord in
            let id = row.text(0)
            guard let state = JobState(rawValue: row.text(1)), let kind = JobKind(rawValue: row.text(2)) else {
                throw StoreError.corrupt("job \(id) has an unknown state '\(row.text(1))' or kind '\(row.text(2))'")
            }
            return FinishedTransferRecord(
                id: id, state: state, kind: kind, destination: row.optionalText(3),
                resumePoint: try StoreJSON.decodeOptional(ResumePoint.self, row.optionalText(4), what: "job \(id) resume_point"),
                finishedAtMs: row.optionalInt64(5) ?? 0)
        }
    }

    private static func unfinishedResumePoints(_ connection: SQLiteConnection) throws(StoreError) -> [ResumePoint] {
        try connection.query(Self.unfinishedResumePointsSQL) { (row) throws(StoreError) -> ResumePoint in
            try StoreJSON.decode(ResumePoint.self, row.text(1), what: "job \(row.text(0)) resume_point")
        }
    }

    /// The finished jobs that create local files, finished at or after `?`: searched through
    /// `jobs_finished_by_kind` (schema 6) by kind and time, so a log of a million other finished jobs
    /// (download-memory, uploads to `gs://`) costs nothing — the sweep runs at every worker's start.
    /// The destination comes from the job's `submitted` event (its seq is `jobs.seq`): the spec is
    /// stored there only (schema 8).
    static let finishedLeftoverSQL = finishedLeftoverSelection + """

        ORDER BY jobs.finished_at_ms, jobs.seq
        """

    /// What `finishedLeftoverSQL` and `changedLeftoverSQL` select, and the conditions they share.
    private static let finishedLeftoverSelection = """
        SELECT jobs.id, jobs.state, jobs.kind, json_extract(submitted.data, '$.spec.destination') AS destination,
               jobs.resume_point, jobs.finished_at_ms
        FROM jobs LEFT JOIN events submitted ON submitted.seq = jobs.seq
        WHERE jobs.kind IN ('download-file', 'upload-file', 'upload-data') AND jobs.finished_at_ms >= ?
          AND jobs.state IN ('succeeded', 'failed', 'cancelled')
          AND (jobs.kind = 'download-file' OR destination LIKE 'file:%')
        """

    /// The time of the earliest final event (`succeeded`, `failed`, `cancelled`: the only ones that make a
    /// job final) after the event `?` (a seq), or NULL when none came after it: a range of the table by
    /// seq, no job read.
    static let earliestFinalEventSQL = """
        SELECT min(at_ms) FROM events
        WHERE seq > ? AND (type = 'succeeded' OR type = 'failed' OR type = 'cancelled')
        """

    /// The final jobs that create local files, finished at or after the first `?` (the time of
    /// `earliestFinalEventSQL`), that have a final event after the second `?` (a seq):
    /// searched as `finishedLeftoverSQL` searches, through `jobs_finished_by_kind`, so the jobs of other
    /// kinds that finished meanwhile are not read at all; each candidate's own final events through its
    /// `(job_id, version)` index. A job with several final events after the position (cancelled,
    /// retried, cancelled) comes once; one final before the position does not come, even when it
    /// finished later than a job that became final after it. In no particular order: sorting the rows
    /// cost a drain's last sweep over 2,000 downloads ~1.5 ms.
    ///
    /// Before, the final events after the position were read and each one's job looked up by id: on a
    /// draining worker's last sweep that was a lookup for every job finished in the drain, whatever its
    /// kind (the read cost ~6,600 instructions a download-memory job), and every one of several workers
    /// draining one log made it for every other's jobs too.
    static let changedLeftoverSQL = finishedLeftoverSelection + finalEventAfterPosition

    /// `changedLeftoverSQL` without the jobs whose ids the JSON array (the second `?`) holds. A condition
    /// on the job's own row is tested before the `submitted` event it is joined to is looked up, so a
    /// skipped job costs its row and one probe of the array's ephemeral index (built once a statement).
    /// A draining worker's last sweep over 2,000 downloads it had finished itself read ~600 pages (~14 ms)
    /// and looked for 2,000 partial files (~11 ms) before it skipped them.
    static let changedLeftoverSkippingSQL = finishedLeftoverSelection + """

          AND jobs.id NOT IN (SELECT value FROM json_each(?))
        """ + finalEventAfterPosition

    /// The condition of `changedLeftoverSQL`: a final event of the job after the event `?` (a seq).
    private static let finalEventAfterPosition = """

          AND EXISTS (SELECT 1 FROM events later
                      WHERE later.job_id = jobs.id AND later.seq > ?
                        AND (later.type = 'succeeded' OR later.type = 'failed' OR later.type = 'cancelled'))
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
