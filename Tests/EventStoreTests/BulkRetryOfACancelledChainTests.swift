import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// `retry --state cancelled` after a chain's first job failed: each link is refused, with the failed
/// job as the remedy. Each refusal walked the chain of cancels up to that job, reading and decoding an
/// event per link: 2,000 links took over two minutes. The walk's roots are now kept for the command.
@Suite(.onTestThreads) struct BulkRetryOfACancelledChainTests {
    /// A chain of `length` jobs whose head failed (the rest cancelled by the cascade); returns the ids.
    private func failedChain(_ fixture: StoreFixture, length: Int) throws -> [String] {
        let specs = (0..<length).map { i in
            var spec = uploadSpec(key: "k\(i)")
            spec.after = i == 0 ? nil : ["k\(i - 1)"]
            return spec
        }
        let ids = try fixture.store.submit(specs, actor: "cli:test", now: 1_000).map(\.id)
        let head = try #require(try fixture.store.claim(owner: workerName, queues: nil, limit: 10, leaseMs: 30_000, now: 2_000).first)
        #expect(head.record.id == ids[0])
        try fixture.append(PendingEvent(jobID: head.record.id, type: .failed, actor: workerName, leaseToken: head.token,
                                        data: EventData(error: StorageError(.objectNotFound, "gone", httpStatus: 404))), now: 3_000)
        #expect(try fixture.store.job(ids[length - 1])?.state == .cancelled)
        return ids
    }

    /// Every link is refused and names the failed head as the remedy, the last as the first.
    private func expectRefusedWithTheHead(_ answers: [Result<ControlAnswer, StoreError>], ids: [String]) {
        let remedy = "`jobctl retry \(ids[0]) --with-dependants` opens it again with \(ids[0])"
        let refusals = answers.compactMap { answer -> String? in
            if case .failure(let error) = answer { return "\(error)" }
            return nil
        }
        #expect(refusals.count == ids.count - 1)
        #expect(refusals.allSatisfy { $0.hasSuffix(remedy) }, "\(refusals.first ?? "")")
    }

    @Test(arguments: Engine.allCases)
    func everyLinkOfACancelledChainIsRefusedWithItsRoot(engine: Engine) throws {
        let fixture = try StoreFixture("bulk-retry-chain", engine: engine)
        defer { fixture.remove() }
        let ids = try failedChain(fixture, length: 300)
        let answers = try fixture.store.controlEach(.retry, ids: Array(ids.dropFirst()), actor: "cli:test", now: 4_000, ifStateIn: nil)
        expectRefusedWithTheHead(answers, ids: ids)
        #expect(try ids.dropFirst().allSatisfy { try fixture.store.job($0)?.state == .cancelled })
    }

    /// Counted, not timed: the events the bulk retry read (one statement) grow with the chain, not with
    /// its square — about three a link, where one walk per link read ~N²/2 (45,000 for 300 links).
    @Test
    func aBulkRetryOfACancelledChainReadsEachCancelOnce() throws {
        let fixture = try StoreFixture("bulk-retry-count")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let length = 300
        let ids = try failedChain(fixture, length: length)
        let payloadSQL = "SELECT \(JobEvent.selectColumns) FROM events WHERE job_id = ? AND version = ?"
        let before = try store.writeTransaction { (connection) throws(StoreError) -> Int in connection.timesRun(payloadSQL) ?? 0 }
        let answers = try store.controlEach(.retry, ids: Array(ids.dropFirst()), actor: "cli:test", now: 4_000, ifStateIn: nil)
        let after = try store.writeTransaction { (connection) throws(StoreError) -> Int? in connection.timesRun(payloadSQL) }
        expectRefusedWithTheHead(answers, ids: ids)
        let read = try #require(after, "the bulk retry read no event through the statement counted") - before
        #expect(read >= length - 1 && read < 10 * length, "\(read) events read for \(length - 1) links")
    }
}
