import Checksums
import Foundation
import JobLifecycle
import JobModel
import StorePort

/// The `DecisionWriter` of one group of appends, claims or submits inside a write transaction, built
/// to send as few statements as the decisions allow — each statement is a round trip to the server.
///
/// - Writes whose result nobody reads (the projection row, the lease row, dependency rows, blobs) are
///   held back and sent as data-modifying `WITH` clauses of the next statement that must run anyway:
///   the next `INSERT INTO events … RETURNING seq`, or one statement of their own before any read and
///   at the end (`flush`). At most one held-back write per table goes into one statement, so no
///   statement writes a table twice (the clauses of one statement all see the same snapshot).
/// - The lease rows of the group's jobs are read once (`loadLeases`) and then kept up to date by the
///   writer's own lease writes, instead of one read per event for the lease-table fence.
///
/// The checks do not change: the lifecycle decides on the row the caller locked, the fence compares
/// the token of the lease row as it stands in this transaction. A failed held-back write fails the
/// statement that carries it, which aborts the transaction, as a failed statement of its own would.
final class PostgresBatchWriter: DecisionWriter {
    /// A write held back until the next statement.
    struct HeldWrite {
        /// The table it writes: one held write per table and statement.
        let table: String
        /// One INSERT, UPDATE or DELETE without RETURNING, with `$1`… for its own parameters.
        let sql: String
        let parameters: [PostgresValue]
    }

    /// What the writer knows of a job's lease row.
    private enum KnownLease {
        case token(Int64)
        case none
    }

    let connection: PostgresConnection
    private var held: [HeldWrite] = []
    /// Lease rows by job id, compared byte for byte (a `String` key would also match canonically
    /// equivalent text, which is another id).
    private var leases: [[UInt8]: KnownLease] = [:]
    /// How many writes the writer has made or held back: a caller compares it before and after one
    /// decision to know whether that decision wrote anything.
    private(set) var writes = 0

    init(_ connection: PostgresConnection) {
        self.connection = connection
    }

    /// Reads the lease rows of `jobIDs` in one statement; later lease checks of these jobs read none.
    func loadLeases(of jobIDs: [String]) throws(StoreError) {
        guard !jobIDs.isEmpty else { return }
        try flush()
        for id in jobIDs { leases[Array(id.utf8)] = KnownLease.none }
        let rows = try connection.rows("SELECT job_id, token FROM leases WHERE job_id = ANY($1::text[])", [postgresTextArray(jobIDs)]) {
            (row) throws(StoreError) in (try row.string(0), try row.integer(1))
        }
        for (id, token) in rows { leases[Array(id.utf8)] = .token(token) }
    }

    /// Sends the held-back writes now, in one statement; the transaction then holds every write made.
    func flush() throws(StoreError) {
        switch held.count {
        case 0: return
        case 1: try connection.store(held[0].sql, held[0].parameters)
        default:
            let (sql, parameters) = Self.statement(held, then: "SELECT 1", [])
            try connection.store(sql, parameters)
        }
        held.removeAll()
    }

    /// Holds `write` back for the next statement (sending the held ones first when one already writes
    /// its table).
    func hold(_ write: HeldWrite) throws(StoreError) {
        if held.contains(where: { $0.table == write.table }) { try flush() }
        held.append(write)
        writes += 1
    }

    /// Inserts or replaces the lease row of a job just claimed.
    func writeLease(jobID: String, owner: String, token: Int64, expiresAtMs: Int64) throws(StoreError) {
        try hold(HeldWrite(table: "leases", sql: """
            INSERT INTO leases (job_id, owner, token, expires_at_ms) VALUES ($1, $2, $3, $4)
            ON CONFLICT (job_id) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token,
                                               expires_at_ms = EXCLUDED.expires_at_ms
            """, parameters: [.text(jobID), .text(owner), .integer(token), .integer(expiresAtMs)]))
        leases[Array(jobID.utf8)] = .token(token)
    }

    /// `main` with `writes` in front of it as `WITH wN AS (…)` clauses, every clause's parameters
    /// renumbered after the ones before it; the parameters of the whole, in order.
    ///
    /// A data-modifying `WITH` clause runs exactly once, to completion, whether or not the main
    /// statement reads it. See https://www.postgresql.org/docs/current/queries-with.html#QUERIES-WITH-MODIFYING
    static func statement(_ writes: [HeldWrite], then main: String, _ mainParameters: [PostgresValue]) -> (String, [PostgresValue]) {
        guard !writes.isEmpty else { return (main, mainParameters) }
        var clauses: [String] = []
        var parameters: [PostgresValue] = []
        for (index, write) in writes.enumerated() {
            clauses.append("w\(index) AS (\(renumbered(write.sql, by: parameters.count)))")
            parameters += write.parameters
        }
        let body = renumbered(main, by: parameters.count)
        return ("WITH " + clauses.joined(separator: ", ") + " " + body, parameters + mainParameters)
    }

    /// `sql` with every parameter reference `$n` replaced by `$(n + offset)`. The statements held back
    /// here have no `$` anywhere else (no dollar quoting, no `$` in a literal).
    static func renumbered(_ sql: String, by offset: Int) -> String {
        guard offset > 0 else { return sql }
        var out = ""
        out.reserveCapacity(sql.utf8.count + 16)
        var digits = ""
        var inReference = false
        func finish() {
            if inReference {
                out += "$" + (Int(digits).map { String($0 + offset) } ?? digits)
                digits = ""
                inReference = false
            }
        }
        for character in sql {
            if inReference, let ascii = character.asciiValue, (48...57).contains(ascii) {
                digits.append(character)
                continue
            }
            finish()
            if character == "$" {
                inReference = true
            } else {
                out.append(character)
            }
        }
        finish()
        return out
    }

    // MARK: DecisionWriter

    /// The lease row's token as this transaction has it, read from the server only for a job whose
    /// lease was not loaded.
    func leaseToken(ofJob jobID: String) throws(StoreError) -> Int64? {
        switch leases[Array(jobID.utf8)] {
        case .token(let token)?: return token
        case .none?: return nil
        case nil:
            try flush()
            let token = try connection.leaseToken(ofJob: jobID)
            leases[Array(jobID.utf8)] = token.map(KnownLease.token) ?? KnownLease.none
            return token
        }
    }

    /// Holds back the blob's insert (a blob is immutable and content-addressed: nothing reads it back
    /// in the transaction that stores it).
    func storeBlob(_ bytes: Data) throws(StoreError) -> String {
        let hash = Digest.sha256Hex(bytes)
        try hold(HeldWrite(table: "blobs", sql: "INSERT INTO blobs (sha256, size, data) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
                           parameters: [.text(hash), .int(bytes.count), .bytea(bytes)]))
        return hash
    }

    /// Inserts the event with every held-back write in one statement, and returns its `seq`.
    func insertEvent(jobID: String, version: Int, type: EventType, atMs: Int64, actor: String, leaseToken: Int64?,
                     data: String) throws(StoreError) -> Int64 {
        let (sql, parameters) = Self.statement(held, then: """
            INSERT INTO events (job_id, version, type, at_ms, actor, lease, data)
            VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq
            """, [.text(jobID), .int(version), .text(type.rawValue), .integer(atMs), .text(actor),
                  .optional(leaseToken), .text(data)])
        let seq = try connection.row(sql, parameters) { (row) throws(StoreError) in try row.integer(0) }
        held.removeAll()
        writes += 1
        guard let seq else { throw StoreError.invalidControl("INSERT … RETURNING seq returned no row for job \(jobID)") }
        return seq
    }

    /// Holds back the projection row's update (or insert).
    func writeProjection(_ record: JobRecord, replacing current: JobRecord?) throws(StoreError) {
        if current != nil {
            try hold(HeldWrite(table: "jobs", sql: JobRecord.postgresUpdateSQL, parameters: try record.postgresUpdateValues()))
        } else {
            try hold(HeldWrite(table: "jobs", sql: JobRecord.postgresInsertSQL, parameters: try record.postgresValues()))
        }
    }

    /// Holds back the lease row's removal.
    func dropLease(jobID: String) throws(StoreError) {
        try hold(HeldWrite(table: "leases", sql: "DELETE FROM leases WHERE job_id = $1", parameters: [.text(jobID)]))
        leases[Array(jobID.utf8)] = KnownLease.none
    }

    /// The dependency's row, locked (after the held-back writes are sent).
    func dependencyRecord(_ jobID: String) throws(StoreError) -> JobRecord? {
        try flush()
        return try connection.dependencyRecord(jobID)
    }

    /// Holds back the row of `job_dependencies`.
    func insertDependency(jobID: String, dependsOn: String) throws(StoreError) {
        try hold(HeldWrite(table: "job_dependencies",
                           sql: "INSERT INTO job_dependencies (job, depends_on) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                           parameters: [.text(jobID), .text(dependsOn)]))
    }

    /// Holds back the removal of the rows that wait on `jobID`.
    func removeDependencies(on jobID: String) throws(StoreError) {
        try hold(HeldWrite(table: "job_dependencies", sql: "DELETE FROM job_dependencies WHERE depends_on = $1",
                           parameters: [.text(jobID)]))
    }

    /// The jobs waiting on `jobID`, locked (after the held-back writes are sent).
    func waitingDependants(of jobID: String) throws(StoreError) -> [JobRecord] {
        try flush()
        return try connection.waitingDependants(of: jobID)
    }
}
