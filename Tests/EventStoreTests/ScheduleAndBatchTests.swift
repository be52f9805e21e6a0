import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
import TestSupport

/// Scheduled jobs are not claimed before their time, and the `batch` column selects a batch, on both
/// engines; both are folded from the `submitted` event, so replay rebuilds them.
@Suite(.onTestThreads) struct ScheduleAndBatchTests {
    @Test(arguments: Engine.allCases)
    func aScheduledJobIsNotClaimedBeforeItsTime(engine: Engine) throws {
        let fixture = try StoreFixture("schedule", engine: engine)
        defer { fixture.remove() }
        var later = uploadSpec()
        later.runAfterMs = 50_000
        var past = uploadSpec(priority: -1)
        past.runAfterMs = 10
        let laterID = try fixture.submit(later, now: 1_000)
        let pastID = try fixture.submit(past, now: 1_000)
        #expect(try fixture.store.job(laterID)?.runAfterMs == 50_000)
        // A time in the past runs at once, at the submit's time (so it does not jump the queue).
        #expect(try fixture.store.job(pastID)?.runAfterMs == 1_000)
        #expect(try fixture.store.nextRunAfter(queues: nil) == 1_000)
        let early = try fixture.store.claim(owner: "w", queues: nil, limit: 10, leaseMs: 30_000, now: 49_999)
        #expect(early.map(\.record.id) == [pastID])
        let due = try fixture.store.claim(owner: "w", queues: nil, limit: 10, leaseMs: 30_000, now: 50_000)
        #expect(due.map(\.record.id) == [laterID])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// A scheduled job paused before its time and resumed keeps its schedule.
    @Test(arguments: Engine.allCases)
    func resumingAScheduledJobKeepsTheSchedule(engine: Engine) throws {
        let fixture = try StoreFixture("schedule-pause", engine: engine)
        defer { fixture.remove() }
        var spec = uploadSpec()
        spec.runAfterMs = 90_000
        let id = try fixture.submit(spec, now: 1_000)
        _ = try fixture.store.control(.pause, id: id, actor: "cli:test", now: 2_000)
        _ = try fixture.store.control(.resume, id: id, actor: "cli:test", now: 3_000)
        #expect(try fixture.store.job(id)?.runAfterMs == 90_000)
        #expect(try fixture.store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 30_000, now: 89_000).isEmpty)
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    @Test(arguments: Engine.allCases)
    func theBatchColumnSelectsABatch(engine: Engine) throws {
        let fixture = try StoreFixture("batch", engine: engine)
        defer { fixture.remove() }
        let batch = JobID.generate(atMs: 1_000)
        let specs = (0..<3).map { index -> JobSpec in
            var spec = uploadSpec()
            spec.batch = JobBatch(id: batch, source: "/data/photos/", exclude: ["*.tmp"], path: "p\(index).jpg")
            return spec
        }
        let ids = try fixture.store.submit(specs + [uploadSpec()], actor: "cli:test", now: 1_000).map(\.id)
        let selected = try fixture.store.jobs(filter: JobFilter(batch: batch))
        #expect(Set(selected.map(\.id)) == Set(ids.prefix(3)))
        #expect(selected.allSatisfy { $0.batch == batch })
        #expect(try fixture.store.countJobs(filter: JobFilter(states: [.queued], batch: batch)) == 3)
        #expect(try fixture.store.jobs(filter: JobFilter(batch: JobID.generate())).isEmpty)
        // Counted by state with their bytes in one query (watch --batch): one job running with bytes done,
        // one cancelled, one queued; the job outside the batch not counted.
        let claimed = try #require(try fixture.store.claim(owner: "worker:w", queues: nil, limit: 1, leaseMs: 30_000, now: 1_100).first)
        try #require(ids.prefix(3).contains(claimed.record.id))
        try fixture.append(PendingEvent(jobID: claimed.record.id, type: .started, actor: "worker:w", leaseToken: claimed.token,
                                        data: EventData(bytesDone: 0)), now: 1_200)
        try fixture.append(PendingEvent(jobID: claimed.record.id, type: .progress, actor: "worker:w", leaseToken: claimed.token,
                                        data: EventData(bytesDone: 4_096, bytesTotal: 10_000)), now: 1_300)
        let other = try #require(ids.prefix(3).first { $0 != claimed.record.id })
        _ = try fixture.store.requestCancel(id: other, actor: "cli:test", now: 1_400)
        let tally = try fixture.store.tally(filter: JobFilter(batch: batch))
        #expect(tally == [.running: JobTally(count: 1, bytesDone: 4_096), .cancelled: JobTally(count: 1, bytesDone: 0),
                          .queued: JobTally(count: 1, bytesDone: 0)], "\(tally)")
        #expect(try fixture.store.tally(filter: JobFilter(batch: JobID.generate())).isEmpty)
        #expect(try fixture.store.tally(filter: JobFilter(states: [])).isEmpty)
        // The batch is recorded in the submitted event, whence replay rebuilds the column.
        let submitted = try #require(try fixture.store.events(jobID: ids[0]).first)
        #expect(submitted.payload.spec?.batch?.source == "/data/photos/")
        #expect(try fixture.store.replay(verify: true).isConsistent)
        // A batch column that disagrees with the log is found by replay.
        try fixture.sql("UPDATE jobs SET batch = NULL WHERE id = '\(ids[1])'")
        #expect(try fixture.store.replay(verify: true).differences.map(\.column) == ["batch"])
    }
}
