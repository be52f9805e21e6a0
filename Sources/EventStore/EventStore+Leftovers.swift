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
    /// and one final now is not found again. `now` is not needed here.
    public func leftoversSince(position: Int64?, now: Int64) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) {
        try readTransaction { (connection) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) in
            let finished: [FinishedTransferRecord]
            if let position {
                // A job with several final events after the position (failed, retried, succeeded) comes
                // once for each, with the same row: kept once.
                var seen = Set<String>()
                finished = try Self.finishedTransfers(connection, Self.changedLeftoverSQL, [.integer(position)])
                    .filter { seen.insert($0.id).inserted }
            } else {
                finished = try Self.finishedTransfers(connection, Self.finishedLeftoverSQL, [.integer(Int64.min)])
            }
            let newest = try connection.first("SELECT coalesce(max(seq), 0) FROM events") { row in row.int64(0) } ?? 0
            return (LeftoverCandidates(finished: finished, unfinishedResumePoints: try Self.unfinishedResumePoints(connection)),
                    max(newest, position ?? 0))
        }
    }

    /// The sweep watermark (schema 12): the seq up to which the leftover sweeps have looked, or nil
    /// before the first complete sweep.
    public func sweepWatermark() throws(StoreError) -> Int64? {
        try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.first("SELECT position FROM sweep_watermark WHERE id = 1") { row in row.int64(0) }
        }
    }

    /// Raises the sweep watermark to `position`; a lower value leaves it as it is. Not synced on its own
    /// (the next synced commit carries it): a raise lost in a crash only makes the next worker's first
    /// sweep read again what this one read, and a draining worker's last sweep waited ~1–2 ms here for a
    /// sync of its own.
    public func raiseSweepWatermark(to position: Int64) throws(StoreError) {
        try writeTransaction(syncing: false) { (connection) throws(StoreError) in
            try connection.run("""
                INSERT INTO sweep_watermark (id, position) VALUES (1, ?)
                ON CONFLICT (id) DO UPDATE SET position = max(position, excluded.position)
                """, [.integer(position)])
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
    static let finishedLeftoverSQL = """
        SELECT jobs.id, jobs.state, jobs.kind, json_extract(submitted.data, '$.spec.destination') AS destination,
               jobs.resume_point, jobs.finished_at_ms
        FROM jobs LEFT JOIN events submitted ON submitted.seq = jobs.seq
        WHERE jobs.kind IN ('download-file', 'upload-file', 'upload-data') AND jobs.finished_at_ms >= ?
          AND jobs.state IN ('succeeded', 'failed', 'cancelled')
          AND (jobs.kind = 'download-file' OR destination LIKE 'file:%')
        ORDER BY jobs.finished_at_ms, jobs.seq
        """

    /// The final jobs that create local files with a final event (`succeeded`, `failed`, `cancelled`: the
    /// only ones that make a job final) after `?` (a seq), in the order of those events — a job once for
    /// each (the caller keeps one): the events after it read by seq (a range of the table itself), each
    /// final one's job by id. The CROSS JOIN keeps that order: with `jobs.id IN (SELECT …)` the planner
    /// walked every final job through `jobs_claim` and tested its id (~50 ms a worker's start on 100,000
    /// finished downloads), and with a DISTINCT subquery it walked every event through `(job_id,
    /// version)`. Joining every event after the position, not only the final ones, made a draining
    /// worker's last sweep over 2,000 downloads ~3× as long; sorting and grouping in SQL added ~1.5 ms.
    static let changedLeftoverSQL = """
        SELECT jobs.id, jobs.state, jobs.kind, json_extract(submitted.data, '$.spec.destination') AS destination,
               jobs.resume_point, jobs.finished_at_ms
        FROM (SELECT job_id FROM events
              WHERE seq > ? AND (type = 'succeeded' OR type = 'failed' OR type = 'cancelled')) AS changed
             CROSS JOIN jobs ON jobs.id = changed.job_id
             LEFT JOIN events submitted ON submitted.seq = jobs.seq
        WHERE jobs.kind IN ('download-file', 'upload-file', 'upload-data')
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
