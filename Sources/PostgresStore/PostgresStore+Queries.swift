import Foundation
import JobLifecycle
import JobModel
import StorePort

// MARK: - Queries

extension PostgresStore {
    /// The job with exactly this id, or nil (see `resolveID` for prefixes).
    public func job(_ id: String) throws(StoreError) -> JobRecord? {
        try withConnection { (connection) throws(StoreError) -> JobRecord? in try connection.loadJob(id) }
    }

    /// The state and requests of each of `ids` that exists, in one statement (no spec decoded).
    public func controlStates(ids: [String]) throws(StoreError) -> [JobControlState] {
        guard !ids.isEmpty else { return [] }
        let parameter = PostgresValue.array(PostgresArray(elementType: PostgresType.text, elements: ids.map(PostgresValue.text)))
        return try withConnection { (connection) throws(StoreError) -> [JobControlState] in
            try connection.rows("""
                SELECT id, state, pause_requested, cancel_requested, (\(NewerEvents.firstOfJobSQL(parameter: "jobs.id")))
                FROM jobs WHERE id = ANY($1)
                """, [parameter]) { (row) throws(StoreError) -> JobControlState in
                let id = try row.string(0)
                guard let state = JobState(rawValue: try row.string(1)) else {
                    throw StoreError.corrupt("job \(id) has unknown state '\(try row.string(1))'")
                }
                return JobControlState(id: id, state: state, pauseRequested: try row.flag(2), cancelRequested: try row.flag(3),
                                       newerEventType: try row.optionalString(4))
            }
        }
    }

    /// Jobs matching `filter`, newest first; those of kinds this jobctl does not know counted in `passingOver`.
    public func jobs(filter: JobFilter, passingOver: PassedOver) throws(StoreError) -> [JobRecord] {
        let selected = filter.readsResults ? JobRecord.postgresSelectColumns : JobRecord.postgresSelectColumnsWithoutResult
        guard var (sql, values) = Self.selection("SELECT \(selected) FROM jobs", filter) else { return [] }
        sql += " ORDER BY created_at_ms DESC, seq DESC"
        if let limit = filter.limit {
            values.append(.int(max(0, limit)))
            sql += " LIMIT $\(values.count)"
        }
        let query = sql
        let parameters = values
        return try withConnection { (connection) throws(StoreError) -> [JobRecord] in
            // Jobs with a newer jobctl's event (an empty index read while there are none) are passed over.
            let newer = try connection.jobsWithNewerEvents(inStates: nil)
            return passingOver.passingOver(newer, in: try connection.rows(query, parameters) { (row) throws(StoreError) in
                try JobRecord(listedPostgresRow: row, specs: connection.specs, passingOver: passingOver)
            }.compactMap { $0 })
        }
    }

    /// Among the next `limit` queued jobs in claim order (priority, then run-after, then submission: the
    /// jobs a worker takes first), exactly those whose `submitted` event's text (the spec with the
    /// payload's version) contains `text`, ASCII letters compared without case, in that order.
    ///
    /// The server matches the stored text before anything else is read, so a spec that cannot match is
    /// neither parsed as JSON on the server nor sent nor decoded here. Every worker process asks this
    /// once at start (the look for `gs://` jobs without credentials); through `jobs(filter:)` it read,
    /// parsed, sent and decoded up to 10,000 specs per process — with four processes draining 10,000
    /// jobs, ~0.9 s of the server's statement time, more than a fifth of the whole drain's
    /// (BENCHMARKS.md, PostgreSQL). `lower()` under the "C" collation lowers exactly the ASCII
    /// capitals, as SQLite's `lower()` does, whatever the database's own collation. The window comes
    /// from the partial index `jobs_queued_claim_order` in its order, so its cost does not grow with the
    /// queue (the newest queued jobs, the window before, were sorted from every queued row).
    ///
    /// Each candidate's `submitted` event is read by its primary key (`seq`), in a sub-select per
    /// candidate: joined instead, the planner hashed the candidates and matched the text of EVERY event
    /// of the log (a sequential scan: ~6-12 ms a start with 10,000 events, growing with the log, four
    /// times for four processes). The matching ids come first; only those jobs' rows are read, by their
    /// primary key, in one snapshot (REPEATABLE READ). The statements run with `jit = off`: compiling
    /// took ~150 ms of a ~250 ms statement (EXPLAIN ANALYZE), for statements run once per process.
    public func nextQueuedJobs(limit: Int, specMentioning text: String) throws(StoreError) -> [JobRecord] {
        let parameters: [PostgresValue] = [.int(max(0, limit)), .text(Self.asciiLowercased(text))]
        return try transaction(Self.withoutJIT) { (connection) throws(StoreError) -> [JobRecord] in
            let ids = try connection.rows(Self.nextQueuedJobsSQL, parameters) { (row) throws(StoreError) in try row.string(0) }
            guard !ids.isEmpty else { return [] }
            return try connection.rows(Self.jobsInClaimOrderSQL, [postgresTextArray(ids)]) { (row) throws(StoreError) in
                try JobRecord(postgresRow: row, specs: connection.specs)
            }
        }
    }

    /// The ids `nextQueuedJobs(limit:specMentioning:)` matches: $1 the limit, $2 the text.
    static let nextQueuedJobsSQL = """
            SELECT next.id FROM (SELECT id, seq FROM jobs WHERE state = 'queued' AND NOT waits_for_jobs
                                 ORDER BY priority DESC, run_after_ms, seq LIMIT $1) AS next
            WHERE strpos(lower((SELECT events.data FROM events WHERE events.seq = next.seq) COLLATE "C"), $2) > 0
            """

    /// The jobs of the ids in $1, in claim order.
    static let jobsInClaimOrderSQL = """
            SELECT \(JobRecord.postgresSelectColumns) FROM jobs WHERE jobs.id = ANY($1::text[])
            ORDER BY jobs.priority DESC, jobs.run_after_ms, jobs.seq
            """

    /// How `nextQueuedJobs(limit:specMentioning:)` begins: one snapshot for its two statements, which the
    /// server does not compile to machine code (`SET LOCAL` ends with the transaction; a read-only
    /// store's session stays read-only).
    static let withoutJIT = ["BEGIN ISOLATION LEVEL REPEATABLE READ", "SET LOCAL jit = off"]

    /// `text` with its ASCII capitals made small and every other character left as it is.
    static func asciiLowercased(_ text: String) -> String {
        String(decoding: text.utf8.map { (65...90).contains($0) ? $0 + 32 : $0 }, as: UTF8.self)
    }

    /// How many jobs read per FETCH when streaming jobs.
    static let jobPageSize = 1_000

    /// Every job matching `filter`, oldest first, `jobPageSize` at a time, each page read in a
    /// transaction of its own that ends before its jobs are handed to `body` (libpq holds a whole result
    /// in memory, so never one huge result). A later pass reads the jobs the first one read (up to its
    /// last), as they are then. One REPEATABLE READ snapshot around every pass stayed open for as long as
    /// `body` waited on a slow reader of standard output (`jobctl audit | less`), holding back vacuum's
    /// cleanup of every row the workers updated meanwhile.
    public func forEachJob(filter: JobFilter, passes: Int, passingOver: PassedOver,
                           _ body: @escaping (_ pass: Int, _ job: JobRecord) throws(StoreError) -> Void) throws(StoreError) {
        guard filter.limit == nil else { return try forEachListedJob(filter: filter, passes: passes, passingOver: passingOver, body) }
        guard let (select, parameters) = Self.selection("SELECT \(JobRecord.postgresSelectColumns) FROM jobs", filter) else { return }
        // Jobs with a newer jobctl's event are passed over (an empty index read while there are none).
        let newer = try jobsWithNewerEvents(inStates: nil)
        // The first pass's last job (created_at_ms, seq): later passes stop there.
        var end: (Int64, Int64)?
        for pass in 1...max(1, passes) {
            var after: (Int64, Int64)?
            while true {
                var keys: [String] = []
                var values = parameters
                if let after {
                    values += [.integer(after.0), .integer(after.1)]
                    keys.append("(created_at_ms, seq) > ($\(values.count - 1), $\(values.count))")
                }
                if pass > 1 {
                    guard let end else { return }
                    values += [.integer(end.0), .integer(end.1)]
                    keys.append("(created_at_ms, seq) <= ($\(values.count - 1), $\(values.count))")
                }
                var query = select
                if !keys.isEmpty { query += (parameters.isEmpty ? " WHERE " : " AND ") + keys.joined(separator: " AND ") }
                query += " ORDER BY created_at_ms, seq LIMIT \(Self.jobPageSize)"
                // A page's last row, known kind or not, is where the next page starts. Passed over jobs
                // are counted at the first pass.
                let passed = pass == 1 ? passingOver : PassedOver()
                let page = try readTransaction { (connection) throws(StoreError) -> [(JobRecord?, (Int64, Int64))] in
                    try connection.rows(query, values) { (row) throws(StoreError) in
                        (try JobRecord(listedPostgresRow: row, specs: connection.specs, passingOver: passed),
                         (try row.integer(19), try row.integer(1)))
                    }
                }
                for job in passed.passingOver(newer, in: page.compactMap(\.0)) { try body(pass, job) }
                guard let last = page.last else { break }
                after = last.1
                if pass == 1 { end = after }
                if page.count < Self.jobPageSize { break }
            }
        }
    }

    public func jobsWithNewerEvents(inStates states: Set<JobState>?) throws(StoreError) -> [String: String] {
        try withConnection { (connection) throws(StoreError) -> [String: String] in try connection.jobsWithNewerEvents(inStates: states) }
    }

    /// How many jobs match `filter`, ignoring its `limit`.
    public func countJobs(filter: JobFilter) throws(StoreError) -> Int {
        guard let (query, parameters) = Self.selection("SELECT count(*) FROM jobs", filter) else { return 0 }
        return try withConnection { (connection) throws(StoreError) -> Int in
            Int(try connection.row(query, parameters) { (row) throws(StoreError) in try row.integer(0) } ?? 0)
        }
    }

    public func tally(filter: JobFilter) throws(StoreError) -> [JobState: JobTally] {
        guard let (query, parameters) = Self.selection("SELECT state, count(*), coalesce(sum(bytes_done), 0)::bigint FROM jobs",
                                                       filter) else { return [:] }
        return try withConnection { (connection) throws(StoreError) -> [JobState: JobTally] in
            var tally: [JobState: JobTally] = [:]
            for (name, count, bytes) in try connection.rows(query + " GROUP BY state", parameters, {
                (row) throws(StoreError) in (try row.string(0), try row.integer(1), try row.integer(2))
            }) {
                guard let state = JobState(rawValue: name) else {
                    throw StoreError.corrupt("jobs table holds unknown state '\(name)'")
                }
                tally[state] = JobTally(count: Int(count), bytesDone: bytes)
            }
            return tally
        }
    }

    /// `select` with the WHERE clause of `filter` (its limit aside); nil when nothing can match.
    private static func selection(_ select: String, _ filter: JobFilter) -> (String, [PostgresValue])? {
        var clauses: [String] = []
        var values: [PostgresValue] = []
        if let states = filter.states {
            guard !states.isEmpty else { return nil }
            values.append(postgresTextArray(states.map(\.rawValue).sorted()))
            clauses.append("state = ANY($\(values.count)::text[])")
        }
        if let kinds = filter.kinds {
            guard !kinds.isEmpty else { return nil }
            values.append(postgresTextArray(kinds.map(\.rawValue).sorted()))
            clauses.append("kind = ANY($\(values.count)::text[])")
        }
        if let queue = filter.queue {
            values.append(.text(queue))
            clauses.append("queue = $\(values.count)")
        }
        if let batch = filter.batch {
            values.append(.text(batch))
            clauses.append("batch = $\(values.count)")
        }
        let bounds: [(String, Int64?)] = [
            ("created_at_ms >=", filter.createdSince), ("created_at_ms <", filter.createdUntil),
            ("finished_at_ms >=", filter.finishedSince), ("finished_at_ms <", filter.finishedUntil),
        ]
        for (clause, bound) in bounds {
            if let bound {
                values.append(.integer(bound))
                clauses.append("\(clause) $\(values.count)")
            }
        }
        var sql = select
        if !clauses.isEmpty { sql += " WHERE " + clauses.joined(separator: " AND ") }
        return (sql, values)
    }

    /// Every event of a job, oldest first.
    public func events(jobID: String) throws(StoreError) -> [JobEvent] {
        try withConnection { (connection) throws(StoreError) -> [JobEvent] in
            try connection.rows("SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE job_id = $1 ORDER BY version",
                                [.text(jobID)]) { (row) throws(StoreError) in try JobEvent(postgresRow: row) }
        }
    }

    /// Up to `limit` events with `seq > afterSeq`, in seq order.
    ///
    /// On PostgreSQL seq order is the order the values were taken, not commit order: a transaction
    /// still running may later commit an event below a seq already read. Readers that continue after
    /// the last seq they were given (`watch --all`) use `tailEvents`, which holds such events back.
    public func events(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent] {
        try withConnection { (connection) throws(StoreError) -> [JobEvent] in
            try connection.rows("SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                                [.integer(afterSeq), .int(max(0, limit))]) { (row) throws(StoreError) in
                try JobEvent(postgresRow: row)
            }
        }
    }

    /// Up to `limit` events with `seq > afterSeq`, in seq order, stopping below any seq that a running
    /// transaction may still commit — so a reader that continues after the last seq it was given
    /// (`watch --all`) never skips an event that commits out of seq order.
    ///
    /// A seq missing below a visible one (a gap) was taken by a transaction that is still running or
    /// that rolled back. The first time a gap is seen, the `xmax` of that snapshot is noted: the gap's
    /// holder took its seq before the later event's transaction committed, so it already had its
    /// transaction id (every jobctl writer takes one before its first seq), and that id is below `xmax`.
    /// Once a snapshot's `xmin` reaches the noted `xmax`, every such transaction has ended: what is still
    /// missing was rolled back and is skipped. Until then, the events above the gap are held back.
    public func tailEvents(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent] {
        let (snapshot, rows) = try readTransaction { (connection) throws(StoreError) -> ((xmin: Int64, xmax: Int64), [JobEvent]) in
            let snapshot = try connection.row(
                "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint FROM pg_current_snapshot() AS s") {
                (row) throws(StoreError) in (xmin: try row.integer(0), xmax: try row.integer(1))
            }
            guard let snapshot else { throw StoreError.io("pg_current_snapshot() returned no row") }
            let rows = try connection.rows(
                "SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                [.integer(afterSeq), .int(max(0, limit))]) { (row) throws(StoreError) in try JobEvent(postgresRow: row) }
            return (snapshot, rows)
        }
        return tailGaps.withLock { gaps in
            gaps = gaps.filter { $0.key > afterSeq }
            var delivered: [JobEvent] = []
            var expected = afterSeq + 1
            for event in rows {
                guard let seq = event.seq else { break }
                if seq > expected {
                    let firstSeen = gaps[expected] ?? snapshot.xmax
                    guard snapshot.xmin >= firstSeen else {
                        gaps[expected] = firstSeen
                        break
                    }
                    // For good: a reader starting below it again skips it at once.
                    gaps[expected] = Int64.min
                }
                delivered.append(event)
                expected = seq + 1
            }
            return delivered
        }
    }

    /// The bytes stored under a SHA-256 (hex, any case), or nil.
    public func blob(sha256: String) throws(StoreError) -> Data? {
        try withConnection { (connection) throws(StoreError) -> Data? in
            try connection.row("SELECT data FROM blobs WHERE sha256 = $1", [.text(sha256.lowercased())]) {
                (row) throws(StoreError) -> Data in
                do throws(PostgresError) { return try row.bytea(0) } catch { throw StoreError(error) }
            }
        }
    }

    /// The length of the bytes stored under a SHA-256 (hex, any case), or nil. `octet_length` of a
    /// TOASTed `bytea` is read from its header: the bytes are neither read nor sent.
    public func blobSize(sha256: String) throws(StoreError) -> Int64? {
        try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.row("SELECT octet_length(data) FROM blobs WHERE sha256 = $1", [.text(sha256.lowercased())]) {
                (row) throws(StoreError) -> Int64 in try row.integer(0)
            }
        }
    }

    /// How many jobs are in each state (states without jobs are absent).
    public func counts() throws(StoreError) -> [JobState: Int] {
        try withConnection { (connection) throws(StoreError) -> [JobState: Int] in
            var counts: [JobState: Int] = [:]
            for (name, count) in try connection.rows("SELECT state, count(*) FROM jobs GROUP BY state", [], {
                (row) throws(StoreError) in (try row.string(0), try row.integer(1))
            }) {
                guard let state = JobState(rawValue: name) else {
                    throw StoreError.corrupt("jobs table holds unknown state '\(name)'")
                }
                counts[state] = Int(count)
            }
            return counts
        }
    }

    /// The seq of the newest event; 0 for an empty log.
    public func lastSeq() throws(StoreError) -> Int64 {
        try withConnection { (connection) throws(StoreError) -> Int64 in
            try connection.row("SELECT coalesce(max(seq), 0)::bigint FROM events") { (row) throws(StoreError) in
                try row.integer(0)
            } ?? 0
        }
    }

    /// Final download-file jobs and final jobs that write a `file://` object or its sidecar (uploads,
    /// update-metadata, fetch-url) finished at or after `finishedSince`
    /// (nil: all), oldest first, and the resume points of all unfinished jobs, in one snapshot.
    public func leftoverCandidates(finishedSince: Int64?) throws(StoreError) -> LeftoverCandidates {
        let since = finishedSince ?? Int64.min
        return try readTransaction { (connection) throws(StoreError) -> LeftoverCandidates in
            LeftoverCandidates(finished: try Self.finishedTransfers(connection, Self.finishedLeftoverSQL, [.integer(since)]),
                               unfinishedResumePoints: try Self.unfinishedResumePoints(connection))
        }
    }

    /// The rows of `sql` (the columns of `finishedLeftoverSQL`) as records.
    fileprivate static func finishedTransfers(_ connection: PostgresConnection, _ sql: String,
                                              _ values: [PostgresValue]) throws(StoreError) -> [FinishedTransferRecord] {
        do throws(StoreError) {
            return try finishedTransferRows(connection, sql, values)
        } catch {
            throw MalformedPayload.described(error, reading: "the submitted events of finished jobs that leave local files")
        }
    }

    private static func finishedTransferRows(_ connection: PostgresConnection, _ sql: String,
                                             _ values: [PostgresValue]) throws(StoreError) -> [FinishedTransferRecord] {
        try connection.rows(sql, values) { (row) throws(StoreError) -> FinishedTransferRecord in
            let id = try row.string(0)
            guard let state = JobState(rawValue: try row.string(1)), let kind = JobKind(rawValue: try row.string(2)) else {
                throw StoreError.corrupt("job \(id) has an unknown state '\(try row.string(1))' or kind '\(try row.string(2))'")
            }
            return FinishedTransferRecord(
                id: id, state: state, kind: kind, destination: try row.optionalString(3),
                resumePoint: try StoreJSON.decodeOptional(ResumePoint.self, try row.optionalString(4), what: "job \(id) resume_point"),
                finishedAtMs: try row.optionalInteger(5) ?? 0, leaseTokens: FinishedTransferRecord.leaseTokens(fromList: try row.optionalString(6)))
        }
    }

    fileprivate static func unfinishedResumePoints(_ connection: PostgresConnection) throws(StoreError) -> [ResumePoint] {
        try connection.rows(Self.unfinishedResumePointsSQL) { (row) throws(StoreError) -> ResumePoint in
            let id = try row.string(0)
            return try StoreJSON.decode(ResumePoint.self, try row.string(1), what: "job \(id) resume_point")
        }
    }
}

extension PostgresStore {
    /// The final jobs that create local files and finished at or after `position` (a time; nil: every
    /// such job), the resume points of every unfinished job, and `now` less `LeftoverSweep.overlapMs` as
    /// the next position. By time, not seq: PostgreSQL's commits do not come in seq order, so a job with a
    /// lower seq than one already read may still become final; the overlap catches a final event written
    /// while the previous read ran.
    /// The jobs in `skipping` are passed over before their `submitted` event is read.
    public func leftoversSince(position: Int64?, now: Int64, skipping: Set<String>) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) {
        let next = max(position ?? Int64.min, now - LeftoverSweep.overlapMs)
        guard !skipping.isEmpty else { return (try leftoverCandidates(finishedSince: position), next) }
        let since = position ?? Int64.min
        let skipped = PostgresValue.array(PostgresArray(elementType: PostgresType.text, elements: skipping.map(PostgresValue.text)))
        return try readTransaction { (connection) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) in
            let finished = try Self.finishedTransfers(connection, Self.finishedLeftoverSkippingSQL, [.integer(since), skipped])
            return (LeftoverCandidates(finished: finished, unfinishedResumePoints: try Self.unfinishedResumePoints(connection)), next)
        }
    }

    /// `host`'s sweep watermark (schema 14): the finish time up to which the leftover sweeps on that host
    /// have looked, or nil before the first complete sweep there.
    public func sweepWatermark(host: String) throws(StoreError) -> Int64? {
        try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.row("SELECT position FROM sweep_watermarks WHERE host = $1", [.text(host)]) { (row) throws(StoreError) in
                try row.integer(0)
            }
        }
    }

    /// Raises `host`'s sweep watermark to `position`; a lower value leaves it as it is. Committed without
    /// waiting for the server's WAL flush (`synchronous_commit` off for this transaction only): a raise
    /// lost in a crash only makes the next worker's first sweep read again what this one read.
    public func raiseSweepWatermark(host: String, to position: Int64) throws(StoreError) {
        try writeTransaction { (connection) throws(StoreError) in
            _ = try connection.store("SET LOCAL synchronous_commit TO OFF")
            _ = try connection.store("""
                INSERT INTO sweep_watermarks (host, position) VALUES ($1, $2)
                ON CONFLICT (host) DO UPDATE SET position = GREATEST(sweep_watermarks.position, EXCLUDED.position)
                """, [.text(host), .integer(position)])
        }
    }

    /// The finished jobs that create local files, finished at or after `$1`, through
    /// `jobs_finished_by_kind` (schema 6) by kind and time: other finished jobs are never read. The
    /// destination (fetch-url: its source) comes from the job's `submitted` event (its seq is `jobs.seq`):
    /// the spec is stored there only (schema 8).
    ///
    /// One branch a kind: with `kind IN (…)` the planner took `jobs_finished` and filtered every job
    /// finished since `$1` by kind whenever the statistics still said no job had finished (a fresh or a
    /// just-submitted log until autovacuum analyses it: every draining worker's end, 3 ms for 10,000
    /// finished jobs); with `kind = …` each branch is one range of `jobs_finished_by_kind` whatever the
    /// statistics say.
    static let finishedLeftoverSQL = finishedLeftoverSelection + """

        ORDER BY jobs.finished_at_ms, jobs.seq
        """

    /// `finishedLeftoverSQL` without the jobs whose ids the array `$2` holds: an anti-join (a hash of the
    /// array, whatever its length) before the `submitted` events are read, in no particular order.
    static let finishedLeftoverSkippingSQL = finishedLeftoverSelection + """

          AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest($2::text[]) AS skipped(id) WHERE skipped.id = jobs.id)
        """

    /// What `finishedLeftoverSQL` and `finishedLeftoverSkippingSQL` select, and the conditions they share;
    /// the jobs that write a `file://` sidecar with the lease tokens of their claims (through the log's
    /// UNIQUE (job_id, version) index), which name their sidecar temporaries and upload sessions, and a
    /// download's attempts' own partial files: read only for a download that was claimed more than once.
    private static let finishedLeftoverSelection = """
        SELECT jobs.id, jobs.state, jobs.kind, submitted.destination, jobs.resume_point, jobs.finished_at_ms,
               CASE WHEN jobs.kind = 'download-file' AND jobs.attempts <= 1 THEN NULL
                    ELSE (SELECT string_agg(claims.lease::text, ',') FROM events claims
                          WHERE claims.job_id = jobs.id AND claims.type = 'claimed') END AS tokens
        FROM (SELECT id, seq, state, kind, resume_point, finished_at_ms, attempts FROM jobs
              WHERE kind = 'download-file' AND finished_at_ms >= $1
              UNION ALL
              SELECT id, seq, state, kind, resume_point, finished_at_ms, attempts FROM jobs
              WHERE kind = 'upload-file' AND finished_at_ms >= $1
              UNION ALL
              SELECT id, seq, state, kind, resume_point, finished_at_ms, attempts FROM jobs
              WHERE kind = 'upload-data' AND finished_at_ms >= $1
              UNION ALL
              SELECT id, seq, state, kind, resume_point, finished_at_ms, attempts FROM jobs
              WHERE kind = 'update-metadata' AND finished_at_ms >= $1
              UNION ALL
              SELECT id, seq, state, kind, resume_point, finished_at_ms, attempts FROM jobs
              WHERE kind = 'fetch-url' AND finished_at_ms >= $1) jobs
             LEFT JOIN LATERAL (SELECT \(JobRecord.parsableJSONSQL("events.data"))::json -> 'spec'
                                       ->> (CASE jobs.kind WHEN 'fetch-url' THEN 'source' ELSE 'destination' END) AS destination
                                FROM events WHERE events.seq = jobs.seq AND events.job_id = jobs.id
                                                  AND events.type = 'submitted') submitted ON true
        WHERE jobs.state IN ('succeeded', 'failed', 'cancelled')
          AND (jobs.kind = 'download-file' OR submitted.destination LIKE 'file:%')
        """

    /// The resume points of the unfinished jobs, through the partial index `jobs_resume_points` (schema
    /// 12), which holds only the jobs that have one; the condition stays written exactly so.
    static let unfinishedResumePointsSQL = """
        SELECT id, resume_point FROM jobs WHERE state IN ('queued', 'running', 'paused') AND resume_point IS NOT NULL
        """
}

// MARK: - Replay

extension PostgresStore {
    /// Folds every event in seq order into job records and compares them with the `jobs` projection,
    /// column by column (the same columns as on SQLite). With `verify`, only reports, in one snapshot;
    /// without, also rewrites `jobs` from the fold in one transaction (which locks the table first, so
    /// no append slips in between the fold and the rewrite).
    public func replay(verify: Bool) throws(StoreError) -> ReplayReport {
        if verify {
            return try readTransaction { (connection) throws(StoreError) -> ReplayReport in
                try Self.verify(connection)
            }
        }
        return try writeTransaction { (connection) throws(StoreError) -> ReplayReport in
            try connection.store("LOCK TABLE jobs IN EXCLUSIVE MODE")
            return try Self.replay(connection, rewrite: true)
        }
    }

    /// How many events replay reads at a time.
    static let replayPageSize = 10_000

    /// The fold and comparison of `replay(verify:)`, reading `pageSize` events at a time; the caller
    /// holds the transaction.
    static func replay(_ connection: PostgresConnection, rewrite: Bool,
                       pageSize: Int = replayPageSize) throws(StoreError) -> ReplayReport {
        var fold = ReplayFold()
        // Within a job, seq follows version (each append holds the job's row lock), so seq order folds
        // every job in version order. Read in pages (libpq holds a whole result in memory); the
        // transaction's one snapshot keeps the pages consistent.
        var afterSeq: Int64 = 0
        var pageCount = 0
        repeat {
            let page = try connection.rows(
                "SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                [.integer(afterSeq), .int(pageSize)]) { (row) throws(StoreError) -> (Int64, Result<JobEvent, StoreError>) in
                let seq = try row.integer(0)
                do throws(StoreError) { return (seq, .success(try JobEvent(postgresRow: row))) } catch { return (seq, .failure(error)) }
            }
            pageCount = page.count
            afterSeq = page.last?.0 ?? afterSeq
            for (_, outcome) in page { try fold.fold(outcome) }
        } while pageCount == pageSize

        var stored: [String: [PostgresValue]] = [:]
        for (id, values) in try connection.rows("SELECT \(JobRecord.postgresStoredColumns) FROM jobs", [], {
            (row) throws(StoreError) -> (String, [PostgresValue]) in
            (try row.string(0), try (0..<JobRecord.postgresColumns.count).map { (index) throws(StoreError) in try row.typedValue(index) })
        }) {
            stored[id] = values
        }
        var differences = try fold.differences(stored: stored, columns: JobRecord.postgresColumns) {
            (record) throws(StoreError) in try record.postgresValues()
        }
        let waits = try connection.rows("SELECT job, depends_on FROM job_dependencies", []) { (row) throws(StoreError) in
            DependencyRow(job: try row.string(0), dependsOn: try row.string(1))
        }
        differences += fold.dependencyDifferences(stored: waits)
        differences += try waitFlagDifferences(connection)

        if rewrite {
            try fold.refuseRewriteWithProblems()
            // The lease expiries of running jobs are not in the log (heartbeats extend them without an
            // event): kept across the rewrite, for the jobs that are still running under the same token.
            let expiries = try connection.rows("""
                SELECT id, lease_token, lease_expires_at_ms FROM jobs
                WHERE state = 'running' AND lease_token IS NOT NULL AND lease_expires_at_ms IS NOT NULL
                """, []) { (row) throws(StoreError) in (try row.string(0), try row.integer(1), try row.integer(2)) }
            try connection.store("DELETE FROM jobs")
            for record in fold.recordsInLogOrder {
                try connection.store(JobRecord.postgresInsertSQL, try record.postgresValues())
            }
            if !expiries.isEmpty {
                try connection.store("""
                    UPDATE jobs SET lease_expires_at_ms = kept.expires_at_ms
                    FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS kept(id, token, expires_at_ms)
                    WHERE jobs.id = kept.id AND jobs.state = 'running' AND jobs.lease_token = kept.token
                    """, [postgresTextArray(expiries.map(\.0)),
                          .array(PostgresArray(elementType: PostgresType.int8, elements: expiries.map { .integer($0.1) })),
                          .array(PostgresArray(elementType: PostgresType.int8, elements: expiries.map { .integer($0.2) }))])
            }
            try connection.store("DELETE FROM job_dependencies")
            for row in fold.dependencyRows {
                try connection.store("INSERT INTO job_dependencies (job, depends_on) VALUES ($1, $2)", [.text(row.job), .text(row.dependsOn)])
            }
        }
        return fold.report(differences: differences, rewritten: rewrite)
    }

    /// `replay --verify` job by job (see `StreamingReplay`): a server-side cursor walks the events in
    /// (job_id, version) order — the order of the log's UNIQUE index — `pageSize` rows per FETCH (libpq
    /// holds a whole result in memory, so never one huge result); the stored rows of each page's jobs
    /// come in one query. The caller's REPEATABLE READ transaction keeps every page in one snapshot.
    /// How many jobs `replay --verify` fetches at a time, with their events (about four each): a page
    /// is what bounds the client's memory (stored rows of a few KiB with their specs, decoded events).
    static let verifyPageSize = 500

    /// `replay --verify` job by job (see `StreamingReplay`), in the order the jobs were submitted: a
    /// server-side cursor over the stored rows (`pageSize` per FETCH: libpq holds a whole result in
    /// memory, so never one huge result), and the events of each page's jobs in one query through the
    /// log's UNIQUE (job_id, version) index. Submission order, not job id order: ids made in the same
    /// millisecond sort at random, and the log by id would be read a page per event. Events of jobs with
    /// no stored row (and the log's archive records) are looked for afterwards, only when some exist.
    /// The caller's REPEATABLE READ transaction keeps every query in one snapshot.
    static func verify(_ connection: PostgresConnection, pageSize: Int = verifyPageSize) throws(StoreError) -> ReplayReport {
        var replay = StreamingReplay<PostgresValue>(columns: JobRecord.postgresColumns) {
            (record) throws(StoreError) in try record.postgresValues()
        }
        let decode = { (row: PostgresRow) throws(StoreError) -> (String, Int64, Result<JobEvent, StoreError>) in
            let decoded: Result<JobEvent, StoreError>
            do throws(StoreError) { decoded = .success(try JobEvent(postgresRow: row)) } catch { decoded = .failure(error) }
            return (try row.string(1), try row.integer(0), decoded)
        }
        let eventsOfJob = "SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE job_id = $1 ORDER BY version"
        var storedCount = 0
        var jobsWithEvents = 0
        try connection.store("DECLARE replay_jobs NO SCROLL CURSOR FOR SELECT \(JobRecord.postgresStoredColumns) FROM jobs ORDER BY created_at_ms, seq")
        while true {
            let page = try connection.rows("FETCH FORWARD \(max(1, pageSize)) FROM replay_jobs", []) {
                (row) throws(StoreError) -> (String, [PostgresValue]) in
                (try row.string(0), try (0..<JobRecord.postgresColumns.count).map { (index) throws(StoreError) in try row.typedValue(index) })
            }
            if page.isEmpty { break }
            // Rows in (job_id, version) order: each job's list is in version order.
            var events: [String: [(Int64, Result<JobEvent, StoreError>)]] = [:]
            for (id, seq, decoded) in try connection.rows(
                "SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE job_id = ANY($1::text[]) ORDER BY job_id, version",
                [postgresTextArray(page.map(\.0))], decode) {
                events[id, default: []].append((seq, decoded))
            }
            for (id, stored) in page {
                storedCount += 1
                guard let list = events[id], !list.isEmpty else {
                    replay.storedRowWithoutEvents(jobID: id)
                    continue
                }
                jobsWithEvents += 1
                for (seq, decoded) in list { try replay.fold(jobID: id, seq: seq, decoded) }
                try replay.finishJob { _ in stored }
            }
        }
        try connection.store("CLOSE replay_jobs")

        // Jobs in the log without a stored row: only looked for when the log names more jobs than have rows.
        let loggedJobs = Int(try connection.row("SELECT count(DISTINCT job_id) FROM events", []) {
            (row) throws(StoreError) in try row.integer(0)
        } ?? 0)
        if loggedJobs > jobsWithEvents {
            let missing = try connection.rows(
                "SELECT DISTINCT job_id FROM events WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id)", []
            ) { (row) throws(StoreError) in try row.string(0) }
            for id in missing.sorted() {
                let list = try connection.rows(eventsOfJob, [.text(id)], decode)
                guard !list.isEmpty else { continue }
                for (_, seq, decoded) in list { try replay.fold(jobID: id, seq: seq, decoded) }
                try replay.finishJob { _ in nil }
            }
        }

        let waits = try connection.rows("SELECT job, depends_on FROM job_dependencies", []) { (row) throws(StoreError) in
            DependencyRow(job: try row.string(0), dependsOn: try row.string(1))
        }
        var report = try replay.report(
            storedRowCount: storedCount,
            storedWithoutEvents: { () throws(StoreError) -> [String] in [] },
            storedWaits: waits,
            rebuild: { (id) throws(StoreError) -> JobRecord? in
                let events = try connection.rows(eventsOfJob, [.text(id)]) { (row) throws(StoreError) in try decode(row).2 }
                return try StreamingReplay<PostgresValue>.rebuild(jobID: id, events: events)
            })
        report.differences += try waitFlagDifferences(connection)
        return report
    }

    /// The jobs whose `waits_for_jobs` (schema 21) disagrees with their rows in `job_dependencies`, by
    /// job id. The claim trusts the flag alone: a job flagged without a wait would never run, one with a
    /// wait but not flagged would run before its dependency succeeded. The rows themselves are compared
    /// with the log apart; a rewrite rebuilds both (the table's triggers set the flag).
    /// None before schema 21: a migration's rebuild of the projection (`PostgresMigrator.rebuildProjection`)
    /// can run on a log that has no flag yet.
    static func waitFlagDifferences(_ connection: PostgresConnection) throws(StoreError) -> [ReplayDifference] {
        let hasFlag = try connection.row("""
            SELECT 1 FROM pg_catalog.pg_attribute
            WHERE attrelid = 'jobs'::regclass AND attname = 'waits_for_jobs' AND NOT attisdropped
            """, []) { (row) throws(StoreError) in try row.integer(0) } != nil
        guard hasFlag else { return [] }
        return try connection.rows("""
            SELECT id, waits_for_jobs::text, waits::text FROM (
                SELECT id, waits_for_jobs, EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = jobs.id) AS waits FROM jobs) AS flags
            WHERE waits_for_jobs <> waits ORDER BY id COLLATE "C"
            """, []) { (row) throws(StoreError) in
            ReplayDifference(jobID: try row.string(0), column: "waits_for_jobs", stored: try row.string(1), rebuilt: try row.string(2))
        }
    }
}

extension PostgresConnection {
    /// `PostgresStore.jobsWithNewerEvents`, on this connection.
    func jobsWithNewerEvents(inStates states: Set<JobState>?) throws(StoreError) -> [String: String] {
        var found: [String: String] = [:]
        for (id, type) in try rows(NewerEvents.jobsSQL(inStates: states), []) { (row) throws(StoreError) in
            (try row.string(0), try row.string(1))
        } {
            found[id] = type
        }
        return found
    }

    /// Refuses (`unknownEventType`) to go on with job `jobID` when its history holds an event of a type
    /// this jobctl does not know: a control folded onto the row as if it were not there (a pause, a
    /// cancel or a retry of a job a newer jobctl had held).
    func refuseNewerEvents(_ jobID: String) throws(StoreError) {
        if let type = try row(NewerEvents.firstOfJobSQL(parameter: "$1"), [.text(jobID)], { (row) throws(StoreError) in try row.string(0) }) {
            throw StoreError.unknownEventType(jobID: jobID, type: type)
        }
    }
}
