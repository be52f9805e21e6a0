import Foundation
import JobModel
import Testing
@testable import EventStore
@testable import StorePort
import TestSupport

/// The hand-written payload JSON is byte for byte Foundation's (`StoreJSON.encode(payload.wire)`).
@Suite("Payload JSON", .onTestThreads)
struct PayloadJSONTests {
    static let texts = ["worker:host-1:4242", "", "a/b c", "quote \" inside", "back\\slash", "tab\there", "line\nfeed",
                        "\u{1}control", "café", "emoji 🚀", "e\u{301}", "del\u{7F}"]
    static let progresses = [
        TransferProgress.none, TransferProgress(attempt: 1), TransferProgress(attempt: 2, bytesDone: 0, bytesTotal: 64),
        TransferProgress(bytesDone: -1), TransferProgress(bytesTotal: Int64.max), TransferProgress(attempt: Int(Int32.max), bytesDone: Int64.min),
        TransferProgress(attempt: 1, bytesDone: 5, bytesTotal: 9,
                         resumePoint: .download(bytesWritten: 5, generation: "7", etag: nil, tempPath: "/t/x.part")),
        TransferProgress(resumePoint: .upload(sessionURI: "http://127.0.0.1/s?id=1", confirmedOffset: 262_144, total: nil)),
        TransferProgress(resumePoint: .unanswered), TransferProgress(resumePoint: .sentDelete),
    ]

    /// `succeeded` results: every field set and unset, text with and without escapes, custom metadata,
    /// bytes in flight.
    static var results: [JobResult] {
        var results: [JobResult] = [JobResult()]
        let full = StorageObject(bucket: "b", name: "dir/o-000001.bin", size: 64, contentType: "application/octet-stream",
                                 cacheControl: "no-cache", contentDisposition: "inline", contentEncoding: "gzip",
                                 contentLanguage: "en", md5Hash: "1B2M2Y8AsgTpgAmY7PhCfg==", crc32c: "AAAAAA==",
                                 generation: "1796065157543789", metageneration: "1", timeCreated: "2026-11-30T18:59:17.544Z",
                                 updated: "2026-11-30T18:59:17.544Z", downloadTokens: "t1,t2")
        for text in texts {
            results += [
                JobResult(object: StorageObject(bucket: text, name: text, size: 0), size: 64),
                JobResult(path: text, md5: text, crc32c: text, blob: text, url: text, deleted: text),
                JobResult(object: StorageObject(bucket: "", name: "n", size: 1, contentType: text, generation: text,
                                                timeCreated: text)),
            ]
        }
        results += [
            JobResult(object: full, size: 64, crc32c: "X6KfPg==", blob: String(repeating: "b6", count: 32), verified: []),
            JobResult(object: full, path: "/tmp/x", size: -1, md5: "m", crc32c: "c", verified: [.md5, .crc32c], skipped: true),
            JobResult(object: StorageObject(bucket: "b", name: "o", size: Int64.max), verified: [.crc32c], skipped: false),
            JobResult(object: StorageObject(bucket: "b", name: "o", size: 1, customMetadata: ["a": "1", "B": "2"]), size: 1),
            JobResult(object: StorageObject(bucket: "b", name: "o", size: 1, customMetadata: [:])),
            JobResult(size: 3, data: Data("abc".utf8)),
            JobResult(size: 0, data: Data()),
            JobResult(url: "https://h/v0/b/x/o/a%2Fb?alt=media&token=1"),
        ]
        return results
    }

    /// Every case of `EventPayload`, with the fields each can hold set and unset, and text that needs
    /// escaping as well as text that does not.
    static var payloads: [EventPayload] {
        var payloads: [EventPayload] = []
        let error = StorageError(.objectNotFound, "no such object: \"x\"/y", httpStatus: 404, url: "https://h/o")
        let spec = JobSpec(kind: .downloadMemory, source: "file://b/o.bin")
        for text in texts {
            payloads.append(.claimed(leaseOwner: text, leaseExpiresAtMs: 1_700_000_030_000, attempt: 1))
            for reason in [text, nil] as [String?] {
                payloads += [.pauseRequested(reason: reason), .resumeRequested(reason: reason), .cancelRequested(reason: reason),
                             .leaseExpired(.none, reason: reason), .retried(reason: reason), .released(.none, reason: reason),
                             .paused(.none, reason: reason), .cancelled(.none, error: nil, reason: reason),
                             .failed(.none, error: error, reason: reason)]
            }
        }
        payloads.append(.claimed(leaseOwner: "w", leaseExpiresAtMs: -5, attempt: 0))
        for progress in progresses {
            payloads += [.started(progress), .progress(progress), .paused(progress, reason: "r"), .released(progress, reason: nil),
                         .cancelled(progress, error: error, reason: nil), .attemptFailed(progress, error: error, retryAtMs: 9),
                         .failed(progress, error: error, reason: nil), .leaseExpired(progress, reason: "lease held by w expired"),
                         .succeeded(progress, result: JobResult(size: 64, crc32c: "AAAAAA==", blob: String(repeating: "ab", count: 32)))]
        }
        for result in results {
            payloads += [.succeeded(TransferProgress(attempt: 1, bytesDone: 64, bytesTotal: 64), result: result),
                         .succeeded(.none, result: result)]
        }
        payloads.append(.submitted(spec: spec))
        payloads.append(.archived(ArchiveRecord(file: "/a/b.jsonl.gz", sha256: String(repeating: "0", count: 64), beforeMs: 1, jobs: 2,
                                                events: 3, blobs: 0, blobsRemoved: 0, firstSeq: 1, lastSeq: 3)))
        return payloads
    }

    @Test("every payload case encodes byte for byte as Foundation's encoder does")
    func everyCase() throws {
        let payloads = Self.payloads
        #expect(Set(payloads.map(\.type)) == Set(EventType.allCases))
        var handWritten = 0
        for payload in payloads {
            let expected = try StoreJSON.encode(payload.wire)
            let text = try PayloadJSON.encode(payload)
            #expect(Array(text.utf8) == Array(expected.utf8), "\(payload)")
            if let fast = PayloadJSON.handWritten(payload) {
                handWritten += 1
                #expect(Array(fast.utf8) == Array(expected.utf8), "\(payload)")
            }
        }
        // The shapes a worker writes most take the hand-written path; text needing escapes does not.
        #expect(PayloadJSON.handWritten(.claimed(leaseOwner: "worker:h:1", leaseExpiresAtMs: 1, attempt: 1)) != nil)
        #expect(PayloadJSON.handWritten(.started(TransferProgress(attempt: 1, bytesDone: 0, bytesTotal: 64))) != nil)
        #expect(PayloadJSON.handWritten(.claimed(leaseOwner: "café", leaseExpiresAtMs: 1, attempt: 1)) == nil)
        // A download-memory job's result (its bytes already moved to a blob) takes the hand-written path too.
        let drained = JobResult(object: StorageObject(bucket: "", name: "tmp/o.bin", size: 64, contentType: "application/octet-stream",
                                                      generation: "1", metageneration: "1"),
                                size: 64, crc32c: "X6KfPg==", blob: String(repeating: "b6", count: 32), verified: [])
        #expect(PayloadJSON.handWritten(.succeeded(TransferProgress(attempt: 1, bytesDone: 64, bytesTotal: 64), result: drained)) != nil)
        // Bytes in flight (base64) and one custom metadata entry are written by hand as Foundation writes
        // them; two entries (whose order is Foundation's to choose) are left to the encoder.
        for payload: EventPayload in [
            .succeeded(.none, result: JobResult(size: 3, data: Data("abc".utf8))),
            .succeeded(.none, result: JobResult(object: StorageObject(bucket: "b", name: "o", size: 1, customMetadata: ["k": "v"]))),
        ] {
            let fast = try #require(PayloadJSON.handWritten(payload))
            #expect(Array(fast.utf8) == Array(try StoreJSON.encode(payload.wire).utf8))
        }
        #expect(PayloadJSON.handWritten(.succeeded(.none, result: JobResult(
            object: StorageObject(bucket: "b", name: "o", size: 1, customMetadata: ["k": "v", "a": "w"])))) == nil)
        #expect(handWritten > 50, "\(handWritten) of \(payloads.count) written by hand")
    }

    @Test("every payload of a release's log re-encodes to the bytes stored")
    func releaseLog() throws {
        let (directory, path) = try ReleaseFixtureTests.copy("payload-json-release", migrated: true)
        defer { directory.remove() }
        let store = try EventStore(path: path, mode: .readOnly)
        let rows = try store.logRows(afterSeq: 0, limit: 10_000)
        #expect(rows.count == 111)
        var handWritten = 0
        for row in rows {
            let type = try #require(EventType(rawValue: row.type))
            let wire = try StoreJSON.decode(EventData.self, row.data, what: "event \(row.seq)")
            let payload = try EventPayload(type: type, wire: wire)
            #expect(Array(try PayloadJSON.encode(payload).utf8) == Array(row.data.utf8), "seq \(row.seq): \(row.data)")
            if PayloadJSON.handWritten(payload) != nil { handWritten += 1 }
        }
        #expect(handWritten > 20, "\(handWritten) of \(rows.count) written by hand")
    }
}
