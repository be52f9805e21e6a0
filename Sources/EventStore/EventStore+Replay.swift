import Foundation
import JobLifecycle
import JobModel
import StorePort

extension EventStore {
    /// Folds every event from seq 1 into job records and compares them with the `jobs` projection.
    ///
    /// With `verify`, only reports the differences (works on a read-only store). Without, also
    /// rewrites the `jobs` table from the fold in one transaction. Lease expiries (in the rows since
    /// schema 10, but written by heartbeats, not events) and blobs are not compared.
    ///
    /// `verify` first runs SQLite's `PRAGMA quick_check` (every page and b-tree of the file, indexes
    /// included, without comparing index entries to their rows) and compares the schema with what the
    /// migrations make (`SchemaCheck`): what they find is a problem of the log, before the fold's own,
    /// as is a read the damage then makes fail.
    public func replay(verify: Bool) throws(StoreError) -> ReplayReport {
        if verify {
            return try readTransaction { (connection) throws(StoreError) -> ReplayReport in
                let damage = try Self.quickCheck(connection) + SchemaCheck.problems(connection)
                guard !damage.isEmpty else { return try Self.verify(connection) }
                do throws(StoreError) {
                    var report = try Self.verify(connection)
                    report.problems = damage + report.problems
                    return report
                } catch {
                    return ReplayReport(eventsRead: 0, jobsRebuilt: 0, differences: [],
                                        problems: damage + ["the log could not be replayed on the damaged file: \(error)"], rewritten: false)
                }
            }
        }
        return try writeTransaction { (connection) throws(StoreError) -> ReplayReport in
            try Self.replay(connection, rewrite: true)
        }
    }

    /// How many of `PRAGMA quick_check`'s findings a verify reports (SQLite stops looking there).
    static let quickCheckLimit = 20

    /// What `PRAGMA quick_check` finds wrong with the database file, each as a problem that says what
    /// to do; empty when it answers `ok`. https://www.sqlite.org/pragma.html#pragma_quick_check
    static func quickCheck(_ connection: SQLiteConnection) throws(StoreError) -> [String] {
        let findings = try connection.query("PRAGMA quick_check(\(quickCheckLimit))") { row in row.text(0) }
        guard findings != ["ok"] else { return [] }
        return findings.map { finding in
            "the database file is damaged (SQLite quick_check: \(finding)): stop every worker and keep a copy of the file with "
                + "its -wal and -shm files; a damaged index is rebuilt by `sqlite3 FILE 'REINDEX'`, other damage needs "
                + "`sqlite3 FILE .recover` into a new file"
        }
    }

    /// Rewrites the `jobs` projection from the log with the current fold, then appends the event that
    /// honours a request still pending on a job that no longer runs (the lifecycle's `settle`), which a
    /// log written by an older jobctl can hold. Used by migrations that change the fold; the caller
    /// holds a write transaction.
    static func rebuildProjection(_ connection: SQLiteConnection, now: Int64, actor: String) throws(StoreError) {
        _ = try replay(connection, rewrite: true)
        let unsettled = try connection.query("""
            SELECT \(JobRecord.selectColumns) FROM jobs
            WHERE state IN ('queued', 'paused') AND (pause_requested != 0 OR cancel_requested != 0) ORDER BY seq
            """) { (row) throws(StoreError) in try JobRecord(row: row, specs: connection.decodedSpecs) }
        for job in unsettled {
            _ = try connection.perform(.settle, jobID: job.id, on: job, actor: actor, now: now)
        }
    }

    private static func replay(_ connection: SQLiteConnection, rewrite: Bool) throws(StoreError) -> ReplayReport {
        var fold = ReplayFold()
        // Streams the log: one event decoded at a time; only the records stay in memory.
        try connection.forEach("SELECT \(JobEvent.selectColumns) FROM events ORDER BY seq") { (row) throws(StoreError) in
            let decoded: Result<JobEvent, StoreError>
            do throws(StoreError) { decoded = .success(try JobEvent(row: row)) } catch { decoded = .failure(error) }
            try fold.fold(decoded)
        }

        var stored: [String: [SQLiteValue]] = [:]
        try connection.forEach("SELECT \(JobRecord.storedColumns) FROM jobs") { row in
            stored[row.text(0)] = (0..<JobRecord.columns.count).map { row.value($0) }
        }
        var differences = try fold.differences(stored: stored, columns: JobRecord.columns) {
            (record) throws(StoreError) in try record.rowValues()
        }
        let waits = try connection.query("SELECT job, depends_on FROM job_dependencies") { row in
            DependencyRow(job: row.text(0), dependsOn: row.text(1))
        }
        differences += fold.dependencyDifferences(stored: waits)
        differences += try connection.query(JobRecord.finishedSeqDifferencesSQL) { row in
            ReplayDifference(jobID: row.text(0), column: "finished_seq", stored: row.value(1).description,
                             rebuilt: row.value(2).description)
        }
        differences += try waitFlagDifferences(connection)

        if rewrite {
            try fold.refuseRewriteWithProblems()
            // The lease expiries of running jobs are not in the log (heartbeats extend them without an
            // event): kept across the rewrite, for the jobs that are still running under the same token.
            let expiries = try connection.query("""
                SELECT id, lease_token, lease_expires_at_ms FROM jobs
                WHERE state = 'running' AND lease_token IS NOT NULL AND lease_expires_at_ms IS NOT NULL
                """) { row in (row.text(0), row.int64(1), row.int64(2)) }
            try connection.run("DELETE FROM jobs")
            for record in fold.recordsInLogOrder {
                try connection.run(JobRecord.insertSQL, try record.rowValues())
            }
            try connection.run(JobRecord.finishedSeqFromLogSQL)
            for (id, token, expiresAtMs) in expiries {
                try connection.run(
                    "UPDATE jobs SET lease_expires_at_ms = ? WHERE id = ? AND state = 'running' AND lease_token = ?",
                    [.integer(expiresAtMs), .text(id), .integer(token)])
            }
            try connection.run("DELETE FROM job_dependencies")
            for row in fold.dependencyRows {
                try connection.run("INSERT INTO job_dependencies (job, depends_on) VALUES (?, ?)", [.text(row.job), .text(row.dependsOn)])
            }
            connection.dependencyRowsAbsent = nil
        }
        return fold.report(differences: differences, rewritten: rewrite)
    }

    /// `replay --verify` job by job (see `StreamingReplay`), in the order the jobs were submitted
    /// (`jobs_created`): each stored row, then its events through the log's UNIQUE (job_id, version)
    /// index, compared and forgotten. Memory stays flat whatever the log's size.
    ///
    /// Submission order, not job id order: ids made in the same millisecond sort at random, so walking
    /// the log by id jumps across the whole table (a page read per event once the log outgrows SQLite's
    /// cache), while a job's events follow their submission closely. Events of jobs with no stored row
    /// (and the log's own archive records) are found afterwards, only when some exist.
    static func verify(_ connection: SQLiteConnection) throws(StoreError) -> ReplayReport {
        var replay = StreamingReplay<SQLiteValue>(columns: JobRecord.columns) { (record) throws(StoreError) in try record.rowValues() }
        let eventsOfJob = "SELECT \(JobEvent.selectColumns) FROM events WHERE job_id = ? ORDER BY version"
        // The seq of the folded job's event at `storedVersion` (its stored row's version), for `finished_seq`.
        var storedVersion: Int64?
        var seqAtStoredVersion: Int64?
        func fold(_ jobID: String) throws(StoreError) -> Bool {
            var any = false
            try connection.forEach(eventsOfJob, [.text(jobID)]) { (row) throws(StoreError) in
                any = true
                if let storedVersion, row.int64(2) == storedVersion { seqAtStoredVersion = row.int64(0) }
                let decoded: Result<JobEvent, StoreError>
                do throws(StoreError) { decoded = .success(try JobEvent(row: row)) } catch { decoded = .failure(error) }
                try replay.fold(jobID: jobID, seq: row.int64(0), decoded)
            }
            return any
        }
        var storedCount = 0
        var jobsWithEvents = 0
        var finishedSeqDifferences: [ReplayDifference] = []
        let finishedSeqColumn = JobRecord.columns.count
        try connection.forEach("SELECT \(JobRecord.storedColumns), finished_seq FROM jobs ORDER BY created_at_ms, seq") { (row) throws(StoreError) in
            storedCount += 1
            let id = row.text(0)
            let stored = (0..<JobRecord.columns.count).map { row.value($0) }
            let finished = !row.isNull(JobRecord.finishedAtColumn)
            storedVersion = finished ? row.int64(JobRecord.versionColumn) : nil
            seqAtStoredVersion = nil
            if try fold(id) {
                jobsWithEvents += 1
                try replay.finishJob { _ in stored }
                let expected: SQLiteValue = seqAtStoredVersion.map { .integer($0) } ?? .null
                let found = row.value(finishedSeqColumn)
                if found != expected && replay.unchecked[id] == nil {
                    finishedSeqDifferences.append(ReplayDifference(jobID: id, column: "finished_seq", stored: found.description,
                                                                   rebuilt: expected.description))
                }
            } else {
                replay.storedRowWithoutEvents(jobID: id)
            }
        }
        // Jobs in the log without a stored row: only looked for when the log names more jobs than it has rows.
        let loggedJobs = try connection.first("SELECT count(DISTINCT job_id) FROM events") { row in row.int(0) } ?? 0
        if loggedJobs > jobsWithEvents {
            let missing = try connection.query(
                "SELECT DISTINCT job_id FROM events WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id) ORDER BY job_id"
            ) { row in row.text(0) }
            for id in missing where try fold(id) {
                try replay.finishJob { _ in nil }
            }
        }

        let waits = try connection.query("SELECT job, depends_on FROM job_dependencies") { row in
            DependencyRow(job: row.text(0), dependsOn: row.text(1))
        }
        var report = try replay.report(
            storedRowCount: storedCount,
            storedWithoutEvents: { () throws(StoreError) -> [String] in [] },
            storedWaits: waits,
            rebuild: { (id) throws(StoreError) -> JobRecord? in
                let events = try connection.query(eventsOfJob, [.text(id)]) { (row) -> Result<JobEvent, StoreError> in
                    do throws(StoreError) { return .success(try JobEvent(row: row)) } catch { return .failure(error) }
                }
                return try StreamingReplay<SQLiteValue>.rebuild(jobID: id, events: events)
            })
        // After the fold's own, by job id: as `replay` without `--verify` reports them (ids are ASCII).
        report.differences += finishedSeqDifferences.sorted { $0.jobID < $1.jobID }
        report.differences += try waitFlagDifferences(connection)
        return report
    }

    /// The jobs whose `waits_for_jobs` (schema 19) disagrees with their rows in `job_dependencies`, by
    /// job id. The claim trusts the flag alone: a job flagged without a wait would never run, one with a
    /// wait but not flagged would run before its dependency succeeded. The rows themselves are compared
    /// with the log apart (`dependencyDifferences`); a rewrite rebuilds both (the table's triggers set
    /// the flag).
    /// None before schema 19: a migration's rebuild of the projection (`rebuildProjection`) can run on
    /// a log that has no flag yet.
    static func waitFlagDifferences(_ connection: SQLiteConnection) throws(StoreError) -> [ReplayDifference] {
        let hasFlag = try connection.first("SELECT 1 FROM pragma_table_info('jobs') WHERE name = 'waits_for_jobs'") { _ in true } ?? false
        guard hasFlag else { return [] }
        return try connection.query(waitFlagDifferencesSQL) { row in
            ReplayDifference(jobID: row.text(0), column: "waits_for_jobs", stored: row.value(1).description,
                             rebuilt: row.value(2).description)
        }
    }

    static let waitFlagDifferencesSQL = """
        SELECT id, waits_for_jobs, waits FROM (
            SELECT id, waits_for_jobs, EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = jobs.id) AS waits FROM jobs)
        WHERE waits_for_jobs != waits ORDER BY id
        """
}
