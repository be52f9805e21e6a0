import JobModel

/// An upload-file source missing at submit whose job waits (`after:`) for a job outside its manifest:
/// a download-file job of another manifest of the same submit, or one in the log that has not finished,
/// may write it. The manifest reader cannot see those, so it leaves the check here, with the error it
/// would have reported; `unresolved` finishes it once every manifest is read.
public struct PendingSourceCheck: Sendable, Hashable {
    /// The source's absolute path.
    public var path: String
    /// The job's `after:` names, as written.
    public var after: [String]
    /// What is reported when no job the chain reaches writes `path`.
    public var error: ManifestError

    /// A job of the log as the check sees it: the local file it writes, when it is a download-file job
    /// that has not finished (one that finished wrote its file already, or never will), and the ids it
    /// waits for.
    public struct LoggedJob: Sendable {
        public var writes: String?
        public var after: [String]

        public init(writes: String?, after: [String]) {
            self.writes = writes
            self.after = after
        }
    }

    /// Whether a download writing `written` (a file, or a prefix's folder ending in `/`) writes `path`.
    static func writes(_ written: String, _ path: String) -> Bool {
        written.hasSuffix("/") ? path.hasPrefix(written) : written == path
    }

    /// The errors of the checks `jobs` carry that no job their chains reach writes. A chain follows
    /// `after:` names through the keyed jobs of every manifest (`jobs`), then through the log: `logJob`
    /// gives the job a name means there (its key, id or unique id prefix; nil for none), and a logged
    /// job's own `after:` ids lead on. At most `visitLimit` names are followed for one check.
    public static func unresolved(_ jobs: [ManifestJob], visitLimit: Int = 10_000,
                                  logJob: (String) throws -> LoggedJob?) rethrows -> [ManifestError] {
        let checks = jobs.compactMap(\.pendingSourceCheck)
        guard !checks.isEmpty else { return [] }
        var written: [UTF8Key: String] = [:]
        var edges: [UTF8Key: [String]] = [:]
        for job in jobs {
            guard let key = job.spec.key.map(UTF8Key.init), edges[key] == nil else { continue }
            edges[key] = job.spec.after ?? []
            guard job.spec.kind == .downloadFile else { continue }
            if let folder = job.prefixExpansion?.destinationFolder {
                written[key] = folder + "/"
            } else if let destination = job.spec.destination {
                written[key] = destination
            }
        }
        var logged: [UTF8Key: LoggedJob?] = [:]
        var errors: [ManifestError] = []
        for check in checks {
            var seen: Set<UTF8Key> = []
            var pending = check.after.map(UTF8Key.init)
            var found = false
            while !found, seen.count < visitLimit, let name = pending.popLast() {
                guard seen.insert(name).inserted else { continue }
                if let next = edges[name] {
                    found = written[name].map { writes($0, check.path) } ?? false
                    pending += next.map(UTF8Key.init)
                    continue
                }
                let job: LoggedJob?
                if let known = logged[name] {
                    job = known
                } else {
                    job = try logJob(name.string)
                    logged[name] = job
                }
                guard let job else { continue }
                found = job.writes.map { writes($0, check.path) } ?? false
                pending += job.after.map(UTF8Key.init)
            }
            if !found { errors.append(check.error) }
        }
        return errors
    }
}
