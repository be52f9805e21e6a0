import JobLifecycle
import JobModel

/// `replay`'s work that is the same for every adapter: folding the log, event by event in log order,
/// into job records (noting what is wrong with the log instead of stopping), and comparing the rebuilt
/// rows with the stored projection column by column. An adapter only reads rows and writes them back.
public struct ReplayFold: Sendable {
    /// The jobs rebuilt so far, by id.
    public private(set) var records: [String: JobRecord] = [:]
    /// Events read, decodable or not.
    public private(set) var eventsRead = 0
    /// What is wrong with the log: undecodable payloads, events before their submission, version gaps.
    public private(set) var problems: [String] = []
    /// Jobs whose history holds an event of a type this jobctl does not know (a newer jobctl's), by id
    /// with that event's type: their events are not folded from it on, nor their rows compared.
    public private(set) var unchecked: [String: String] = [:]
    /// The log's own `archived` events read (each records jobs moved out of the log into a file).
    public private(set) var archives: [ArchiveRecord] = []
    /// The version of the last `archived` event, to check that the log's own events stay contiguous.
    private var logVersion = 0

    /// An empty fold.
    public init() {}

    /// Throws `corrupt` when the fold met a problem, before a rewrite of the projection: the rows it
    /// would write leave out every event it could not apply — one of a type this jobctl does not know,
    /// written by a newer one, or a damaged one — so such a rewrite would quietly undo them. The log is
    /// the truth; the projection stays as it was until a jobctl that reads every event rebuilds it.
    public func refuseRewriteWithProblems() throws(StoreError) {
        if problems.isEmpty, let (job, type) = unchecked.min(by: { $0.key < $1.key }) {
            throw StoreError.invalidControl("the log holds events of types this jobctl does not know (job \(job) has one of type "
                + "'\(TerminalText.storedName(type))'\(unchecked.count > 1 ? "; \(unchecked.count) jobs in all" : "")): a newer jobctl wrote "
                + "them, and a rewrite would undo them; nothing was rewritten: run `jobctl replay` with a jobctl as new")
        }
        guard let first = problems.first else { return }
        let count = problems.count == 1 ? "an event" : "\(problems.count) events"
        throw StoreError.corrupt("the log holds \(count) this jobctl cannot apply (\(first)); nothing was rewritten "
            + "(a type this jobctl does not know is a newer jobctl's: upgrade jobctl)")
    }

    /// Folds the next event of the log: a decoded event, or the error its row gave. A `corrupt` error
    /// (a payload lacking what its type needs) is a problem of the log to report; any other is thrown.
    public mutating func fold(_ decoded: Result<JobEvent, StoreError>) throws(StoreError) {
        eventsRead += 1
        let event: JobEvent
        switch decoded {
        case .success(let value): event = value
        case .failure(.unknownEventType(let jobID, let type)):
            // Not damage: this jobctl cannot fold the job from here on.
            if unchecked[jobID] == nil { unchecked[jobID] = type }
            records[jobID] = nil
            return
        case .failure(let error):
            guard case .corrupt(let message) = error else { throw error }
            problems.append(message)
            return
        }
        if unchecked[event.jobID] != nil { return }
        if case .archived(let record) = event.payload {
            // The log's own event: archived jobs left the log together with their events and rows,
            // so there is nothing to fold; it only has to sit on the log's pseudo job, in order.
            if event.jobID != ArchiveRecord.logJobID {
                problems.append("event \(event.seq ?? 0): an 'archived' event on job \(event.jobID) instead of '\(ArchiveRecord.logJobID)'")
            } else if event.version != logVersion + 1 {
                problems.append("event \(event.seq ?? 0): the log's archive record jumps from version \(logVersion) to \(event.version)")
            }
            logVersion = event.version
            archives.append(record)
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
        if event.version != record.version.saturatingAdding(1) || record.version == Int.max {
            problems.append("event \(event.seq ?? 0): job \(event.jobID) jumps from version \(record.version) to \(event.version)")
        }
        record.apply(event)
        records[event.jobID] = record
    }

    /// The rebuilt records in log order (of their submission), as a rewrite inserts them.
    public var recordsInLogOrder: [JobRecord] { records.values.sorted { $0.seq < $1.seq } }

    /// Every difference between the stored projection rows and the rebuilt ones, by job id then column.
    ///
    /// - Parameters:
    ///   - stored: the stored rows by job id, values in `columns` order.
    ///   - columns: the projection's column names.
    ///   - row: the row a rebuilt record is written as, in `columns` order.
    public func differences<Value: Equatable & CustomStringConvertible>(
        stored: [String: [Value]], columns: [String], row: (JobRecord) throws(StoreError) -> [Value]
    ) throws(StoreError) -> [ReplayDifference] {
        var differences: [ReplayDifference] = []
        for id in Set(records.keys).union(stored.keys).sorted() where unchecked[id] == nil {
            switch (stored[id], records[id]) {
            case (let storedRow?, let record?):
                let rebuiltRow = try row(record)
                for (index, column) in columns.enumerated() where storedRow[index] != rebuiltRow[index] {
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
        return differences
    }

    /// The report of this fold.
    public func report(differences: [ReplayDifference], rewritten: Bool) -> ReplayReport {
        ReplayReport(eventsRead: eventsRead, jobsRebuilt: records.count, differences: differences,
                     problems: problems, rewritten: rewritten, unchecked: unchecked)
    }

    // MARK: - Dependencies

    /// The `job_dependencies` rows the log implies: for each job, every dependency it lists that is in
    /// the log and has not succeeded (a job's waits are recorded at its submission and removed when the
    /// dependency succeeds, which is final; an archived dependency's rows left with it), sorted.
    public var dependencyRows: [DependencyRow] {
        var rows: [DependencyRow] = []
        for record in records.values {
            for dependency in record.spec.after ?? [] {
                guard let target = records[dependency], target.state != .succeeded else { continue }
                rows.append(DependencyRow(job: record.id, dependsOn: dependency))
            }
        }
        return rows.sorted()
    }

    /// The differences between the stored `job_dependencies` rows and `dependencyRows`, as column `after`.
    public func dependencyDifferences(stored: [DependencyRow]) -> [ReplayDifference] {
        Self.dependencyDifferences(rebuilt: dependencyRows, stored: stored)
    }

    /// The differences between stored `job_dependencies` rows and rebuilt ones, as column `after`: what
    /// the whole-log fold and the streaming replay both report.
    static func dependencyDifferences(rebuilt rows: [DependencyRow], stored: [DependencyRow]) -> [ReplayDifference] {
        let rebuilt = Set(rows)
        let kept = Set(stored)
        var differences: [ReplayDifference] = []
        for row in kept.subtracting(rebuilt).sorted() {
            differences.append(ReplayDifference(jobID: row.job, column: "after", stored: "waits for \(row.dependsOn)", rebuilt: "no wait"))
        }
        for row in rebuilt.subtracting(kept).sorted() {
            differences.append(ReplayDifference(jobID: row.job, column: "after", stored: "no wait", rebuilt: "waits for \(row.dependsOn)"))
        }
        return differences
    }
}

/// One row of `job_dependencies`: `job` waits for `dependsOn` to succeed.
public struct DependencyRow: Sendable, Hashable, Comparable {
    /// The waiting job.
    public var job: String
    /// The job it waits for.
    public var dependsOn: String

    /// Creates a row.
    public init(job: String, dependsOn: String) {
        self.job = job
        self.dependsOn = dependsOn
    }

    public static func < (lhs: DependencyRow, rhs: DependencyRow) -> Bool {
        (lhs.job, lhs.dependsOn) < (rhs.job, rhs.dependsOn)
    }
}
