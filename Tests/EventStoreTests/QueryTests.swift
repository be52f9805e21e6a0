import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

@Suite("Queries and errors", .onTestThreads)
struct QueryTests {
    @Test("jobs(filter:) filters by state, kind, queue and time windows, newest first", arguments: Engine.allCases)
    func listing(engine: Engine) throws {
        let fixture = try StoreFixture("store-query", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let old = try fixture.submit(uploadSpec(), now: 1_000)
        let memory = try fixture.submit(memorySpec(), now: 2_000)
        let other = try fixture.submit(uploadSpec(queue: "other"), now: 3_000)
        try fixture.submit(uploadSpec(queue: "fast"), now: 4_000)
        let done = try #require(try store.claim(owner: workerName, queues: ["fast"], limit: 1, leaseMs: 100, now: 4_000).first)
        try fixture.append(PendingEvent(jobID: done.record.id, type: .succeeded, actor: workerName, leaseToken: done.token,
                                        data: EventData(result: JobResult())),
                           now: 4_500)

        #expect(try store.jobs().map(\.id) == [done.record.id, other, memory, old])
        #expect(try store.jobs(filter: JobFilter(limit: 2)).map(\.id) == [done.record.id, other])
        #expect(try store.jobs(filter: JobFilter(states: [.succeeded])).map(\.id) == [done.record.id])
        #expect(try store.jobs(filter: JobFilter(states: [])).isEmpty)
        #expect(try store.jobs(filter: JobFilter(kinds: [.downloadMemory])).map(\.id) == [memory])
        #expect(try store.jobs(filter: JobFilter(queue: "other")).map(\.id) == [other])
        #expect(try store.jobs(filter: JobFilter(states: [.queued], kinds: [.uploadFile])).map(\.id) == [other, old])
        #expect(try store.jobs(filter: JobFilter(createdSince: 2_000, createdUntil: 4_000)).map(\.id) == [other, memory])
        #expect(try store.jobs(filter: JobFilter(finishedSince: 4_500)).map(\.id) == [done.record.id])
        #expect(try store.jobs(filter: JobFilter(finishedUntil: 4_500)).isEmpty)
        #expect(try store.counts() == [.queued: 3, .succeeded: 1])
        #expect(try store.job("01NOSUCHJOB000000000000000") == nil)
    }

    @Test("events(afterSeq:limit:) pages through the log in order", arguments: Engine.allCases)
    func tailing(engine: Engine) throws {
        let fixture = try StoreFixture("store-tail", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        _ = try store.submit((0..<5).map { _ in uploadSpec() }, actor: "cli:test", now: 1)
        #expect(try store.lastSeq() == 5)
        let first = try store.events(afterSeq: 0, limit: 2)
        #expect(first.map(\.seq) == [1, 2])
        let rest = try store.events(afterSeq: first.last?.seq ?? 0)
        #expect(rest.map(\.seq) == [3, 4, 5])
        #expect(try store.events(afterSeq: 5).isEmpty)
    }

    @Test("a writer waiting past the busy timeout gets .busy, and nothing is written")
    func busy() throws {
        let fixture = try StoreFixture("store-busy")
        defer { fixture.remove() }
        let impatient = try EventStore(path: fixture.path, busyTimeoutMs: 50)
        try fixture.sql("BEGIN IMMEDIATE")
        #expect {
            _ = try impatient.submit([uploadSpec()], actor: "cli:test", now: 1)
        } throws: { error in
            guard case StoreError.busy = error else { return false }
            return "\(error)".contains("busy timeout")
        }
        try fixture.sql("ROLLBACK")
        #expect(try impatient.jobs().isEmpty)
        #expect(try impatient.submit([uploadSpec()], actor: "cli:test", now: 2).count == 1)
    }

    @Test("a file that is not a database is refused as damaged, a missing directory as an I/O error")
    func notADatabase() throws {
        let directory = try TemporaryDirectory("store-garbage")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: path))
        #expect {
            _ = try EventStore(path: path)
        } throws: { error in
            guard case StoreError.damaged(let message) = error else { return false }
            return message.contains("file is not a database")
        }
        #expect {
            _ = try EventStore(path: directory.file("missing/dir/jobs.db"))
        } throws: { error in
            guard case StoreError.io = error else { return false }
            return true
        }
    }
}
