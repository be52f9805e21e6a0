import Foundation
import JobLifecycle
import JobModel
import StorePort

extension PostgresStore {
    /// Jobs by queue × state, sorted by queue then state: `stats`' counts alone (a worker's `/metrics`).
    public func queueStateCounts() throws(StoreError) -> [StoreStats.QueueStateCount] {
        try withConnection { (connection) throws(StoreError) in try Self.queueStateCounts(connection, queue: nil) }
    }

    /// The counts of one queue (nil: all; the queue is $1 when given).
    static func queueStateCounts(_ connection: PostgresConnection, queue: String?) throws(StoreError) -> [StoreStats.QueueStateCount] {
        var counts = try connection.rows(
            "SELECT queue, state, count(*) FROM jobs WHERE true\(queue == nil ? "" : " AND queue = $1") GROUP BY queue, state",
            queue.map { [.text($0)] } ?? []
        ) { (row) throws(StoreError) -> StoreStats.QueueStateCount in
            let stateText = try row.string(1)
            guard let state = JobState(rawValue: stateText) else {
                throw StoreError.corrupt("jobs table holds unknown state '\(stateText)'")
            }
            return StoreStats.QueueStateCount(queue: try row.string(0), state: state, count: Int(try row.integer(2)))
        }
        let order = JobState.allCases
        counts.sort { ($0.queue, order.firstIndex(of: $0.state) ?? 0) < ($1.queue, order.firstIndex(of: $1.state) ?? 0) }
        return counts
    }

    /// Jobs by queue × state, the oldest queued job, running jobs with their live leases, and the
    /// outcome events of the last hour folded into the last-minute and last-hour windows, read in one
    /// snapshot — the same figures as the SQLite adapter's, folded by the same `StoreStats.windows`.
    public func stats(queue: String?, now: Int64) throws(StoreError) -> StoreStats {
        // $1 is the queue when one is given; every query below takes the same parameters.
        let parameters: [PostgresValue] = queue.map { [.text($0)] } ?? []
        let queueClause = queue == nil ? "" : " AND queue = $1"
        return try readTransaction { (connection) throws(StoreError) -> StoreStats in
            let counts = try Self.queueStateCounts(connection, queue: queue)

            let oldest = try connection.row(
                "SELECT id, queue, created_at_ms, run_after_ms FROM jobs WHERE state = 'queued'\(queueClause) ORDER BY created_at_ms, seq LIMIT 1",
                parameters
            ) { (row) throws(StoreError) in
                StoreStats.OldestQueued(jobID: try row.string(0), queue: try row.string(1),
                                        createdAtMs: try row.integer(2), runAfterMs: try row.integer(3))
            }

            let running = try connection.rows("""
                SELECT j.id, j.queue, j.kind, coalesce(j.lease_owner, ''), j.lease_token, j.lease_expires_at_ms
                FROM jobs j
                WHERE j.state = 'running'\(queue == nil ? "" : " AND j.queue = $1")
                ORDER BY j.lease_owner, j.id
                """, parameters) { (row) throws(StoreError) -> StoreStats.RunningLease in
                StoreStats.RunningLease(jobID: try row.string(0), queue: try row.string(1), kind: try row.string(2),
                                        owner: try row.string(3), token: try row.optionalInteger(4),
                                        expiresAtMs: try row.optionalInteger(5))
            }

            let window = parameters.count
            // Counted by the server, by type and error code: an hour of outcomes on a busy log is hundreds
            // of thousands of events, each of which was sent and decoded here.
            let groups: [StoreStats.OutcomeGroup]
            do throws(StoreError) {
                groups = try connection.rows(Self.recentOutcomesSQL(firstTimeParameter: window + 1, byQueue: queue != nil),
                                             parameters + [.integer(now - 3_600_000), .integer(now), .integer(now - 60_000)]) {
                    (row) throws(StoreError) in
                    let recent = try row.flag(2)
                    let count = Int(try row.integer(3))
                    let bytes = try row.integer(4)
                    return StoreStats.OutcomeGroup(type: try row.string(0), code: try row.optionalInteger(1), count: count,
                                                   countInLastMinute: recent ? count : 0, bytes: bytes, bytesInLastMinute: recent ? bytes : 0)
                }
            } catch {
                throw MalformedPayload.described(error, reading: "the outcomes of the last hour")
            }
            let windows = try StoreStats.windows(from: groups)
            var stats = StoreStats(nowMs: now, queue: queue, counts: counts, oldestQueued: oldest, running: running,
                                   lastMinute: windows.lastMinute, lastHour: windows.lastHour)
            // The schema's own tables (a database may hold other schemas), with indexes and TOAST.
            stats.databaseBytes = try connection.row("""
                SELECT coalesce(sum(pg_catalog.pg_total_relation_size(c.oid::regclass)), 0)::bigint FROM pg_catalog.pg_class c
                WHERE c.relnamespace = (SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = 'jobs'::regclass) AND c.relkind = 'r'
                """, []) { (row) throws(StoreError) in try row.integer(0) }
            stats.finishedJobs = queue == nil
                ? counts.filter { $0.state.isFinal }.reduce(0) { $0 + $1.count }
                : Int(try connection.row("SELECT count(*) FROM jobs WHERE state IN ('succeeded', 'failed', 'cancelled')", []) {
                    (row) throws(StoreError) in try row.integer(0)
                } ?? 0)
            return stats
        }
    }

    /// The outcome events between two times (`$first`, `$first + 1`), and of the queue `$1` with
    /// `byQueue`, counted by type, error code and whether they are after `$first + 2` (the last minute),
    /// with the bytes of the `succeeded` ones (counted as `StoreStats.Window.bytes` says; as `numeric`, held
    /// within `bigint`: a size past it, written by hand, failed the cast). Its WHERE clause is the partial index's
    /// (`events_outcomes_at`, migration 6), so the read follows the last hour's work, not the log's size;
    /// the queue is checked job by job. Each event's text is parsed once (`OFFSET 0` keeps the planner
    /// from copying the cast into every use).
    static func recentOutcomesSQL(firstTimeParameter first: Int, byQueue: Bool) -> String {
        """
        SELECT type, code, recent, count(*), least(greatest(coalesce(sum(bytes), 0), 0), 9223372036854775807)::bigint
        FROM (
            SELECT type, recent,
                   CASE WHEN type = 'succeeded' THEN NULL ELSE (j -> 'error' ->> 'code')::bigint END AS code,
                   CASE WHEN type = 'succeeded' AND (j -> 'result' ->> 'skipped') IS DISTINCT FROM 'true'
                       THEN coalesce((j -> 'result' ->> 'size')::numeric, 0) ELSE 0 END AS bytes
            FROM (
                SELECT type, at_ms > $\(first + 2) AS recent, \(JobRecord.parsableJSONSQL("data"))::json AS j FROM events
                WHERE type IN ('succeeded', 'failed', 'attempt_failed') AND at_ms > $\(first) AND at_ms <= $\(first + 1)\(
                    byQueue ? " AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id AND jobs.queue = $1)" : "")
                OFFSET 0
            ) AS parsed
        ) AS counted
        GROUP BY type, code, recent
        """
    }
}
