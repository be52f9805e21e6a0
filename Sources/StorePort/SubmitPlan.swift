import Foundation
import JobModel

/// What `submit` does with each spec of a batch, decided before anything is written: which specs are
/// new jobs (with the ids they get), which map to an existing job by idempotency key, and what each
/// `after:` name means. The same rules for every adapter; only the lookups are theirs.
public struct SubmitPlan: Sendable {
    /// One spec of the batch, in order.
    public struct Entry: Sendable {
        /// The spec with `after:` resolved to full job ids (nil when it names none).
        public var spec: JobSpec
        /// The job's id: new, or the existing job's.
        public var id: String
        /// Whether a `submitted` event is to be appended (false: the key already names this job).
        public var creates: Bool
    }

    /// The entries, in the batch's order.
    public private(set) var entries: [Entry] = []

    /// Plans `specs`.
    ///
    /// - Parameters:
    ///   - storedByKey: the id and stored spec (canonical JSON) of the job the log holds under a key.
    ///   - logJob: the id of the job in the log that an `after:` name means (its key, its id or a unique id
    ///     prefix), or nil for none.
    /// - Throws: `keyConflict` when a known key comes with a different spec, `unknownDependency` for an
    ///   `after:` name that means no job, and what the lookups throw.
    public init(_ specs: [JobSpec], now: Int64,
                storedByKey: (String) throws(StoreError) -> (id: String, spec: String)?,
                logJob: (String) throws(StoreError) -> String?) throws(StoreError) {
        // Ids first, so an `after:` may name a job later in the batch. Keys and names are compared by their
        // bytes, as the log compares them (`==` calls NFC and NFD spellings of one key equal).
        var stored: [UTF8Key: (id: String, spec: String)] = [:]
        var firstOfKey: [UTF8Key: Int] = [:]
        var ids: [String] = []
        for (index, spec) in specs.enumerated() {
            guard let key = spec.key else {
                ids.append(JobID.generate(atMs: now))
                continue
            }
            if let first = firstOfKey[UTF8Key(key)] {
                ids.append(ids[first])
                continue
            }
            firstOfKey[UTF8Key(key)] = index
            if let existing = try storedByKey(key) {
                stored[UTF8Key(key)] = existing
                ids.append(existing.id)
            } else {
                ids.append(JobID.generate(atMs: now))
            }
        }
        var resolved: [UTF8Key: String] = [:]
        func resolve(_ name: String) throws(StoreError) -> String {
            if let id = resolved[UTF8Key(name)] { return id }
            let id: String
            if let index = firstOfKey[UTF8Key(name)] {
                id = try Self.keyOrID(name, keyed: ids[index], logJob: logJob)
            } else if let found = try logJob(name) {
                id = found
            } else {
                throw StoreError.unknownDependency(name)
            }
            resolved[UTF8Key(name)] = id
            return id
        }
        var firstSpec: [UTF8Key: String] = [:]
        for (index, original) in specs.enumerated() {
            var spec = original
            if let names = spec.after {
                // In the order written, each id once: a set says which are in already, where a scan of
                // `after` for every entry made a job after 50,000 others take 71 s to submit.
                var after: [String] = []
                var listed: Set<String> = []
                after.reserveCapacity(names.count)
                for name in names {
                    let id = try resolve(name)
                    if listed.insert(id).inserted { after.append(id) }
                }
                spec.after = after.isEmpty ? nil : after
            }
            guard let key = spec.key else {
                entries.append(Entry(spec: spec, id: ids[index], creates: true))
                continue
            }
            let encoded = try StoreJSON.encode(spec)
            if let existing = stored[UTF8Key(key)] ?? firstSpec[UTF8Key(key)].map({ (ids[index], $0) }) {
                var same = encoded.hasSameUTF8(as: existing.spec)
                if !same { same = try Self.sameButForRunTime(spec, existing.spec) }
                guard same else {
                    throw StoreError.keyConflict(key: key, existingID: existing.id)
                }
                entries.append(Entry(spec: spec, id: existing.id, creates: false))
                continue
            }
            firstSpec[UTF8Key(key)] = encoded
            entries.append(Entry(spec: spec, id: ids[index], creates: true))
        }
        if let cycle = Self.cycle(among: entries.filter(\.creates)) {
            // Named by the specs that made them, which the submit can place in its manifests.
            var indexOf: [String: Int] = [:]
            for (index, entry) in entries.enumerated() where entry.creates && indexOf[entry.id] == nil { indexOf[entry.id] = index }
            throw StoreError.dependencyCycle(specIndices: cycle.compactMap { indexOf[$0] })
        }
    }

    /// Whether `spec` and the stored spec (canonical JSON) differ only in when the job may run: `delay:`
    /// and `submit --at 1h` are worked out at each submit, so the same manifest submitted again named
    /// another time, and was refused as another spec under the key. The job keeps the time its first
    /// submit gave it, as a key's job keeps everything else.
    static func sameButForRunTime(_ spec: JobSpec, _ stored: String) throws(StoreError) -> Bool {
        var existing = try StoreJSON.decode(JobSpec.self, stored, what: "a stored spec")
        guard existing.runAfterMs != nil || spec.runAfterMs != nil else { return false }
        var given = spec
        given.runAfterMs = nil
        existing.runAfterMs = nil
        return try StoreJSON.encode(given).hasSameUTF8(as: StoreJSON.encode(existing))
    }

    /// A cycle of `after:` edges among new jobs (ids, the first repeated at the end), or nil. Jobs in the
    /// log cannot wait for new ones, so only new jobs can close a cycle.
    static func cycle(among entries: [Entry]) -> [String]? {
        var edges: [String: [String]] = [:]
        for entry in entries { edges[entry.id] = entry.spec.after ?? [] }
        var done: Set<String> = []
        for start in entries.map(\.id) where !done.contains(start) {
            // Iterative depth-first search; `path` is the chain being followed.
            var path: [String] = []
            var onPath: Set<String> = []
            var stack: [(id: String, next: Int)] = [(start, 0)]
            path.append(start)
            onPath.insert(start)
            while let top = stack.last {
                let targets = edges[top.id] ?? []
                if top.next < targets.count {
                    stack[stack.count - 1].next += 1
                    let target = targets[top.next]
                    if onPath.contains(target) {
                        guard let from = path.firstIndex(of: target) else { continue }
                        return Array(path[from...]) + [target]
                    }
                    if done.contains(target) || edges[target] == nil { continue }
                    stack.append((target, 0))
                    path.append(target)
                    onPath.insert(target)
                } else {
                    stack.removeLast()
                    path.removeLast()
                    onPath.remove(top.id)
                    done.insert(top.id)
                }
            }
        }
        return nil
    }
}

extension SubmitPlan {
    /// Appends a `submitted` event for every job the plan creates, through `writer` (the adapter's
    /// connection, inside its transaction), and returns one outcome per spec in the order given.
    public func persist(on writer: some DecisionWriter, actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome] {
        var outcomes: [SubmitOutcome] = []
        for entry in entries {
            if entry.creates {
                _ = try writer.perform(.submit(entry.spec), jobID: entry.id, on: nil, actor: actor, expectedVersion: 0, now: now)
            }
            outcomes.append(SubmitOutcome(id: entry.id, key: entry.spec.key, kind: entry.spec.kind, created: entry.creates))
        }
        return outcomes
    }

    /// The job an `after:` name means when it is the key of a job submitted here (`keyed`): that job,
    /// unless the name is also a job's id in the log — a whole id names the job that has it — or a prefix
    /// of one, which names two jobs (`keyAndIDPrefix`), as in every command (`JobIDQuery.named`).
    private static func keyOrID(_ name: String, keyed: String,
                                logJob: (String) throws(StoreError) -> String?) throws(StoreError) -> String {
        // Only a name of id characters can be one (most keys are not: no lookup for them).
        guard let query = try? JobIDQuery(name) else { return keyed }
        let found: [String]
        do throws(StoreError) {
            found = try logJob(name).map { [$0] } ?? []
        } catch {
            guard case .ambiguous(_, let matches) = error else { throw error }
            found = matches
        }
        guard !found.isEmpty, found != [keyed] else { return keyed }
        if case .exact = query { return found[0] }
        throw StoreError.keyAndIDPrefix(name: name, keyed: keyed, byID: found)
    }
}
