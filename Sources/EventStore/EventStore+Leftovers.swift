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
