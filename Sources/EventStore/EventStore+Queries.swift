import Foundation
import JobLifecycle
import JobModel
import StorePort

extension EventStore {
    /// The job with exactly this id, or nil (see `resolveID` for prefixes).
    public func job(_ id: String) throws(StoreError) -> JobRecord? {
        try withConnection { (connection) throws(StoreError) -> JobRecord? in try connection.loadJob(id) }
    }

    /// The state and requests of each of `ids` that exists, one prepared statement stepped per id in
    /// one read transaction (no spec decoded): one snapshot for all of them, so while other worker
    /// processes commit, the connection's page cache is dropped and pages are read again once, not
    /// before every id.
    public func controlStates(ids: [String]) throws(StoreError) -> [JobControlState] {
        guard !ids.isEmpty else { return [] }
        return try readTransaction { (connection) throws(StoreError) -> [JobControlState] in
            var states: [JobControlState] = []
            states.reserveCapacity(ids.count)
            for id in ids {
                states += try connection.query("""
                    SELECT state, pause_requested, cancel_requested, (\(NewerEvents.firstOfJobSQL(parameter: "jobs.id")))
                    FROM jobs WHERE id = ?
                    """, [.text(id)]) { (row) throws(StoreError) -> JobControlState in
                    guard let state = JobState(rawValue: row.text(0)) else {
                        throw StoreError.corrupt("job \(id) has unknown state '\(row.text(0))'")
                    }
                    return JobControlState(id: id, state: state, pauseRequested: row.bool(1), cancelRequested: row.bool(2),
                                           newerEventType: row.optionalText(3))
                }
            }
            return states
        }
    }

    /// Jobs matching `filter`, newest first.
    ///
    /// With a limit and a condition (`list --state queued --limit 20`), the newest jobs are looked at
    /// first: the window of the `newestWindow(limit:)` newest jobs (`jobs_created`, read backwards) is
    /// filtered, and when it holds `limit` matches they are the answer — every match outside the window
    /// is older than all of the window, so it could only come after them. Otherwise the whole condition
    /// runs as before. Without statistics SQLite answers a condition on the state through `jobs_claim`
    /// and sorts every match: with 159,000 jobs queued, 197 ms to show 5 of them (BENCHMARKS.md).
    public func jobs(filter: JobFilter, passingOver: PassedOver) throws(StoreError) -> [JobRecord] {
        let order = " ORDER BY created_at_ms DESC, seq DESC"
        let selected = filter.readsResults ? JobRecord.selectColumns : JobRecord.selectColumnsWithoutResult
        guard var (sql, values) = Self.selection("SELECT \(selected) FROM jobs", filter) else { return [] }
        sql += order
        var window: (sql: String, values: [SQLiteValue], limit: Int)?
        if let limit = filter.limit {
            sql += " LIMIT ?"
            values.append(.int(max(0, limit)))
            let newest = "SELECT \(selected) FROM (SELECT * FROM jobs INDEXED BY jobs_created"
                + "\(order) LIMIT \(Self.newestWindow(limit: limit))) AS jobs"
            if limit > 0, filter != JobFilter(limit: limit, readsResults: filter.readsResults),
               var (windowSQL, windowValues) = Self.selection(newest, filter) {
                windowSQL += order + " LIMIT ?"
                windowValues.append(.int(limit))
                window = (windowSQL, windowValues, limit)
            }
        }
        let query = sql
        let parameters = values
        return try readTransaction { (connection) throws(StoreError) -> [JobRecord] in
            // Jobs with a newer jobctl's event (an empty index read while there are none) are passed over.
            let newer = try connection.jobsWithNewerEvents(inStates: nil)
            // The rows of the read whose jobs are returned are the ones counted as passed over.
            let read = { (sql: String, values: [SQLiteValue], passed: PassedOver) throws(StoreError) -> [JobRecord] in
                passed.passingOver(newer, in: try connection.query(sql, values) { (row) throws(StoreError) in
                    try JobRecord(listedRow: row, specs: connection.decodedSpecs, passingOver: passed)
                }.compactMap { $0 })
            }
            if let window {
                let passed = PassedOver()
                let found = try read(window.sql, window.values, passed)
                if found.count == window.limit {
                    passingOver.add(passed)
                    return found
                }
            }
            return try read(query, parameters, passingOver)
        }
    }

    /// How many of the newest jobs `jobs(filter:)` looks at first for `limit` matches: enough for a
    /// condition that one job in twenty meets, and a cost of at most a few milliseconds.
    static func newestWindow(limit: Int) -> Int { max(1_000, min(limit, 1_000) * 20) }

    /// Among the next `limit` queued jobs in claim order (priority, then run-after, then submission: the
    /// jobs a worker takes first), exactly those whose `submitted` payload (the spec, with the payload's
    /// version) contains `text` (ASCII letters without case), in that order. SQLite matches the text, so
    /// a spec that cannot match is never decoded, and the window comes from `jobs_queued_claim_order` as
    /// it stands, so the look costs the same however long the queue is (a worker's start-up look for
    /// `gs://` jobs).
    ///
    /// The window's `submitted` events (an event's seq is its job's) are matched with `LIKE`, which
    /// ignores ASCII case as it walks the text. The window was the newest queued jobs before, which no
    /// index hands out in order: SQLite read and sorted every queued row, ~12 ms of every worker's start
    /// with 10,000 jobs queued, four times over for four processes (BENCHMARKS.md). `%`, `_` and `\` in
    /// `text` are escaped: matched as written.
    public func nextQueuedJobs(limit: Int, specMentioning text: String) throws(StoreError) -> [JobRecord] {
        let parameters: [SQLiteValue] = [.int(max(0, limit)), .text(Self.likePattern(containing: text))]
        return try withConnection { (connection) throws(StoreError) -> [JobRecord] in
            try connection.query(Self.nextQueuedJobsSQL, parameters) { (row) throws(StoreError) in
                try JobRecord(row: row, specs: connection.decodedSpecs)
            }
        }
    }

    /// The statement of `nextQueuedJobs(limit:specMentioning:)`: the limit, the `LIKE` pattern. The window
    /// reads only the claim-order index (it holds `seq`); the index's condition is written out, so the
    /// partial index applies (the jobs still waiting for another job are not among the next claimed).
    static let nextQueuedJobsSQL = """
        SELECT \(JobRecord.selectColumns) FROM jobs
        WHERE jobs.id IN (SELECT events.job_id
                          FROM (SELECT seq FROM jobs INDEXED BY jobs_queued_claim_order WHERE state = 'queued' AND waits_for_jobs = 0
                                ORDER BY priority DESC, run_after_ms, seq LIMIT ?) AS next
                          JOIN events ON events.seq = next.seq
                          WHERE events.data LIKE ? ESCAPE '\\')
        ORDER BY jobs.priority DESC, jobs.run_after_ms, jobs.seq
        """

    /// A `LIKE` pattern (escape character `\`) matching any text that contains `text`.
    static func likePattern(containing text: String) -> String {
        var pattern = "%"
        for character in text.unicodeScalars {
            if character == "%" || character == "_" || character == "\\" { pattern.unicodeScalars.append("\\") }
            pattern.unicodeScalars.append(character)
        }
        return pattern + "%"
    }

    /// How many jobs `forEachJob` reads in one read transaction.
    static let jobPageSize = 500

    /// Every job matching `filter`, oldest first (the `jobs_created` index gives the order), read
    /// `jobPageSize` at a time, each page in a read transaction of its own that ends before its jobs are
    /// handed to `body`. A later pass reads the jobs the first one read (up to its last), as they are then.
    ///
    /// Why pages: `body` writes to standard output (`jobctl audit`), which may block for as long as
    /// whoever reads it pleases (a pager, a slow pipe). One transaction around every pass held its
    /// snapshot all that time, and while a reader holds a snapshot no checkpoint can copy the WAL past
    /// it or start it over: beside four draining workers the WAL grew by ~5 KiB a job, without bound.
    public func forEachJob(filter: JobFilter, passes: Int, passingOver: PassedOver,
                           _ body: @escaping (_ pass: Int, _ job: JobRecord) throws(StoreError) -> Void) throws(StoreError) {
        guard filter.limit == nil else { return try forEachListedJob(filter: filter, passes: passes, passingOver: passingOver, body) }
        let specs = DecodedSpecCache.uncached()
        // In the order of `jobs_created`, so a page reads its rows and stops: SQLite picked `jobs_claim`
        // for a `--state` filter and sorted every job in that state for each page. `jobs_batch` holds
        // the same order after the batch, and a batch is small.
        let table = filter.batch == nil ? "jobs INDEXED BY jobs_created" : "jobs"
        // Jobs with a newer jobctl's event are passed over (an empty index read while there are none).
        let newer = try jobsWithNewerEvents(inStates: nil)
        // The first pass's last job (created_at_ms, seq): later passes stop there.
        var end: (Int64, Int64)?
        for pass in 1...max(1, passes) {
            var after: (Int64, Int64)?
            while true {
                var keys: [String] = []
                var values: [SQLiteValue] = []
                if let after {
                    keys.append("(created_at_ms, seq) > (?, ?)")
                    values += [.integer(after.0), .integer(after.1)]
                }
                if pass > 1 {
                    guard let end else { return }
                    keys.append("(created_at_ms, seq) <= (?, ?)")
                    values += [.integer(end.0), .integer(end.1)]
                }
                guard let (select, parameters) = Self.selection("SELECT \(JobRecord.selectColumns) FROM \(table)", filter, and: keys)
                else { return }
                let query = select + " ORDER BY created_at_ms, seq LIMIT \(Self.jobPageSize)"
                // A page's last row, known kind or not, is where the next page starts. Passed over jobs
                // are counted at the first pass.
                let passed = pass == 1 ? passingOver : PassedOver()
                let page = try readTransaction { (connection) throws(StoreError) -> [(JobRecord?, (Int64, Int64))] in
                    try connection.query(query, parameters + values) { (row) throws(StoreError) in
                        (try JobRecord(listedRow: row, specs: specs, passingOver: passed), (row.int64(19), row.int64(1)))
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

    /// How many jobs match `filter`, ignoring its `limit` (so a listing can say "50 of N").
    public func countJobs(filter: JobFilter) throws(StoreError) -> Int {
        guard let (query, parameters) = Self.selection("SELECT count(*) FROM jobs", filter) else { return 0 }
        return try withConnection { (connection) throws(StoreError) -> Int in
            try connection.first(query, parameters) { row in row.int(0) } ?? 0
        }
    }

    public func tally(filter: JobFilter) throws(StoreError) -> [JobState: JobTally] {
        guard let (query, parameters) = Self.selection("SELECT state, count(*), coalesce(sum(bytes_done), 0) FROM jobs", filter) else {
            return [:]
        }
        return try withConnection { (connection) throws(StoreError) -> [JobState: JobTally] in
            var tally: [JobState: JobTally] = [:]
            try connection.forEach(query + " GROUP BY state", parameters) { (row) throws(StoreError) in
                guard let state = JobState(rawValue: row.text(0)) else {
                    throw StoreError.corrupt("jobs table holds unknown state '\(row.text(0))'")
                }
                tally[state] = JobTally(count: row.int(1), bytesDone: row.int64(2))
            }
            return tally
        }
    }

    /// `select` with the WHERE clause of `filter` (its limit aside); nil when nothing can match.
    /// `and`: further clauses, their parameters after the filter's.
    static func selection(_ select: String, _ filter: JobFilter, and more: [String] = []) -> (String, [SQLiteValue])? {
        var clauses: [String] = []
        var values: [SQLiteValue] = []
        if let states = filter.states {
            guard !states.isEmpty else { return nil }
            let sorted = states.map(\.rawValue).sorted()
            clauses.append("state IN (\(sorted.map { _ in "?" }.joined(separator: ", ")))")
            values += sorted.map(SQLiteValue.text)
        }
        if let kinds = filter.kinds {
            guard !kinds.isEmpty else { return nil }
            let sorted = kinds.map(\.rawValue).sorted()
            clauses.append("kind IN (\(sorted.map { _ in "?" }.joined(separator: ", ")))")
            values += sorted.map(SQLiteValue.text)
        }
        if let queue = filter.queue {
            clauses.append("queue = ?")
            values.append(.text(queue))
        }
        if let batch = filter.batch {
            clauses.append("batch = ?")
            values.append(.text(batch))
        }
        let bounds: [(String, Int64?)] = [
            ("created_at_ms >= ?", filter.createdSince), ("created_at_ms < ?", filter.createdUntil),
            ("finished_at_ms >= ?", filter.finishedSince), ("finished_at_ms < ?", filter.finishedUntil),
        ]
        for (clause, bound) in bounds {
            if let bound {
                clauses.append(clause)
                values.append(.integer(bound))
            }
        }
        clauses += more
        var sql = select
        if !clauses.isEmpty { sql += " WHERE " + clauses.joined(separator: " AND ") }
        return (sql, values)
    }

    /// Every event of a job, oldest first.
    public func events(jobID: String) throws(StoreError) -> [JobEvent] {
        try withConnection { (connection) throws(StoreError) -> [JobEvent] in
            try connection.query("SELECT \(JobEvent.selectColumns) FROM events WHERE job_id = ? ORDER BY version",
                                 [.text(jobID)]) { (row) throws(StoreError) in try JobEvent(row: row) }
        }
    }

    /// Up to `limit` events with `seq > afterSeq`, in log order (audit, watch, tailing).
    public func events(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent] {
        try withConnection { (connection) throws(StoreError) -> [JobEvent] in
            try connection.query("SELECT \(JobEvent.selectColumns) FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                                 [.integer(afterSeq), .int(max(0, limit))]) { (row) throws(StoreError) in
                try JobEvent(row: row)
            }
        }
    }

    /// The bytes stored under a SHA-256 (hex, any case), or nil.
    public func blob(sha256: String) throws(StoreError) -> Data? {
        try withConnection { (connection) throws(StoreError) -> Data? in
            try connection.first("SELECT data FROM blobs WHERE sha256 = ?", [.text(sha256.lowercased())]) { row in
                row.blob(0)
            }
        }
    }

    /// The length of the bytes stored under a SHA-256 (hex, any case), or nil. SQLite answers
    /// `length()` of a BLOB from the record's header, without reading its overflow pages.
    public func blobSize(sha256: String) throws(StoreError) -> Int64? {
        try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.first("SELECT length(data) FROM blobs WHERE sha256 = ?", [.text(sha256.lowercased())]) { row in
                row.int64(0)
            }
        }
    }

    /// How many jobs are in each state (states without jobs are absent).
    public func counts() throws(StoreError) -> [JobState: Int] {
        try withConnection { (connection) throws(StoreError) -> [JobState: Int] in
            var counts: [JobState: Int] = [:]
            try connection.forEach("SELECT state, count(*) FROM jobs GROUP BY state") { (row) throws(StoreError) in
                guard let state = JobState(rawValue: row.text(0)) else {
                    throw StoreError.corrupt("jobs table holds unknown state '\(row.text(0))'")
                }
                counts[state] = row.int(1)
            }
            return counts
        }
    }

    /// The seq of the newest event; 0 for an empty log.
    public func lastSeq() throws(StoreError) -> Int64 {
        try withConnection { (connection) throws(StoreError) -> Int64 in
            try connection.first("SELECT coalesce(max(seq), 0) FROM events") { row in row.int64(0) } ?? 0
        }
    }
}

extension EventStore {
    /// Up to `limit` log rows with `seq > afterSeq`, in seq order, exactly as stored.
    public func logRows(afterSeq: Int64, limit: Int) throws(StoreError) -> [LogRow] {
        try withConnection { (connection) throws(StoreError) -> [LogRow] in
            try connection.query("SELECT seq, job_id, version, type, at_ms, actor, lease, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                                 [.integer(afterSeq), .int(max(0, limit))]) { (row) throws(StoreError) in
                LogRow(seq: row.int64(0), jobID: row.text(1), version: row.int(2), type: row.text(3), atMs: row.int64(4),
                       actor: row.text(5), leaseToken: row.optionalInt64(6), data: row.text(7))
            }
        }
    }

    /// The SHA-256 of every stored blob, in ascending order.
    public func blobDigests() throws(StoreError) -> [String] {
        try withConnection { (connection) throws(StoreError) -> [String] in
            try connection.query("SELECT sha256 FROM blobs ORDER BY sha256") { row in row.text(0) }
        }
    }

    /// Every record of an expired blob, in ascending hash order, exactly as stored.
    public func expiredBlobRecords() throws(StoreError) -> [ExpiredBlob] {
        try withConnection { (connection) throws(StoreError) -> [ExpiredBlob] in
            try connection.query("SELECT sha256, size, expired_at_ms FROM expired_blobs ORDER BY sha256") { row in
                ExpiredBlob(sha256: row.text(0), size: row.int64(1), expiredAtMs: row.int64(2))
            }
        }
    }
}

extension SQLiteConnection {
    /// `EventStore.jobsWithNewerEvents`, on this connection.
    func jobsWithNewerEvents(inStates states: Set<JobState>?) throws(StoreError) -> [String: String] {
        var found: [String: String] = [:]
        try forEach(NewerEvents.jobsSQL(inStates: states), []) { (row) throws(StoreError) in found[row.text(0)] = row.text(1) }
        return found
    }

    /// Refuses (`unknownEventType`) to go on with job `jobID` when its history holds an event of a type
    /// this jobctl does not know: a control folded onto the row as if it were not there (a pause, a
    /// cancel or a retry of a job a newer jobctl had held).
    func refuseNewerEvents(_ jobID: String) throws(StoreError) {
        if let type = try first(NewerEvents.firstOfJobSQL(parameter: "?"), [.text(jobID)], { row in row.text(0) }) {
            throw StoreError.unknownEventType(jobID: jobID, type: type)
        }
    }
}
