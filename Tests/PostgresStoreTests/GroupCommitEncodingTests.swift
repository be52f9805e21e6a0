import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// The worker's side of a group commit, made cheaper without changing what reaches the server: the
/// projection update's values built directly, its text built once, value types read without encoding
/// the values, renumbered texts made once. Each is compared here with the way it was made before.
@Suite("PostgreSQL group commit encoding", .onTestThreads)
struct GroupCommitEncodingTests {
    /// Records in every shape the projection update sees: queued, running under a lease, with a resume
    /// point, an error, requests, a result, a key, a batch; finished.
    static func records() throws -> [JobRecord] {
        let fixture = try PostgresFixture("gc-encoding")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit([
            JobSpec(kind: .uploadData, destination: "file://b/ü.txt", data: Data("x".utf8)),
            JobSpec(kind: .downloadMemory, source: "file://b/a.bin", maxSize: 64, key: "key-1"),
        ], actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "worker-é", queues: nil, limit: 1, leaseMs: 60_000, now: 2_000)
        var records = try store.jobs(filter: JobFilter())
        #expect(records.count == 2)
        #expect(claimed.count == 1)
        var variant = records[0]
        variant.resumePoint = .upload(sessionURI: "http://127.0.0.1:9/s?id=\"q\"", confirmedOffset: 7, total: nil)
        variant.error = StorageError(.objectNotFound, "no such object: ü", httpStatus: 404)
        variant.pauseRequested = true
        variant.cancelRequested = true
        variant.bytesTotal = 99
        records.append(variant)
        var finished = records[1]
        finished.state = .succeeded
        finished.leaseOwner = nil
        finished.leaseToken = nil
        finished.startedAtMs = 3_000
        finished.finishedAtMs = 4_000
        finished.version = 9
        records.append(finished)
        return records
    }

    @Test("the update's values are the values of the changing columns, then the id, as picked from all values by name")
    func updateValuesAsPicked() throws {
        for record in try Self.records() {
            let all = try record.postgresValues()
            let picked = JobRecord.postgresChangingColumns.compactMap { JobRecord.postgresColumns.firstIndex(of: $0) }.map { all[$0] }
            #expect(picked.count == JobRecord.postgresChangingColumns.count)
            #expect(try record.postgresUpdateValues() == picked + [.text(record.id)])
        }
    }

    @Test("the update's text, built once, is the text built for every group before, and its parameters fit it")
    func updateTextAsBuilt() throws {
        let records = try Self.records()
        let update = try PostgresBatchWriter.projectionUpdate(records, leaseExpiries: records.indices.map { $0 == 1 ? 62_000 : nil })
        #expect(update.sql == Self.updateTextAsBuiltBefore())
        #expect(update.parameters.count == PostgresBatchWriter.projectionUpdateColumns.count)
        #expect(update.sql.contains("$\(update.parameters.count))") && !update.sql.contains("$\(update.parameters.count + 1)"))
        for parameter in update.parameters {
            guard case .array(let array) = parameter else {
                Issue.record("a parameter that is not an array: \(parameter)")
                continue
            }
            #expect(array.elements.count == records.count)
        }
    }

    @Test("every kind of value is sent with its type and its binary form, arrays in array_send's layout")
    func typeAndBinaryForm() throws {
        func be32(_ value: Int32) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }
        let ascii = { (text: String) in Array(text.utf8) }
        let cases: [(PostgresValue, UInt32, [UInt8]?)] = [
            (.null, 0, nil),
            (.integer(-1), PostgresType.int8, [UInt8](repeating: 0xFF, count: 8)),
            (.integer(258), PostgresType.int8, [0, 0, 0, 0, 0, 0, 1, 2]),
            (.text(""), PostgresType.text, []),
            (.text("ü"), PostgresType.text, [0xC3, 0xBC]),
            (.bytea(Data([0, 1])), PostgresType.bytea, [0, 1]),
            (.bool(true), PostgresType.bool, [1]),
            // Dimensions, has-nulls, element type, then each dimension's length and lower bound, then each
            // element as its length (-1: NULL) and bytes.
            (.array(PostgresArray(elementType: PostgresType.text, elements: [.text("ab"), .null])), 1009,
             be32(1) + be32(1) + be32(25) + be32(2) + be32(1) + be32(2) + ascii("ab") + be32(-1)),
            (.array(PostgresArray(elementType: PostgresType.int8, elements: [])), 1016, be32(0) + be32(0) + be32(20)),
            (.array(PostgresArray(elementType: PostgresType.bool, elements: [.bool(false)])), 1000,
             be32(1) + be32(0) + be32(16) + be32(1) + be32(1) + be32(1) + [0]),
            (.array(PostgresArray(elementType: PostgresType.bytea, elements: [.bytea(Data())])), 1001,
             be32(1) + be32(0) + be32(17) + be32(1) + be32(1) + be32(0)),
        ]
        for (value, type, bytes) in cases {
            #expect(try value.typeOID() == type, "\(value)")
            let sent = try value.binary()
            #expect(sent.type == type && sent.bytes == bytes, "\(value): \(sent)")
        }
        // An array of a type that cannot be sent is refused by both.
        let refused = PostgresValue.array(PostgresArray(elementType: 700, elements: []))
        #expect(throws: PostgresError.self) { try refused.typeOID() }
        #expect(throws: PostgresError.self) { try refused.binary() }
    }

    @Test("a renumbered text made once is the text renumbered anew, past the cache's capacity too")
    func renumberedOnceAsAnew() {
        let texts = ["VALUES ($1, $10, $2)", "$", "é$1ü$22€", "", "x = $7 AND y = $70", PostgresBatchWriter.projectionUpdateSQL]
        for round in 0..<2 {
            for text in texts {
                for offset in [0, 1, 9, 25, 1_000] {
                    #expect(PostgresBatchWriter.renumberedOnce(text, by: offset) == PostgresBatchWriter.renumbered(text, by: offset),
                            "round \(round): \(text) by \(offset)")
                }
            }
        }
        for offset in 1...(PostgresBatchWriter.renumberedKept + 10) {
            #expect(PostgresBatchWriter.renumberedOnce("a $1 b $2", by: offset) == "a $\(1 + offset) b $\(2 + offset)")
        }
    }

    /// The update's text as `projectionUpdate` built it for every group before it was built once (every
    /// column sent as an array parameter).
    static func updateTextAsBuiltBefore() -> String {
        let names = JobRecord.postgresChangingColumns + ["lease_expires_at_ms", "id"]
        var assignments: [String] = []
        var aliases: [String] = []
        var stateAlias = "NULL"
        for (index, name) in names.enumerated() {
            aliases.append("c\(index)")
            switch name {
            case "id": break
            case "state":
                stateAlias = "u.c\(index)"
                assignments.append("\(name) = u.c\(index)")
            case "lease_expires_at_ms":
                assignments.append("\(name) = CASE WHEN \(stateAlias) = 'running' THEN coalesce(u.c\(index), jobs.\(name)) END")
            default:
                assignments.append("\(name) = u.c\(index)")
            }
        }
        return "UPDATE jobs SET " + assignments.joined(separator: ", ")
            + " FROM unnest(" + (1...names.count).map { "$\($0)" }.joined(separator: ", ") + ") AS u("
            + aliases.joined(separator: ", ") + ") WHERE jobs.id = u.c\(names.count - 1) AND jobs.id = ANY($\(names.count))"
    }
}
