import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

@Suite("Submitting jobs", .onTestThreads)
struct SubmitTests {
    @Test("a submit appends one submitted event and one queued row per job", arguments: Engine.allCases)
    func submit(engine: Engine) throws {
        let fixture = try StoreFixture("store-submit", engine: engine)
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

    @Test("a batch's job ids sort in the order of its specs, after every id submitted before it", arguments: Engine.allCases)
    func batchIDsInSpecOrder(engine: Engine) throws {
        let fixture = try StoreFixture("store-submit-order", engine: engine)
        defer { fixture.remove() }
        let first = try fixture.store.submit((0..<300).map { _ in memorySpec() }, actor: "cli:test", now: 42).map(\.id)
        // A second batch with the same time (a clock that did not move, or moved back).
        let second = try fixture.store.submit((0..<300).map { _ in memorySpec() }, actor: "cli:test", now: 41).map(\.id)
        let ids = first + second
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        // The log's order (seq) is the id order.
        #expect(try fixture.store.jobs().sorted { $0.seq < $1.seq }.map(\.id) == ids)
    }

    @Test("the same key with a different spec is refused, naming the key and the job; nothing is stored", arguments: Engine.allCases)
    func reusedKeyWithAnotherSpec(engine: Engine) throws {
        let fixture = try StoreFixture("store-key-conflict", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let original = try store.submit([uploadSpec(key: "nightly-1")], actor: "cli:test", now: 1)[0]
        let before = try store.lastSeq()
        var changed = uploadSpec(key: "nightly-1")
        changed.destination = "gs://bucket/other.bin"
        let expected = StoreError.keyConflict(key: "nightly-1", existingID: original.id)
        // Across submits, even with a valid new job before it in the same batch: the batch stores nothing.
        #expect(throws: expected) { _ = try store.submit([uploadSpec(key: "fresh"), changed], actor: "cli:test", now: 2) }
        #expect(try store.lastSeq() == before)
        #expect(try store.jobs().count == 1)
        // Every field of the spec counts, not only the paths.
        let changes: [(inout JobSpec) -> Void] = [
            { $0.priority = 9 }, { $0.maxAttempts = 1 }, { $0.queue = "other" },
            { $0.metadata = UploadMetadata(customMetadata: ["a": "b"]) },
        ]
        for change in changes {
            var spec = uploadSpec(key: "nightly-1")
            change(&spec)
            #expect(throws: expected) { _ = try store.submit([spec], actor: "cli:test", now: 3) }
        }
        // Within one batch, against the first spec with the key.
        #expect(throws: StoreError.self) {
            _ = try store.submit([uploadSpec(key: "batch"), memorySpec(key: "batch")], actor: "cli:test", now: 4)
        }
        #expect(try store.jobs().count == 1)
        // The same spec again still maps to the existing job.
        #expect(try store.submit([uploadSpec(key: "nightly-1")], actor: "cli:test", now: 5)[0]
            == SubmitOutcome(id: original.id, key: "nightly-1", kind: .uploadFile, created: false))
        #expect("\(expected)".contains("nightly-1") && "\(expected)".contains(original.id))
    }

    /// `delay:` and `submit --at 1h` are worked out at each submit: the same manifest submitted again named
    /// another run time, and was refused as another spec under its key. It maps to the job, which keeps
    /// the time its first submit gave it; any other field still counts.
    @Test("a keyed job submitted again with another run time maps to the job, which keeps its first", arguments: Engine.allCases)
    func runTimeIsNotTheSpec(engine: Engine) throws {
        let fixture = try StoreFixture("store-key-runtime", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        var scheduled = uploadSpec(key: "later")
        scheduled.runAfterMs = 3_600_000
        let original = try store.submit([scheduled], actor: "cli:test", now: 1)[0]
        var again = uploadSpec(key: "later")
        again.runAfterMs = 3_601_000
        #expect(try store.submit([again], actor: "cli:test", now: 1_001)[0]
            == SubmitOutcome(id: original.id, key: "later", kind: .uploadFile, created: false))
        // Without a time (`submit` without `--at` after `submit --at 1h`) too.
        #expect(try store.submit([uploadSpec(key: "later")], actor: "cli:test", now: 2_001)[0].id == original.id)
        #expect(try store.job(original.id)?.runAfterMs == 3_600_000)
        again.priority = 9
        #expect(throws: StoreError.keyConflict(key: "later", existingID: original.id)) {
            _ = try store.submit([again], actor: "cli:test", now: 3_001)
        }
        #expect(try store.jobs().count == 1)
    }

    @Test("a spec stored with other JSON bytes (another key order) still matches its key", arguments: Engine.allCases)
    func keyMatchIsCanonical(engine: Engine) throws {
        let fixture = try StoreFixture("store-key-canonical", engine: engine)
        defer { fixture.remove() }
        let spec = JobSpec(kind: .uploadData, destination: "gs://b/o", data: Data("x".utf8),
                           metadata: UploadMetadata(contentType: "text/plain", customMetadata: ["b": "2", "a": "1"]), key: "k")
        let id = try fixture.submit(spec)
        // As an older encoder might have written it: the same content, keys in another order, spaces.
        let text = try StoreJSON.encode(spec)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let reordered = "{ " + object.keys.sorted(by: >).map { key in
            let value = try? JSONSerialization.data(withJSONObject: object[key] ?? NSNull(), options: [.fragmentsAllowed])
            return "\"\(key)\": " + String(decoding: value ?? Data(), as: UTF8.self)
        }.joined(separator: ", ") + " }"
        #expect(!reordered.utf8.elementsEqual(text.utf8))
        // The spec is stored once, in the submitted event (schema 8): rewritten there, past the log's guard.
        let seq = try #require(try fixture.scalar("SELECT seq FROM jobs WHERE id = ?", [.text(id)]))
        let data = try #require(try fixture.scalar("SELECT data FROM events WHERE seq = \(seq)"))
        #expect(data.contains(text))
        switch engine {
        case .sqlite: try fixture.sql("DROP TRIGGER events_refuse_update")
        case .postgres: try fixture.sql("ALTER TABLE events DISABLE TRIGGER events_refuse_update")
        }
        try fixture.sql("UPDATE events SET data = ? WHERE seq = \(seq)", [.text(data.replacingOccurrences(of: text, with: reordered))])
        #expect(try fixture.scalar("SELECT data FROM events WHERE seq = \(seq)")?.contains(reordered) == true)
        #expect(try fixture.store.submit([spec], actor: "cli:test", now: 2)[0].id == id)
    }

    @Test("the same key twice makes one job, within a batch and across submits", arguments: Engine.allCases)
    func idempotentKeys(engine: Engine) throws {
        let fixture = try StoreFixture("store-keys", engine: engine)
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

    /// A job's `after:` is stored with each job once, in the order first named, however many names mean
    /// it (its key, its id, a prefix of its id, the same name again). Checked with a fan-in of 50,000: the
    /// check for a repeat was a scan of the ids kept so far (71 s to submit such a job), now a set.
    @Test("after: keeps each job once, in the order first named, across names that mean the same job")
    func afterKeepsEachJobOnceInOrder() throws {
        let logID = JobID.generate(atMs: 1)
        let count = 50_000
        var names = (0..<count).map { "k\($0)" }
        names += ["old", String(logID.prefix(8)), logID, "k7", "k0"]   // a log job by two names, then repeats
        names += (0..<count).reversed().map { "k\($0)" }
        var fanIn = memorySpec(key: "fan-in")
        fanIn.after = names
        let specs = (0..<count).map { memorySpec(key: "k\($0)") } + [fanIn]
        let plan = try SubmitPlan(specs, now: 2, storedByKey: { _ in nil }, logJob: { name in
            name == "old" || logID.hasPrefix(name) ? logID : nil
        })
        let ids = plan.entries.prefix(count).map(\.id)
        let after = try #require(plan.entries.last?.spec.after)
        #expect(after == ids + [logID], "\(after.count) ids")
    }

    /// A folder or prefix job's key is expanded with each file's path, so a key can be longer than the
    /// 1,024 bytes a manifest allows, and longer than a PostgreSQL B-tree entry (2,704 bytes): on
    /// PostgreSQL its submit failed whole, "index row size 3024 exceeds btree version 4 maximum 2704 for
    /// index jobs_idempotency_key_set", where SQLite kept it. Letters that do not repeat, as a deep path's
    /// names, so the server cannot compress the entry below the limit.
    @Test("a key longer than a B-tree entry (a folder job's key with a deep path) is kept and still unique", arguments: Engine.allCases)
    func longKeys(engine: Engine) throws {
        let fixture = try StoreFixture("store-long-key", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        let path = (0..<12).map { _ in
            String((0..<250).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return letters[Int(state >> 33) % letters.count]
            })
        }.joined(separator: "/")
        let key = "nightly/" + path + "/f.txt"
        #expect(key.utf8.count > 3_000)
        let first = try store.submit([uploadSpec(key: key), uploadSpec(key: key + "2")], actor: "cli:test", now: 1)
        #expect(first.map(\.created) == [true, true] && first[0].id != first[1].id)
        #expect(try store.job(first[0].id)?.key == key)
        // The same job again maps to it; another spec with the key is refused.
        #expect(try store.submit([uploadSpec(key: key)], actor: "cli:test", now: 2).map(\.id) == [first[0].id])
        var changed = uploadSpec(key: key)
        changed.destination = "gs://bucket/other.bin"
        #expect(throws: StoreError.keyConflict(key: key, existingID: first[0].id)) {
            _ = try store.submit([changed], actor: "cli:test", now: 3)
        }
        // A job after it, named by its key, waits for it.
        let after = try store.submit([JobSpec(kind: .uploadData, destination: "gs://b/o", data: Data("x".utf8), after: [key])],
                                     actor: "cli:test", now: 4)
        #expect(try store.job(after[0].id)?.spec.after == [first[0].id])
        #expect(try store.jobs().count == 3)
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
                    // Another thread may have resumed the shared job already: resuming a queued job is refused.
                    do {
                        _ = try store.requestResume(id: id, actor: "cli:t\(thread)", now: Int64(round))
                    } catch {
                        guard case StoreError.invalidControl(let message) = error, message.contains("queued, not paused") else {
                            throw error
                        }
                    }
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
