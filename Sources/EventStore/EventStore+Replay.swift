import Foundation
import JobLifecycle
import JobModel
import StorePort

extension EventStore {
    /// Folds every event from seq 1 into job records and compares them with the `jobs` projection.
    ///
    /// With `verify`, only reports the differences (works on a read-only store). Without, also
    /// rewrites the `jobs` table from the fold in one transaction. Leases and blobs are not compared.
    public func replay(verify: Bool) throws(StoreError) -> ReplayReport {
        if verify {
            return try readTransaction { (connection) throws(StoreError) -> ReplayReport in
                try Self.replay(connection, rewrite: false)
            }
        }
        return try writeTransaction { (connection) throws(StoreError) -> ReplayReport in
            try Self.replay(connection, rewrite: true)
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
        var records: [String: JobRecord] = [:]
        var eventsRead = 0
        var problems: [String] = []
        // Streams the log: one event decoded at a time; only the records stay in memory.
        try connection.forEach("SELECT \(JobEvent.selectColumns) FROM events ORDER BY seq") { (row) throws(StoreError) in
            eventsRead += 1
            let event: JobEvent
            do throws(StoreError) {
                event = try JobEvent(row: row)
            } catch {
                // An event whose payload lacks what its type needs (a `submitted` without a spec) is a
                // problem of the log to report, not a reason to stop reading it.
                guard case .corrupt(let message) = error else { throw error }
                problems.append(message)
                return
            }
            if case .submitted = event.payload {
                if records[event.jobID] != nil {
                    problems.append("event \(event.seq ?? 0): job \(event.jobID) submitted twice")
                } else if let record = JobRecord(submitted: event) {
                    records[event.jobID] = record
                }
                return
            }
            guard var record = records[event.jobID] else {
                problems.append("event \(event.seq ?? 0) (\(event.type.rawValue)) precedes job \(event.jobID)'s submission")
                return
            }
            if event.version != record.version + 1 {
                problems.append("event \(event.seq ?? 0): job \(event.jobID) jumps from version \(record.version) to \(event.version)")
            }
            record.apply(event)
            records[event.jobID] = record
        }

        var stored: [String: [SQLiteValue]] = [:]
        try connection.forEach("SELECT \(JobRecord.selectColumns) FROM jobs") { row in
            stored[row.text(0)] = (0..<JobRecord.columns.count).map { row.value($0) }
        }
        var differences: [ReplayDifference] = []
        for id in Set(records.keys).union(stored.keys).sorted() {
            switch (stored[id], records[id]) {
            case (let storedRow?, let record?):
                let rebuiltRow = try record.rowValues()
                for (index, column) in JobRecord.columns.enumerated() where storedRow[index] != rebuiltRow[index] {
                    differences.append(ReplayDifference(jobID: id, column: column, stored: storedRow[index].description,
                                                        rebuilt: rebuiltRow[index].description))
                }
            case (nil, _?):
                differences.append(ReplayDifference(jobID: id, column: "(row)", stored: nil, rebuilt: "present"))
            case (_?, nil):
                differences.append(ReplayDifference(jobID: id, column: "(row)", stored: "present", rebuilt: nil))
            case (nil, nil):
                break
            }
        }

        if rewrite {
            try connection.run("DELETE FROM jobs")
            for record in records.values.sorted(by: { $0.seq < $1.seq }) {
                try connection.run(JobRecord.insertSQL, try record.rowValues())
            }
        }
        return ReplayReport(eventsRead: eventsRead, jobsRebuilt: records.count, differences: differences,
                            problems: problems, rewritten: rewrite)
    }
}
