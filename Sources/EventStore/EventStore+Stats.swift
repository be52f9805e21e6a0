import Foundation
import JobLifecycle
import JobModel
import StorePort

extension EventStore {
    /// Jobs by queue × state, sorted by queue then state: `stats`' counts alone (a worker's `/metrics`).
    public func queueStateCounts() throws(StoreError) -> [StoreStats.QueueStateCount] {
        try withConnection { (connection) throws(StoreError) in try Self.queueStateCounts(connection, queue: nil) }
    }

    /// The counts of one queue (nil: all), through `jobs_claim` alone (it holds the queue and the state).
    static func queueStateCounts(_ connection: SQLiteConnection, queue: String?) throws(StoreError) -> [StoreStats.QueueStateCount] {
        var counts = try connection.query(
            "SELECT queue, state, count(*) FROM jobs WHERE 1 = 1\(queue == nil ? "" : " AND queue = ?") GROUP BY queue, state",
            queue.map { [.text($0)] } ?? []
        ) { (row) throws(StoreError) -> StoreStats.QueueStateCount in
            guard let state = JobState(rawValue: row.text(1)) else {
                throw StoreError.corrupt("jobs table holds unknown state '\(row.text(1))'")
            }
            return StoreStats.QueueStateCount(queue: row.text(0), state: state, count: row.int(2))
        }
        let order = JobState.allCases
        counts.sort { ($0.queue, order.firstIndex(of: $0.state) ?? 0) < ($1.queue, order.firstIndex(of: $1.state) ?? 0) }
        return counts
    }

    /// Jobs by queue × state, the oldest queued job, running jobs with their live leases, and the
    /// outcome events of the last hour folded into the last-minute and last-hour windows, read in one
    /// snapshot.
    ///
    /// The windows read the outcome events of the last hour through the partial index
    /// `events_outcomes_at` (migration 6), so their cost follows the last hour's work, not the log's size.
    public func stats(queue: String?, now: Int64) throws(StoreError) -> StoreStats {
        let queueClause = queue == nil ? "" : " AND queue = ?"
        let queueValues: [SQLiteValue] = queue.map { [.text($0)] } ?? []
        return try readTransaction { (connection) throws(StoreError) -> StoreStats in
            let counts = try Self.queueStateCounts(connection, queue: queue)

            let oldest = try connection.first(
                "SELECT id, queue, created_at_ms, run_after_ms FROM jobs WHERE state = 'queued'\(queueClause) ORDER BY created_at_ms, seq LIMIT 1",
                queueValues
            ) { row in
                StoreStats.OldestQueued(jobID: row.text(0), queue: row.text(1), createdAtMs: row.int64(2), runAfterMs: row.int64(3))
            }

            let running = try connection.query("""
                SELECT j.id, j.queue, j.kind, coalesce(j.lease_owner, ''), j.lease_token, j.lease_expires_at_ms
                FROM jobs j
                WHERE j.state = 'running'\(queue == nil ? "" : " AND j.queue = ?")
                ORDER BY j.lease_owner, j.id
                """, queueValues) { (row) throws(StoreError) -> StoreStats.RunningLease in
                StoreStats.RunningLease(jobID: row.text(0), queue: row.text(1), kind: row.text(2), owner: row.text(3),
                                        token: row.optionalInt64(4), expiresAtMs: row.optionalInt64(5))
            }

            // Counted by SQLite, by type and error code: an hour of outcomes on a busy log is hundreds of
            // thousands of events, and decoding each one was most of the command's time.
            let groups: [StoreStats.OutcomeGroup]
            do throws(StoreError) {
                groups = try connection.query(Self.recentOutcomesSQL(byQueue: queue != nil),
                                              [.integer(now - 3_600_000), .integer(now), .integer(now - 60_000)] + queueValues) {
                    row in
                    let recent = row.bool(2)
                    return StoreStats.OutcomeGroup(type: row.text(0), code: row.optionalInt64(1), count: row.int(3),
                                                   countInLastMinute: recent ? row.int(3) : 0,
                                                   bytes: row.int64(4), bytesInLastMinute: recent ? row.int64(4) : 0)
                }
            } catch {
                throw MalformedPayload.described(error, on: connection, locate: Self.malformedOutcomeSQL(byQueue: queue != nil),
                                                 [.integer(now - 3_600_000), .integer(now)] + queueValues)
            }
            let windows = try StoreStats.windows(from: groups)
            var stats = StoreStats(nowMs: now, queue: queue, counts: counts, oldestQueued: oldest, running: running,
                                   lastMinute: windows.lastMinute, lastHour: windows.lastHour)
            stats.databaseBytes = try connection.first(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()") { row in row.int64(0) }
            stats.finishedJobs = queue == nil
                ? counts.filter { $0.state.isFinal }.reduce(0) { $0 + $1.count }
                : try connection.first("SELECT count(*) FROM jobs WHERE state IN ('succeeded', 'failed', 'cancelled')") { row in row.int(0) }
            return stats
        }
    }

    /// The outcome events between two times (`?1`, `?2`), and of one queue (`?4`) with `byQueue`, counted
    /// by type, error code and whether they are after `?3` (the last minute), with the bytes of the
    /// `succeeded` ones (counted as `StoreStats.Window.bytes` says; summed once, as grouped: a second
    /// sum of the expression for the minute would extract it from the JSON twice; `total`, whose float
    /// holds any sum, where `sum` failed the whole command on an integer overflow of hand-written sizes). Its
    /// WHERE clause is the partial index's, so SQLite searches `events_outcomes_at`; the queue is checked
    /// job by job through the primary key, never by scanning `jobs`. The condition is spelt as the
    /// index's is since migration 9 (comparisons, not an IN list: see that migration). 200,000 outcomes
    /// of the last hour: ~0.5 s, where decoding each event took ~1.0 s.
    /// The first outcome event `recentOutcomesSQL` reads (`?1`, `?2`; the queue `?3`) whose payload is not
    /// JSON, as its seq and job id: which one made it fail.
    static func malformedOutcomeSQL(byQueue: Bool) -> String {
        """
        SELECT seq, job_id FROM events
        WHERE (type = 'succeeded' OR type = 'failed' OR type = 'attempt_failed') AND at_ms > ?1 AND at_ms <= ?2\(
            byQueue ? " AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id AND jobs.queue = ?3)" : "")
          AND json_valid(data) = 0
        ORDER BY seq LIMIT 1
        """
    }

    static func recentOutcomesSQL(byQueue: Bool) -> String {
        """
        SELECT type, code, recent, count(*), total(bytes) FROM (
            SELECT type, at_ms > ?3 AS recent,
                   CASE WHEN type = 'succeeded' THEN NULL ELSE json_extract(data, '$.error.code') END AS code,
                   CASE WHEN type = 'succeeded' AND json_extract(data, '$.result.skipped') IS NOT 1
                       THEN coalesce(json_extract(data, '$.result.size'), 0) ELSE 0 END AS bytes
            FROM events
            WHERE (type = 'succeeded' OR type = 'failed' OR type = 'attempt_failed') AND at_ms > ?1 AND at_ms <= ?2\(
                byQueue ? " AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id AND jobs.queue = ?4)" : "")
        ) GROUP BY type, code, recent
        """
    }
}
