import Foundation
@testable import JobLifecycle
import JobModel
import Testing

// MARK: - Fixtures

/// A spec with most of its optional fields set, so a lost or shared field shows in the JSON and in `==`.
private let fullSpec = JobSpec(kind: .uploadData, destination: "gs://b/o", data: Data("hello".utf8),
                               metadata: UploadMetadata(contentType: "text/plain", customMetadata: ["k": "v"]),
                               key: "key-1", priority: 3, maxAttempts: 4, queue: "q", timeoutSeconds: 60,
                               checksums: [.md5, .crc32c], ifExists: .skip, maxRate: 1_000, runAfterMs: 50,
                               batch: JobBatch(id: "B1", source: "/src", include: ["*.txt"], path: "a.txt"),
                               after: ["J0"])
private let fullResult = JobResult(path: "/dst/o", size: 5, md5: "XUFAKrxLKna5cZ2REBfFkg==", crc32c: "mnG7TA==",
                                   verified: [.crc32c], skipped: false)

/// A record with every field set (no nil, no default), different from what `JobRecord(submitted:)` makes.
private func fullRecord() -> JobRecord {
    JobRecord(id: "01JOB", seq: 7, kind: .uploadData, state: .running, queue: "q", priority: 3, runAfterMs: 50,
              attempts: 2, maxAttempts: 4, leaseOwner: "worker-1", leaseToken: 9, bytesDone: 3, bytesTotal: 5,
              resumePoint: .upload(sessionURI: "https://example.test/s", confirmedOffset: 3, total: 5),
              error: StorageError(.unknown, "the server is busy (503)", httpStatus: 503, retryable: true),
              result: fullResult, spec: fullSpec, key: "key-1", pauseRequested: true, cancelRequested: true,
              version: 6, createdAtMs: 10, updatedAtMs: 20, startedAtMs: 15, finishedAtMs: 30)
}

/// A record with every optional field nil and every defaulted field at its default.
private func sparseRecord() -> JobRecord {
    JobRecord(id: "01SPARSE", seq: 1, kind: .downloadFile, state: .queued, queue: "default", priority: 0,
              runAfterMs: 0, attempts: 0, maxAttempts: 5,
              spec: JobSpec(kind: .downloadFile, source: "gs://b/o", destination: "/tmp/o"), key: nil,
              version: 1, createdAtMs: 0, updatedAtMs: 0)
}

/// The record as it was laid out before its fields moved into a shared box: the same stored properties
/// in the same order, with the synthesized `Codable`. Its JSON is what the record must keep producing.
private struct PlainRecord: Codable {
    var id: String
    var seq: Int64
    var kind: JobKind
    var state: JobState
    var queue: String
    var priority: Int
    var runAfterMs: Int64
    var attempts: Int
    var maxAttempts: Int
    var leaseOwner: String?
    var leaseToken: Int64?
    var bytesDone: Int64
    var bytesTotal: Int64?
    var resumePoint: ResumePoint?
    var error: StorageError?
    var result: JobResult?
    var spec: JobSpec
    var key: String?
    var pauseRequested: Bool
    var cancelRequested: Bool
    var version: Int
    var createdAtMs: Int64
    var updatedAtMs: Int64
    var startedAtMs: Int64?
    var finishedAtMs: Int64?

    init(_ r: JobRecord) {
        (id, seq, kind, state, queue, priority, runAfterMs) = (r.id, r.seq, r.kind, r.state, r.queue, r.priority, r.runAfterMs)
        (attempts, maxAttempts, leaseOwner, leaseToken) = (r.attempts, r.maxAttempts, r.leaseOwner, r.leaseToken)
        (bytesDone, bytesTotal, resumePoint, error, result) = (r.bytesDone, r.bytesTotal, r.resumePoint, r.error, r.result)
        (spec, key, pauseRequested, cancelRequested, version) = (r.spec, r.key, r.pauseRequested, r.cancelRequested, r.version)
        (createdAtMs, updatedAtMs, startedAtMs, finishedAtMs) = (r.createdAtMs, r.updatedAtMs, r.startedAtMs, r.finishedAtMs)
    }
}

/// One change to one field of a record, named for the test's arguments.
enum FieldChange: String, CaseIterable, Sendable {
    case id, state, attempts, leaseOwner, bytesDone, resumePoint, error, result, resultSize, spec, specQueue
    case key, pauseRequested, version, finishedAtMs

    func apply(to record: inout JobRecord) {
        switch self {
        case .id: record.id = "01OTHER"
        case .state: record.state = .failed
        case .attempts: record.attempts += 1
        case .leaseOwner: record.leaseOwner = nil
        case .bytesDone: record.bytesDone = 4
        case .resumePoint: record.resumePoint = .download(bytesWritten: 1, generation: nil, etag: nil, tempPath: nil)
        case .error: record.error = nil
        case .result: record.result = nil
        case .resultSize: record.result?.size = 6
        case .spec: record.spec = JobSpec(kind: .downloadFile, source: "gs://b/p", destination: "/tmp/p")
        case .specQueue: record.spec.queue = "other"
        case .key: record.key = "key-2"
        case .pauseRequested: record.pauseRequested = false
        case .version: record.version = 7
        case .finishedAtMs: record.finishedAtMs = nil
        }
    }
}

private func json(_ value: some Encodable, _ formatting: JSONEncoder.OutputFormatting) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = formatting
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

private func event(_ version: Int, _ payload: EventPayload, leaseToken: Int64? = nil) -> JobEvent {
    JobEvent(seq: Int64(version), jobID: "01JOB", version: version, atMs: Int64(version) * 10, actor: "test",
             leaseToken: leaseToken, payload: payload)
}

/// A long log: submitted, then attempts that fail with progress on the way, a retry, and a success.
private func longLog(attempts: Int, reportsPerAttempt: Int) -> [JobEvent] {
    var events = [event(1, .submitted(spec: fullSpec))]
    func next(_ payload: EventPayload, leaseToken: Int64? = nil) {
        events.append(event(events.count + 1, payload, leaseToken: leaseToken))
    }
    let busy = StorageError(.unknown, "the server is busy (503)", httpStatus: 503, retryable: true)
    for attempt in 1...attempts {
        next(.claimed(leaseOwner: "worker-\(attempt)", leaseExpiresAtMs: 1_000_000, attempt: attempt), leaseToken: Int64(attempt))
        next(.started(TransferProgress(attempt: attempt, bytesDone: 0, bytesTotal: 5_000)), leaseToken: Int64(attempt))
        for report in 1...reportsPerAttempt {
            next(.progress(TransferProgress(attempt: attempt, bytesDone: Int64(report))), leaseToken: Int64(attempt))
        }
        next(.attemptFailed(TransferProgress(attempt: attempt), error: busy, retryAtMs: 0), leaseToken: Int64(attempt))
    }
    next(.retried(reason: "again"))
    next(.claimed(leaseOwner: "worker-last", leaseExpiresAtMs: 1_000_000, attempt: 1), leaseToken: 99)
    next(.succeeded(TransferProgress(bytesDone: 5_000), result: fullResult), leaseToken: 99)
    return events
}

// MARK: - Tests

@Suite("JobRecord: copy-on-write storage")
struct JobRecordStorageTests {
    @Test("a copy shares the box until one side changes; then the other keeps its values", arguments: FieldChange.allCases)
    func copiesAreIndependent(_ change: FieldChange) {
        let original = fullRecord()
        var copy = original
        #expect(copy.storageIdentity == original.storageIdentity)
        change.apply(to: &copy)
        #expect(copy.storageIdentity != original.storageIdentity)
        #expect(original == fullRecord())
        #expect(copy != original)
        var again = fullRecord()
        change.apply(to: &again)
        #expect(copy == again)
    }

    @Test("applying an event to a shared record leaves the other copy as it was")
    func applyOnSharedRecord() {
        let original = fullRecord()
        var copy = original
        copy.apply(event(7, .succeeded(TransferProgress(bytesDone: 5), result: JobResult(size: 5))))
        #expect(copy.state == .succeeded)
        #expect(copy.result == JobResult(size: 5))
        #expect(original == fullRecord())
    }

    @Test("records built apart with equal fields are equal and hash alike; one differing field makes them unequal",
          arguments: FieldChange.allCases)
    func equalityIsByValue(_ change: FieldChange) {
        let one = fullRecord(), two = fullRecord()
        #expect(one.storageIdentity != two.storageIdentity)
        #expect(one == two)
        #expect(one.hashValue == two.hashValue)
        #expect(Set([one, two]).count == 1)
        var changed = two
        change.apply(to: &changed)
        #expect(one != changed)
        #expect(Set([one, changed]).count == 2)
    }

    /// Every JSON the project writes has sorted keys (the store's, `show --json`'s); without them
    /// Foundation's key order is a hash order, which no two encodings need share.
    @Test("the JSON is byte for byte the JSON of the plain stored-property layout, and decodes back",
          arguments: [fullRecord(), sparseRecord()])
    func jsonIsUnchanged(_ record: JobRecord) throws {
        let formats: [JSONEncoder.OutputFormatting] = [
            [.sortedKeys], [.sortedKeys, .withoutEscapingSlashes], [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes],
        ]
        for formatting in formats {
            let text = try json(record, formatting), plain = try json(PlainRecord(record), formatting)
            #expect(text == plain, "\(formatting)")
        }
        let data = try JSONEncoder().encode(PlainRecord(record))
        #expect(try JSONDecoder().decode(JobRecord.self, from: data) == record)
    }

    @Test("a sparse record's JSON leaves the nil fields out, as the synthesized conformance does")
    func sparseJSONOmitsNils() throws {
        let text = try json(sparseRecord(), [.sortedKeys])
        for key in ["leaseOwner", "leaseToken", "bytesTotal", "resumePoint", "error", "result", "key", "startedAtMs", "finishedAtMs"] {
            #expect(!text.contains("\"\(key)\""), "\(key)")
        }
        #expect(text.hasPrefix(#"{"attempts":0,"bytesDone":0,"cancelRequested":false,"createdAtMs":0,"id":"01SPARSE""#))
    }

    @Test("a record prints its fields as the plain layout does, not its box")
    func printsFields() {
        let record = fullRecord()
        let text = String(describing: record), plain = String(describing: PlainRecord(record))
        #expect(text.hasPrefix("JobRecord(id: \"01JOB\", seq: 7,"))
        #expect(text.dropFirst("JobRecord".count) == plain.dropFirst("PlainRecord".count))
    }

    @Test("folding a long log changes one box in place: no event copies the record")
    func foldKeepsOneBox() throws {
        let events = longLog(attempts: 4, reportsPerAttempt: 50)
        var record = try #require(JobRecord(submitted: events[0]))
        let box = record.storageIdentity
        for event in events.dropFirst() {
            record.apply(event)
            #expect(record.storageIdentity == box, "event \(event.version)")
        }
        #expect(record.state == .succeeded)
        #expect(record.version == events.count)
        #expect(record.result == fullResult)
        #expect(record == JobRecord.folding(events))
    }

    @Test("the lifecycle folds its own record in place")
    func lifecycleFoldsInPlace() throws {
        let events = longLog(attempts: 2, reportsPerAttempt: 20)
        var lifecycle = JobLifecycle()
        lifecycle.apply(events[0])
        let box = try #require(lifecycle.record).storageIdentity
        for event in events.dropFirst() {
            lifecycle.apply(event)
            #expect(lifecycle.record?.storageIdentity == box, "event \(event.version)")
        }
        #expect(lifecycle.record == JobRecord.folding(events))
    }
}
