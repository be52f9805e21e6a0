import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// A worker's small `gs://` uploads go in one request by default: no session, so no resume point in the
/// job's history. With `JOBCTL_RESUMABLE_THRESHOLD=0` the same upload takes a session, whose URI the log
/// keeps before the bytes go (a checkpoint a later attempt resumes from).
@Suite("gs:// uploads in one request", .onTestThreads) struct SingleRequestUploadTests {
    @Test func resumableThresholdChoosesOneRequestOrASession() throws {
        let emulator = try EmulatorServer.start()
        defer { emulator.stop() }
        let directory = try TemporaryDirectory("one-request")
        defer { directory.remove() }
        for (threshold, name) in [(nil, "default"), ("0", "sessions"), ("off", "off")] as [(String?, String)] {
            let database = directory.file("\(name).db")
            let id = try #require(try submit("""
            - {kind: upload-data, data: "hello \(name)", destination: "gs://\(emulator.bucket)/\(name).txt"}
            """, database: database, directory: directory).first)
            var environment = ["STORAGE_EMULATOR_HOST": emulator.baseURL]
            if let threshold { environment["JOBCTL_RESUMABLE_THRESHOLD"] = threshold }
            let worker = try JobctlProcess.worker(database: database, ["--drain"], environment: environment, logDirectory: directory.path)
            #expect(worker.wait(seconds: 60) == 0, "\(name): \(worker.log)")
            let store = try EventStore(path: database, readOnly: true)
            #expect(try store.job(id)?.state == .succeeded, "\(name): \(worker.log)")
            let sessions = try store.events(jobID: id).compactMap(\.data.resumePoint).filter { point in
                if case .upload = point { true } else { false }
            }
            if threshold == nil {
                #expect(sessions.isEmpty, "\(name): \(sessions)")
            } else {
                #expect(!sessions.isEmpty, "\(name): no session URI in the history")
            }
        }
        // A bad value stops the worker before it starts, naming the variable.
        let bad = try JobctlProcess.worker(database: directory.file("default.db"), ["--drain"],
                                           environment: ["STORAGE_EMULATOR_HOST": emulator.baseURL, "JOBCTL_RESUMABLE_THRESHOLD": "2GiB"],
                                           logDirectory: directory.path)
        #expect(bad.wait(seconds: 30) != 0)
        #expect(bad.log.contains("JOBCTL_RESUMABLE_THRESHOLD must be between 0 and 1 GiB"), "\(bad.log)")
    }
}
