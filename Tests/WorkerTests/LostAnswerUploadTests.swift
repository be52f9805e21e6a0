import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// A worker's `if_exists: fail` upload over plain HTTP whose PUT the server stored but whose answer never
/// came: the attempt records that every byte went out (`sentUpload`), and the retry, finding the file
/// with exactly the source's bytes, succeeds with it instead of failing on its own upload.
@Suite("an upload's lost answer", .onTestThreads) struct LostAnswerUploadTests {
    @Test func failRuleUploadWhoseAnswerWasLostSucceedsOnRetry() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [
            // The first attempt's PUT and libcurl's resend of it: nginx stores the file, the worker hears nothing.
            FaultRule(RequestMatch(method: "PUT", pathContains: "/lost.txt"), .resetBeforeResponse, times: 2),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("lost-answer")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try #require(try submit("""
        - {kind: upload-data, data: "written once", destination: "\(proxy.baseURL)/lost.txt", if_exists: fail}
        """, database: database, directory: directory).first)
        let worker = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(worker.wait(seconds: 60) == 0, "\(worker.log)")
        let store = try EventStore(path: database, readOnly: true)
        let job = try #require(try store.job(id))
        #expect(job.state == .succeeded, "\(String(describing: job.error)) \(worker.log)")
        let events = try store.events(jobID: id)
        let types = events.map(\.type)
        #expect(types.contains(.attemptFailed), "\(types)")
        #expect(events.contains { $0.data.resumePoint == .sentUpload(total: 12) }, "\(types)")
        #expect(proxy.firedCounts == [2])
        // The retry sent nothing: it looked, read the file back and compared.
        let methods = proxy.exchanges.filter { $0.request.target == "/lost.txt" }.map(\.request.method)
        #expect(methods.filter { $0 == "PUT" }.count == 2, "\(methods)")
        #expect(methods.suffix(2) == ["HEAD", "GET"], "\(methods)")
        #expect(try String(contentsOfFile: nginx.root + "/lost.txt", encoding: .utf8) == "written once")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
