import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A delete the server carried out whose answer never reached us (the fault proxy forwards the DELETE,
/// then resets the connection): the attempt says its request went out (`ResumePoint.sentDelete`), and the
/// retry takes the object gone as its own delete instead of failing with `objectNotFound`. Without that
/// word — a request that never left, or no earlier attempt — a missing object stays an error.
@Suite("a delete's lost answer", .onTestThreads)
struct LostAnswerDeleteTests {
    // MARK: Plain HTTP (nginx's WebDAV DELETE)

    @Test("HTTP: DELETE carried out, answer lost (reset, or cut inside its headers): the attempt reports it sent, the retry succeeds on the missing file",
          arguments: ["reset", "cutInHeaders"])
    func httpDeleteAnswerLost(fault: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data("doomed".utf8).write(to: URL(fileURLWithPath: server.root + "/doomed.txt"))
        // A new proxy: the first DELETE goes out on a fresh connection, so libcurl does not send it again.
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "DELETE", pathContains: "/doomed.txt"),
                      fault == "reset" ? .resetBeforeResponse : .closeInResponse(afterBytes: 40), times: 1),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let url = "\(proxy.baseURL)/doomed.txt"
        let spec = JobSpec(kind: .delete, destination: url)

        let recorder = EventRecorder()
        let error = try failure(await run(backend, spec, recorder: recorder))
        #expect(error.retryable, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/doomed.txt"), "nginx carried the DELETE out")
        #expect(recorder.checkpoints == [.sentDelete], "\(recorder.all)")
        #expect(proxy.firedCounts == [1])

        let retried = try finished(await run(backend, spec, resume: .sentDelete))
        #expect(retried.deleted == url)
        #expect(proxy.exchanges.filter { $0.request.method == "DELETE" }.count == 2, "the retry asked again and met a 404")

        // Without the earlier attempt's word the missing file is an error, as always.
        let missing = try failure(await run(backend, spec))
        #expect(missing.code == .objectNotFound && missing.httpStatus == 404, "\(missing)")
    }

    @Test("HTTP: a DELETE that never left (connection refused) reports nothing, so a missing file stays an error")
    func httpDeleteNeverSent() async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let recorder = EventRecorder()
        let error = try failure(await run(backend, JobSpec(kind: .delete, destination: "http://\(closed.hostAndPort)/x.txt"), recorder: recorder))
        #expect(error.retryable, "\(error)")
        #expect(recorder.checkpoints.isEmpty, "\(recorder.all)")
    }

    @Test("HTTP: a file still there after a lost answer is deleted by the retry")
    func httpDeleteRetryFindsTheFile() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data("still here".utf8).write(to: URL(fileURLWithPath: server.root + "/kept.txt"))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let url = "\(server.baseURL)/kept.txt"
        let deleted = try finished(await run(backend, JobSpec(kind: .delete, destination: url), resume: .sentDelete))
        #expect(deleted.deleted == url)
        #expect(!FileManager.default.fileExists(atPath: server.root + "/kept.txt"))
    }

    // MARK: file:// (a worker that died between the unlink and its outcome)

    @Test("file://: after an attempt that may have deleted it (sentDelete), a missing object is the delete done and a sidecar left behind goes")
    func localDeleteAfterCrash() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-delete-after-crash", making: "b/docs")
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/docs/a.txt", data: Data("x".utf8),
                                                    metadata: UploadMetadata(customMetadata: ["k": "v"]))))
        // The crash came after the object's unlink and before its sidecar's.
        try FileManager.default.removeItem(atPath: buckets + "/b/docs/a.txt")
        #expect(FileManager.default.fileExists(atPath: buckets + "/b/docs/.a.txt.jobctl-meta.json"))
        let spec = JobSpec(kind: .delete, destination: "file://b/docs/a.txt")

        let missing = try failure(await run(backend, spec))
        #expect(missing.code == .objectNotFound, "without the earlier attempt's word: \(missing)")
        let done = try finished(await run(backend, spec, resume: .sentDelete))
        #expect(done.deleted == "file://b/docs/a.txt")
        #expect(try FileManager.default.contentsOfDirectory(atPath: buckets + "/b/docs").isEmpty)
        // An object still there is deleted as usual; a missing bucket stays an error.
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/docs/c.txt", data: Data("y".utf8))))
        #expect(try finished(await run(backend, JobSpec(kind: .delete, destination: "file://b/docs/c.txt"), resume: .sentDelete)).deleted != nil)
        #expect(!FileManager.default.fileExists(atPath: buckets + "/b/docs/c.txt"))
        let noBucket = try failure(await run(backend, JobSpec(kind: .delete, destination: "file://nobucket/x.txt"), resume: .sentDelete))
        #expect(noBucket.code == .bucketNotFound, "\(noBucket)")
    }

    // MARK: GCS (the emulator)

    @Test("GCS: DELETE carried out, answer lost: reported sent; the retry succeeds on the missing object, with or without if_generation",
          arguments: [false, true])
    func gcsDeleteAnswerLost(withGeneration: Bool) async throws {
        // With a generation the look before the DELETE warms the connection, so the DELETE is sent twice
        // (libcurl sends it again on a fresh connection): both answers are lost.
        let setup = try UploadFaultTests.ProxiedEmulator([
            FaultRule(RequestMatch(method: "DELETE", pathContains: "/o/doomed.txt"), .resetBeforeResponse, times: withGeneration ? 2 : 1),
        ])
        defer { setup.stop() }
        let object = "gs://\(setup.server.bucket)/doomed.txt"
        let stored = try finished(await run(setup.direct, JobSpec(kind: .uploadData, destination: object, data: Data("doomed".utf8))))
        let generation = try #require(stored.object?.generation.flatMap { Int64($0) })
        var spec = JobSpec(kind: .delete, destination: object)
        if withGeneration { spec.ifGeneration = generation }

        let recorder = EventRecorder()
        let error = try failure(await run(setup.backend, spec, recorder: recorder))
        #expect(error.retryable, "\(error)")
        #expect(await !setup.exists("doomed.txt"), "the emulator carried the DELETE out")
        #expect(recorder.checkpoints == [.sentDelete], "\(recorder.all)")
        #expect(setup.proxy.firedCounts == [withGeneration ? 2 : 1])

        let retried = try finished(await run(setup.backend, spec, resume: .sentDelete))
        #expect(retried.deleted == object)

        let missing = try failure(await run(setup.backend, spec))
        #expect(missing.code == .objectNotFound, "\(missing)")
    }

    @Test("GCS and HTTP: a DELETE carried out on a reused connection that died before answering: libcurl's resend meets a 404, and the attempt succeeds",
          arguments: [false, true])
    func deleteResentByLibcurl(overGCS: Bool) async throws {
        // The warm connection can be gone by the time the DELETE is sent (other tests run meanwhile), so
        // the scenario is tried up to 3 times until the reset really hit a reused connection.
        for round in 1...3 {
            let rule = FaultRule(RequestMatch(method: "DELETE", pathContains: "doomed-\(round).txt", reusedConnection: true), .resetBeforeResponse)
            let setup = try await ProxiedObject(overGCS: overGCS, name: "doomed-\(round).txt", rule: rule)
            defer { setup.stop() }
            let (proxy, backend, object) = (setup.proxy, setup.backend, setup.reference)
            // A first request through the proxy opens the keep-alive connection the DELETE reuses.
            _ = try finished(await run(backend, JobSpec(kind: .getMetadata, source: object)))

            let recorder = EventRecorder()
            let deleted = try finished(await run(backend, JobSpec(kind: .delete, destination: object), recorder: recorder))
            #expect(deleted.deleted == object)
            let deletes = proxy.exchanges.filter { $0.request.method == "DELETE" }
            guard proxy.firedCounts == [1] || round == 3 else { continue }
            #expect(proxy.firedCounts == [1], "the DELETE never went out on a reused connection in 3 rounds")
            #expect(deletes.count == 2, "\(deletes.map(\.faults))")
            #expect(deletes.first?.indexOnConnection ?? 0 >= 2, "the reset hit a reused connection")
            #expect(deletes.last?.indexOnConnection == 1, "sent again on a fresh connection")
            #expect(recorder.checkpoints.isEmpty, "a finished delete leaves nothing to resume: \(recorder.all)")
            #expect(await !setup.exists())
            return
        }
    }

    @Test("GCS: after a lost answer, a missing bucket is still an error, and another generation is still refused")
    func gcsDeleteOtherFailuresStay() async throws {
        let setup = try UploadFaultTests.ProxiedEmulator([])
        defer { setup.stop() }
        let noBucket = try failure(await run(setup.backend, JobSpec(kind: .delete, destination: "gs://no-such-bucket-here/x.txt"), resume: .sentDelete))
        #expect(noBucket.code == .bucketNotFound, "\(noBucket)")

        let object = "gs://\(setup.server.bucket)/replaced.txt"
        let stored = try finished(await run(setup.direct, JobSpec(kind: .uploadData, destination: object, data: Data("new".utf8))))
        let generation = try #require(stored.object?.generation.flatMap { Int64($0) })
        var staleSpec = JobSpec(kind: .delete, destination: object)
        staleSpec.ifGeneration = generation - 1
        let stale = try failure(await run(setup.backend, staleSpec, resume: .sentDelete))
        #expect(stale.code == .invalidArgument && stale.message.contains("precondition failed"), "\(stale)")
        #expect(await setup.exists("replaced.txt"), "another generation is not deleted")
    }

    @Test("HTTP and GCS: a DELETE paused after it went out (its answer held back) stops with sentDelete, and the resumed run succeeds on the missing object",
          arguments: [false, true])
    func deletePausedAfterSending(overGCS: Bool) async throws {
        let rule = FaultRule(RequestMatch(method: "DELETE", pathContains: "held.txt"), .stallInResponse(afterBytes: 0, seconds: 20), times: 1)
        let setup = try await ProxiedObject(overGCS: overGCS, name: "held.txt", rule: rule)
        defer { setup.stop() }
        let (backend, object) = (setup.backend, setup.reference)
        let spec = JobSpec(kind: .delete, destination: object)
        let control = TransferControl()
        // Pause once the server has carried the DELETE out (its answer is held back by the proxy).
        let pauser = Task {
            for _ in 0..<400 {
                if await !setup.exists() { control.stop(.pause); return true }
                try? await Task.sleep(for: .milliseconds(25))
            }
            return false
        }
        let outcome = await run(backend, spec, control: control)
        #expect(await pauser.value, "the server never carried the DELETE out")
        guard case .success(.stopped(let reason, let point)) = outcome else {
            Issue.record("expected a stop, got \(outcome)")
            return
        }
        #expect(reason == .pause && point == .sentDelete, "\(reason) \(String(describing: point))")
        let resumed = try finished(await run(backend, spec, resume: point))
        #expect(resumed.deleted == object)
    }
}

/// One object behind the fault proxy, on nginx (plain HTTP) or the GCS emulator, for the tests that run
/// the same scenario on both.
// @unchecked: every property is set once in init; the servers and the proxy are safe to share.
private final class ProxiedObject: @unchecked Sendable {
    private let nginx: NginxServer?
    private let emulator: UploadFaultTests.ProxiedEmulator?
    let proxy: FaultProxy
    let backend: any StorageBackend
    /// The object's reference (`gs://…` or the proxy's URL).
    let reference: String
    private let name: String

    /// Starts the server and the proxy with `rule`, and stores `name` there.
    init(overGCS: Bool, name: String, rule: FaultRule) async throws {
        self.name = name
        if overGCS {
            let setup = try UploadFaultTests.ProxiedEmulator([rule])
            emulator = setup
            nginx = nil
            proxy = setup.proxy
            backend = setup.backend
            reference = "gs://\(setup.server.bucket)/\(name)"
            _ = try finished(await run(setup.direct, JobSpec(kind: .uploadData, destination: reference, data: Data(name.utf8))))
        } else {
            let server = try NginxServer.start()
            nginx = server
            emulator = nil
            do {
                proxy = try FaultProxy(upstreamPort: server.port, rules: [rule])
            } catch {
                server.stop()
                throw error
            }
            backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
            reference = "\(proxy.baseURL)/\(name)"
            try Data(name.utf8).write(to: URL(fileURLWithPath: server.root + "/" + name))
        }
    }

    /// Whether the server still holds the object (read directly, not through the proxy).
    func exists() async -> Bool {
        if let emulator { return await emulator.exists(name) }
        return FileManager.default.fileExists(atPath: nginx!.root + "/" + name)
    }

    func stop() {
        if let emulator {
            emulator.stop()
        } else {
            proxy.stop()
            nginx?.stop()
        }
    }
}
