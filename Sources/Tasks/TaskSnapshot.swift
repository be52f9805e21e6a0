import JobModel

/// What observers see: the task's state when a status was reached (Firebase `StorageTaskSnapshot`).
public struct TaskSnapshot: Sendable, Equatable {
    /// The job the task runs.
    public var jobID: String
    /// The status that was reached.
    public var status: ObserverStatus
    /// Bytes done so far.
    public var bytesDone: Int64
    /// The total, once known.
    public var bytesTotal: Int64?
    /// failure: the error (`cancelled` for a cancelled job).
    public var error: StorageError?
    /// success: what the job produced.
    public var result: JobResult?
    /// The job.
    public var spec: JobSpec

    /// Creates a snapshot.
    public init(jobID: String, status: ObserverStatus, bytesDone: Int64, bytesTotal: Int64?,
                error: StorageError? = nil, result: JobResult? = nil, spec: JobSpec) {
        self.jobID = jobID
        self.status = status
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.error = error
        self.result = result
        self.spec = spec
    }

    /// `bytesDone / bytesTotal` in `0 ... 1`; 1 after success, 0 while the total is unknown.
    public var fractionCompleted: Double {
        if status == .success { return 1 }
        guard let bytesTotal, bytesTotal > 0 else { return 0 }
        return min(1, max(0, Double(bytesDone) / Double(bytesTotal)))
    }
}

/// Identifies one observer, for `TaskRunner.removeObserver(withHandle:)`.
public struct ObserverHandle: Sendable, Hashable {
    /// The status the observer watches.
    public let status: ObserverStatus
    let id: UInt64
}
