import Foundation
import JobModel
import Storage
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// An upload survives the uploading process being killed: a child copy of the test runner uploads and
/// appends every checkpoint to a log (as the worker appends `progress` events), is SIGKILLed mid-upload,
/// and this process finishes the upload from the last logged resume point alone.
@Suite("Upload resume after a crash", .onTestThreads)
struct CrashResumeTests {
    private enum Key {
        static let child = "JOBCTL_CRASH_CHILD"
        static let endpoint = "JOBCTL_CRASH_ENDPOINT"
        static let source = "JOBCTL_CRASH_SOURCE"
        static let destination = "JOBCTL_CRASH_DESTINATION"
        static let log = "JOBCTL_CRASH_LOG"
    }

    static let stallAfter: Int64 = 524_288

    @Test("SIGKILL mid-upload, then resume from the logged session URI and offset")
    func uploadSurvivesProcessCrash() async throws {
        let environment = ProcessInfo.processInfo.environment
        if environment[Key.child] == "1" {
            try await childUpload(environment)
            return
        }
        let runner = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        try #require(runner.hasSuffix(".xctest"), "this test re-runs the test bundle as the crashing process; run it with swift test")

        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.file("crash.bin")
        let payload = patternData(1_400_000, seed: 1234)
        try payload.write(to: URL(fileURLWithPath: source))
        let log = directory.file("checkpoints.jsonl")
        let destination = "gs://\(server.bucket)/crash/crash.bin"

        let child = Process()
        child.executableURL = URL(fileURLWithPath: runner)
        child.arguments = ["--testing-library", "swift-testing", "--filter", "uploadSurvivesProcessCrash"]
        var childEnvironment = environment
        childEnvironment[Key.child] = "1"
        childEnvironment[Key.endpoint] = server.baseURL
        childEnvironment[Key.source] = source
        childEnvironment[Key.destination] = destination
        childEnvironment[Key.log] = log
        child.environment = childEnvironment
        // The child's own output is kept, so a child that never logs a checkpoint says why.
        let childOutput = directory.file("child-output.txt")
        _ = FileManager.default.createFile(atPath: childOutput, contents: nil)
        let childOutputHandle = try #require(FileHandle(forWritingAtPath: childOutput))
        child.standardOutput = childOutputHandle
        child.standardError = childOutputHandle
        try child.run()

        // Wait for a logged checkpoint past the stall point, then kill the child without warning.
        // Generous: the child is a second copy of the whole test bundle, started on a busy machine.
        let deadline = Date().addingTimeInterval(120)
        var points: [ResumePoint] = []
        while Date() < deadline {
            points = Self.readLog(log)
            if points.contains(where: { $0.bytesDone >= Self.stallAfter }) { break }
            if !child.isRunning { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        // A test starved past its deadline still reads what the child logged meanwhile.
        points = Self.readLog(log)
        child.signalTree(SIGKILL)
        child.waitForExit()
        #expect(child.terminationReason == .uncaughtSignal, "the child must have been killed, not finished")
        let last = try #require(points.last, "the child logged no checkpoint; its output: \((try? String(contentsOfFile: childOutput, encoding: .utf8)) ?? "")")
        guard case .upload(_, let confirmed, _, _) = last else {
            Issue.record("expected an upload resume point, got \(last)")
            return
        }
        #expect(confirmed >= Self.stallAfter && confirmed < Int64(payload.count))

        // A fresh process (here: a fresh backend in this one) knows only the logged resume point.
        let recorder = EventRecorder()
        let result = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                            JobSpec(kind: .uploadFile, source: source, destination: destination),
                                            resume: last, recorder: recorder))
        #expect(result.object?.md5Hash == hashes(payload).md5)
        #expect(result.object?.crc32c == hashes(payload).crc32c)
        #expect(recorder.checkpoints.first?.bytesDone == confirmed, "resumed at the server's offset, not from zero")
        let readBack = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                              JobSpec(kind: .downloadMemory, source: destination, maxSize: 1 << 22)))
        #expect(readBack.data == payload)
    }

    /// The crashing side: uploads, logs each checkpoint as a JSON line, and stalls (as on a dead
    /// network) once past `stallAfter`, waiting to be killed.
    private func childUpload(_ environment: [String: String]) async throws {
        guard let endpoint = environment[Key.endpoint], let source = environment[Key.source],
              let destination = environment[Key.destination], let log = environment[Key.log] else {
            Issue.record("child started without its parameters")
            return
        }
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try #require(FileHandle(forWritingAtPath: log))
        let configuration = StorageConfiguration(gcsEndpoint: endpoint, usesEmulator: true, firebaseEndpoint: endpoint,
                                                 chunkSize: 256 * 1024)
        let report: @Sendable (TransferEvent) -> Void = { event in
            guard case .checkpoint(let point, _) = event, let line = try? JSONEncoder().encode(point) else { return }
            handle.write(line + Data("\n".utf8))
            if point.bytesDone >= Self.stallAfter { sleep(600) }
        }
        _ = try await GCSBackend(configuration: configuration)
            .perform(JobSpec(kind: .uploadFile, source: source, destination: destination),
                     resumingFrom: nil, control: TransferControl(), report: report)
        Issue.record("the child finished the upload; it should have been killed first")
    }

    private static func readLog(_ path: String) -> [ResumePoint] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        // Only complete lines count: the child may be killed mid-write.
        return text.split(separator: "\n", omittingEmptySubsequences: true).compactMap {
            try? JSONDecoder().decode(ResumePoint.self, from: Data($0.utf8))
        }
    }
}
