import Foundation
import JobModel
import StorePort
import Synchronization
import Testing
import TestSupport

/// With `appendCommitSpacingUs`, appends that come soon after a group commit wait (up to the spacing)
/// for more, so that they share one commit; a claim or a call ends the wait at once, the wait ends by
/// itself after the spacing, and an append after a quiet spell is written at once.
///
/// The tests do not rely on their own tasks running promptly: "soon" is within an hour, or ordered by a
/// flush held shut. Each append a test makes from a task must reach the executor before the test's next
/// step, and within a minute: a test stops there otherwise (once, when blocking tests held the test
/// process's cooperative pool, an append came after the call meant to end its wait and waited out the
/// hour — see `OnTestThreads`).
@Suite("Group commits spaced while appends keep coming", .onTestThreads)
struct CommitSpacingTests {
    /// The job ids of each batch the executor's flush was handed, in order; the flush of a batch holding
    /// `holdingShut` waits until `open()`.
    private final class Flushed: Sendable {
        private let batches = Mutex<[[String]]>([])
        private let gate = DispatchSemaphore(value: 0)
        let holdingShut: String?

        init(holdingShut: String? = nil) { self.holdingShut = holdingShut }

        func record(_ events: [PendingEvent]) {
            let ids = events.map(\.jobID)
            batches.withLock { $0.append(ids) }
            if let holdingShut, ids.contains(holdingShut) { gate.wait() }
        }

        func open() { gate.signal() }
        var all: [[String]] { batches.withLock { $0 } }
        var count: Int { batches.withLock { $0.count } }
    }

    private func executor(spacingUs: Int64, _ flushed: Flushed) throws -> StoreExecutor {
        try StoreExecutor(name: "spacing-test", appendCommitSpacingUs: spacingUs) { events, _ in
            flushed.record(events)
            return writtenAsIs(events)
        }
    }

    private static let anHourUs: Int64 = 3_600_000_000

    /// Appends "a" (written at once: nothing was committed before), then `next` from a task, and waits
    /// until the executor has taken it off its queue and is waiting for more, `next` not yet written.
    private func lingering(on next: String, after executor: StoreExecutor,
                           _ flushed: Flushed) async throws -> Task<Result<JobEvent, StoreError>, Never> {
        if flushed.count == 0 {
            _ = try await executor.append(progressReport("a")).get()
            #expect(flushed.all == [["a"]])
        }
        let before = flushed.count
        let task = Task { await executor.append(progressReport(next)) }
        await pollUntil { executor.queuedCount == 0 && executor.isLingering }
        // Stop here rather than go on: a call made before `next` reaches the executor would leave `next`
        // waiting out the hour-long spacing, and the test with it.
        try #require(executor.isLingering, "\(next) did not reach the executor within a minute")
        #expect(flushed.count == before, "\(next) was written without waiting: \(flushed.all)")
        return task
    }

    @Test("an append soon after a commit waits, and the appends that come meanwhile share its commit")
    func appendsShareASpacedCommit() async throws {
        let flushed = Flushed()
        let executor = try executor(spacingUs: Self.anHourUs, flushed)
        defer { executor.stop() }
        let b = try await lingering(on: "b", after: executor, flushed)
        let c = Task { await executor.append(progressReport("c")) }
        await pollUntil { executor.queuedCount == 1 }
        #expect(executor.isLingering, "c did not end the wait")
        // A call ends the wait; it sees the appends queued before it written, in one commit.
        let seen = try await executor.run { flushed.all }
        #expect(seen == [["a"], ["b", "c"]])
        #expect(try await b.value.get().jobID == "b")
        #expect(try await c.value.get().jobID == "c")
        let stats = executor.groupCommitStats
        #expect(stats.commits == 2)
        #expect(stats.spacedCommits == 1 && stats.eventsGatheredWhileSpacing == 1, "\(stats)")
    }

    /// The monotonic clock counts from the machine's boot: taking "no commit yet" for a commit at 0, the
    /// first append on a machine up for less than the spacing waited the spacing out (a test process on
    /// a fresh CI machine sat in the hour-long spacing of the tests here until it was killed).
    @Test("the first append is written at once, however long the spacing")
    func firstAppendDoesNotWait() async throws {
        let flushed = Flushed()
        let executor = try executor(spacingUs: Self.aCenturyUs, flushed)
        defer { executor.stop() }
        let first = Task { await executor.append(progressReport("a")) }
        await pollUntil { flushed.count == 1 }
        try #require(flushed.all == [["a"]], "the first append waited for the spacing after the machine's boot")
        #expect(try await first.value.get().jobID == "a")
        #expect(executor.groupCommitStats.spacedCommits == 0)
    }

    private static let aCenturyUs: Int64 = 100 * 365 * 86_400 * 1_000_000

    @Test("a call or a claim ends the wait at once; the appends before it are written first",
          .timeLimit(.minutes(10)))
    func callsAndClaimsDoNotWait() async throws {
        let flushed = Flushed()
        // Were the wait not ended, each step below would take an hour (the time limit stops it sooner).
        let executor = try executor(spacingUs: Self.anHourUs, flushed)
        defer { executor.stop() }
        var waiting = try await lingering(on: "b", after: executor, flushed)
        let seen = try await executor.run { flushed.all }
        #expect(seen == [["a"], ["b"]], "the call sees the append queued before it")
        #expect(try await waiting.value.get().jobID == "b")

        // And again with a claim, which the waiting append's commit takes along.
        waiting = try await lingering(on: "d", after: executor, flushed)
        let claimed = await executor.claim(ClaimRequest(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: 0))
        #expect((try? claimed.get())?.isEmpty == true)
        #expect(try await waiting.value.get().jobID == "d")
        #expect(flushed.all == [["a"], ["b"], ["d"]])
        #expect(executor.groupCommitStats.spacedCommits == 2)
    }

    @Test("the wait ends by itself after the spacing", .timeLimit(.minutes(10)))
    func waitEndsAfterTheSpacing() async throws {
        // "b" is queued while "a"'s commit is held shut, so it comes right after that commit, however
        // late this test's tasks run.
        let flushed = Flushed(holdingShut: "a")
        let executor = try executor(spacingUs: 1_000_000, flushed)
        defer { executor.stop() }
        let a = Task { await executor.append(progressReport("a")) }
        await pollUntil { flushed.count == 1 }
        let b = Task { await executor.append(progressReport("b")) }
        await pollUntil { executor.queuedCount == 1 }
        let clock = ContinuousClock()
        let opened = clock.now
        flushed.open()
        #expect(try await a.value.get().jobID == "a")
        #expect(try await b.value.get().jobID == "b")
        let took = clock.now - opened
        #expect(took >= .milliseconds(900), "b was written \(took) after a: it did not wait")
        #expect(flushed.all == [["a"], ["b"]])
        #expect(executor.groupCommitStats.spacedCommits == 1)
    }

    @Test("an append after a quiet spell is written at once")
    func quietAppendsDoNotWait() async throws {
        let flushed = Flushed()
        let executor = try executor(spacingUs: 2_000_000, flushed)
        defer { executor.stop() }
        _ = try await executor.append(progressReport("a")).get()
        try await Task.sleep(for: .milliseconds(2_500))
        _ = try await executor.append(progressReport("b")).get()
        #expect(flushed.all == [["a"], ["b"]])
        #expect(executor.groupCommitStats.spacedCommits == 0, "b waited for the spacing after a quiet spell")
    }
}
