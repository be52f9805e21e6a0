import JobLifecycle
import JobModel

/// Running jobs' projection rows as this connection last committed them, so that a worker's next
/// append to a job (its `started`, its outcome) starts from the record instead of reading the whole
/// row, the spec from the job's `submitted` event, and decoding them again.
///
/// A record is used only after a probe of the row in the append's own write transaction finds the
/// same `version`: every change of a `jobs` row is an event and every event bumps the version, so a
/// row another process (or another path of this one) changed since is read again as before. Records
/// enter the cache only once their transaction committed: `note` puts them aside, `commitNoted`
/// keeps them after COMMIT, `discardNoted` drops them after a rollback — a record that was never
/// committed could otherwise match a later row of the same version written by someone else.
///
/// The lease is part of the row (schema 10), so the fencing check of the same append takes the token of
/// the record it starts from (`rememberLease`, then `takeLeaseToken`) instead of a second query.
///
/// Not `Sendable`: it belongs to one `SQLiteConnection`, which the store's executor serialises.
final class CommittedRecordCache {
    private var committed: [String: JobRecord] = [:]
    private var noted: [String: JobRecord] = [:]
    /// The lease token of the row the current append starts from, for the one fencing check that follows.
    private var knownLease: (jobID: String, token: Int64?)?
    private let capacity: Int

    /// - Parameter capacity: at most this many records (a worker holds a few hundred jobs at once);
    ///   the cache is emptied when it fills.
    init(capacity: Int = 4_096) {
        self.capacity = capacity
    }

    /// The committed record of `jobID`, if cached (byte for byte the same id: a `String` key also
    /// matches canonically equivalent text, another job).
    func candidate(_ jobID: String) -> JobRecord? {
        guard let record = committed[jobID], record.id.hasSameUTF8(as: jobID) else { return nil }
        return record
    }

    /// Puts aside `record`, as written in the current transaction, until it commits or rolls back.
    func note(_ record: JobRecord) {
        noted[record.id] = record
    }

    /// The current transaction committed: its noted records are the rows as they now stand. Only
    /// running jobs are kept (a job that ended, paused or went back to the queue has no next append
    /// from this worker).
    func commitNoted() {
        guard !noted.isEmpty else { return }
        if committed.count + noted.count > capacity { committed.removeAll(keepingCapacity: true) }
        for (id, record) in noted {
            if record.state == .running { committed[id] = record } else { committed[id] = nil }
        }
        noted.removeAll(keepingCapacity: true)
    }

    /// The current transaction rolled back (or its outcome is unknown): forget what it noted.
    func discardNoted() {
        noted.removeAll(keepingCapacity: true)
        knownLease = nil
    }

    /// The records noted in the current transaction so far, to put back with `restoreNoted` when the
    /// writes after this point are rolled back to a savepoint.
    var notedRecords: [String: JobRecord] { noted }

    /// Puts back the records noted before a savepoint the transaction rolled back to.
    func restoreNoted(_ records: [String: JobRecord]) {
        noted = records
    }

    /// Remembers the lease token of the row of `jobID` an append starts from, for the fencing check right after it.
    func rememberLease(of jobID: String, token: Int64?) {
        knownLease = (jobID, token)
    }

    /// The token remembered for `jobID` (once), or nil when there is none to take.
    func takeLeaseToken(of jobID: String) -> Int64?? {
        guard let known = knownLease, known.jobID.hasSameUTF8(as: jobID) else { return nil }
        knownLease = nil
        return .some(known.token)
    }

    /// Forgets the remembered lease token (the append it was taken for is over).
    func forgetLease() {
        knownLease = nil
    }

    /// How many committed and noted records are held (tests).
    var usage: (committed: Int, noted: Int) { (committed.count, noted.count) }
}
