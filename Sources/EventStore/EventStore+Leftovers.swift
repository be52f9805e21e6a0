import Foundation
import JobModel

/// A final transfer job that may have left hidden files on local disk (a partial download, a `file://`
/// upload session): what the orphan sweep needs to find them.
public struct FinishedTransferRecord: Sendable, Equatable {
    public var id: String
    /// succeeded, failed or cancelled.
    public var state: JobState
    public var kind: JobKind
    /// download-file: the local path; uploads: the destination reference.
    public var destination: String?
    /// The last resume point the log recorded.
    public var resumePoint: ResumePoint?
    /// When the job reached its final state.
    public var finishedAtMs: Int64
}

/// What `EventStore.leftoverCandidates(finishedSince:)` returns: the final jobs whose local files may be
/// left over, and the resume points of every unfinished job (whose files must never be touched).
public struct LeftoverCandidates: Sendable, Equatable {
    public var finished: [FinishedTransferRecord]
    public var unfinishedResumePoints: [ResumePoint]
}

extension EventStore {
    /// Final download-file jobs and final uploads to `file://` (the jobs that create local temporary files)
    /// that finished at or after `finishedSince` (nil: all), oldest first, and the resume points of all
    /// unfinished jobs — read in one snapshot. Specs are not decoded: only the destination is read.
    public func leftoverCandidates(finishedSince: Int64?) throws(StoreError) -> LeftoverCandidates {
        let since = finishedSince ?? Int64.min
        return try readTransaction { (connection) throws(StoreError) -> LeftoverCandidates in
            let finished = try connection.query("""
                SELECT id, state, kind, json_extract(spec, '$.destination'), resume_point, finished_at_ms FROM jobs
                WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms >= ?
                  AND (kind = 'download-file'
                       OR (kind IN ('upload-file', 'upload-data') AND json_extract(spec, '$.destination') LIKE 'file:%'))
                ORDER BY finished_at_ms, seq
                """, [.integer(since)]) { (row) throws(StoreError) -> FinishedTransferRecord in
                let id = row.text(0)
                guard let state = JobState(rawValue: row.text(1)), let kind = JobKind(rawValue: row.text(2)) else {
                    throw StoreError.corrupt("job \(id) has an unknown state '\(row.text(1))' or kind '\(row.text(2))'")
                }
                return FinishedTransferRecord(
                    id: id, state: state, kind: kind, destination: row.optionalText(3),
                    resumePoint: try StoreJSON.decodeOptional(ResumePoint.self, row.optionalText(4), what: "job \(id) resume_point"),
                    finishedAtMs: row.optionalInt64(5) ?? 0)
            }
            let unfinished = try connection.query("""
                SELECT id, resume_point FROM jobs
                WHERE state NOT IN ('succeeded', 'failed', 'cancelled') AND resume_point IS NOT NULL
                """) { (row) throws(StoreError) -> ResumePoint in
                try StoreJSON.decode(ResumePoint.self, row.text(1), what: "job \(row.text(0)) resume_point")
            }
            return LeftoverCandidates(finished: finished, unfinishedResumePoints: unfinished)
        }
    }
}
