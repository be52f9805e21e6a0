import JobLifecycle
import JobModel

/// `replay --verify` over a log of any size: the log is read job by job (events ordered by job id,
/// then version), each job is folded, compared with its stored projection row and dropped, so memory
/// holds one job at a time — not the whole projection as `ReplayFold` does.
///
/// The report is the one `ReplayFold` gives for the same log: differences sorted by job id (columns
/// in projection order, dependency waits last), problems in the log order (seq) of the events that
/// raised them. Only what is proportional to the faults found, and to the dependency edges of the
/// log (`after:`), is kept until the end.
///
/// An adapter feeds it every event with `fold(jobID:seq:_:)`, calls `finishJob(stored:)` — which
/// compares and forgets the job — each time the job id changes and after the last event, then
/// `report(...)`.
public struct StreamingReplay<Value: Equatable & CustomStringConvertible> {
    private let columns: [String]
    private let row: (JobRecord) throws(StoreError) -> [Value]
    /// The job being folded: its id and a fold of its events alone.
    private var current: (jobID: String, fold: ReplayFold)?
    /// The seq of the current job's last event folded: read in version order, a job's events must also
    /// be in log order (versions swapped between two events would otherwise fold as a consistent job).
    private var currentLastSeq: Int64?
    private var problems: [(seq: Int64, text: String)] = []
    private var differences: [ReplayDifference] = []
    /// `job` waits for `dependsOn` unless that one succeeded: decided once every job is folded.
    private var edges: [DependencyRow] = []
    /// Jobs not compared: their history holds an event of a type this jobctl does not know (`ReplayFold.unchecked`).
    public private(set) var unchecked: [String: String] = [:]
    /// Events read, decodable or not.
    public private(set) var eventsRead = 0
    /// Jobs rebuilt from the log.
    public private(set) var jobsRebuilt = 0
    /// Jobs read from the log that have a stored row (to find stored rows without a job in the log).
    public private(set) var storedRowsMatched = 0

    /// A replay comparing rebuilt records, as `row` writes them, with stored rows in `columns` order.
    public init(columns: [String], row: @escaping (JobRecord) throws(StoreError) -> [Value]) {
        self.columns = columns
        self.row = row
    }

    /// The job id of the events being folded (nil before the first and after `finishJob`).
    public var currentJobID: String? { current?.jobID }

    /// Folds the next event of the current job (call `finishJob` first when `jobID` changes): a
    /// decoded event, or the error its row gave. A `corrupt` row is a problem of the log; any other
    /// error is thrown.
    public mutating func fold(jobID: String, seq: Int64, _ decoded: Result<JobEvent, StoreError>) throws(StoreError) {
        if current == nil { current = (jobID, ReplayFold()) }
        guard var job = current else { return }
        current = nil  // the fold is mutated in place, not copied
        let before = job.fold.problems.count
        eventsRead += 1
        if let last = currentLastSeq, seq <= last {
            let version = (try? decoded.get()).map { " version \($0.version)" } ?? ""
            problems.append((seq, "event \(seq): job \(jobID)'s\(version) comes before its previous version (event \(last)) in the log"))
        }
        currentLastSeq = seq
        try job.fold.fold(decoded)
        for text in job.fold.problems[before...] { problems.append((seq, text)) }
        current = job
    }

    /// Compares the current job, rebuilt, with its stored row (`stored` looks one up by id; nil: none)
    /// and forgets it. Does nothing when no event was folded since the last call.
    public mutating func finishJob(stored: (String) throws(StoreError) -> [Value]?) throws(StoreError) {
        guard let job = current else { return }
        current = nil
        currentLastSeq = nil
        let record = job.fold.records[job.jobID]
        // Events of several jobs folded together would be a bug of the adapter's ordering.
        if job.fold.records.count > 1 {
            throw StoreError.invalidControl("replay read the events of job \(job.jobID) out of order; run it again")
        }
        let storedRow = try stored(job.jobID)
        if storedRow != nil { storedRowsMatched += 1 }
        if let type = job.fold.unchecked[job.jobID] {
            unchecked[job.jobID] = type
            return
        }
        if record != nil { jobsRebuilt += 1 }
        switch (storedRow, record) {
        case (let storedRow?, let record?):
            let rebuiltRow = try row(record)
            for (index, column) in columns.enumerated() where storedRow[index] != rebuiltRow[index] {
                differences.append(ReplayDifference(jobID: job.jobID, column: column, stored: storedRow[index].description,
                                                    rebuilt: rebuiltRow[index].description))
            }
        case (nil, _?):
            differences.append(ReplayDifference(jobID: job.jobID, column: "(row)", stored: nil, rebuilt: "present"))
        case (_?, nil):
            differences.append(ReplayDifference(jobID: job.jobID, column: "(row)", stored: "present", rebuilt: nil))
        case (nil, nil):
            break
        }
        if let record {
            for dependency in record.spec.after ?? [] { edges.append(DependencyRow(job: record.id, dependsOn: dependency)) }
        }
    }

    /// Notes a stored row whose job has no event in the log (for an adapter that walks the stored rows
    /// and finds no event for one): a `(row)` difference, as `report` gives for `storedWithoutEvents`.
    public mutating func storedRowWithoutEvents(jobID: String) {
        storedRowsMatched += 1
        differences.append(ReplayDifference(jobID: jobID, column: "(row)", stored: "present", rebuilt: nil))
    }

    /// The report, once every job is finished.
    ///
    /// - Parameters:
    ///   - storedWithoutEvents: the ids of stored rows whose job has no event in the log (asked only
    ///     when fewer stored rows were matched than `storedRowCount`).
    ///   - storedRowCount: how many rows the projection holds.
    ///   - storedWaits: the stored `job_dependencies` rows.
    ///   - rebuild: folds one job's events again (nil: not in the log): only for jobs others wait for.
    public mutating func report(
        storedRowCount: Int, storedWithoutEvents: () throws(StoreError) -> [String], storedWaits: [DependencyRow],
        rebuild: (String) throws(StoreError) -> JobRecord?
    ) throws(StoreError) -> ReplayReport {
        if storedRowsMatched < storedRowCount {
            for id in try storedWithoutEvents() {
                differences.append(ReplayDifference(jobID: id, column: "(row)", stored: "present", rebuilt: nil))
            }
        }
        // As ReplayFold: by job id, each job's columns in projection order.
        let sorted = differences.enumerated().sorted { lhs, rhs in
            lhs.element.jobID != rhs.element.jobID ? lhs.element.jobID < rhs.element.jobID : lhs.offset < rhs.offset
        }.map(\.element)

        var succeeded: [String: Bool] = [:]
        var waits: [DependencyRow] = []
        for edge in edges {
            if succeeded[edge.dependsOn] == nil {
                // Absent from the log counts as "no wait", like a succeeded dependency.
                succeeded[edge.dependsOn] = try rebuild(edge.dependsOn).map { $0.state == .succeeded } ?? true
            }
            if succeeded[edge.dependsOn] == false { waits.append(edge) }
        }
        let dependencyDifferences = ReplayFold.dependencyDifferences(rebuilt: waits, stored: storedWaits)
        let orderedProblems = problems.enumerated().sorted { lhs, rhs in
            lhs.element.seq != rhs.element.seq ? lhs.element.seq < rhs.element.seq : lhs.offset < rhs.offset
        }.map(\.element.text)
        return ReplayReport(eventsRead: eventsRead, jobsRebuilt: jobsRebuilt, differences: sorted + dependencyDifferences,
                            problems: orderedProblems, rewritten: false, unchecked: unchecked)
    }

    /// A job's record rebuilt from its events alone (the `rebuild` of `report`), nil when none.
    public static func rebuild(jobID: String, events: [Result<JobEvent, StoreError>]) throws(StoreError) -> JobRecord? {
        var fold = ReplayFold()
        for event in events { try fold.fold(event) }
        return fold.records[jobID]
    }
}
