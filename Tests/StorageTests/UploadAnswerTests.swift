import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A resumable upload's answers that lie, from the server or from something between it and this machine
/// (the fault proxy in front of the emulator rewrites them): a 200 before the last chunk, a final answer
/// with another object's metadata or a wrong hash, an error's JSON in a 200. None may be taken as the
/// upload's success, and none may make jobctl delete an object it did not write.
@Suite("lying answers to a resumable upload", .onTestThreads)
struct UploadAnswerTests {
    private let payload = patternData(700_000, seed: 97)   // three chunks of 256 KiB

    private static func chunk(endingAt end: Int64, of total: Int64) -> RequestMatch {
        RequestMatch(method: "PUT", pathContains: "upload_id=", headerContains: ProxyHeader("Content-Range", "-\(end)/\(total)"))
    }

    /// `response`'s JSON body changed by `edit`, served as a 200.
    private static func rewriteJSON(_ response: inout ProxyMessage, _ edit: (inout [String: Any]) -> Void) {
        var object = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
        edit(&object)
        response.startLine = "HTTP/1.1 200 OK"
        response.setHeader("Range", nil)
        response.setHeader("Content-Type", "application/json")
        response.body = (try? JSONSerialization.data(withJSONObject: object)) ?? Data()
    }

    /// A 200 to the first chunk, carrying an object resource: forged with the whole payload's size and
    /// hashes (success was reported for 262,144 bytes sent, the object never written), or the metadata of
    /// the object already there (its generation was then deleted: data loss). Either way the stored object
    /// is asked, found not to hold the payload, and the session is replaced; nothing is deleted.
    @Test("a 200 before the last chunk is believed only if the stored object holds every byte", arguments: [true, false])
    func earlyFinishIsChecked(forged: Bool) async throws {
        let total = Int64(payload.count)
        let oldBytes = patternData(1_000, seed: 98)
        let ours = hashes(payload)
        let setup = try UploadFaultTests.ProxiedEmulator([])
        defer { setup.stop() }
        let bucket = setup.server.bucket
        let old = try finished(await run(setup.direct, JobSpec(kind: .uploadData, destination: "gs://\(bucket)/a.bin", data: oldBytes)))
        let oldGeneration = try #require(old.object?.generation)
        let proxy = try FaultProxy(upstreamPort: setup.server.port, rules: [
            FaultRule(Self.chunk(endingAt: 256 * 1024 - 1, of: total), .rewriteResponse { _, response in
                Self.rewriteJSON(&response) { object in
                    object = ["kind": "storage#object", "bucket": bucket, "name": "a.bin", "generation": oldGeneration,
                              "metageneration": "1", "size": forged ? String(total) : "1000", "contentType": "application/octet-stream"]
                    if forged {
                        object["md5Hash"] = ours.md5
                        object["crc32c"] = ours.crc32c
                    }
                }
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true, firebaseEndpoint: proxy.baseURL,
                                                                     chunkSize: 256 * 1024, singleRequestLimit: 0, stallTimeout: 30, connectTimeout: 5))
        let result = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(bucket)/a.bin", data: payload)))
        #expect(proxy.firedCounts == [1])
        #expect(result.object?.size == total && result.object?.md5Hash == ours.md5, "\(String(describing: result.object))")
        #expect(try await setup.storedBytes("a.bin") == payload, "the whole payload was sent again and stored")
        #expect(!proxy.exchanges.contains { $0.request.method == "DELETE" && !$0.request.target.contains("upload_id=") },
                "no object was deleted")
        #expect(proxy.exchanges.filter { $0.request.method == "POST" }.count == 2, "a second session")
    }

    /// The same false 200 to the first chunk of an object that does not exist yet: the stored object was
    /// asked, its 404 taken for the job's own missing object, and the job failed for good
    /// (`objectNotFound`, "check the path"). Nothing stored means the session did not finish: replaced.
    @Test("a 200 before the last chunk of a new object replaces the session, not failing the job as not found")
    func earlyFinishOfANewObject() async throws {
        let total = Int64(payload.count)
        let ours = hashes(payload)
        let setup = try UploadFaultTests.ProxiedEmulator([])
        defer { setup.stop() }
        let bucket = setup.server.bucket
        let proxy = try FaultProxy(upstreamPort: setup.server.port, rules: [
            FaultRule(Self.chunk(endingAt: 256 * 1024 - 1, of: total), .rewriteResponse { _, response in
                Self.rewriteJSON(&response) { object in
                    object = ["kind": "storage#object", "bucket": bucket, "name": "new.bin", "generation": "1", "metageneration": "1",
                              "size": String(total), "md5Hash": ours.md5 ?? "", "crc32c": ours.crc32c]
                }
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true, firebaseEndpoint: proxy.baseURL,
                                                                     chunkSize: 256 * 1024, singleRequestLimit: 0, stallTimeout: 30, connectTimeout: 5))
        let result = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(bucket)/new.bin", data: payload)))
        #expect(proxy.firedCounts == [1])
        #expect(result.object?.size == total, "\(String(describing: result.object))")
        #expect(try await setup.storedBytes("new.bin") == payload)
        #expect(proxy.exchanges.filter { $0.request.method == "POST" }.count == 2, "a second session")
    }

    /// A final answer with another CRC32C (the stored object was right: it was deleted all the same), or
    /// naming another bucket and object (recorded as the job's result): the stored object is asked.
    @Test("a final answer about other bytes or another object is checked against the stored object", arguments: [true, false])
    func finalAnswerIsChecked(wrongHash: Bool) async throws {
        let total = Int64(payload.count)
        let setup = try UploadFaultTests.ProxiedEmulator([
            FaultRule(Self.chunk(endingAt: total - 1, of: total), .rewriteResponse { _, response in
                Self.rewriteJSON(&response) { object in
                    if wrongHash {
                        object["crc32c"] = "AAAAAA=="
                    } else {
                        object["bucket"] = "otherbucket"
                        object["name"] = "zzz/other.bin"
                    }
                }
            }, times: 1),
        ])
        defer { setup.stop() }
        let bucket = setup.server.bucket
        let result = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(bucket)/b.bin", data: payload)))
        #expect(setup.proxy.firedCounts == [1])
        #expect(result.object?.bucket == bucket && result.object?.name == "b.bin", "\(String(describing: result.object))")
        #expect(result.crc32c == hashes(payload).crc32c && result.verified?.contains(.crc32c) == true)
        #expect(try await setup.storedBytes("b.bin") == payload)
        #expect(!setup.proxy.exchanges.contains { $0.request.method == "DELETE" }, "the right object was not deleted")
    }

    /// An error's JSON in a 200 to the last chunk: the object may well be stored, so the attempt fails
    /// retryable (it failed for good, though the emulator held the right bytes).
    @Test("an error's JSON in a 200 to the last chunk is a retryable failure")
    func errorInAFinalAnswerIsRetryable() async throws {
        let total = Int64(payload.count)
        let setup = try UploadFaultTests.ProxiedEmulator([
            FaultRule(Self.chunk(endingAt: total - 1, of: total), .rewriteResponse { _, response in
                Self.rewriteJSON(&response) { object in object = ["error": ["code": 503, "message": "backend error"]] }
            }, times: 1),
        ])
        defer { setup.stop() }
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/c.bin", data: payload)))
        #expect(error.retryable, "\(error)")
        #expect(setup.proxy.firedCounts == [1])
    }

    /// A session that said it is complete (200) in an answer cut short where nothing framed it (no
    /// `Content-Length`, the connection's close taken as its end) was taken for a session gone: when the
    /// object no longer held the upload's bytes — another writer stored its own after ours — a new session
    /// stored ours again over theirs. Now the stored object decides: the source's bytes, success; anything
    /// else, a retryable failure with nothing sent or deleted, and the next attempt asks the same session.
    @Test("a status answer 'complete' cut short is checked against the stored object, never a new session")
    func cutCompleteAnswerStartsNoSession() async throws {
        let total = Int64(payload.count)
        let setup = try UploadFaultTests.ProxiedEmulator([])
        defer { setup.stop() }
        let bucket = setup.server.bucket
        let spec = JobSpec(kind: .uploadData, destination: "gs://\(bucket)/s.bin", data: payload)
        let recorder = EventRecorder()
        _ = try finished(await run(setup.backend, spec, recorder: recorder))
        let session = try #require(recorder.checkpoints.first)
        // The status query of the next attempt (its first one died after the last chunk) is answered
        // complete, cut short 40 bytes into its JSON.
        let statusQuery = RequestMatch(method: "PUT", pathContains: "upload_id=", headerContains: ProxyHeader("Content-Range", "*/\(total)"))
        let cutComplete = ProxyMessage.response(200, reason: "OK", headers: [ProxyHeader("Content-Type", "application/json")],
                                                body: Data(#"{"kind": "storage#object", "bucket": "\#(bucket)", "name": "s.bin", "size": "\#(total)"}"#.utf8))
        setup.proxy.add(FaultRule(statusQuery, .respond(cutComplete), times: 2))
        setup.proxy.add(FaultRule(statusQuery, .unframedResponse, times: 2))
        setup.proxy.add(FaultRule(statusQuery, .closeInResponse(afterBytes: 80), times: 2))

        // The object is still the upload's: it is the result, stored once.
        let before = setup.proxy.exchanges.count
        let resumed = try finished(await run(setup.backend, spec, resume: session))
        #expect(resumed.crc32c == hashes(payload).crc32c && resumed.object?.size == total, "\(resumed)")
        #expect(setup.proxy.exchanges.dropFirst(before).filter { $0.request.method == "POST" }.isEmpty, "no new session")

        // Another writer stored other bytes since: no new session puts ours back over them.
        let theirs = patternData(5_000, seed: 99)
        _ = try finished(await run(setup.direct, JobSpec(kind: .uploadData, destination: "gs://\(bucket)/s.bin", data: theirs)))
        let after = setup.proxy.exchanges.count
        let refused = try failure(await run(setup.backend, spec, resume: session))
        #expect(refused.retryable && refused.message.contains("asks the session again"), "\(refused)")
        #expect(setup.proxy.firedCounts == [2, 2, 2])
        let requests = setup.proxy.exchanges.dropFirst(after).map { "\($0.request.method) \($0.request.target)" }
        #expect(!requests.contains { $0.hasPrefix("POST") || $0.hasPrefix("DELETE") }, "\(requests)")
        #expect(try await setup.storedBytes("s.bin") == theirs, "the other writer's object stayed")
    }
}
