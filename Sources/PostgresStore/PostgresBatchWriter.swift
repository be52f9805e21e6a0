import Foundation
import JobLifecycle
import JobModel
import StorePort
import Synchronization

/// The `DecisionWriter` of one group of appends, claims or submits inside a write transaction, built
/// to send as few statements as the decisions allow — each statement is a round trip to the server,
/// and each is parsed, bound and started by the server whatever it holds.
///
/// - The rows of the group are collected and written together, a statement per table whatever the
///   number of jobs: every event in one `INSERT … SELECT FROM unnest(…)`, the projection rows in one
///   `UPDATE jobs … FROM unnest(…)` (only the job's last row of the group, with the lease expiry a
///   claim set) and one multi-row insert for new jobs, the blobs in one insert (or, when together they
///   pass an eighth of the message limit, in inserts of their own, each message under it: `blobPacks`),
///   the rows of `job_dependencies` in one insert or one delete. The arrays travel in binary (`PostgresArray`): nothing is quoted or parsed as text.
/// - All of them go as data-modifying `WITH` clauses of ONE statement (`flush`): before any read of
///   the transaction (so the read sees them) and at the end. A table gets at most one clause per
///   statement except `jobs` (new jobs inserted, others updated; a job inserted and changed in one
///   group is inserted as it ends), so no statement changes a row twice (the clauses of one statement
///   all see the same snapshot).
/// - An event's `seq` is known before its row is written: the writer takes seqs from the identity
///   sequence of `events` ahead (`reserveSeqs`, or the claim's own query) and writes them
///   with `OVERRIDING SYSTEM VALUE`. Seqs are taken only after the rows of the jobs they are for are
///   locked (a job's events then have growing seqs, as the log needs: a seq taken before the lock could
///   be smaller than one another transaction gave the job meanwhile), handed out in ascending order,
///   and forgotten when the writer locks the rows of other jobs (`discardReservedSeqs`). A seq taken
///   and not used (a refused event) is a gap, as a rolled-back append leaves one, which readers of the
///   log already allow for.
/// - The lease is part of the job row (schema 11: `lease_owner`, `lease_token`, `lease_expires_at_ms`).
///   The fence's token comes from the rows the caller locked (`knowLeases`) and is then kept up to date
///   by the writer's own lease writes; a claim's expiry rides on the projection update, and the update
///   that ends a run clears it. No lease rows are read or written.
///
/// The checks do not change: the lifecycle decides on the row the caller locked, the fence compares
/// the token of the job's lease as it stands in this transaction. A failed write fails the statement
/// that carries it, which aborts the transaction, as a failed statement of its own would.
final class PostgresBatchWriter: DecisionWriter {
    /// One write of a table, held back until the next statement.
    struct HeldWrite {
        /// The table it writes.
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

    /// One `events` row to insert.
    private struct EventRow {
        let seq: Int64
        let jobID: String
        let version: Int
        let type: String
        let atMs: Int64
        let actor: String
        let lease: Int64?
        let data: String
    }

    let connection: PostgresConnection
    private var eventRows: [EventRow] = []
    /// The projection rows to write, by job id (byte for byte), the last one of the group only.
    private var projectionUpdates: [UTF8Key: JobRecord] = [:]
    private var projectionInserts: [UTF8Key: JobRecord] = [:]
    /// The order jobs' projection rows were first written in (updates then run in a stable order).
    private var projectionOrder: [UTF8Key] = []
    /// The lease expiry of each job claimed in this group, by job id: written with its projection row.
    private var leaseExpiries: [UTF8Key: Int64] = [:]
    private var blobRows: [String: Data] = [:]
    /// Rows of `job_dependencies` to insert, and the jobs whose waiters' rows go (never both pending:
    /// the writer sends one kind before it collects the other).
    private var dependencyInserts: [(job: String, dependsOn: String)] = []
    private var dependencyRemovals: [String] = []
    /// Seqs taken from `events`' identity sequence and not yet used, in ascending order.
    private var reservedSeqs: [Int64] = []
    private var nextReserved = 0
    /// How many events the caller expects to append before the next read: an event that finds no
    /// reserved seq takes this many at once.
    private var expectedEvents = 0
    /// The jobs' leases by job id, compared byte for byte (a `String` key would also match canonically
    /// equivalent text, which is another id).
    private var leases: [UTF8Key: KnownLease] = [:]
    /// How many writes the writer has made or held back: a caller compares it before and after one
    /// decision to know whether that decision wrote anything.
    private(set) var writes = 0
    /// Every job row the writer wrote, the last record of each (a flush does not forget them): what a
    /// later decision of the group must start from — also for a job an earlier decision changed on the
    /// way (a dependant its dependency's end cancelled).
    private var writtenRecords: [UTF8Key: JobRecord] = [:]

    init(_ connection: PostgresConnection) {
        self.connection = connection
    }

    /// At most this many own transaction ids wait for `dataVersion` (a store that writes and never polls
    /// must not grow): past it, an own commit counts as another's — a spare poll, nothing lost.
    static let ownTransactionIDsKept = 65_536

    /// The identity sequence of `events.seq`, for `nextval`: looked up once per statement.
    ///
    /// Why the sub-select: `pg_get_serial_sequence` is stable, not immutable, so a generic plan calls it
    /// for every row — a parse of the names and a catalog scan per seq taken, three per job (~4 µs
    /// each, more than the `nextval`). An uncorrelated sub-select is an InitPlan, evaluated once per
    /// execution, and the `nextval` of each row gets its value.
    ///
    /// See https://www.postgresql.org/docs/current/sql-explain.html (InitPlan) and
    /// https://www.postgresql.org/docs/current/functions-info.html (`pg_get_serial_sequence`)
    static let eventSeqSequence = "(SELECT pg_catalog.pg_get_serial_sequence('events'::text, 'seq'::text)::regclass)"

    /// Notes the leases of jobs whose rows the caller locked, as those rows hold them: a running job's
    /// token, none for any other. Later fence checks of these jobs read nothing.
    func knowLeases(_ records: some Sequence<JobRecord>) {
        for record in records {
            leases[UTF8Key(record.id)] = Self.lease(of: record)
        }
    }

    /// The lease a job row holds: its token while it runs (a claim sets both), none otherwise.
    private static func lease(of record: JobRecord) -> KnownLease {
        if record.state == .running, let token = record.leaseToken { return .token(token) }
        return .none
    }

    /// Takes `count` seqs for events of jobs whose rows this transaction has locked.
    func reserveSeqs(_ count: Int) throws(StoreError) {
        guard count > 0 else { return }
        let taken = try connection.rows("SELECT pg_catalog.nextval(\(Self.eventSeqSequence)) FROM pg_catalog.generate_series(1::bigint, $1::bigint)", [.int(count)]) {
            (row) throws(StoreError) in try row.integer(0)
        }
        addReservedSeqs(taken)
    }

    /// Adds seqs taken after the rows of the jobs they are for were locked (a claim takes them in its
    /// own query): they are handed out in ascending order.
    func addReservedSeqs(_ seqs: [Int64]) {
        guard !seqs.isEmpty else { return }
        reservedSeqs.removeFirst(nextReserved)
        nextReserved = 0
        reservedSeqs += seqs.sorted()
    }

    /// Forgets the reserved seqs: the caller is about to lock the rows of jobs they were not taken for.
    func discardReservedSeqs() {
        reservedSeqs.removeAll()
        nextReserved = 0
    }

    /// Expects `count` events before the next read (a submit of `count` jobs): the first event without
    /// a reserved seq takes seqs for all of them in one statement.
    func expectEvents(_ count: Int) {
        expectedEvents = count
    }

    /// How many reserved seqs are still unused.
    var unusedReservedSeqs: Int { reservedSeqs.count - nextReserved }

    /// Turns everything written so far into one statement and holds it back on the connection
    /// (`PostgresConnection.enqueue`): it reaches the server in one pipeline with the transaction's
    /// next statement — the next read, or the COMMIT — so it costs no round trip of its own, and every
    /// later statement of the transaction sees its writes. A write that fails fails that pipeline's
    /// call (the transaction is aborted and nothing of it commits).
    /// The statement returns the transaction's id, which the connection notes as its own
    /// (`ownTransactionIDs`: `dataVersion` does not count this session's own commits).
    func flush() throws(StoreError) {
        if !blobRows.isEmpty {
            // The blobs' turns before they are stored (see `BlobTurns`), held back in the same pipeline.
            connection.enqueue(BlobTurns.sharedSQL, [postgresTextArray(blobRows.keys.sorted())])
            // Large results go in inserts of their own, each message under the server's limit: in the
            // group's one statement, two download-memory results of 512 MiB made a message past 1 GB,
            // which the server answers by ending the session (the whole group commit lost, and lost again
            // at every retry of the jobs it held).
            if blobRows.values.reduce(0, { $0 + $1.count }) > connection.messageLimit / Self.sharedBlobFraction {
                let blobs = blobRows.sorted { $0.key < $1.key }
                blobRows.removeAll()
                for pack in Self.blobPacks(blobs.map { ($0.key, $0.value) }, messageLimit: connection.messageLimit) {
                    connection.enqueue(Self.blobInsertSQL, Self.blobParameters(pack))
                }
            }
        }
        let writes = try collectedWrites()
        guard !writes.isEmpty else { return }
        let (sql, parameters) = Self.statement(writes, then: "SELECT pg_current_xact_id_if_assigned()::text::bigint", [])
        let connection = connection
        connection.enqueue(sql, parameters) { (result) throws(PostgresError) in
            guard let row = result.rows.first, let xid = try row.optionalInt64(0),
                  connection.ownTransactionIDs.count < Self.ownTransactionIDsKept else { return }
            connection.ownTransactionIDs.insert(xid)
        }
    }

    /// The collected rows as one write per table, emptying the collections.
    private func collectedWrites() throws(StoreError) -> [HeldWrite] {
        var writes: [HeldWrite] = []
        if !eventRows.isEmpty {
            let rows = eventRows
            eventRows.removeAll()
            writes.append(HeldWrite(table: "events", sql: """
                INSERT INTO events (seq, job_id, version, type, at_ms, actor, lease, data) OVERRIDING SYSTEM VALUE
                SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, $8)
                """, parameters: [
                    Self.array(PostgresType.int8, rows.map { .integer($0.seq) }),
                    Self.array(PostgresType.text, rows.map { .text($0.jobID) }),
                    Self.array(PostgresType.int8, rows.map { .int($0.version) }),
                    Self.array(PostgresType.text, rows.map { .text($0.type) }),
                    Self.array(PostgresType.int8, rows.map { .integer($0.atMs) }),
                    Self.array(PostgresType.text, rows.map { .text($0.actor) }),
                    Self.array(PostgresType.int8, rows.map { .optional($0.lease) }),
                    Self.array(PostgresType.text, rows.map { .text($0.data) }),
                ]))
        }
        let order = projectionOrder
        projectionOrder.removeAll()
        let inserts = order.compactMap { projectionInserts[$0] }
        let updates = order.compactMap { projectionUpdates[$0] }
        let updated = Set(order.filter { projectionUpdates[$0] != nil })
        projectionInserts.removeAll()
        projectionUpdates.removeAll()
        if !inserts.isEmpty {
            writes.append(try Self.projectionInsert(inserts))
        }
        if !updates.isEmpty {
            writes.append(try Self.projectionUpdate(updates, leaseExpiries: updates.map { leaseExpiries[UTF8Key($0.id)] }))
        }
        // An expiry whose job's projection row was sent before it (none is today: a claim writes its
        // lease right after its row) goes in an update of its own, of other rows than the one above.
        let orphans = leaseExpiries.filter { !updated.contains($0.key) }
        leaseExpiries.removeAll()
        if !orphans.isEmpty {
            let expiries = orphans.map { (id: $0.key.string, expiresAtMs: $0.value) }.sorted { $0.id < $1.id }
            writes.append(HeldWrite(table: "jobs", sql: """
                UPDATE jobs SET lease_expires_at_ms = u.expires_at_ms FROM unnest($1, $2) AS u(id, expires_at_ms)
                WHERE jobs.id = u.id AND jobs.state = 'running' AND jobs.id = ANY($1)
                """, parameters: [Self.array(PostgresType.text, expiries.map { .text($0.id) }),
                                  Self.array(PostgresType.int8, expiries.map { .integer($0.expiresAtMs) })]))
        }
        if !blobRows.isEmpty {
            let blobs = blobRows.sorted { $0.key < $1.key }
            blobRows.removeAll()
            writes.append(HeldWrite(table: "blobs", sql: Self.blobInsertSQL, parameters: Self.blobParameters(blobs.map { ($0.key, $0.value) })))
        }
        if !dependencyInserts.isEmpty {
            let rows = dependencyInserts
            dependencyInserts.removeAll()
            writes.append(HeldWrite(table: "job_dependencies", sql: """
                INSERT INTO job_dependencies (job, depends_on) SELECT * FROM unnest($1, $2) ON CONFLICT DO NOTHING
                """, parameters: [Self.array(PostgresType.text, rows.map { .text($0.job) }),
                                  Self.array(PostgresType.text, rows.map { .text($0.dependsOn) })]))
        }
        if !dependencyRemovals.isEmpty {
            let ids = dependencyRemovals
            dependencyRemovals.removeAll()
            writes.append(HeldWrite(table: "job_dependencies", sql: "DELETE FROM job_dependencies WHERE depends_on = ANY($1)",
                                    parameters: [Self.array(PostgresType.text, ids.map(PostgresValue.text))]))
        }
        return writes
    }

    /// The insert of blobs: hashes, sizes and bytes as three arrays (`blobParameters`).
    static let blobInsertSQL = "INSERT INTO blobs (sha256, size, data) SELECT * FROM unnest($1, $2, $3) ON CONFLICT (sha256) DO NOTHING"

    private static func blobParameters(_ blobs: [(sha256: String, bytes: Data)]) -> [PostgresValue] {
        [array(PostgresType.text, blobs.map { .text($0.sha256) }),
         array(PostgresType.int8, blobs.map { .int($0.bytes.count) }),
         array(PostgresType.bytea, blobs.map { .bytea($0.bytes) })]
    }

    /// Blobs ride in the group's one statement while together they are at most this fraction of the
    /// message limit (the rest is room for the events and rows: a claim of thousands of jobs is a few MiB).
    static let sharedBlobFraction = 8

    /// What each blob adds to a message besides its bytes: its hash, its size and three lengths, with room.
    static let blobOverheadBytes = 128

    /// `blobs` cut, in order, into groups whose message stays under `messageLimit` (with a KiB for the
    /// statement's own fields); a blob too large for any message is a group alone, which the connection
    /// refuses (`messageTooLarge`) before anything is sent.
    static func blobPacks(_ blobs: [(sha256: String, bytes: Data)], messageLimit: Int) -> [[(sha256: String, bytes: Data)]] {
        let budget = messageLimit - 1_024
        var packs: [[(sha256: String, bytes: Data)]] = []
        var current: [(sha256: String, bytes: Data)] = []
        var size = 0
        for blob in blobs {
            let added = blob.bytes.count + blobOverheadBytes
            if !current.isEmpty && size + added > budget {
                packs.append(current)
                current = []
                size = 0
            }
            current.append(blob)
            size += added
        }
        if !current.isEmpty { packs.append(current) }
        return packs
    }

    private static func array(_ elementType: UInt32, _ elements: [PostgresValue]) -> PostgresValue {
        .array(PostgresArray(elementType: elementType, elements: elements))
    }

    /// The element type of each `jobs` column the writer sends as an array: a column whose values in
    /// one statement are all NULL still needs its type. A column missing here is sent typed by its
    /// values, or as a plain NULL when all of them are NULL.
    static let projectionColumnTypes: [String: UInt32] = [
        "id": PostgresType.text, "seq": PostgresType.int8, "kind": PostgresType.text, "state": PostgresType.text,
        "queue": PostgresType.text, "priority": PostgresType.int8, "run_after_ms": PostgresType.int8,
        "attempts": PostgresType.int8, "max_attempts": PostgresType.int8, "lease_owner": PostgresType.text,
        "lease_token": PostgresType.int8, "bytes_done": PostgresType.int8, "bytes_total": PostgresType.int8,
        "resume_point": PostgresType.text, "error": PostgresType.text,
        "idempotency_key": PostgresType.text, "pause_requested": PostgresType.bool,
        "cancel_requested": PostgresType.bool, "version": PostgresType.int8, "created_at_ms": PostgresType.int8,
        "updated_at_ms": PostgresType.int8, "started_at_ms": PostgresType.int8, "finished_at_ms": PostgresType.int8,
        "batch": PostgresType.text, "lease_expires_at_ms": PostgresType.int8,
    ]

    /// Column `index` of `rows` as an array parameter, or nil when its type is unknown and every value
    /// is NULL (the caller writes a plain NULL).
    private static func column(_ name: String, _ index: Int, of rows: [[PostgresValue]]) throws(StoreError) -> PostgresValue? {
        let values = rows.map { $0[index] }
        var type = projectionColumnTypes[name]
        for value in values where value != .null {
            let valueType: UInt32
            // The type alone: encoding every value here (a copy of each text) only to read its type was
            // ~2 % of a worker's instructions; the array is encoded once, when it is sent.
            do throws(PostgresError) { valueType = try value.typeOID() } catch { throw StoreError(error) }
            if type == nil { type = valueType }
            guard valueType == type else {
                throw StoreError.corrupt("the projection column \(name) got a value of type \(valueType) and one of type \(type ?? 0)")
            }
        }
        guard let type else { return nil }
        return array(type, values)
    }

    /// One `INSERT INTO jobs` of every new row.
    static func projectionInsert(_ records: [JobRecord]) throws(StoreError) -> HeldWrite {
        let rows = try records.map { (record) throws(StoreError) in try record.postgresValues() }
        var parameters: [PostgresValue] = []
        var selected: [String] = []
        var unnested: [String] = []
        for (index, name) in JobRecord.postgresColumns.enumerated() {
            if let column = try column(name, index, of: rows) {
                parameters.append(column)
                unnested.append("$\(parameters.count)")
                selected.append("u.c\(index)")
            } else {
                selected.append("NULL")
            }
        }
        let aliases = JobRecord.postgresColumns.indices.filter { selected[$0] != "NULL" }.map { "c\($0)" }
        let sql = "INSERT INTO jobs (\(JobRecord.postgresStoredColumns)) SELECT " + selected.joined(separator: ", ")
            + " FROM unnest(" + unnested.joined(separator: ", ") + ") AS u(" + aliases.joined(separator: ", ") + ")"
        return HeldWrite(table: "jobs", sql: sql, parameters: parameters)
    }

    /// One `UPDATE jobs` of every changing column of each job's last row, joined by id.
    ///
    /// `leaseExpiries` (one per record, nil: none) are the expiries of the leases this group's claims
    /// gave: a running job gets its claim's expiry, or keeps the one it has; a job that is not running
    /// has none (its run ended, or it never started one).
    static func projectionUpdate(_ records: [JobRecord], leaseExpiries: [Int64?]? = nil) throws(StoreError) -> HeldWrite {
        precondition(leaseExpiries.map { $0.count == records.count } ?? true, "projectionUpdate: one lease expiry per record")
        // `postgresUpdateValues()`: the changing columns, then the id; the lease expiry goes before the id.
        let rows = try records.enumerated().map { (index, record) throws(StoreError) -> [PostgresValue] in
            var values = try record.postgresUpdateValues()
            values.insert(.optional(leaseExpiries?[index]), at: values.count - 1)
            return values
        }
        var parameters: [PostgresValue] = []
        parameters.reserveCapacity(projectionUpdateColumns.count)
        for (index, name) in projectionUpdateColumns.enumerated() {
            // Every one of these columns has a type in `projectionColumnTypes`, so none is left out.
            guard let column = try column(name, index, of: rows) else {
                throw StoreError.corrupt("the projection column \(name) has no known type; this is a bug in jobctl: please report it")
            }
            parameters.append(column)
        }
        return HeldWrite(table: "jobs", sql: projectionUpdateSQL, parameters: parameters)
    }

    /// The columns `projectionUpdate` sends, one array parameter each, in order: the changing columns,
    /// the lease expiry, the id.
    static let projectionUpdateColumns = JobRecord.postgresChangingColumns + ["lease_expires_at_ms", "id"]

    /// The text of `projectionUpdate`, the same for every group: every column it sends has a known type,
    /// so none is ever sent as a plain NULL. Built once instead of at every group commit (the string
    /// building was ~3 % of a worker's instructions).
    static let projectionUpdateSQL: String = {
        let names = projectionUpdateColumns
        precondition(names.allSatisfy { projectionColumnTypes[$0] != nil }, "projectionUpdateSQL: a column without a type")
        var assignments: [String] = []
        var stateAlias = "NULL"
        for (index, name) in names.enumerated() {
            switch name {
            case "id": break
            case "state":
                stateAlias = "u.c\(index)"
                assignments.append("\(name) = u.c\(index)")
            case "lease_expires_at_ms":
                // `state` comes first among the columns, so its alias is known here.
                assignments.append("\(name) = CASE WHEN \(stateAlias) = 'running' THEN coalesce(u.c\(index), jobs.\(name)) END")
            default:
                assignments.append("\(name) = u.c\(index)")
            }
        }
        // The ids again as `= ANY`: without it the planner, which cannot see how many rows `unnest`
        // gives, may join by hashing the WHOLE table (a sequential scan of every job per group commit);
        // with it, it looks each row up in the primary key.
        return "UPDATE jobs SET " + assignments.joined(separator: ", ")
            + " FROM unnest(" + names.indices.map { "$\($0 + 1)" }.joined(separator: ", ") + ") AS u("
            + names.indices.map { "c\($0)" }.joined(separator: ", ") + ") WHERE jobs.id = u.c\(names.count - 1) AND jobs.id = ANY($\(names.count))"
    }()

    /// Notes the lease of a job just claimed: its expiry is written with the job's projection row (the
    /// claim's `writeProjection` set its owner and token).
    func writeLease(jobID: String, owner: String, token: Int64, expiresAtMs: Int64) throws(StoreError) {
        let key = UTF8Key(jobID)
        leaseExpiries[key] = expiresAtMs
        leases[key] = .token(token)
        writes += 1
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
            clauses.append("w\(index) AS (\(renumberedOnce(write.sql, by: parameters.count)))")
            parameters += write.parameters
        }
        let body = renumberedOnce(main, by: parameters.count)
        return ("WITH " + clauses.joined(separator: ", ") + " " + body, parameters + mainParameters)
    }

    /// A text and an offset `renumbered` was asked for.
    private struct RenumberedKey: Hashable {
        let sql: String
        let offset: Int
    }

    /// The texts `renumbered` made, by text and offset. A group commit's writes are the same few texts at
    /// the same few offsets every time, and renumbering them byte by byte (with the concatenation) was
    /// ~5 % of a PostgreSQL worker's instructions; a lookup hashes the text once. At most
    /// `renumberedKept` are kept; when full, the cache starts over.
    private static let renumberedTexts = Mutex<[RenumberedKey: String]>([:])
    static let renumberedKept = 256

    /// `renumbered(sql, by: offset)`, made once per text and offset (`renumberedTexts`).
    static func renumberedOnce(_ sql: String, by offset: Int) -> String {
        guard offset > 0 else { return sql }
        let key = RenumberedKey(sql: sql, offset: offset)
        if let made = renumberedTexts.withLock({ $0[key] }) { return made }
        let made = renumbered(sql, by: offset)
        renumberedTexts.withLock { texts in
            if texts.count >= renumberedKept { texts.removeAll(keepingCapacity: true) }
            texts[key] = made
        }
        return made
    }

    /// `sql` with every parameter reference `$n` replaced by `$(n + offset)`. The statements held back
    /// here have no `$` anywhere else (no dollar quoting, no `$` in a literal).
    ///
    /// Runs once per held-back write of every group commit, so it works on the UTF-8 bytes (the
    /// profile of a drain had the `Character` walk it replaced at ~1.7 % of the worker). A `$` and its
    /// digits are ASCII and never part of a multi-byte character, so the bytes between references are
    /// copied unchanged.
    static func renumbered(_ sql: String, by offset: Int) -> String {
        guard offset > 0 else { return sql }
        let dollar = UInt8(ascii: "$"), zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")
        let bytes = Array(sql.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 16)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            guard byte == dollar else {
                out.append(byte)
                continue
            }
            let first = index
            while index < bytes.count, (zero...nine).contains(bytes[index]) { index += 1 }
            out.append(dollar)
            // More digits than an Int holds is no parameter reference: copied as it stands.
            if let number = Int(String(decoding: bytes[first..<index], as: UTF8.self)) {
                out += Array(String(number + offset).utf8)
            } else {
                out += bytes[first..<index]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: DecisionWriter

    /// The job's lease token as this transaction has it, read from the server only for a job whose
    /// row the caller did not hand to `knowLeases`.
    func leaseToken(ofJob jobID: String) throws(StoreError) -> Int64? {
        switch leases[UTF8Key(jobID)] {
        case .token(let token)?: return token
        case .none?: return nil
        case nil:
            try flush()
            let token = try connection.leaseToken(ofJob: jobID)
            leases[UTF8Key(jobID)] = token.map(KnownLease.token) ?? KnownLease.none
            return token
        }
    }

    /// Collects the blob for the group's one insert of blobs (a blob is immutable and
    /// content-addressed: nothing reads it back in the transaction that stores it).
    func storeBlob(_ bytes: Data, sha256: String) throws(StoreError) {
        blobRows[sha256] = bytes
        writes += 1
    }

    /// Collects the event for the group's one insert of events, under the next reserved seq (taking
    /// one more first when none is left), and returns that seq.
    func insertEvent(jobID: String, version: Int, type: EventType, atMs: Int64, actor: String, leaseToken: Int64?,
                     data: String) throws(StoreError) -> Int64 {
        if nextReserved == reservedSeqs.count {
            try reserveSeqs(max(1, expectedEvents))
            expectedEvents = 0
        }
        let seq = reservedSeqs[nextReserved]
        nextReserved += 1
        eventRows.append(EventRow(seq: seq, jobID: jobID, version: version, type: type.rawValue, atMs: atMs, actor: actor,
                                  lease: leaseToken, data: data))
        writes += 1
        return seq
    }

    /// Collects the projection row: the job's last row of the group is the one written (an insert
    /// for a job the group created, else an update).
    func writeProjection(_ record: JobRecord, replacing current: JobRecord?) throws(StoreError) {
        let key = UTF8Key(record.id)
        writtenRecords[key] = record
        if projectionInserts[key] != nil {
            projectionInserts[key] = record
        } else if current == nil {
            projectionInserts[key] = record
            projectionOrder.append(key)
        } else {
            if projectionUpdates[key] == nil { projectionOrder.append(key) }
            projectionUpdates[key] = record
        }
        writes += 1
    }

    /// The job's row as this writer last wrote it, or nil when it wrote none.
    func written(_ jobID: String) -> JobRecord? {
        writtenRecords[UTF8Key(jobID)]
    }

    /// The job stopped running: the projection row written for it clears the expiry (its state is not
    /// `running`), so nothing more is written.
    func dropLease(jobID: String) throws(StoreError) {
        let key = UTF8Key(jobID)
        leaseExpiries[key] = nil
        leases[key] = KnownLease.none
        writes += 1
    }

    /// The dependency's row, locked (after everything written so far is sent).
    func dependencyRecord(_ jobID: String) throws(StoreError) -> JobRecord? {
        try flush()
        let record = try connection.dependencyRecord(jobID)
        if record != nil { discardReservedSeqs() }
        return record
    }

    /// The payload of the job's event at `version`, read after what the group collected is written
    /// (the event may be one of this transaction's).
    func payload(ofJob jobID: String, version: Int) throws(StoreError) -> EventPayload? {
        try flush()
        return try connection.payload(ofJob: jobID, version: version)
    }

    /// Collects the row of `job_dependencies` for the group's one insert of them.
    func insertDependency(jobID: String, dependsOn: String) throws(StoreError) {
        if !dependencyRemovals.isEmpty { try flush() }
        dependencyInserts.append((jobID, dependsOn))
        writes += 1
    }

    /// Collects the removal of the rows that wait on `jobID` for the group's one delete of them.
    func removeDependencies(on jobID: String) throws(StoreError) {
        if !dependencyInserts.isEmpty { try flush() }
        dependencyRemovals.append(jobID)
        writes += 1
    }

    /// The jobs waiting on `jobID`, locked (after everything written so far is sent).
    func waitingDependants(of jobID: String) throws(StoreError) -> [JobRecord] {
        try flush()
        let dependants = try connection.waitingDependants(of: jobID)
        if !dependants.isEmpty { discardReservedSeqs() }
        return dependants
    }
}
