import Foundation
import JobModel
import TestSupport
@testable import EventStore
@testable import PostgresStore
import Testing

/// The store adapters a parameterised test runs against.
enum Engine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }
}

/// A store in a fresh temporary directory (SQLite) or a fresh schema of the tests' PostgreSQL server;
/// `remove()` deletes the directory.
struct StoreFixture {
    let directory: TemporaryDirectory
    let engine: Engine
    let store: any JobStore
    /// The SQLite store, for tests of SQLite's own behaviour (nil on PostgreSQL).
    let sqlite: EventStore?
    /// The PostgreSQL store's URL, to open it again (nil on SQLite).
    let postgresURL: String?
    var path: String { directory.file("jobs.db") }

    init(_ label: String = "eventstore", engine: Engine = .sqlite) throws {
        directory = try TemporaryDirectory(label)
        self.engine = engine
        switch engine {
        case .sqlite:
            let store = try EventStore(path: directory.file("jobs.db"))
            self.store = store
            sqlite = store
            postgresURL = nil
        case .postgres:
            let url = try PostgresServer.shared().makeSchema(label)
            store = try PostgresStore(url: url, mode: .create)
            sqlite = nil
            postgresURL = url
        }
    }

    func remove() { directory.remove() }

    /// Submits one job and returns its id.
    @discardableResult
    func submit(_ spec: JobSpec = uploadSpec(), now: Int64 = 1_000) throws -> String {
        try store.submit([spec], actor: "cli:test", now: now)[0].id
    }

    /// Submits and claims one job; returns the claim.
    func running(_ spec: JobSpec = uploadSpec(), now: Int64 = 1_000, leaseMs: Int64 = 30_000) throws -> ClaimedJob {
        let id = try submit(spec, now: now)
        let claims = try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: leaseMs, now: now)
        guard let claim = claims.first, claim.record.id == id else {
            throw StoreError.invalidControl("expected to claim \(id), got \(claims.map(\.record.id))")
        }
        return claim
    }

    /// Appends one event and returns it, throwing its refusal.
    @discardableResult
    func append(_ pending: PendingEvent, now: Int64 = 2_000) throws -> JobEvent {
        try store.append(pending, now: now)
    }

    /// Runs `perform` of the adapter's `DecisionWriter` in a write transaction of its own, on the job's
    /// row as it stands (locked on PostgreSQL), as the worker's appends do.
    func perform(_ command: JobCommand, jobID: String, leaseToken: Int64?, prepared: PreparedPayload? = nil,
                 now: Int64) throws -> (events: [JobEvent], record: JobRecord?) {
        switch engine {
        case .sqlite:
            return try #require(sqlite).writeTransaction { (connection) throws(StoreError) in
                try connection.perform(command, jobID: jobID, on: try connection.loadJob(jobID), actor: workerName,
                                       leaseToken: leaseToken, prepared: prepared, now: now)
            }
        case .postgres:
            return try #require(store as? PostgresStore).writeTransaction { (connection) throws(StoreError) in
                try connection.perform(command, jobID: jobID, on: try connection.lockJob(jobID), actor: workerName,
                                       leaseToken: leaseToken, prepared: prepared, now: now)
            }
        }
    }

    /// Runs raw SQL on the store's own connection (tests only), written for SQLite with `?` parameters;
    /// on PostgreSQL the parameters become `$1`, `$2`, … (the statements the tests use mean the same on both).
    func sql(_ text: String, _ values: [SQLiteValue] = []) throws {
        switch engine {
        case .sqlite:
            let sqlite = try #require(sqlite)
            try sqlite.withConnection { (connection) throws(StoreError) in try connection.run(text, values) }
        case .postgres:
            let store = try #require(store as? PostgresStore)
            let (query, parameters) = Self.postgres(text, values)
            _ = try store.withConnection { (connection) throws(StoreError) in try connection.store(query, parameters) }
        }
    }

    /// The first column of the first row of a query (written as for `sql`), as text; nil for no row or NULL.
    func scalar(_ text: String, _ values: [SQLiteValue] = []) throws -> String? {
        switch engine {
        case .sqlite:
            let sqlite = try #require(sqlite)
            return try sqlite.withConnection { (connection) throws(StoreError) -> String? in
                try connection.first(text, values) { row in row.value(0) == .null ? nil : row.value(0).description } ?? nil
            }
        case .postgres:
            let store = try #require(store as? PostgresStore)
            let (query, parameters) = Self.postgres(text, values)
            return try store.withConnection { (connection) throws(StoreError) -> String? in
                try connection.row(query, parameters) { (row) throws(StoreError) -> String? in
                    let value = try row.typedValue(0)
                    return value == .null ? nil : value.description
                } ?? nil
            }
        }
    }

    /// Every `jobs` row in id order, each column as text (NULL as "NULL"): what replay must rebuild.
    func allRows() throws -> [[String]] {
        switch engine {
        case .sqlite:
            let sqlite = try #require(sqlite)
            return try sqlite.withConnection { (connection) throws(StoreError) in
                try connection.query("SELECT \(JobRecord.selectColumns) FROM jobs ORDER BY id") { row in
                    (0..<JobRecord.columns.count).map { row.value($0).description }
                }
            }
        case .postgres:
            let store = try #require(store as? PostgresStore)
            return try store.withConnection { (connection) throws(StoreError) in
                try connection.rows("SELECT \(JobRecord.postgresSelectColumns) FROM jobs ORDER BY id") { (row) throws(StoreError) in
                    try (0..<JobRecord.postgresColumns.count).map { (index) throws(StoreError) in try row.typedValue(index).description }
                }
            }
        }
    }

    /// SQLite's `?` parameters as PostgreSQL's `$n`, and the values in PostgreSQL's types.
    private static func postgres(_ text: String, _ values: [SQLiteValue]) -> (String, [PostgresValue]) {
        var query = ""
        var number = 0
        for character in text {
            if character == "?" {
                number += 1
                query += "$\(number)"
            } else {
                query.append(character)
            }
        }
        let parameters = values.map { (value) -> PostgresValue in
            switch value {
            case .null: .null
            case .integer(let integer): .integer(integer)
            case .real(let real): .text(String(real))
            case .text(let text): .text(text)
            case .blob(let data): .bytea(data)
            }
        }
        return (query, parameters)
    }
}

let workerName = "worker:test"

func uploadSpec(key: String? = nil, priority: Int = 0, queue: String = "default", maxAttempts: Int = 3) -> JobSpec {
    JobSpec(kind: .uploadFile, source: "/tmp/source.bin", destination: "gs://bucket/object.bin", key: key,
            priority: priority, maxAttempts: maxAttempts, queue: queue)
}

/// The `started` a worker reports for `job` (under its token, or `token`), happened at `occurredAtMs`.
func reportedStarted(_ job: ClaimedJob, token: Int64? = nil, at occurredAtMs: Int64? = nil) -> PendingEvent {
    PendingEvent(jobID: job.record.id, actor: workerName, leaseToken: token ?? job.token, occurredAtMs: occurredAtMs,
                 payload: .started(TransferProgress(bytesDone: 0, bytesTotal: 1)))
}

/// The `succeeded` (one byte, no result bytes) a worker reports for `job`, under its token or `token`.
func reportedSucceeded(_ job: ClaimedJob, token: Int64? = nil) -> PendingEvent {
    PendingEvent(jobID: job.record.id, actor: workerName, leaseToken: token ?? job.token,
                 payload: .succeeded(TransferProgress(bytesDone: 1, bytesTotal: 1), result: JobResult(size: 1)))
}

func memorySpec(key: String? = nil) -> JobSpec {
    JobSpec(kind: .downloadMemory, source: "gs://bucket/small.txt", maxSize: 1024, key: key)
}

// MARK: - Executor tests (a `StoreExecutor` with a flush of the test's own)

/// A progress report of `jobID`: an append for tests of the executor alone.
func progressReport(_ jobID: String) -> PendingEvent {
    PendingEvent(jobID: jobID, actor: workerName, leaseToken: 1, payload: .progress(TransferProgress(bytesDone: 1)))
}

/// What a test's flush reports for `events`: every one written (seqs from 1 in the batch), no job claimed.
func writtenAsIs(_ events: [PendingEvent]) -> AppendAndClaimOutcome {
    let appended = events.enumerated().map { index, event in
        Result<JobEvent, StoreError>.success(JobEvent(seq: Int64(index + 1), jobID: event.jobID, version: 2, atMs: 1_000,
                                                      actor: event.actor, payload: event.payload))
    }
    return AppendAndClaimOutcome(appended: appended, claimed: .success([]))
}

/// Polls `condition` off the cooperative pool until it holds, for at most 60 s.
func pollUntil(_ condition: @escaping @Sendable () -> Bool) async {
    await offPool {
        let deadline = Date().addingTimeInterval(60)
        while !condition() && Date() < deadline { usleep(1_000) }
    }
}
