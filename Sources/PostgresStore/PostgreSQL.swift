import CPostgres
import Foundation
import JobModel

// The one file that calls libpq. Everything else in the module speaks `PostgresConnection`,
// `PostgresResult`, `PostgresRow` and `PostgresValue`; no unsafe pointer leaves this file.
//
// Parameters and results travel in PostgreSQL's binary format: integers and bytea need no text
// round-trip, a text value is sent with its length (so a NUL byte is refused by the server instead of
// silently ending the string), and a column's type is checked when it is read.

// MARK: - Values

/// A value bound to a statement parameter (`$1`, `$2`, …) or read from a result column.
///
/// See https://www.postgresql.org/docs/current/datatype.html
enum PostgresValue: Equatable, Sendable, CustomStringConvertible {
    case null
    case integer(Int64)
    case text(String)
    case bytea(Data)
    case bool(Bool)
    /// A one-dimensional array of one element type (for `unnest($n)`: many rows in one statement).
    case array(PostgresArray)

    static func optional(_ value: String?) -> PostgresValue { value.map(PostgresValue.text) ?? .null }
    static func optional(_ value: Int64?) -> PostgresValue { value.map(PostgresValue.integer) ?? .null }
    static func optional(_ value: Data?) -> PostgresValue { value.map(PostgresValue.bytea) ?? .null }
    static func int(_ value: Int) -> PostgresValue { .integer(Int64(value)) }

    /// Text for reports; a bytea shows only its size.
    var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let value): String(value)
        case .text(let value): value
        case .bytea(let value): "<\(value.count) bytes>"
        case .bool(let value): value ? "true" : "false"
        case .array(let array): "<array of \(array.elements.count)>"
        }
    }

    /// The type OID `binary()` sends the value with (0 for NULL), without encoding the value: what a
    /// batch's array of one column checks for every value it holds.
    func typeOID() throws(PostgresError) -> UInt32 {
        switch self {
        case .null: return 0
        case .integer: return PostgresType.int8
        case .text: return PostgresType.text
        case .bytea: return PostgresType.bytea
        case .bool: return PostgresType.bool
        case .array(let array): return try array.arrayType()
        }
    }

    /// The value's binary form and its type OID; nil bytes for NULL (sent untyped).
    ///
    /// See https://www.postgresql.org/docs/current/protocol-overview.html#PROTOCOL-FORMAT-CODES
    func binary() throws(PostgresError) -> (type: UInt32, bytes: [UInt8]?) {
        var bytes: [UInt8] = []
        guard try appendBinary(to: &bytes) else { return (0, nil) }
        return (try typeOID(), bytes)
    }

    /// Appends the value's binary form to `out`, where it is sent from; false for NULL (nothing
    /// appended). No array of its own per value: a group commit's parameters are a few arrays of many
    /// values each, and an array made for every value and copied was most of their encoding.
    func appendBinary(to out: inout [UInt8]) throws(PostgresError) -> Bool {
        switch self {
        case .null: return false
        case .integer(let integer): withUnsafeBytes(of: integer.bigEndian) { out.append(contentsOf: $0) }
        case .text(let text): out.append(contentsOf: text.utf8)
        case .bytea(let data): out.append(contentsOf: data)
        case .bool(let flag): out.append(flag ? 1 : 0)
        case .array(let array): try array.appendBinary(to: &out)
        }
        return true
    }
}

/// A one-dimensional array parameter: `elements` are NULLs or scalars of `elementType` (`int8`, `text`,
/// `bool` or `bytea`), sent in the binary array format, so no element is quoted, escaped or parsed as
/// text on either side.
///
/// See https://www.postgresql.org/docs/current/arrays.html (the binary layout is `array_send`'s).
struct PostgresArray: Equatable, Sendable {
    let elementType: UInt32
    let elements: [PostgresValue]

    /// The OID of the array type of `elementType`.
    func arrayType() throws(PostgresError) -> UInt32 {
        switch elementType {
        case PostgresType.bool: return 1000
        case PostgresType.bytea: return 1001
        case PostgresType.text: return 1009
        case PostgresType.int8: return 1016
        default: throw PostgresError.conversion("no array of type \(elementType) can be sent: use int8, text, bool or bytea")
        }
    }

    /// `array_send`'s layout: dimensions, a has-nulls flag, the element type, each dimension's length
    /// and lower bound, then every element as a length (-1: NULL) and its binary form.
    func binary() throws(PostgresError) -> [UInt8] {
        var out: [UInt8] = []
        try appendBinary(to: &out)
        return out
    }

    /// Appends `binary()` to `out`: a first pass over the elements checks them and adds up the exact
    /// size (an integer is 8 bytes, a text its UTF-8 count); `out` grows by that once, and a second pass
    /// stores every length and value through one buffer. A group commit sends a few such arrays per
    /// column; appending each 4-byte length through `append(contentsOf:)` and patching it afterwards byte
    /// by byte cost ~100 instructions a field.
    func appendBinary(to out: inout [UInt8]) throws(PostgresError) {
        var hasNull = false
        var size = elements.isEmpty ? 12 : 20
        for element in elements {
            let length: Int
            switch element {
            case .null:
                hasNull = true
                size += 4
                continue
            case .array: throw PostgresError.conversion("an array element cannot be an array")
            case .integer: length = 8
            case .text(let text): length = text.utf8.count
            case .bytea(let data): length = data.count
            case .bool: length = 1
            }
            let type = try element.typeOID()
            guard type == elementType else {
                throw PostgresError.conversion("an element of type \(type) in an array of type \(elementType)")
            }
            guard length <= Int(Int32.max) else {
                throw PostgresError.conversion("an array element is \(length) bytes; PostgreSQL takes at most \(Int32.max)")
            }
            size += 4 + length
        }
        // `out` grows by doubling: the caller appends every parameter to it, and growing it by just the
        // room needed would copy it once for each array. The room is zeroed by copying from a page of
        // zeros (appending a repeated zero goes a byte at a time), then written through one buffer.
        let start = out.count
        if out.capacity < start + size { out.reserveCapacity(max(start + size, 2 * out.capacity)) }
        var missing = size
        while missing > 0 {
            let count = min(missing, Self.zeros.count)
            Self.zeros.withUnsafeBufferPointer { out.append(contentsOf: UnsafeBufferPointer(rebasing: $0[..<count])) }
            missing -= count
        }
        out.withUnsafeMutableBufferPointer { buffer in
            var writer = BigEndianWriter(buffer: UnsafeMutableBufferPointer(rebasing: buffer[start...]), at: 0)
            writer.put(UInt32(elements.isEmpty ? 0 : 1))
            writer.put(UInt32(hasNull ? 1 : 0))
            writer.put(elementType)
            if !elements.isEmpty {
                writer.put(UInt32(elements.count))
                writer.put(UInt32(1))
            }
            for element in elements {
                switch element {
                case .null: writer.put(UInt32(bitPattern: -1))
                case .integer(let integer):
                    writer.put(UInt32(8))
                    writer.put(UInt64(bitPattern: integer))
                case .text(let text):
                    writer.put(UInt32(text.utf8.count))
                    writer.put(text.utf8)
                case .bytea(let data):
                    writer.put(UInt32(data.count))
                    writer.put(data)
                case .bool(let flag):
                    writer.put(UInt32(1))
                    writer.put(UInt8(flag ? 1 : 0))
                case .array: break  // refused above
                }
            }
            precondition(writer.at == size, "an array's binary form is not the size counted for it")
        }
    }

    private static let zeros = [UInt8](repeating: 0, count: 4_096)
}

/// Stores big-endian integers and bytes into a buffer made big enough (and zeroed) beforehand, each
/// write moving on. Every write checks that it fits (one comparison): the buffer's size is counted in a
/// pass before, and a miscount must stop the process, not write past the buffer.
private struct BigEndianWriter {
    let buffer: UnsafeMutableBufferPointer<UInt8>
    var at: Int

    private func room(_ count: Int) -> UnsafeMutablePointer<UInt8> {
        precondition(count <= buffer.count - at, "a write past the end of a buffer sized beforehand")
        return buffer.baseAddress! + at
    }

    mutating func put(_ byte: UInt8) {
        room(1).pointee = byte
        at += 1
    }

    mutating func put(_ value: UInt32) {
        let target = room(4)
        target[0] = UInt8(truncatingIfNeeded: value >> 24)
        target[1] = UInt8(truncatingIfNeeded: value >> 16)
        target[2] = UInt8(truncatingIfNeeded: value >> 8)
        target[3] = UInt8(truncatingIfNeeded: value)
        at += 4
    }

    mutating func put(_ value: UInt64) {
        put(UInt32(truncatingIfNeeded: value >> 32))
        put(UInt32(truncatingIfNeeded: value))
    }

    mutating func put<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        let copied = bytes.withContiguousStorageIfAvailable { source -> Int in
            if let base = source.baseAddress, source.count > 0 {
                room(source.count).update(from: base, count: source.count)
            }
            return source.count
        }
        if let copied {
            at += copied
        } else {
            for byte in bytes { put(byte) }
        }
    }
}

/// Type OIDs of the built-in types jobctl sends and reads (`pg_type.oid`, fixed across versions).
///
/// See https://www.postgresql.org/docs/current/catalog-pg-type.html
enum PostgresType {
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let name: UInt32 = 19
    static let int8: UInt32 = 20
    static let int2: UInt32 = 21
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let oid: UInt32 = 26
    static let json: UInt32 = 114
    static let unknown: UInt32 = 705
    static let bpchar: UInt32 = 1042
    static let varchar: UInt32 = 1043
    static let jsonb: UInt32 = 3802

    /// The types `PostgresRow.int64` reads.
    static func isIntegral(_ type: UInt32) -> Bool {
        switch type {
        case int2, int4, int8, oid: true
        default: false
        }
    }

    /// The types `PostgresRow.text` reads (a set made per cell was a tenth of `replay --verify`'s CPU;
    /// a set's lookup still showed in a drain's profile).
    static func isTextualOrJSONB(_ type: UInt32) -> Bool {
        switch type {
        case name, text, json, unknown, bpchar, varchar, jsonb: true
        default: false
        }
    }
}

/// The isolation level a transaction begins with.
///
/// See https://www.postgresql.org/docs/current/transaction-iso.html
enum PostgresIsolation: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    /// Serializable: the server fails one of two conflicting transactions with SQLSTATE 40001
    /// (`PostgresError.isSerializationFailure`); the caller runs it again.
    case serializable = "SERIALIZABLE"
}

// MARK: - Connection

/// One libpq `PGconn*`, connected in `init` and closed with `PQfinish` in `deinit`.
///
/// Not `Sendable`: a connection runs one statement at a time and belongs to one thread at a time; the
/// store that owns it serialises access. Blocking calls only (the store runs them on its own executor).
///
/// See https://www.postgresql.org/docs/current/libpq-connect.html
final class PostgresConnection {
    private let handle: OpaquePointer
    /// The target as given, with passwords replaced (`redactedDatabaseURL`); safe to show.
    let redactedTarget: String
    /// The password libpq used (from the URL, PGPASSWORD or the password file), only to scrub it from
    /// messages the server or libpq send back; never shown.
    private let password: String?
    /// The transaction ids (`xid8`) of this session's write transactions that the store noted
    /// (`PostgresBatchWriter.flush`) and `PostgresStore.dataVersion` has not yet looked at: commits of
    /// these are this connection's own, not another's.
    var ownTransactionIDs: Set<Int64> = []
    /// While a group commit runs with a savepoint per event (`appendBatch`; nil otherwise), every job row
    /// `writeProjection` wrote in it, by job id (byte for byte), as written: a job's next event in the
    /// batch starts from its row as it stands — also a dependant an earlier event's end cancelled.
    var batchRecords: [UTF8Key: JobRecord]?
    /// What `writeProjection` replaced in `batchRecords` during the current event, oldest first: a
    /// refused event's entries are put back from it (as SQLite's connection does; no copy of the map).
    var batchRecordsUndo: [(key: UTF8Key, record: JobRecord?)] = []
    /// The specs of the jobs this connection read (kept across reconnects: a hit needs the same stored text).
    let specs = PostgresSpecCache()
    /// Gives the connection up when the server does not answer a call in time (nil: waits for ever).
    private var answerWatchdog: AnswerWatchdog?
    /// How long a connection attempt waits for the server (unless the target says otherwise).
    let connectTimeoutSeconds: Int
    /// When set (a stopping worker's), no connection is opened again past it, nor waited for longer
    /// than up to it (see `reconnect`).
    var stopDeadline: StopDeadline?
    /// The schema of jobctl's log that this session keeps to (`PostgresMigrator.keepToLogSchema`): the
    /// session's search_path names it alone, and a new session (`reconnect`) is set so again. Nil until
    /// then, and when no schema on the search path exists.
    private(set) var logSchema: String?
    /// Whether the last call's connection was given up after the server's silence outlasted the answer
    /// timeout (a one-shot command's measure): a transaction does not take such a connection for one the
    /// server had dropped while idle and run itself again on a new one — that waited the whole limit a
    /// second time (a `stats` with `JOBCTL_DB_ANSWER_TIMEOUT=3s` behind a table lock failed after 6.3 s).
    /// A worker's calls timed whole (claims, group commits, renewals) are still run again once: their
    /// answer may have been trickled by a path that a new connection avoids.
    private(set) var lastCallGivenUp = false
    /// The last connection attempt's failure and until when (`StopDeadline.nowNs()`) `reconnect` answers
    /// with it instead of trying again (`reconnectHoldNs`).
    private var failedReconnect: (error: PostgresError, untilNs: UInt64)?
    /// How long a failed connection attempt stands for the calls that come after it. Every call of a
    /// store runs on its one connection in turn: behind a server that took connections and answered
    /// nothing, each call queued behind a failed attempt made its own (the connect timeout, 10 s), and a
    /// worker holding eight jobs gave them up one at a time, 10 s apart — four minutes into an outage
    /// its 30 s leases had long ended. A worker's own retries pause longer than this anyway.
    static let reconnectHoldNs: UInt64 = 1_000_000_000

    /// Makes `schema` the session's only schema on its search_path (pg_catalog, searched first when the
    /// path does not name it, stays first), now and after every `reconnect`.
    func keepToSchema(_ schema: String) throws(PostgresError) {
        try execute("SELECT pg_catalog.set_config('search_path'::text, pg_catalog.quote_ident($1::text), false)", [.text(schema)])
        logSchema = schema
    }

    /// Notes that a statement of the caller's made `schema` the session's only one, as `keepToSchema` does.
    func keptToSchema(_ schema: String) {
        logSchema = schema
    }

    /// What `init` refuses in `written` before it sends anything: user information libpq would read
    /// otherwise than jobctl (`userInformationProblem`), libpq that cannot be loaded, and a target libpq
    /// cannot read (`PQconninfoParse`: a malformed URL, an unknown query parameter such as `?sslmod=`).
    /// Found without a connection, so `jobctl config` asks it of the worker's database as the worker does.
    /// libpq's message is scrubbed of the password's pieces, as a failed connection's is.
    static func checkTarget(_ written: String) throws(PostgresError) {
        let target = normalizedDatabaseURL(written)
        let redacted = redactedDatabaseURL(target)
        if let problem = userInformationProblem(target) {
            throw PostgresError.connectionFailed(target: redacted, message: problem)
        }
        // libpq is loaded at the first connection (see CPostgres/shim.h); a host without it can still
        // run every SQLite command.
        if let reason = jobctl_pq_load() { throw PostgresError.libraryUnavailable(reason: String(cString: reason)) }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = jobctl_PQconninfoParse(target, &error) else {
            var message = error.map { String(cString: $0) } ?? "libpq could not read the connection target (out of memory)"
            if let error { jobctl_PQfreemem(error) }
            for piece in writtenPasswordPieces(target) { message = scrub(message, password: piece) }
            throw PostgresError.connectionFailed(target: redacted, message: message)
        }
        defer { jobctl_PQconninfoFree(options) }
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val, let problem = valueProblem(String(cString: keyword), String(cString: value)) {
                throw PostgresError.connectionFailed(target: redacted, message: problem)
            }
            option += 1
        }
    }

    /// What libpq refuses in a parameter's value only when it connects (a port past 65535, an `sslmode`
    /// it does not know), which `PQconninfoParse` passes: said here, so that `jobctl config` refuses what
    /// a worker will, before either contacts a server. In libpq's words.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS
    static func valueProblem(_ keyword: String, _ value: String) -> String? {
        func integer(_ text: Substring) -> Int? { text.allSatisfy(\.isASCII) ? Int(text.trimmingCharacters(in: .whitespaces)) : nil }
        switch keyword {
        case "port":
            // One for each host, comma-separated; an empty one is the default.
            for port in value.split(separator: ",", omittingEmptySubsequences: false) where !port.isEmpty {
                guard let number = integer(port), (1...65_535).contains(number) else { return "invalid port number: \"\(port)\"" }
            }
        case "sslmode":
            guard ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"].contains(value) else {
                return "invalid sslmode value: \"\(value)\""
            }
        case "target_session_attrs":
            guard ["any", "read-write", "read-only", "primary", "standby", "prefer-standby"].contains(value) else {
                return "invalid target_session_attrs value: \"\(value)\""
            }
        case "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout":
            guard integer(Substring(value)) != nil else { return "invalid integer value \"\(value)\" for connection option \"\(keyword)\"" }
        default:
            break
        }
        return nil
    }

    /// Connects to `target`: a `postgres://user[:password]@host:port/db?sslmode=…` URL or a libpq
    /// key/value string. libpq itself honours `PGPASSWORD`, `~/.pgpass` and the other `PG*` variables
    /// for whatever the target leaves out.
    ///
    /// Unless the target says otherwise, waits at most `connectTimeoutSeconds` for the server. The client
    /// encoding is always UTF-8.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PQCONNECTDBPARAMS
    init(_ written: String, connectTimeoutSeconds: Int = 10) throws(PostgresError) {
        let target = normalizedDatabaseURL(written)
        redactedTarget = redactedDatabaseURL(target)
        self.connectTimeoutSeconds = connectTimeoutSeconds
        try Self.checkTarget(target)
        // Later keywords win over earlier ones and over what the expanded `dbname` string sets: the
        // timeout and application name are defaults the target may override, the encoding is not.
        let settings: [(String, String)] = [
            ("connect_timeout", String(connectTimeoutSeconds)),
            ("fallback_application_name", "jobctl"),
            ("dbname", target),
            ("client_encoding", "UTF8"),
        ]
        let connection = Self.withCStrings(settings.map(\.0)) { keywords in
            Self.withCStrings(settings.map(\.1)) { values in
                jobctl_PQconnectdbParams(keywords, values, 1)
            }
        }
        guard let connection else {
            throw PostgresError.connectionFailed(target: redactedTarget, message: "libpq could not allocate a connection")
        }
        let password = jobctl_PQpass(connection).map { String(cString: $0) }
        guard jobctl_PQstatus(connection) == CONNECTION_OK else {
            // A target libpq could not parse has no password it knows of, and its message may quote a
            // piece of the one written (`invalid integer value "SECRET" for connection option "port"`,
            // from a password holding an unencoded `/`): those pieces are scrubbed too.
            var message = Self.scrub(String(cString: jobctl_PQerrorMessage(connection)), password: password)
            for piece in Self.writtenPasswordPieces(target) { message = Self.scrub(message, password: piece) }
            jobctl_PQfinish(connection)
            throw PostgresError.connectionFailed(target: redactedTarget, message: message)
        }
        handle = connection
        self.password = password
        // libpq prints notices (`NOTICE: … already exists, skipping`) to stderr by default, which would
        // mix them into a command's output. Capture-free: there is nothing to recover from the context.
        jobctl_PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit {
        answerWatchdog?.stop()
        jobctl_PQfinish(handle)
    }

    /// How long a call may go without a byte of the server's answer before the connection is given up
    /// as lost (nil, the default: for ever); within `timingAnswersWhole`, how long the call may take in
    /// all. See `AnswerWatchdog`. `cap`, when given, bounds whole calls shorter from another thread (see
    /// `AnswerWaitCap`).
    func setAnswerTimeout(milliseconds: Int64?, cap: AnswerWaitCap? = nil) throws(ThreadStartFailure) {
        answerWatchdog?.stop()
        answerWatchdog = nil
        answerWatchdog = try milliseconds.map { (timeoutMs) throws(ThreadStartFailure) in try AnswerWatchdog(timeoutMs: timeoutMs, cap: cap) }
    }

    /// While set (`timingAnswersWhole`), the answer timeout bounds each call as a whole.
    private var answersTimedWhole = false

    /// Runs `body` with the answer timeout bounding each of its calls as a whole, however steadily the
    /// answer arrives, instead of the silence in it: for calls whose answer is worth nothing once it
    /// comes later than that (a worker's lease renewals, its group commits and claims; see their callers).
    func timingAnswersWhole<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let outer = answersTimedWhole
        answersTimedWhole = true
        defer { answersTimedWhole = outer }
        return try body()
    }

    /// Runs `body`, a call that waits on the server, under the answer timeout: when it passes, the
    /// socket is shut down (the wait ends) and the call fails as a lost connection saying why.
    private func awaitingAnswer<T>(sql: String?, _ body: () throws(PostgresError) -> T) throws(PostgresError) -> T {
        lastCallGivenUp = false
        guard let watchdog = answerWatchdog else { return try body() }
        watchdog.arm(socket: jobctl_PQsocket(handle), measure: answersTimedWhole ? .wholeCall : .silence)
        let result: Result<T, PostgresError>
        do throws(PostgresError) { result = .success(try body()) } catch { result = .failure(error) }
        if watchdog.disarm(), case .failure = result, let firing = watchdog.lastFiring {
            lastCallGivenUp = !firing.wholeCall
            let seconds = String(format: "%.1f", Double(firing.limitMs) / 1_000).replacingOccurrences(of: ".0", with: "")
            if firing.atDeadline {
                throw PostgresError.connectionLost(message: "the stopping worker's grace ran out before the server had answered, "
                                                       + "so the connection was given up", sql: sql)
            }
            let what = !firing.answerBegun ? "the server sent no answer for \(seconds) s"
                : firing.wholeCall ? "the server had not finished its answer within \(seconds) s"
                : "the server sent no more of its answer for \(seconds) s"
            throw PostgresError.connectionLost(message: "\(what), so the connection was given up "
                                                   + "(the limit: JOBCTL_DB_ANSWER_TIMEOUT for commands, the lease for workers)", sql: sql)
        }
        return try result.get()
    }

    /// Calls `body` with a NULL-terminated array of C strings that lives for the duration of the call.
    private static func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> T) -> T {
        let duplicates = strings.map { strdup($0) }
        defer { duplicates.forEach { free($0) } }
        let pointers: [UnsafePointer<CChar>?] = duplicates.map { $0.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { buffer in body(buffer.baseAddress) }
    }

    /// The passwords as written in a URL target — its user information (between the first `:` after
    /// `//` and the last `@`) and every query parameter whose name ends in `password` — each whole,
    /// percent-decoded, and in the pieces a parser may have cut it into at `/`, `?`, `#`, `:`, `@`, `&`
    /// and `%` — longest first. libpq ends the user information at the first `@` (a password's raw `@`
    /// made the rest its host name, quoted in "could not translate host name"), and quotes a query
    /// value it cannot percent-decode whole ("invalid percent-encoded token").
    static func writtenPasswordPieces(_ target: String) -> [String] {
        guard let schemeEnd = target.range(of: "://") else { return [] }
        let rest = target[schemeEnd.upperBound...]
        var written: [String] = []
        let authorityEnd = rest.firstIndex(where: { $0 == "?" }) ?? rest.endIndex
        if let at = rest[..<authorityEnd].lastIndex(of: "@") ?? rest.lastIndex(of: "@"),
           let colon = rest[..<at].firstIndex(of: ":") {
            written.append(String(rest[rest.index(after: colon)..<at]))
        }
        if let query = rest.firstIndex(of: "?") {
            for parameter in rest[rest.index(after: query)...].split(separator: "&") {
                guard let equals = parameter.firstIndex(of: "=") else { continue }
                let name = parameter[..<equals]
                if (name.removingPercentEncoding ?? String(name)).lowercased().hasSuffix("password") {
                    written.append(String(parameter[parameter.index(after: equals)...]))
                }
            }
        }
        var pieces: [String] = []
        for password in written {
            pieces += [password, password.removingPercentEncoding ?? password]
            pieces += password.split(whereSeparator: { "/?#:@&%".contains($0) }).map(String.init)
        }
        return Array(Set(pieces)).filter { $0.count >= 4 }.sorted { $0.count > $1.count }
    }

    /// `message` with every occurrence of the connection's password replaced, for passwords long
    /// enough that the replacement cannot mangle ordinary words (`SecretRedaction.scrub`, as a server's
    /// answer quoting an HTTP request's credentials is scrubbed).
    private static func scrub(_ message: String, password: String?) -> String {
        SecretRedaction.scrub(message, secrets: password.map { [$0] } ?? [])
    }

    // MARK: Status

    /// The server's version as an integer (150004 for 15.4).
    ///
    /// See https://www.postgresql.org/docs/current/libpq-status.html#LIBPQ-PQSERVERVERSION
    var serverVersion: Int { Int(jobctl_PQserverVersion(handle)) }

    /// Whether a transaction is open (including one that failed and awaits ROLLBACK).
    ///
    /// See https://www.postgresql.org/docs/current/libpq-status.html#LIBPQ-PQTRANSACTIONSTATUS
    var isInTransaction: Bool {
        let status = jobctl_PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// Whether the connection is still usable; false after the server went away.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-status.html#LIBPQ-PQSTATUS
    var isConnected: Bool { jobctl_PQstatus(handle) == CONNECTION_OK }

    /// The server process serving this connection (`pg_backend_pid()`), for `pg_terminate_backend`
    /// and lock diagnostics.
    var backendPID: Int32 { jobctl_PQbackendPID(handle) }

    /// Re-opens a connection that was lost, with the same parameters.
    ///
    /// Under a `stopDeadline` (a stopping worker's grace) the attempt waits for the server no longer than
    /// what is left of it, and none is made once it has passed: a stopping worker whose server had gone
    /// silent made one 10 s attempt after another (its connect timeout), and took 28–62 s to exit where
    /// its grace is 8 s. libpq's own timeout counts whole seconds (2 at least), so the wait is the
    /// caller's then: a non-blocking reset, polled until the deadline.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PQRESET and
    /// https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PQCONNECTSTARTPARAMS
    ///
    /// An attempt that failed (its session not opened, or not set up) is not made again for
    /// `reconnectHoldNs`: the calls that come meanwhile fail at once with its error.
    func reconnect() throws(PostgresError) {
        if let failed = failedReconnect, StopDeadline.nowNs() < failed.untilNs { throw failed.error }
        do throws(PostgresError) {
            try resetSession()
            // The new session's search_path is the URL's again: back to the log's schema before anything else.
            if let logSchema { try keepToSchema(logSchema) }
            failedReconnect = nil
        } catch {
            failedReconnect = (error, StopDeadline.nowNs() + Self.reconnectHoldNs)
            throw error
        }
    }

    /// `reconnect`'s new session, as the URL sets it up.
    private func resetSession() throws(PostgresError) {
        // A new session has none of the old one's prepared statements, and nothing queued for the old one.
        preparedNames.removeAll()
        queued.removeAll()
        guard let leftNs = stopDeadline?.remainingNs() else {
            jobctl_PQreset(handle)
            guard jobctl_PQstatus(handle) == CONNECTION_OK else {
                throw PostgresError.connectionFailed(target: redactedTarget, message: lastErrorMessage)
            }
            return
        }
        guard leftNs > 0 else {
            throw PostgresError.connectionFailed(target: redactedTarget, message: StopDeadline.passedMessage)
        }
        let endNs = StopDeadline.nowNs() + min(leftNs, UInt64(max(1, connectTimeoutSeconds)) * 1_000_000_000)
        guard jobctl_PQresetStart(handle) == 1 else {
            throw PostgresError.connectionFailed(target: redactedTarget, message: lastErrorMessage)
        }
        // Until the first poll, as if it had asked to write (libpq's protocol for the polling functions).
        var status = PGRES_POLLING_WRITING
        while true {
            switch status {
            case PGRES_POLLING_OK:
                guard jobctl_PQstatus(handle) == CONNECTION_OK else {
                    throw PostgresError.connectionFailed(target: redactedTarget, message: lastErrorMessage)
                }
                return
            case PGRES_POLLING_FAILED:
                throw PostgresError.connectionFailed(target: redactedTarget, message: lastErrorMessage)
            default:
                let now = StopDeadline.nowNs()
                guard now < endNs else {
                    // The half-made connection stays bad (`isConnected` false): the next use begins anew,
                    // or, past the deadline, tries nothing.
                    let why = leftNs <= UInt64(max(1, connectTimeoutSeconds)) * 1_000_000_000
                        ? "timeout expired: the stopping worker's grace ran out before the server answered"
                        : "timeout expired"
                    throw PostgresError.connectionFailed(target: redactedTarget, message: why)
                }
                var descriptor = pollfd(fd: jobctl_PQsocket(handle), events: Int16(status == PGRES_POLLING_READING ? POLLIN : POLLOUT),
                                        revents: 0)
                let waitMs = Int32(min(1_000, max(1, (endNs - now + 999_999) / 1_000_000)))
                if descriptor.fd >= 0 { _ = poll(&descriptor, 1, waitMs) } else { usleep(UInt32(waitMs) * 1_000) }
                status = jobctl_PQresetPoll(handle)
            }
        }
    }

    /// Ends a session that cannot be used again (the server said it is ending it, or a pipeline broke
    /// off with answers still due): its socket is shut down and libpq reads the end, so the connection
    /// is bad (`isConnected` false) and the next use opens a new session instead of failing on this one.
    private func abandonSession() {
        let socket = jobctl_PQsocket(handle)
        if socket >= 0 { shutdown(socket, Int32(SHUT_RDWR)) }
        _ = jobctl_PQconsumeInput(handle)
    }

    private var lastErrorMessage: String {
        Self.scrub(String(cString: jobctl_PQerrorMessage(handle)), password: password)
    }

    // MARK: Statements

    /// The server-side prepared statements of this session, by parameter types and SQL text: a
    /// statement with parameters is parsed and planned once per session (`PQprepare`), then only bound
    /// and executed (`PQexecPrepared`). Emptied when the session is replaced (`reconnect`).
    private var preparedNames: [PreparedKey: String] = [:]
    /// How many names `preparedNames` has handed out this session (a name is never reused in one).
    private var preparedCount = 0

    /// At most this many statements are kept prepared per session; more run unprepared
    /// (`PQexecParams`), so statements built with changing text cannot grow the server's memory.
    static let preparedLimit = 256

    /// A prepared statement's identity: the same text with other parameter types is another statement.
    private struct PreparedKey: Hashable {
        let sql: String
        let types: [UInt32]
    }

    /// How many statements this session has prepared (for tests and diagnostics).
    var preparedStatementCount: Int { preparedNames.count }

    /// How many statements (or scripts) this connection has sent, each a round trip, not counting the
    /// one-time `PQprepare`s: what the adapter's statement budget per event is measured in.
    private(set) var statementsSent = 0

    /// The largest message the server reads from a client (`PQ_LARGE_MESSAGE_LIMIT`, one byte less than
    /// the 1 GB a server allocation may take): a statement's values travel in one message (`Bind`), and
    /// a longer one makes the server end the session ("invalid message length") — after, in a pipeline,
    /// the statements before it may already have run.
    ///
    /// See https://www.postgresql.org/docs/current/protocol-message-formats.html (Bind)
    static let protocolMessageLimit = 0x3FFF_FFFE

    /// The most one statement's values may take in their message: `protocolMessageLimit`, lower in tests
    /// (so the limit can be met with a few MiB). A statement over it is refused before anything is sent
    /// (`messageTooLarge`), and writers that may make one (a group commit's blobs) split what they send by it.
    var messageLimit = PostgresConnection.protocolMessageLimit

    /// The largest message of values this session has sent, in bytes (tests and diagnostics).
    private(set) var largestMessageBytes = 0

    /// Refuses `encoded` when its message would pass `messageLimit`; notes its size otherwise.
    private func checkMessageSize(_ encoded: EncodedParameters, sql: String) throws(PostgresError) {
        let bytes = encoded.messageBytes
        guard bytes <= messageLimit else { throw PostgresError.messageTooLarge(bytes: bytes, limit: messageLimit, sql: sql) }
        largestMessageBytes = max(largestMessageBytes, bytes)
    }

    /// How many times this connection has waited for the server's answers: one per statement sent
    /// alone, one per pipeline however many statements it holds (not counting the one-time
    /// `PQprepare`s of statements sent alone).
    private(set) var roundTrips = 0

    /// Runs `sql` — one statement, `$1`… bound to `parameters` — and returns its result.
    ///
    /// Every value goes in binary format with its type (`text`, `int8`, `bytea`, `bool`, arrays of them; NULL untyped,
    /// so the server infers it from the context).
    ///
    /// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQEXECPARAMS
    @discardableResult
    func execute(_ sql: String, _ parameters: [PostgresValue] = []) throws(PostgresError) -> PostgresResult {
        if !queued.isEmpty {
            return try pipeline(then: QueuedStatement(sql: sql, parameters: parameters, onResult: nil))
        }
        let encoded = try EncodedParameters(parameters)
        try checkMessageSize(encoded, sql: sql)
        let preparedName = try prepared(sql, types: encoded.types)
        statementsSent += 1
        roundTrips += 1
        return try awaitingAnswer(sql: sql) { () throws(PostgresError) -> PostgresResult in
            let raw: OpaquePointer? = encoded.withValues { count, types, values, lengths, formats in
                if let name = preparedName {
                    return jobctl_PQexecPrepared(handle, name, count, values, lengths, formats, 1)
                }
                return jobctl_PQexecParams(handle, sql, count, types, values, lengths, formats, 1)
            }
            return try check(raw, sql: sql)
        }
    }

    /// The name of `sql` prepared with `types` in this session, preparing it now when it is not yet
    /// (one extra round trip, once); nil for a statement without parameters (transaction control,
    /// scripts: nothing to plan) and once `preparedLimit` statements are prepared.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQPREPARE
    private func prepared(_ sql: String, types: [UInt32]) throws(PostgresError) -> String? {
        guard !types.isEmpty else { return nil }
        let key = PreparedKey(sql: sql, types: types)
        if let name = preparedNames[key] { return name }
        guard preparedNames.count < Self.preparedLimit else { return nil }
        preparedCount += 1
        let name = "jobctl_\(preparedCount)"
        _ = try awaitingAnswer(sql: sql) { () throws(PostgresError) -> PostgresResult in
            try check(jobctl_PQprepare(handle, name, sql, Int32(types.count), types), sql: sql)
        }
        preparedNames[key] = name
        return name
    }

    /// Runs one or more statements without parameters (migrations, transaction control); results are
    /// text and discarded.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQEXEC
    func executeScript(_ sql: String) throws(PostgresError) {
        // A script cannot join a pipeline (several statements in one simple query): what is queued goes first.
        if !queued.isEmpty { _ = try pipeline(then: nil) }
        statementsSent += 1
        roundTrips += 1
        _ = try awaitingAnswer(sql: sql) { () throws(PostgresError) -> PostgresResult in try check(jobctl_PQexec(handle, sql), sql: sql) }
    }

    // MARK: Pipelines

    /// A statement held back (`enqueue`) to travel with the next one this connection sends.
    private struct QueuedStatement {
        let sql: String
        let parameters: [PostgresValue]
        /// Called with the statement's result when the pipeline that carried it has been read.
        let onResult: ((PostgresResult) throws(PostgresError) -> Void)?
    }

    /// The statements `enqueue` held back, in order.
    private var queued: [QueuedStatement] = []

    /// Whether statements are held back, waiting for the next one sent.
    var hasQueuedStatements: Bool { !queued.isEmpty }

    /// Holds `sql` back: it is sent, before it, with the next statement this connection runs
    /// (`execute`, `run`, `query`, `first`, `executeScript`), all in one libpq pipeline — one round
    /// trip for all of them. `onResult`, when given, is called with its result then.
    ///
    /// When a held-back statement fails, the server skips every later statement of the pipeline and
    /// the call that sent them throws the first failure: the failed statement's own error, with its SQL.
    /// Inside a transaction the transaction is then aborted, as if the statement had been sent alone.
    /// A transaction's COMMIT is therefore never reported done when a statement before it failed.
    func enqueue(_ sql: String, _ parameters: [PostgresValue] = [],
                 onResult: ((PostgresResult) throws(PostgresError) -> Void)? = nil) {
        queued.append(QueuedStatement(sql: sql, parameters: parameters, onResult: onResult))
    }

    /// Forgets the held-back statements without sending them (a transaction that failed before
    /// sending them).
    func discardQueued() { queued.removeAll() }

    /// One statement's parameters in libpq's form: types, lengths and offsets into one buffer (all
    /// values in one buffer, so one allocation however many there are).
    private struct EncodedParameters {
        var types: [UInt32] = []
        var lengths: [Int32] = []
        var offsets: [Int?] = []
        var storage: [UInt8] = []

        init(_ parameters: [PostgresValue]) throws(PostgresError) {
            types.reserveCapacity(parameters.count)
            lengths.reserveCapacity(parameters.count)
            offsets.reserveCapacity(parameters.count)
            for value in parameters {
                types.append(try value.typeOID())
                let start = storage.count
                if try value.appendBinary(to: &storage) {
                    let length = storage.count - start
                    guard length <= Int(Int32.max) else {
                        throw PostgresError.conversion("parameter $\(types.count) is \(length) bytes; PostgreSQL takes at most "
                                                       + "\(Int32.max) bytes in one value: store it in smaller pieces")
                    }
                    offsets.append(start)
                    lengths.append(Int32(length))
                } else {
                    offsets.append(nil)
                    lengths.append(0)
                }
            }
            // Never empty, so every value gets a non-NULL pointer (a NULL pointer means SQL NULL).
            storage.append(0)
        }

        /// The size of the `Bind` message that carries these values: each value and its 4-byte length, its
        /// 2-byte format code, and at most 32 bytes of names, counts and result formats.
        var messageBytes: Int { storage.count - 1 + 6 * types.count + 32 }

        /// Calls `body` with what libpq's `PQexec…`/`PQsend…` calls take: the count, the types, a
        /// pointer to each value (nil for NULL) into the buffer, the lengths and the formats (binary).
        func withValues<R>(_ body: (Int32, [UInt32], [UnsafePointer<CChar>?], [Int32], [Int32]) -> R) -> R {
            let formats = [Int32](repeating: 1, count: types.count)
            return storage.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    // `storage` is never empty, so `base` is never nil.
                    let base = chars.baseAddress
                    let values: [UnsafePointer<CChar>?] = offsets.map { offset in
                        guard let offset, let base else { return nil }
                        return base + offset
                    }
                    return body(Int32(types.count), types, values, lengths, formats)
                }
            }
        }
    }

    /// Sends the held-back statements and `last` in pipeline mode with one sync at the end, reads every
    /// answer, and returns the last statement's result after each earlier one's `onResult` has seen
    /// its own.
    ///
    /// A statement not yet prepared in this session is prepared in the same pipeline (its name is kept
    /// only once the server confirmed it). The first statement that fails — or the connection breaking
    /// — is what this throws; the server skips the statements after it (`PGRES_PIPELINE_ABORTED`).
    /// All the answers are read before it returns or throws, so the connection is ready for the next
    /// statement either way, unless it was lost.
    ///
    /// The sends run with the socket non-blocking, reading answers while the server's input is full,
    /// so a large pipeline cannot deadlock against the server writing its answers.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-pipeline-mode.html
    private func pipeline(then last: QueuedStatement?) throws(PostgresError) -> PostgresResult {
        try awaitingAnswer(sql: last?.sql ?? queued.last?.sql) { () throws(PostgresError) -> PostgresResult in try pipelineNow(then: last) }
    }

    private func pipelineNow(then last: QueuedStatement?) throws(PostgresError) -> PostgresResult {
        let statements = queued + (last.map { [$0] } ?? [])
        // A value that cannot be sent fails the call before anything is: the held-back statements
        // stay held back (and fail the transaction's COMMIT in turn), none is lost unsent.
        let encoded = try statements.map { (statement) throws(PostgresError) in try EncodedParameters(statement.parameters) }
        for (index, parameters) in encoded.enumerated() { try checkMessageSize(parameters, sql: statements[index].sql) }
        queued.removeAll()
        let lastSQL = statements.last?.sql ?? ""
        guard jobctl_PQenterPipelineMode(handle) == 1 else {
            throw PostgresError.unexpectedResult(status: "no pipeline mode (\(lastErrorMessage))", sql: lastSQL)
        }
        statementsSent += statements.count
        roundTrips += 1
        // What each answer is for: a prepare (its key and name) or a statement (its index).
        enum Expected { case prepare(PreparedKey, String, sql: String), statement(Int) }
        var expected: [Expected] = []
        var sendFailed = false
        jobctl_PQsetnonblocking(handle, 1)
        for (index, statement) in statements.enumerated() {
            let parameters = encoded[index]
            var name: String?
            if !parameters.types.isEmpty {
                let key = PreparedKey(sql: statement.sql, types: parameters.types)
                if let known = preparedNames[key] {
                    name = known
                } else if preparedNames.count + expected.count < Self.preparedLimit {
                    preparedCount += 1
                    let fresh = "jobctl_\(preparedCount)"
                    guard jobctl_PQsendPrepare(handle, fresh, statement.sql, Int32(parameters.types.count), parameters.types) == 1 else {
                        sendFailed = true
                        break
                    }
                    expected.append(.prepare(key, fresh, sql: statement.sql))
                    name = fresh
                }
            }
            let sent: Int32 = parameters.withValues { count, types, values, lengths, formats in
                if let name {
                    return jobctl_PQsendQueryPrepared(handle, name, count, values, lengths, formats, 1)
                }
                return jobctl_PQsendQueryParams(handle, statement.sql, count, types, values, lengths, formats, 1)
            }
            guard sent == 1 else {
                sendFailed = true
                break
            }
            expected.append(.statement(index))
        }
        if !sendFailed && jobctl_PQpipelineSync(handle) != 1 { sendFailed = true }
        if !sendFailed && !flushNonBlocking() { sendFailed = true }
        jobctl_PQsetnonblocking(handle, 0)
        if sendFailed {
            // Nothing can be read back reliably: the connection is broken (or libpq refused the send).
            let message = lastErrorMessage
            jobctl_PQexitPipelineMode(handle)
            if !isConnected { throw PostgresError.connectionLost(message: message, sql: lastSQL) }
            throw PostgresError.unexpectedResult(status: "a pipeline that could not be sent (\(message))", sql: lastSQL)
        }

        var firstError: PostgresError?
        var results: [PostgresResult?] = Array(repeating: nil, count: statements.count)
        for item in expected {
            let sql: String
            switch item {
            case .prepare(_, _, let text): sql = text
            case .statement(let index): sql = statements[index].sql
            }
            guard let raw = jobctl_PQgetResult(handle) else {
                // No answer where one is due: the connection broke.
                firstError = firstError ?? (isConnected ? PostgresError.unexpectedResult(status: "nothing (\(lastErrorMessage))", sql: sql)
                                                        : PostgresError.connectionLost(message: lastErrorMessage, sql: sql))
                break
            }
            if jobctl_PQresultStatus(raw) == PGRES_PIPELINE_ABORTED {
                // Skipped by the server after an earlier failure, which `firstError` holds.
                jobctl_PQclear(raw)
            } else {
                do throws(PostgresError) {
                    let result = try check(raw, sql: sql)
                    switch item {
                    case .prepare(let key, let name, _): preparedNames[key] = name
                    case .statement(let index): results[index] = result
                    }
                } catch {
                    firstError = firstError ?? error
                }
            }
            guard isConnected else {
                firstError = firstError ?? PostgresError.connectionLost(message: lastErrorMessage, sql: sql)
                break
            }
            // Each statement's answers end with a NULL result.
            if let extra = jobctl_PQgetResult(handle) {
                jobctl_PQclear(extra)
                firstError = firstError ?? PostgresError.unexpectedResult(status: "more than one result", sql: sql)
            }
        }
        if isConnected {
            // The sync's own answer ends the pipeline. In its place may come the FATAL error of a server
            // ending the session after the last statement ran (terminated, shutting down): a lost connection.
            if let sync = jobctl_PQgetResult(handle) {
                let status = jobctl_PQresultStatus(sync)
                if status == PGRES_PIPELINE_SYNC {
                    jobctl_PQclear(sync)
                } else if status == PGRES_FATAL_ERROR || status == PGRES_NONFATAL_ERROR || status == PGRES_BAD_RESPONSE {
                    do throws(PostgresError) { _ = try check(sync, sql: lastSQL) } catch { firstError = firstError ?? error }
                } else {
                    jobctl_PQclear(sync)
                    firstError = firstError ?? PostgresError.unexpectedResult(status: String(cString: jobctl_PQresStatus(status)), sql: lastSQL)
                }
            }
        }
        if jobctl_PQexitPipelineMode(handle) != 1 {
            // Answers are still due (the session broke off mid-pipeline): it cannot be used again, and
            // left in pipeline mode it would refuse every later statement while libpq still calls it open.
            abandonSession()
        }
        if !isConnected {
            // A server that ended the session answers the statement it was running with a FATAL
            // error before closing: that, too, is a lost connection, not a refused statement.
            switch firstError {
            case .server(_, let message, _, _, let sql)?: throw PostgresError.connectionLost(message: message, sql: sql)
            case .connectionLost(let message, let sql)?:
                // Lost before the answer to a COMMIT the pipeline carried was read, the transaction may
                // have committed whichever statement's answer was being read: the loss is the COMMIT's.
                // Named after the statement before it, a `submit` whose jobs were written said "try again".
                if let commit = statements.indices.first(where: { PostgresError.isCommit(statements[$0].sql) && results[$0] == nil }) {
                    throw PostgresError.connectionLost(message: message, sql: statements[commit].sql)
                }
                throw PostgresError.connectionLost(message: message, sql: sql)
            default: throw PostgresError.connectionLost(message: lastErrorMessage, sql: lastSQL)
            }
        }
        if let firstError { throw firstError }
        for (index, statement) in statements.enumerated() {
            if let onResult = statement.onResult, let result = results[index] { try onResult(result) }
        }
        guard let last = results.last ?? nil else {
            throw PostgresError.unexpectedResult(status: "no result for the pipeline's last statement", sql: lastSQL)
        }
        return last
    }

    /// Sends libpq's output buffer without blocking on a full socket: while the server cannot take
    /// more, its answers so far are read into libpq's input buffer, so the server is never stuck
    /// writing them. False when the connection broke.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-async.html#LIBPQ-PQFLUSH
    private func flushNonBlocking() -> Bool {
        let socket = jobctl_PQsocket(handle)
        guard socket >= 0 else { return false }
        while true {
            let pending = jobctl_PQflush(handle)
            if pending == 0 { return true }
            if pending < 0 { return false }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN | POLLOUT), revents: 0)
            let ready = poll(&descriptor, 1, -1)
            if ready < 0 && errno != EINTR { return false }
            if descriptor.revents & Int16(POLLIN) != 0 && jobctl_PQconsumeInput(handle) != 1 { return false }
        }
    }

    /// The one check of every result: returns it for COMMAND_OK / TUPLES_OK / EMPTY_QUERY, otherwise
    /// frees it and throws — `server` with the SQLSTATE, `connectionLost` when the connection broke.
    ///
    /// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQRESULTSTATUS
    private func check(_ raw: OpaquePointer?, sql: String) throws(PostgresError) -> PostgresResult {
        guard let raw else {
            // No result at all: out of memory, or the connection could not send the query.
            if !isConnected { throw PostgresError.connectionLost(message: lastErrorMessage, sql: sql) }
            throw PostgresError.unexpectedResult(status: "nothing (\(lastErrorMessage))", sql: sql)
        }
        let result = PostgresResult(handle: raw)
        let status = jobctl_PQresultStatus(raw)
        switch status {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return result
        case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
            let message = Self.scrub(result.errorField(jobctl_pq_diag_message_primary()) ?? lastErrorMessage, password: password)
            // A server that went away (shut down, crashed, terminated this backend) leaves the
            // connection bad; a statement the server refused leaves it usable. A FATAL (or PANIC) error
            // ends the session even when libpq has not yet read the end of it: the session is given up.
            let severity = result.errorField(jobctl_pq_diag_severity())
            if isConnected && (severity == "FATAL" || severity == "PANIC") { abandonSession() }
            guard isConnected else { throw PostgresError.connectionLost(message: message, sql: sql) }
            throw PostgresError.server(
                // Errors libpq makes up itself carry no SQLSTATE; report them as internal errors.
                sqlstate: result.errorField(jobctl_pq_diag_sqlstate()) ?? "XX000",
                message: message,
                detail: result.errorField(jobctl_pq_diag_message_detail()).map { Self.scrub($0, password: password) },
                hint: result.errorField(jobctl_pq_diag_message_hint()).map { Self.scrub($0, password: password) },
                sql: sql)
        default:
            throw PostgresError.unexpectedResult(status: String(cString: jobctl_PQresStatus(status)), sql: sql)
        }
    }

    /// Runs a statement and returns how many rows it inserted, updated or deleted.
    @discardableResult
    func run(_ sql: String, _ parameters: [PostgresValue] = []) throws(PostgresError) -> Int {
        try execute(sql, parameters).affectedRows
    }

    /// Runs a query and maps every row.
    func query<T>(_ sql: String, _ parameters: [PostgresValue] = [],
                  _ transform: (PostgresRow) throws(PostgresError) -> T) throws(PostgresError) -> [T] {
        let result = try execute(sql, parameters)
        var rows: [T] = []
        rows.reserveCapacity(result.count)
        for index in 0..<result.count {
            rows.append(try transform(PostgresRow(result: result, index: Int32(index))))
        }
        return rows
    }

    /// The first row mapped, or nil when there is none.
    func first<T>(_ sql: String, _ parameters: [PostgresValue] = [],
                  _ transform: (PostgresRow) throws(PostgresError) -> T) throws(PostgresError) -> T? {
        let result = try execute(sql, parameters)
        guard result.count > 0 else { return nil }
        return try transform(PostgresRow(result: result, index: 0))
    }

    // MARK: Transactions

    /// Runs `body` in one transaction at `isolation` and commits; on any error rolls back and rethrows.
    ///
    /// A COMMIT the server turned into a ROLLBACK (because a statement failed and `body` swallowed
    /// the error) throws `rolledBack`: nothing is reported written that was not. A serialization failure
    /// (`isSerializationFailure`) may come from any statement or from the COMMIT itself; the caller
    /// retries the whole transaction.
    ///
    /// Transactions do not nest: PostgreSQL would only warn about the inner BEGIN and let the inner
    /// COMMIT end the outer transaction, so a `transaction` inside another is refused (`misuse`).
    ///
    /// See https://www.postgresql.org/docs/current/sql-begin.html
    @discardableResult
    func transaction<T>(_ isolation: PostgresIsolation = .readCommitted,
                        _ body: () throws(PostgresError) -> T) throws(PostgresError) -> T {
        guard !isInTransaction else {
            throw PostgresError.misuse("a transaction was begun while another was open on the same connection")
        }
        try execute("BEGIN ISOLATION LEVEL \(isolation.rawValue)")
        do throws(PostgresError) {
            let value = try body()
            let commit = try execute("COMMIT")
            guard commit.commandStatus == "COMMIT" else { throw PostgresError.rolledBack(sql: nil) }
            return value
        } catch {
            if isConnected && isInTransaction { _ = try? execute("ROLLBACK") }
            throw error
        }
    }
}

/// A connection runs one statement at a time: sharing it between threads is a compile-time error.
@available(*, unavailable)
extension PostgresConnection: Sendable {}

// MARK: - Result

/// One `PGresult*`, freed with `PQclear` in `deinit`. Not `Sendable`. Rows read from it stay valid as
/// long as they hold it.
///
/// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-EXEC-SELECT-INFO
final class PostgresResult {
    fileprivate let handle: OpaquePointer

    fileprivate init(handle: OpaquePointer) { self.handle = handle }

    deinit { jobctl_PQclear(handle) }

    /// The number of rows returned.
    var count: Int { Int(jobctl_PQntuples(handle)) }

    /// The number of columns.
    var columnCount: Int { Int(jobctl_PQnfields(handle)) }

    /// Rows inserted, updated, deleted, selected (0 for commands without a count).
    ///
    /// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQCMDTUPLES
    var affectedRows: Int { jobctl_PQcmdTuples(handle).flatMap { Int(String(cString: $0)) } ?? 0 }

    /// The command tag (`INSERT 0 1`, `COMMIT`, `ROLLBACK`).
    var commandStatus: String { jobctl_PQcmdStatus(handle).map { String(cString: $0) } ?? "" }

    /// Every row.
    var rows: [PostgresRow] { (0..<count).map { PostgresRow(result: self, index: Int32($0)) } }

    /// The name of column `index`.
    func columnName(_ index: Int) -> String {
        jobctl_PQfname(handle, Int32(index)).map { String(cString: $0) } ?? "column \(index)"
    }

    fileprivate func errorField(_ code: Int32) -> String? {
        jobctl_PQresultErrorField(handle, code).map { String(cString: $0) }
    }

    fileprivate func type(_ column: Int32) -> UInt32 { jobctl_PQftype(handle, column) }

    fileprivate func isNull(_ row: Int32, _ column: Int32) -> Bool { jobctl_PQgetisnull(handle, row, column) == 1 }

    /// Calls `body` with the raw binary value of a cell where libpq holds it (empty for NULL): valid only
    /// during the call, and never copied for a value read in place (an integer, a flag, text).
    fileprivate func withBytes<T, E: Error>(_ row: Int32, _ column: Int32, _ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T)
        throws(E) -> T {
        let length = Int(jobctl_PQgetlength(handle, row, column))
        guard length > 0, let value = jobctl_PQgetvalue(handle, row, column) else {
            return try body(UnsafeBufferPointer(start: nil, count: 0))
        }
        return try UnsafeRawPointer(value).withMemoryRebound(to: UInt8.self, capacity: length) { (start) throws(E) -> T in
            try body(UnsafeBufferPointer(start: start, count: length))
        }
    }
}

/// A result is freed with its last reference; it is not shared between threads.
@available(*, unavailable)
extension PostgresResult: Sendable {}

// MARK: - Row

/// One row of a result. Reading a column checks its type: an integer accessor reads `int2`/`int4`/
/// `int8`, a text accessor the textual types, and a NULL read as a non-optional is an error.
struct PostgresRow {
    fileprivate let result: PostgresResult
    fileprivate let index: Int32

    /// The number of columns.
    var count: Int { result.columnCount }

    func isNull(_ column: Int) -> Bool { result.isNull(index, Int32(column)) }

    func int64(_ column: Int) throws(PostgresError) -> Int64 {
        let type = try cellType(column, as: "an integer", PostgresType.isIntegral)
        return try result.withBytes(index, Int32(column)) { (bytes) throws(PostgresError) -> Int64 in
            // Binary integers are big-endian two's complement of 2, 4 or 8 bytes (oid: unsigned 4).
            guard bytes.count == 2 || bytes.count == 4 || bytes.count == 8 else {
                throw PostgresError.conversion("column \(describe(column)) holds \(bytes.count) bytes, not an integer")
            }
            var value: Int64 = type == PostgresType.oid ? 0 : (bytes[0] & 0x80 != 0 ? -1 : 0)
            for byte in bytes { value = (value << 8) | Int64(byte) }
            return value
        }
    }

    func int(_ column: Int) throws(PostgresError) -> Int { Int(try int64(column)) }

    func bool(_ column: Int) throws(PostgresError) -> Bool {
        _ = try cellType(column, as: "a boolean", { $0 == PostgresType.bool })
        return result.withBytes(index, Int32(column)) { $0.first == 1 }
    }

    func text(_ column: Int) throws(PostgresError) -> String {
        let type = try cellType(column, as: "text", PostgresType.isTextualOrJSONB)
        return result.withBytes(index, Int32(column)) { bytes in
            // jsonb's binary form is a version byte (1) followed by the JSON text.
            String(decoding: type == PostgresType.jsonb && !bytes.isEmpty ? UnsafeBufferPointer(rebasing: bytes.dropFirst()) : bytes,
                   as: UTF8.self)
        }
    }

    func bytea(_ column: Int) throws(PostgresError) -> Data {
        _ = try cellType(column, as: "bytea", { $0 == PostgresType.bytea })
        return result.withBytes(index, Int32(column)) { Data(buffer: $0) }
    }

    func optionalInt64(_ column: Int) throws(PostgresError) -> Int64? { isNull(column) ? nil : try int64(column) }
    func optionalText(_ column: Int) throws(PostgresError) -> String? { isNull(column) ? nil : try text(column) }
    func optionalBytea(_ column: Int) throws(PostgresError) -> Data? { isNull(column) ? nil : try bytea(column) }

    /// The column as a typed value, for comparisons that must not lose the type.
    func value(_ column: Int) throws(PostgresError) -> PostgresValue {
        guard !isNull(column) else { return .null }
        let type = try columnType(column)
        switch type {
        case _ where PostgresType.isIntegral(type): return .integer(try int64(column))
        case PostgresType.bool: return .bool(try bool(column))
        case PostgresType.bytea: return .bytea(try bytea(column))
        default: return .text(try text(column))
        }
    }

    private func columnType(_ column: Int) throws(PostgresError) -> UInt32 {
        guard column >= 0 && column < count else {
            throw PostgresError.conversion("column \(column) does not exist: the row has \(count) columns")
        }
        return result.type(Int32(column))
    }

    /// The column's type, checked with `accepts` (a switch, not a set: hashing a type per cell showed in
    /// a drain's profile), and that the cell is not NULL.
    private func cellType(_ column: Int, as wanted: String, _ accepts: (UInt32) -> Bool) throws(PostgresError) -> UInt32 {
        let type = try columnType(column)
        guard accepts(type) else {
            throw PostgresError.conversion("column \(describe(column)) has type oid \(type) and cannot be read as \(wanted)")
        }
        guard !isNull(column) else {
            throw PostgresError.conversion("column \(describe(column)) is NULL where \(wanted) was expected")
        }
        return type
    }

    private func describe(_ column: Int) -> String { "\(column) (\(result.columnName(column)))" }
}
