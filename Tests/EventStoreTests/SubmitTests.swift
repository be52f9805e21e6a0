import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

@Suite("Submitting jobs")
struct SubmitTests {
    @Test("a submit appends one submitted event and one queued row per job")
    func submit() throws {
        let fixture = try StoreFixture("store-submit")
        defer { fixture.remove() }
        let outcomes = try fixture.store.submit([uploadSpec(), memorySpec()], actor: "cli:alice", now: 42)
        #expect(outcomes.map(\.created) == [true, true])
        #expect(outcomes.map(\.kind) == [.uploadFile, .downloadMemory])
        #expect(outcomes.allSatisfy { JobID.isValid($0.id) })
        for outcome in outcomes {
            let events = try fixture.store.events(jobID: outcome.id)
            #expect(events.count == 1)
            #expect(events.first?.type == .submitted && events.first?.actor == "cli:alice" && events.first?.atMs == 42)
            let record = try #require(try fixture.store.job(outcome.id))
            #expect(record.state == .queued && record.runAfterMs == 42 && record.version == 1)
        }
        #expect(try fixture.store.counts() == [.queued: 2])
        #expect(try fixture.store.lastSeq() == 2)
    }

    @Test("the same key twice makes one job, within a batch and across submits")
    func idempotentKeys() throws {
        let fixture = try StoreFixture("store-keys")
        defer { fixture.remove() }
        let store = fixture.store
        let first = try store.submit([uploadSpec(key: "nightly-1"), uploadSpec(key: "nightly-1"), uploadSpec()],
                                     actor: "cli:test", now: 1)
        #expect(first.map(\.created) == [true, false, true])
        #expect(first[0].id == first[1].id && first[1].key == "nightly-1")
        let second = try store.submit([uploadSpec(key: "nightly-1"), uploadSpec(key: "nightly-2")], actor: "cli:test", now: 2)
        #expect(second.map(\.created) == [false, true])
        #expect(second[0].id == first[0].id)
        #expect(try store.jobs().count == 3)
        #expect(try store.events(jobID: first[0].id).count == 1)
    }

    @Test("connections submitting concurrently to one file lose and duplicate nothing")
    func concurrentSubmitters() throws {
        let fixture = try StoreFixture("store-concurrent")
        defer { fixture.remove() }
        let path = fixture.path
        let threads = 6, rounds = 12, perBatch = 4
        let outcomes = LockedList<SubmitOutcome>()
        let failures = onThreads(threads) { thread in
            let store = try EventStore(path: path)
            for round in 0..<rounds {
                var specs = (0..<perBatch).map { uploadSpec(key: "t\(thread)-r\(round)-\($0)") }
                specs.append(uploadSpec(key: "shared-r\(round)"))
                let batch = try store.submit(specs, actor: "cli:t\(thread)", now: Int64(round))
                outcomes.append(contentsOf: batch)
                // Every thread pauses and resumes its own job and the shared one: versions above 1,
                // written by read-then-append transactions racing on the same job.
                for id in [batch[0].id, batch[perBatch].id] {
                    _ = try store.requestPause(id: id, actor: "cli:t\(thread)", now: Int64(round))
                    _ = try store.requestResume(id: id, actor: "cli:t\(thread)", now: Int64(round))
                }
            }
        }
        #expect(failures == [])

        let store = fixture.store
        let jobs = try store.jobs()
        let keys = jobs.compactMap(\.key)
        #expect(jobs.count == threads * rounds * perBatch + rounds)
        #expect(Set(keys).count == keys.count)
        #expect(keys.count == jobs.count)
        // Every outcome names a stored job; each shared key maps to one id for every thread.
        let ids = Set(jobs.map(\.id))
        var byKey: [String: Set<String>] = [:]
        for outcome in outcomes.items {
            #expect(ids.contains(outcome.id))
            byKey[outcome.key ?? "", default: []].insert(outcome.id)
        }
        #expect(byKey.values.allSatisfy { $0.count == 1 })
        #expect(outcomes.items.filter(\.created).count == jobs.count)
        // Versions are contiguous per job; seqs are unique; exactly one submitted per job.
        var seqs: Set<Int64> = []
        for job in jobs {
            let events = try store.events(jobID: job.id)
            #expect(events.map(\.version) == Array(1...events.count))
            #expect(events.filter { $0.type == .submitted }.count == 1)
            #expect(job.version == events.count)
            for event in events { seqs.insert(event.seq ?? -1) }
        }
        #expect(Int64(seqs.count) == (try store.lastSeq()))
        #expect(try store.replay(verify: true).isConsistent)
    }
}
