import Foundation
import JobModel

// MARK: - Fields

/// The keys a job (or `defaults:`) may hold, as written in YAML.
enum JobField: String, CaseIterable, Sendable {
    case kind, source, destination, data
    case dataBase64 = "data_base64"
    case maxSize = "max_size"
    case metadata, key, priority
    case maxAttempts = "max_attempts"
    case queue
    case timeout
    case checkSource = "check_source"
    case checksums
    case ifExists = "if_exists"
    case maxRate = "max_rate"
    case include, exclude
    case runAfter = "run_after"
    case delay
    case after
    case ifGeneration = "if_generation"
    /// `defaults:` only: the bucket a relative object path is resolved against.
    case bucket

    /// Fields every kind takes.
    /// Every field's name, in declaration order: what an unknown key is compared with.
    static let names = allCases.map(\.rawValue)
    static let common: Set<JobField> = [.kind, .key, .priority, .maxAttempts, .queue, .timeout, .runAfter, .delay, .after]

    /// Every field each kind takes: the common ones and its own.
    static let allowed: [JobKind: Set<JobField>] = Dictionary(uniqueKeysWithValues: JobKind.allCases.map { kind in
        (kind, common.union(specific(to: kind)))
    })

    /// Fields that name one job's own data and so cannot be shared through `defaults:`, with the reason.
    var notADefaultReason: String? {
        switch self {
        case .source, .destination: "each job names its own '\(rawValue)'"
        case .data, .dataBase64: "each job carries its own data"
        case .key: "idempotency keys must differ from job to job"
        case .include, .exclude: "filters belong to the folder, glob or prefix they filter"
        case .after: "each job names the jobs it waits for"
        case .ifGeneration: "each job names the generation of its own object"
        default: nil
        }
    }

    /// The fields a kind takes besides the common ones.
    static func specific(to kind: JobKind) -> Set<JobField> {
        switch kind {
        case .uploadFile: [.source, .destination, .metadata, .checkSource, .checksums, .ifExists, .maxRate, .include, .exclude]
        case .uploadData: [.data, .dataBase64, .destination, .metadata, .checksums, .ifExists, .maxRate]
        case .downloadFile: [.source, .destination, .checksums, .ifExists, .maxRate, .include, .exclude]
        case .downloadMemory: [.source, .maxSize, .checksums, .maxRate]
        case .fetchURL: [.source]
        case .getMetadata: [.source]
        case .updateMetadata: [.destination, .metadata, .ifGeneration]
        case .delete: [.destination, .ifGeneration]
        }
    }
}

/// A value read from the manifest with where its key and value were written.
struct Located<Value> {
    var value: Value
    var keyMark: SourceMark
    var valueMark: SourceMark
}

/// The fields of one job mapping (or of `defaults:`), each already checked on its own.
/// A field whose value was wrong is absent here but listed in `written`, so it is not also reported missing.
struct FieldSet {
    var kind: Located<JobKind>?
    var source: Located<String>?
    var destination: Located<String>?
    var data: Located<Data>?
    var dataBase64: Located<Data>?
    var maxSize: Located<Int64>?
    var metadata: Located<UploadMetadata>?
    /// Custom metadata keys written with a null value (update-metadata deletes them; elsewhere an error),
    /// with the position of each key.
    var metadataRemovals: [String: SourceMark] = [:]
    /// Metadata fields written with a null value (`cache_control: null`, `custom_metadata: null`:
    /// update-metadata removes them; elsewhere an error), with the position of each key.
    var metadataClears: [MetadataField: SourceMark] = [:]
    var key: Located<String>?
    var priority: Located<Int>?
    var maxAttempts: Located<Int>?
    var queue: Located<String>?
    /// Seconds.
    var timeout: Located<Int>?
    var checkSource: Located<Bool>?
    /// The hashes to compute and compare, in `ChecksumAlgorithm` order, without repeats.
    var checksums: Located<[ChecksumAlgorithm]>?
    var ifExists: Located<IfExists>?
    /// Bytes per second.
    var maxRate: Located<Int64>?
    var include: Located<[PathPattern]>?
    var exclude: Located<[PathPattern]>?
    /// ms since the epoch.
    var runAfter: Located<Int64>?
    /// ms.
    var delay: Located<Int64>?
    /// The `after:` entries: names with their positions.
    var after: Located<[Located<String>]>?
    /// The object generation a delete or update-metadata expects.
    var ifGeneration: Located<Int64>?
    /// `defaults:` only: a bucket root (gs:// or file://) that relative object paths resolve against.
    var bucket: Located<StorageReference>?
    /// Every field written, valid or not, with its key's position.
    var written: [JobField: SourceMark] = [:]
    /// The unknown keys written, in order: see `isMisspelled(_:)`.
    var unknownKeys: [String] = []

    /// Whether an unknown key was probably meant to be `field` (`destinaton`): then the field is not
    /// reported missing as well. Asked only when the field is missing, so a manifest of many unknown keys
    /// pays for no suggestion it does not show (each is an edit distance against every field's name).
    func isMisspelled(_ field: JobField) -> Bool {
        unknownKeys.contains { ManifestReader.closest(to: $0, among: JobField.names) == field.rawValue }
    }

    /// These fields with `defaults` filling the gaps; metadata merges field by field (custom metadata key by key).
    /// A field the job wrote with a wrong value is not filled from `defaults`: the job meant its own.
    func merged(over defaults: FieldSet) -> FieldSet {
        func fill<Value>(_ own: Located<Value>?, _ shared: Located<Value>?, _ field: JobField) -> Located<Value>? {
            own ?? (written[field] == nil ? shared : nil)
        }
        var result = self
        result.kind = fill(kind, defaults.kind, .kind)
        result.maxSize = fill(maxSize, defaults.maxSize, .maxSize)
        result.priority = fill(priority, defaults.priority, .priority)
        result.maxAttempts = fill(maxAttempts, defaults.maxAttempts, .maxAttempts)
        result.queue = fill(queue, defaults.queue, .queue)
        result.timeout = fill(timeout, defaults.timeout, .timeout)
        result.checkSource = fill(checkSource, defaults.checkSource, .checkSource)
        result.checksums = fill(checksums, defaults.checksums, .checksums)
        result.ifExists = fill(ifExists, defaults.ifExists, .ifExists)
        result.maxRate = fill(maxRate, defaults.maxRate, .maxRate)
        // `run_after` and `delay` are one schedule: a job that writes either ignores both defaults.
        if written[.runAfter] == nil && written[.delay] == nil {
            result.runAfter = defaults.runAfter
            result.delay = defaults.delay
        }
        if written[.metadata] != nil && metadata == nil { return result }
        if let base = defaults.metadata {
            guard var own = metadata else {
                result.metadata = base
                return result
            }
            own.value.contentType = own.value.contentType ?? base.value.contentType
            own.value.cacheControl = own.value.cacheControl ?? base.value.cacheControl
            own.value.contentDisposition = own.value.contentDisposition ?? base.value.contentDisposition
            own.value.contentEncoding = own.value.contentEncoding ?? base.value.contentEncoding
            own.value.contentLanguage = own.value.contentLanguage ?? base.value.contentLanguage
            if let baseCustom = base.value.customMetadata {
                own.value.customMetadata = baseCustom.merging(own.value.customMetadata ?? [:]) { _, job in job }
            }
            result.metadata = own
        }
        return result
    }
}

extension FieldSet {
    /// Rewrites the job's storage side (an upload's destination, any other kind's source) from an object path
    /// relative to `bucket` into the full reference, as `reference(withPath:)` does; text with a scheme is
    /// left alone. The marks stay where the job wrote the path, and the full reference is parsed (and
    /// `..` refused) like one written out.
    mutating func resolveRelativeReference(of kind: JobKind, against bucket: StorageReference) {
        let isDestination = kind.namesDestinationReference
        guard let written = isDestination ? destination : source else { return }
        let text = written.value.trimmingCharacters(in: .whitespaces)
        guard !text.isEmpty, !text.containsUTF8("://") else { return }
        var resolved = written
        resolved.value = bucket.root.description + text
        if isDestination { destination = resolved } else { source = resolved }
    }
}

// MARK: - Reader

/// Walks a YAML node tree and turns it into `ManifestJob`s, collecting every problem with its position.
struct ManifestReader {
    let file: String
    let source: SourceText
    /// Absolute and standardised.
    /// Nil when it is relative and the current directory cannot be read: relative paths are refused.
    let baseDirectory: String?
    /// Whether upload-file sources are looked at on disk (unless a job says `check_source: false`).
    let checksSources: Bool
    let limits: ManifestLimits
    /// The submit's time (ms): `delay:` counts from it.
    let nowMs: Int64
    /// The hosts whose Firebase-form URLs name `gs://` objects: the submit's storage settings'.
    let firebaseHosts: FirebaseHosts
    /// The errors found so far: the first `limits.maximumShownErrors` whole, the others counted.
    private(set) var errors: ManifestErrorCollector
    /// Jobs made so far, expansions included, against `limits.maximumJobs`.
    var jobCount = 0
    /// The links of /proc local paths lead through, their folders remembered.
    private var processLinks = ProcessLinks()
    /// Idempotency keys seen so far, with the position of the job that used each first.
    /// Keyed by bytes, as the log keys jobs: `==` calls NFC and NFD spellings of one name equal.
    private var idempotencyKeys: [UTF8Key: SourceMark] = [:]

    init(file: String, source: SourceText, baseDirectory: String?, checksSources: Bool = true, limits: ManifestLimits = .default,
         nowMs: Int64 = Clock.nowMs(), firebaseHosts: FirebaseHosts = .firebase) {
        self.nowMs = nowMs
        self.firebaseHosts = firebaseHosts
        self.file = file
        self.source = source
        self.baseDirectory = baseDirectory
        self.checksSources = checksSources
        self.limits = limits
        errors = ManifestErrorCollector(limit: limits.maximumShownErrors)
    }

    /// The last source line an error quoted, redacted: one long line with many errors is read once.
    private var lastQuotedLine: (number: Int, line: SecretText.RedactedLine?)?

    /// Reports an error at `mark`. `message` is made only for an error that will be shown (see
    /// `ManifestErrorCollector`): past the limit an error is counted, not written.
    mutating func report(_ code: ManifestError.Code, _ message: @autoclosure () -> String, at mark: SourceMark) {
        guard errors.keeps(at: mark) else {
            errors.count(code, at: mark)
            return
        }
        let quoted: SecretText.RedactedLine?
        if let last = lastQuotedLine, last.number == mark.line {
            quoted = last.line
        } else {
            quoted = source.quotedLine(mark.line).map(SecretText.RedactedLine.init)
            lastQuotedLine = (mark.line, quoted)
        }
        let error = ManifestError(code: code, file: file, line: mark.line, column: mark.column, message: message(), redactedLine: quoted)
        errors.add(error)
    }

    /// The error `report` would add at `mark`, not added: for a check the submit finishes.
    func error(_ code: ManifestError.Code, _ message: String, at mark: SourceMark) -> ManifestError {
        ManifestError(code: code, file: file, line: mark.line, column: mark.column, message: message,
                      redactedLine: source.quotedLine(mark.line).map(SecretText.RedactedLine.init))
    }

    // MARK: - Top level

    /// The jobs of the document; empty when anything was reported.
    mutating func read(_ root: YAMLNode?) -> [ManifestJob] {
        let emptyMessage = "the manifest has no jobs; expected 'jobs:' followed by a list of jobs ('- kind: upload-file' ...)"
        guard let root, !Self.isNull(root) else {
            report(.emptyManifest, emptyMessage, at: .start)
            return []
        }
        var defaults = FieldSet()
        let jobNodes: [YAMLNode]
        switch root {
        case .sequence(let items, let mark):
            guard !items.isEmpty else {
                report(.emptyManifest, emptyMessage, at: mark)
                return []
            }
            jobNodes = items
        case .mapping(let pairs, let mark):
            guard let nodes = readTopLevelMapping(pairs, at: mark, defaults: &defaults) else { return [] }
            jobNodes = nodes
        case .scalar:
            report(.invalidTopLevel, "a manifest is a mapping with 'jobs:' (and optional 'defaults:') or a list of jobs, not \(root.summary)",
                   at: root.mark)
            return []
        }
        if jobNodes.count > limits.maximumJobs {
            let limit = limits.maximumJobs
            report(.limitExceeded, "the manifest lists \(jobNodes.count) jobs, more than the limit of \(limit) (this is the first one over); "
                       + "split it into several manifests (jobctl submit takes them all in one transaction)",
                   at: jobNodes[limits.maximumJobs].mark)
            return []
        }
        var jobs: [ManifestJob] = []
        jobs.reserveCapacity(jobNodes.count)
        for node in jobNodes {
            let deferredBefore = sourcesAfterDependencies.count
            guard let job = readJob(node, defaults: defaults) else { continue }
            for deferred in deferredBefore..<sourcesAfterDependencies.count { sourcesAfterDependencies[deferred].job = jobs.count }
            for (index, spec) in job.specs.enumerated() {
                var entry = ManifestJob(spec: spec, line: job.mark.line, column: job.mark.column)
                entry.keyLine = lastKeyMark?.line
                entry.keyColumn = lastKeyMark?.column
                entry.dependencies = lastDependencies.map { dependency in
                    ManifestDependency(name: dependency.value, file: file, line: dependency.valueMark.line,
                                       column: dependency.valueMark.column, source: source)
                }
                if index == 0 {
                    entry.notes = job.notes
                    entry.prefixExpansion = job.prefix
                }
                jobs.append(entry)
            }
        }
        checkSourcesAfterDependencies(of: &jobs)
        reportDependencyCycles()
        return errors.isEmpty ? jobs : []
    }

    /// Reads `defaults:` and returns the nodes of `jobs:`, or nil when there is nothing to go on.
    private mutating func readTopLevelMapping(_ pairs: [YAMLPair], at mark: SourceMark, defaults: inout FieldSet) -> [YAMLNode]? {
        var jobsPair: YAMLPair?
        var looksLikeAJob = false
        var jobsMisspelled = false
        for pair in pairs {
            guard let name = keyName(pair.key) else { continue }
            switch name {
            case "jobs":
                jobsPair = pair
            case "defaults":
                if Self.isNull(pair.value) { continue }
                guard case .mapping(let defaultPairs, _) = pair.value else {
                    report(.wrongType, "'defaults' must be a mapping of job fields (queue, priority, max_attempts, ...), not \(pair.value.summary)",
                           at: pair.value.mark)
                    continue
                }
                defaults = readFields(defaultPairs, inDefaults: true)
            case let name where name.hasPrefix("x-"):
                // Extension keys, as in Compose files: somewhere to keep anchors for `<<: *name`.
                continue
            default:
                if JobField(rawValue: name) != nil {
                    looksLikeAJob = true
                    continue
                }
                jobsMisspelled = jobsMisspelled || Self.closest(to: name, among: ["jobs", "defaults"]) == "jobs"
                report(.unknownKey, "unknown key '\(name)' at the top of the manifest\(Self.suggestion(for: name, among: ["jobs", "defaults"])); expected 'jobs', 'defaults' or an 'x-' extension key",
                       at: pair.key.mark)
            }
        }
        guard let jobsPair else {
            if jobsMisspelled { return nil }
            let message = looksLikeAJob
                ? "this looks like a single job; list jobs under 'jobs:', each starting with '- ' (or write a list at the top)"
                : "the manifest has no 'jobs:'; expected 'jobs:' followed by a list of jobs"
            report(looksLikeAJob ? .invalidTopLevel : .missingField, message, at: mark)
            return nil
        }
        if looksLikeAJob {
            for pair in pairs {
                guard let name = keyName(pair.key), JobField(rawValue: name) != nil else { continue }
                report(.unknownKey, "'\(name)' belongs in a job under 'jobs:' (or in 'defaults:'), not at the top of the manifest", at: pair.key.mark)
            }
        }
        switch jobsPair.value {
        case .sequence(let items, let itemsMark):
            guard !items.isEmpty else {
                report(.emptyManifest, "'jobs' is an empty list; a manifest needs at least one job", at: itemsMark)
                return nil
            }
            return items
        case .scalar(let scalar) where scalar.isNull:
            report(.emptyManifest, "'jobs' lists no jobs; a manifest needs at least one job ('- kind: upload-file' ...)", at: jobsPair.key.mark)
            return nil
        case .mapping:
            report(.wrongType, "'jobs' must be a list of jobs, each starting with '- ', not a mapping", at: jobsPair.value.mark)
            return nil
        case .scalar:
            report(.wrongType, "'jobs' must be a list of jobs, each starting with '- ', not \(jobsPair.value.summary)", at: jobsPair.value.mark)
            return nil
        }
    }

    // MARK: - Jobs

    private struct ReadJob {
        /// One spec, or one per file of a folder or glob (a prefix's template until it is listed).
        var specs: [JobSpec]
        var mark: SourceMark
        var notes: [String] = []
        var prefix: PrefixExpansion?
    }

    /// The `after:` entries of the job `readJob` read last.
    private var lastDependencies: [Located<String>] = []

    /// Where the job `readJob` read last wrote its `key:` value, if it wrote one.
    private var lastKeyMark: SourceMark?

    /// The `after:` entries of the jobs read so far, by the job's key (jobs without a key cannot be named).
    private var dependenciesByKey: [(key: String, entries: [Located<String>])] = []

    /// The local file each keyed download-file job read so far writes, by its key; a folder (ending in
    /// `/`) for a prefix's download.
    private var localFilesWrittenByKey: [UTF8Key: String] = [:]

    /// upload-file sources missing at submit whose jobs wait (`after:`) for others: checked at the end
    /// of the manifest, when every job that might write them has been read. `job` is the index of the
    /// job's entry in the jobs read.
    private var sourcesAfterDependencies: [(problem: SourceFile.Problem, path: String, written: Located<String>,
                                            after: [Located<String>], job: Int)] = []

    /// Reports each missing source in `sourcesAfterDependencies` unless a download-file job of this
    /// manifest that its job waits for, directly or through other jobs, writes it: a chain that fetches
    /// a file and then uploads it needs no `check_source: false`. The job's own `after:` decides, so it
    /// runs only once that download succeeded (a failed one cancels it). When the chain names a job
    /// outside this manifest (in another manifest of the submit, or in the log), the check is left to the
    /// submit, which sees those (`PendingSourceCheck`): the job carries the error it would report.
    private mutating func checkSourcesAfterDependencies(of jobs: inout [ManifestJob]) {
        guard !sourcesAfterDependencies.isEmpty else { return }
        var edges: [UTF8Key: [Located<String>]] = [:]
        for (key, entries) in dependenciesByKey where edges[UTF8Key(key)] == nil { edges[UTF8Key(key)] = entries }
        for (problem, path, written, after, job) in sourcesAfterDependencies {
            var seen: Set<UTF8Key> = []
            var pending = after.map { UTF8Key($0.value) }
            var writtenByAWaitedJob = false
            var namesAJobElsewhere = false
            while let key = pending.popLast(), !writtenByAWaitedJob {
                guard seen.insert(key).inserted else { continue }
                if idempotencyKeys[key] == nil { namesAJobElsewhere = true }
                if let file = localFilesWrittenByKey[key] {
                    writtenByAWaitedJob = PendingSourceCheck.writes(file, path)
                }
                pending += (edges[key] ?? []).map { UTF8Key($0.value) }
            }
            if writtenByAWaitedJob { continue }
            let (code, message) = sourceProblem(problem, path: path, written: written)
            if namesAJobElsewhere, jobs.indices.contains(job) {
                jobs[job].pendingSourceCheck = PendingSourceCheck(path: path, after: after.map(\.value),
                                                                  error: error(code, message, at: written.valueMark))
            } else {
                report(code, message, at: written.valueMark)
            }
        }
    }

    private mutating func readJob(_ node: YAMLNode, defaults: FieldSet) -> ReadJob? {
        guard case .mapping(let pairs, let mark) = node else {
            report(.wrongType, "a job must be a mapping of fields ('kind: ...', 'source: ...'), not \(node.summary)", at: node.mark)
            return nil
        }
        var own = readFields(pairs, inDefaults: false)
        lastDependencies = own.after?.value ?? []
        lastKeyMark = own.key?.valueMark
        if let bucket = defaults.bucket?.value, let kind = own.merged(over: defaults).kind?.value {
            own.resolveRelativeReference(of: kind, against: bucket)
        }
        let fields = own.merged(over: defaults)
        if let key = own.key {
            if let first = idempotencyKeys[UTF8Key(key.value)] {
                report(.duplicateIdempotencyKey,
                       "idempotency key '\(key.value)' is already used by the job at line \(first.line); give each job its own key",
                       at: key.valueMark)
            } else {
                idempotencyKeys[UTF8Key(key.value)] = mark
            }
        }
        guard let kind = fields.kind?.value else {
            if own.written[.kind] == nil && defaults.written[.kind] == nil && !own.isMisspelled(.kind) {
                report(.missingField, "the job has no 'kind'; expected one of \(Self.kindList)", at: mark)
            }
            return nil
        }
        let errorCount = errors.reportCount

        // Fields this kind does not take: reported where the job wrote them; defaults that do not apply are skipped.
        let allowed = JobField.allowed[kind] ?? JobField.common
        for (field, keyMark) in own.written where !allowed.contains(field) {
            report(.fieldNotAllowed, Self.notAllowedMessage(field, for: kind), at: keyMark)
        }

        var spec = JobSpec(kind: kind)
        spec.key = own.key?.value
        spec.priority = fields.priority?.value ?? 0
        spec.maxAttempts = fields.maxAttempts?.value ?? JobSpec.defaultMaxAttempts
        spec.queue = fields.queue?.value ?? JobSpec.defaultQueue
        spec.timeoutSeconds = fields.timeout?.value
        if let runAfter = fields.runAfter {
            spec.runAfterMs = runAfter.value
        } else if let delay = fields.delay {
            let (sum, overflow) = nowMs.addingReportingOverflow(delay.value)
            if overflow || sum > ManifestValueRange.latestRunAfterMs {
                report(.invalidValue, "'delay' reaches past 9999-12-31; use a shorter delay", at: delay.valueMark)
            } else {
                spec.runAfterMs = sum
            }
        }
        if let after = own.after?.value, !after.isEmpty {
            spec.after = after.map(\.value)
            if let key = own.key?.value {
                for entry in after where entry.value.hasSameUTF8(as: key) {
                    report(.invalidDependency, "job '\(key)' cannot wait for itself; remove '\(key)' from its 'after'", at: entry.valueMark)
                }
                // A self-dependency is reported above, not again as a cycle.
                dependenciesByKey.append((key, after.filter { $0.value != key }))
            }
        }
        if allowed.contains(.checksums) { spec.checksums = fields.checksums?.value }
        if allowed.contains(.maxRate) { spec.maxRate = fields.maxRate?.value }
        if allowed.contains(.ifExists), let ifExists = fields.ifExists {
            // `overwrite` is the default: left out, so the spec encodes as one written without it.
            if ifExists.value != .overwrite {
                spec.ifExists = ifExists.value
            }
        }
        if kind.isUpload, let metadata = fields.metadata, !metadata.value.isEmpty {
            spec.metadata = metadata.value
            // Checked here, on the job as written (its defaults merged), before a folder or glob makes
            // its files' jobs from it: every one of them carries this metadata.
            checkCustomMetadataSize(metadata.value.customMetadata, at: metadata.valueMark)
        }
        // Only update-metadata deletes keys; a null elsewhere is reported where it was written.
        if kind.isUpload {
            for (name, keyMark) in own.metadataRemovals.sorted(by: { $0.value < $1.value }) {
                report(.wrongType, "custom metadata value for '\(name)' must be a string, not null (only update-metadata jobs delete "
                           + "keys with null)", at: keyMark)
            }
            for (field, keyMark) in own.metadataClears.sorted(by: { $0.value < $1.value }) {
                report(.wrongType, "'\(field.rawValue)' must be \(field == .customMetadata ? "a mapping" : "a string"), not null (only "
                           + "update-metadata jobs remove fields with null)", at: keyMark)
            }
        }

        switch kind {
        case .uploadFile:
            let sourceText = require(.source, in: own, kind: kind, at: mark, what: "the local file to upload")
            let sourcePath = sourceText.flatMap { localPath($0, field: .source, kind: kind) }
            if let sourceText, let sourcePath, let tree = Self.uploadTree(sourcePath) {
                let specs = expandUpload(tree, written: sourceText, template: spec, own: own, mark: mark,
                                         checkingSources: checksSources && (fields.checkSource?.value ?? true))
                return errors.reportCount == errorCount ? ReadJob(specs: specs.specs, mark: mark, notes: specs.notes) : nil
            }
            reportFiltersWithoutExpansion(own)
            spec.source = sourcePath.map(Self.literalSource)
            if let path = spec.source, let sourceText, checksSources, fields.checkSource?.value ?? true,
               let problem = SourceFile.problem(at: path) {
                if let after = own.after?.value, !after.isEmpty, problem.isAbsence {
                    // Perhaps a job it waits for writes it: decided once every job of the manifest is read.
                    sourcesAfterDependencies.append((problem, path, sourceText, after, -1))
                } else {
                    reportSourceProblem(problem, path: path, written: sourceText)
                }
            }
            spec.destination = require(.destination, in: own, kind: kind, at: mark, what: "the storage reference to upload to").flatMap {
                uploadDestination($0, sourcePath: spec.source, other: own.source)
            }
        case .uploadData:
            switch (own.data, own.dataBase64) {
            case (let text?, let base64?):
                let later = text.keyMark < base64.keyMark ? base64 : text
                report(.conflictingFields, "'data' and 'data_base64' exclude each other; keep one", at: later.keyMark)
            case (let text?, nil):
                spec.data = text.value
            case (nil, let base64?):
                spec.data = base64.value
            case (nil, nil):
                if own.written[.data] == nil && own.written[.dataBase64] == nil
                    && !own.isMisspelled(.data) && !own.isMisspelled(.dataBase64) {
                    report(.missingField, "the upload-data job has no 'data' (text) or 'data_base64' (bytes as base64)", at: mark)
                }
            }
            spec.destination = require(.destination, in: own, kind: kind, at: mark, what: "the storage reference to upload to").flatMap {
                reference($0, field: .destination, kind: kind, other: nil)
            }
        case .downloadFile:
            if let sourceText = own.source, let prefix = listablePrefix(sourceText) {
                guard let expansion = prefixExpansion(prefix, template: spec, own: own, mark: mark) else { return nil }
                if let key = own.key?.value {
                    localFilesWrittenByKey[UTF8Key(key)] = expansion.destinationFolder + "/"
                }
                return errors.reportCount == errorCount ? ReadJob(specs: [expansion.template], mark: mark, prefix: expansion) : nil
            }
            reportFiltersWithoutExpansion(own)
            let sourceReference = require(.source, in: own, kind: kind, at: mark, what: "the storage reference to download").flatMap {
                referenceValue($0, field: .source, kind: kind, other: own.destination)
            }
            spec.source = sourceReference?.description
            spec.destination = require(.destination, in: own, kind: kind, at: mark, what: "the local file to write").flatMap {
                localPath($0, field: .destination, kind: kind, folderEntry: sourceReference.map(Self.folderEntryName))
            }
            if let key = own.key?.value, let destination = spec.destination {
                localFilesWrittenByKey[UTF8Key(key)] = destination
            }
        case .downloadMemory:
            spec.source = require(.source, in: own, kind: kind, at: mark, what: "the storage reference to download").flatMap {
                reference($0, field: .source, kind: kind, other: nil)
            }
            spec.maxSize = fields.maxSize?.value ?? JobSpec.defaultMaxSize
        case .fetchURL:
            spec.source = require(.source, in: own, kind: kind, at: mark, what: "the storage reference to make a download URL for").flatMap {
                reference($0, field: .source, kind: kind, other: nil)
            }
        case .getMetadata:
            spec.source = require(.source, in: own, kind: kind, at: mark, what: "the object whose metadata to read").flatMap {
                reference($0, field: .source, kind: kind, other: nil)
            }
        case .updateMetadata:
            spec.destination = require(.destination, in: own, kind: kind, at: mark, what: "the object whose metadata to change").flatMap {
                reference($0, field: .destination, kind: kind, other: nil)
            }
            // The job's own metadata only: a default content type is meant for uploads, not for every update.
            var update = own.metadata?.value ?? UploadMetadata()
            if update.customMetadata?.isEmpty == true { update.customMetadata = nil }
            if !update.isEmpty { spec.metadata = update }
            if let metadata = own.metadata { checkCustomMetadataSize(update.customMetadata, at: metadata.valueMark) }
            if !own.metadataRemovals.isEmpty { spec.removeCustomMetadata = own.metadataRemovals.keys.sorted() }
            if !own.metadataClears.isEmpty { spec.clearMetadata = MetadataField.allCases.filter { own.metadataClears[$0] != nil } }
            if own.written[.metadata] != nil {
                if let metadata = own.metadata, update.isEmpty && own.metadataRemovals.isEmpty && own.metadataClears.isEmpty {
                    report(.invalidValue, "'metadata' changes nothing; give a field to set (content_type, cache_control, ...) or "
                               + "remove (field: null), or a custom_metadata key to set or delete (key: null)", at: metadata.valueMark)
                }
            } else if !own.isMisspelled(.metadata) {
                report(.missingField, "the update-metadata job has no 'metadata' (the fields to change: content_type, cache_control, "
                           + "content_disposition, content_encoding, content_language, custom_metadata)", at: mark)
            }
        case .delete:
            spec.destination = require(.destination, in: own, kind: kind, at: mark, what: "the object to delete").flatMap {
                reference($0, field: .destination, kind: kind, other: nil)
            }
        }
        if allowed.contains(.ifGeneration), let generation = own.ifGeneration {
            // Plain HTTP has no generations: an ETag precondition would be another feature.
            if let destination = spec.destination, destination.hasPrefix("http://") || destination.hasPrefix("https://") {
                report(.invalidValue, "'if_generation' needs a gs:// or file:// object; an http(s) URL has no generation to compare "
                           + "(remove 'if_generation')", at: generation.keyMark)
            } else {
                spec.ifGeneration = generation.value
            }
        }
        jobCount += 1
        if jobCount > limits.maximumJobs {
            let limit = limits.maximumJobs
            report(.limitExceeded, "the manifest makes more than the limit of \(limit) jobs (this one is over); "
                       + "split it into several manifests", at: mark)
            return nil
        }
        return errors.reportCount == errorCount ? ReadJob(specs: [spec], mark: mark) : nil
    }

    /// Reports custom metadata past Cloud Storage's 8 KiB an object (`ManifestValueRange.maximumCustomMetadataBytes`).
    private mutating func checkCustomMetadataSize(_ custom: [String: String]?, at mark: SourceMark) {
        guard let custom else { return }
        let bytes = custom.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
        let limit = ManifestValueRange.maximumCustomMetadataBytes
        guard bytes > limit else { return }
        report(.invalidValue, "the custom metadata is \(bytes) bytes (its keys and values, UTF-8), more than the \(limit) "
                   + "(8 KiB) Cloud Storage allows an object; keep less in custom_metadata (defaults' included), or store it "
                   + "in an object of its own", at: mark)
    }

    /// The field's value, or nil after reporting it missing (unless it was written with a wrong value).
    private mutating func require(_ field: JobField, in fields: FieldSet, kind: JobKind, at mark: SourceMark,
                                  what: String) -> Located<String>? {
        let value = field == .source ? fields.source : fields.destination
        if value == nil && fields.written[field] == nil && !fields.isMisspelled(field) {
            report(.missingField, "the \(kind.rawValue) job has no '\(field.rawValue)' (\(what))", at: mark)
        }
        return value
    }

    static let kindList = JobKind.allCases.map(\.rawValue).joined(separator: ", ")

    private static func notAllowedMessage(_ field: JobField, for kind: JobKind) -> String {
        let name = field.rawValue
        switch field {
        case .metadata:
            return "'metadata' is only for uploads and update-metadata; a \(kind.rawValue) job writes no metadata"
        case .maxSize:
            return "'max_size' is only for download-memory jobs, not \(kind.rawValue)"
        case .checkSource:
            return "'check_source' is only for upload-file jobs (it says whether the local source file is checked at submit)"
        case .bucket:
            return "'bucket' belongs in 'defaults:' (the bucket relative object paths resolve against); a job names its own "
                + "object with a full reference (gs://BUCKET/path) or a path relative to that default bucket"
        case .data, .dataBase64:
            return kind == .uploadFile
                ? "'\(name)' is only for upload-data jobs; an upload-file job reads the file named by 'source'"
                : "'\(name)' is only for upload-data jobs, not \(kind.rawValue)"
        case .source:
            return kind == .uploadData
                ? "an upload-data job takes its bytes from 'data' or 'data_base64', not 'source'"
                : "a \(kind.rawValue) job names its object with 'destination', not 'source'"
        case .destination:
            switch kind {
            case .fetchURL: return "a fetch-url job produces a download URL and takes no 'destination'"
            case .getMetadata: return "a get-metadata job reads the object named by 'source' and takes no 'destination'"
            default:
                return "a download-memory job keeps the bytes in the job store and takes no 'destination' (use download-file to write a file)"
            }
        default:
            return "'\(name)' is not allowed in \(kind.rawValue.first.map { "aeiou".contains($0) } == true ? "an" : "a") \(kind.rawValue) job"
        }
    }

    // MARK: - References and paths

    /// The canonical text of a storage reference that names an object.
    private mutating func reference(_ text: Located<String>, field: JobField, kind: JobKind, other: Located<String>?) -> String? {
        referenceValue(text, field: field, kind: kind, other: other)?.description
    }

    /// `text` parsed as a reference a user submits: a `gs://` one (written as such, as a Firebase or a
    /// storage.googleapis.com URL) must name a bucket Cloud Storage can have. Parsing alone takes any
    /// bucket a `file://` folder may be named, and `gs://MyBucket/x` or `gs://b/x` failed only when the job ran.
    /// A Firebase-form URL names a `gs://` object on Firebase's host and the emulator's (`firebaseHosts`).
    func submittedReference(_ text: String) throws(StorageError) -> StorageReference {
        let reference = try StorageReference(parsing: text, firebaseHosts: firebaseHosts)
        if reference.scheme == .gs, let problem = StorageReference.cloudStorageBucketProblem(reference.bucket) {
            throw StorageError(.invalidArgument, "the bucket name '\(reference.bucket)' cannot be a Cloud Storage bucket's: \(problem); "
                + StorageReference.cloudStorageBucketRule)
        }
        return reference
    }

    /// The reference `text` names, or nil after reporting why it names none.
    private mutating func parsedReference(_ text: Located<String>, field: JobField, other: Located<String>?) -> StorageReference? {
        do {
            return try submittedReference(text.value)
        } catch {
            var message = "'\(field.rawValue)' is not a valid storage reference: \(error.message)"
            if !text.value.containsUTF8("://"), let other, other.value.containsUTF8("://") {
                message += " (did you swap 'source' and 'destination'?)"
            } else if !text.value.containsUTF8("://") {
                message += "; write a full reference (gs://BUCKET/path) or set 'bucket:' in 'defaults:' to write object paths relative to it"
            }
            report(.invalidReference, message, at: text.valueMark)
            return nil
        }
    }

    private mutating func referenceValue(_ text: Located<String>, field: JobField, kind: JobKind,
                                         other: Located<String>?) -> StorageReference? {
        guard let reference = parsedReference(text, field: field, other: other) else { return nil }
        // Refused here, at its line, not by the worker when the job runs.
        if reference.scheme == .file, let reserved = HiddenName.reservedComponent(in: reference.fullPath) {
            report(.invalidReference, "'\(field.rawValue)' '\(text.value)': \(HiddenName.reservedMessage(reserved))", at: text.valueMark)
            return nil
        }
        if reference.isRoot {
            let verb = kind.isUpload ? "an upload needs" : "a \(kind.rawValue) job needs"
            let example = (try? reference.child("path/file.txt").description) ?? "\(reference)path/file.txt"
            report(.bucketRoot, "'\(field.rawValue)' \(reference) is a bucket root; \(verb) an object path such as \(example)",
                   at: text.valueMark)
            return nil
        }
        // A trailing `/` means a folder; parsing alone would drop it and name the object `folder`.
        if Self.namesFolder(text.value, plainHTTP: reference.scheme == .http || reference.scheme == .https) {
            if kind == .uploadData {
                let example = (try? reference.child("data.bin").description) ?? "\(reference)/data.bin"
                report(.invalidReference, "'destination' '\(text.value)' ends in '/', so it names a folder, and an upload-data job has no file name "
                           + "to put in it; write the object's full name, such as \(example)",
                       at: text.valueMark)
                return nil
            }
            if field == .source, reference.scheme == .gs || reference.scheme == .file {
                report(.invalidReference, "'source' '\(text.value)' ends in '/', so it names a folder; only download-file jobs expand a "
                           + "prefix into one job per object: name one object, such as \(reference)",
                       at: text.valueMark)
                return nil
            }
        }
        if kind == .updateMetadata, reference.scheme == .http || reference.scheme == .https {
            report(.invalidReference, "update-metadata needs a gs:// or file:// reference; '\(text.value)' is a plain \(reference.scheme.rawValue) "
                       + "URL, and HTTP has no standard way to change a file's metadata", at: text.valueMark)
            return nil
        }
        if kind == .fetchURL {
            switch reference.scheme {
            case .gs:
                break
            case .file where !reference.bucket.isEmpty:
                break
            case .file:
                report(.invalidReference, "fetch-url needs a reference in a bucket (gs://BUCKET/..., a Firebase URL or file://BUCKET/...); '\(text.value)' is a plain local file with no download URL",
                       at: text.valueMark)
                return nil
            case .http, .https:
                report(.invalidReference, "fetch-url needs a gs:// or Firebase reference; '\(text.value)' is a plain \(reference.scheme.rawValue) URL, which is already its own download URL",
                       at: text.valueMark)
                return nil
            }
        }
        return reference
    }

    /// upload-file's destination, resolved: a folder (a trailing `/`) or a bucket root gets the source
    /// file's name appended, as gsutil and rclone do, so the log records where the object really goes.
    private mutating func uploadDestination(_ text: Located<String>, sourcePath: String?, other: Located<String>?) -> String? {
        guard let reference = parsedReference(text, field: .destination, other: other) else { return nil }
        let folder = Self.namesFolder(text.value, plainHTTP: reference.scheme == .http || reference.scheme == .https)
        guard reference.isRoot || folder else { return reference.description }
        // Without a valid source there is no name to add; the source's problem was reported.
        guard let sourcePath, let name = LocalPath.lastComponent(sourcePath) else { return nil }
        do {
            let resolved: StorageReference
            if reference.isRoot {
                resolved = try StorageReference(scheme: reference.scheme, bucket: reference.bucket, path: name, query: reference.query)
            } else {
                // The name goes after the path as written, so an http(s) URL keeps its exact path and its query.
                let (path, rest) = Self.splitPath(text.value)
                resolved = try StorageReference(parsing: path + StorageReference.percentEncode(name, keepSlash: false) + rest,
                                                 firebaseHosts: firebaseHosts)
            }
            return resolved.description
        } catch {
            report(.invalidReference, "'destination' '\(text.value)' is a folder, but adding the source's name '\(name)' to it fails: \(error.message)",
                   at: text.valueMark)
            return nil
        }
    }

    /// A reference as written, trimmed, split into its path and what follows it: for http(s) text the
    /// `?query` and `#fragment`; for gs:// and file:// nothing (`?` and `#` belong to object names there).
    static func splitPath(_ text: String) -> (path: Substring, rest: Substring) {
        var trimmed = Substring(text)
        while let last = trimmed.last, last.isWhitespace { trimmed = trimmed.dropLast() }
        while let first = trimmed.first, first.isWhitespace { trimmed = trimmed.dropFirst() }
        guard trimmed.hasASCIIPrefix("http://") || trimmed.hasASCIIPrefix("https://"),
              let end = trimmed.firstIndex(where: { $0 == "?" || $0 == "#" }) else {
            return (trimmed, trimmed[trimmed.endIndex...])
        }
        return (trimmed[..<end], trimmed[end...])
    }

    /// Whether a reference as written names a folder: its path ends in `/`, or — in bucket forms (gs://,
    /// file://, Firebase URLs), where the path is decoded — in an encoded `%2F`. A plain http(s) URL is
    /// requested exactly as written, so there only a literal `/` counts.
    static func namesFolder(_ text: String, plainHTTP: Bool) -> Bool {
        let path = splitPath(text).path.utf8
        if path.last == UInt8(ascii: "/") { return true }
        return !plainHTTP && (path.suffix(3).elementsEqual("%2f".utf8) || path.suffix(3).elementsEqual("%2F".utf8))
    }

    // MARK: - Upload sources

    /// Reports what `SourceFile.problem(at:)` found wrong with an upload source the worker could not read:
    /// missing, a folder or glob, not a regular file, unreadable (links followed, as the worker follows them).
    private mutating func reportSourceProblem(_ problem: SourceFile.Problem, path: String, written: Located<String>) {
        let (code, message) = sourceProblem(problem, path: path, written: written)
        report(code, message, at: written.valueMark)
    }

    /// What is said of an upload source that cannot be read now.
    private func sourceProblem(_ problem: SourceFile.Problem, path: String, written: Located<String>) -> (ManifestError.Code, String) {
        let quoted = "'source' '\(written.value)'"
        let absolute = written.value == path ? "" : " (\(path))"
        let optOut = "if it will exist when the job runs, add 'check_source: false' to the job (or to 'defaults:') or submit with "
            + "--no-check-sources; a download-file job that writes it (in the manifests submitted, or not yet finished in the log) "
            + "can be named in the job's 'after:'"
        switch problem {
        case .missing:
            return (.sourceUnavailable, "\(quoted) does not exist\(absolute); \(optOut)")
        case .danglingLink(let target):
            return (.sourceUnavailable, "\(quoted) is a symbolic link to '\(target)', which does not exist; \(optOut)")
        case .glob:
            // Unescaped pattern characters make a glob before this check; escaped ones name a file.
            return (.sourceUnavailable, "\(quoted) names no file (its '*', '?' or '[' are escaped, so it is not a glob; the file "
                        + "looked for is '\(path)'); \(optOut)")
        case .folder:
            // A folder expands before this check; one that became a folder since is reported as such.
            return (.unsupportedSource, "\(quoted) is a folder; write it with a trailing '/' to upload every file in it")
        case .notRegular(let what):
            return (.sourceUnavailable,
                    "\(quoted) is \(what), not a regular file; upload-file reads regular files (or symbolic links to them)")
        case .unreadable(let reason):
            return (.sourceUnavailable, "\(quoted) cannot be read\(absolute): \(reason); the worker must be able to read it")
        case .generated(let filesystem):
            return (.sourceUnavailable, "\(quoted)\(absolute) \(FileKind.generatedRefusal(filesystem, path: path))")
        case .unreachable(let reason):
            return (.sourceUnavailable, "\(quoted) cannot be reached\(absolute): \(reason)")
        }
    }

    /// The name a download of `source` into a folder gives its file: the object's name; for a plain
    /// http(s) URL, the last segment of the path as written, percent-decoded — `…/ok/a%2Fb` is the file
    /// `a/b` names, which `localPath` refuses, not `b` (the path's decoded, collapsed form), where
    /// `…/ok/c%2Fb` went too.
    static func folderEntryName(_ source: StorageReference) -> String {
        guard source.scheme == .http || source.scheme == .https, let raw = source.rawPath,
              let slash = raw.utf8.lastIndex(of: UInt8(ascii: "/")) else { return source.name }
        let segment = String(raw.utf8[raw.utf8.index(after: slash)...]) ?? ""
        guard !segment.isEmpty, let decoded = try? StorageReference.percentDecode(segment) else { return source.name }
        return decoded
    }

    /// An absolute, standardised local path: relative paths start at the base directory; `file:///` URLs are accepted.
    ///
    /// For download-file's destination, a folder — written with a trailing `/`, or a folder that exists —
    /// gets `folderEntry` (the object's name) appended, as `cp` and `gsutil cp` do; without a name (the
    /// source was wrong, and reported) there is no path. For upload-file's source, a folder written as one
    /// keeps a trailing `/` (`uploadTree` expands it); with `folderOnly` (a prefix download's destination)
    /// the path must be written as a folder and is returned without the `/`.
    mutating func localPath(_ text: Located<String>, field: JobField, kind: JobKind, folderEntry: String? = nil,
                                    folderOnly: Bool = false) -> String? {
        var path = text.value
        let fail = { (reader: inout ManifestReader, message: String) -> String? in
            reader.report(.invalidPath, "'\(field.rawValue)' \(message)", at: text.valueMark)
            return nil
        }
        if path.allSatisfy(\.isWhitespace) {
            return fail(&self, "is empty; expected a local file path")
        }
        if path.hasASCIIPrefix("file://") {
            do {
                let reference = try StorageReference(parsing: path)
                guard reference.bucket.isEmpty else {
                    return fail(&self, "'\(path)' names the local bucket '\(reference.bucket)'; a local path is written plainly or as file:///absolute/path")
                }
                path = "/" + reference.fullPath + (Self.namesFolder(path, plainHTTP: false) ? "/" : "")
            } catch {
                report(.invalidReference, "'\(field.rawValue)' is not a valid file URL: \(error.message)", at: text.valueMark)
                return nil
            }
        } else if path.containsUTF8("://") {
            let role = field == .source ? "reads a local 'source' and writes to the 'destination' reference"
                                        : "reads the 'source' reference and writes to a local 'destination'"
            return fail(&self, "must be a local file path, not the URL '\(path)' (\(kind == .uploadFile ? "an" : "a") \(kind.rawValue) job \(role))")
        }
        if path.hasPrefix("~") {
            return fail(&self, "'\(path)' starts with '~', which is not expanded; write an absolute path or one relative to the manifest")
        }
        if path.utf8.contains(0) {
            return fail(&self, "contains a NUL character")
        }
        let absolute: String
        if path.hasPrefix("/") {
            absolute = path
        } else if let baseDirectory {
            absolute = baseDirectory + "/" + path
        } else {
            return fail(&self, "'\(path)' is relative, and \(CurrentDirectory.missingMessage)")
        }
        var standardized = LocalPath.resolve(absolute)
        // The kernel's bounds (ENAMETOOLONG): refused here, at the field, rather than by the worker. A
        // glob's pattern is no path (`[0-9a-f]` is 8 bytes for one of a name's): its folder is held to
        // them, and the files it takes exist, so they fit.
        var bounded = standardized
        if field == .source, PathPattern.isPattern(standardized), !FileManager.default.fileExists(atPath: standardized) {
            let parts = SlashSeparatedPath.parts(of: standardized)
            if let first = parts.firstIndex(where: { PathPattern.isPattern(String($0)) }) {
                bounded = "/" + parts[..<first].joined(separator: "/")
            }
        }
        if let problem = LocalPathBounds.problem(bounded) {
            return fail(&self, problem)
        }
        // `/dev/stdin`, `/dev/fd/3`, `/proc/self/cwd/x`: a file of whichever process follows the path.
        if let link = processLinks.link(in: bounded) {
            return fail(&self, "'\(text.value)' \(ProcessLinks.refusal(link, reading: field == .source))")
        }
        let writtenAsFolder = path.hasSuffix("/") || path.hasSuffix("/.") || path == "." || path.hasSuffix("/..") || path == ".."
        if field == .source {
            // A folder written as one keeps a trailing `/`: `uploadTree` expands it.
            return writtenAsFolder || standardized == "/" ? (standardized == "/" ? "/" : standardized + "/") : standardized
        }
        if folderOnly {
            guard writtenAsFolder else {
                return fail(&self, "'\(text.value)' must end in '/': the objects of a prefix go into a local folder, "
                            + "with their names relative to the prefix (write '\(text.value)/')")
            }
            return standardized
        }
        if writtenAsFolder || LocalPath.isDirectory(standardized) {
            // The caller reported the source already when there is no name to add.
            guard let folderEntry, !folderEntry.isEmpty else { return nil }
            // A URL's last segment decoded (`a%2Fb`, `evil%0Aname`): no file can be named so, and a `/`
            // would put the file in a subfolder other jobs may write too.
            if folderEntry.utf8.contains(UInt8(ascii: "/")) || folderEntry.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                return fail(&self, "'\(text.value)' is a folder, and the source's name, decoded, is '\(TerminalText.printable(folderEntry))', "
                                + "which holds a '/' or a control character no file name should: write the file's own name")
            }
            standardized = LocalPath.standardize(standardized + "/" + folderEntry)
            // The object's name becomes the file's: a GCS name may have a 1,024-byte segment, which no
            // file system takes (the folder itself passed above).
            if folderEntry.utf8.count > Int(NAME_MAX) {
                return fail(&self, "'\(text.value)' is a folder, and the object's name '\(folderEntry.prefix(40))...' is "
                                + "\(folderEntry.utf8.count) bytes; file names are at most \(Int(NAME_MAX)) bytes: write the file's own name")
            }
            if let problem = LocalPathBounds.problem(standardized) {
                return fail(&self, "'\(text.value)' is a folder, and with the object's name the path \(problem); write a shorter one")
            }
            // The folder was looked at above; the object's name may be a link of its own (`/dev/` + `stdout`).
            if let link = processLinks.link(in: standardized) {
                return fail(&self, "'\(text.value)' is a folder, and with the object's name the path '\(standardized)' "
                            + ProcessLinks.refusal(link, reading: false))
            }
        }
        if standardized == "/" {
            return fail(&self, "'\(text.value)' names the root folder; expected a file")
        }
        // A name jobctl keeps for its own files (a `file://` object's metadata sidecar, a partial download),
        // the file's or a folder's on its path: a download written there would stand in for one — a bucket
        // folder's sidecar forged, another job's partial file replaced — or make a folder where one goes.
        if let name = HiddenName.reservedComponent(in: standardized) {
            return fail(&self, "'\(text.value)': \(HiddenName.reservedMessage(name))")
        }
        return standardized
    }

    // MARK: - Field values

    /// Reads a job's (or `defaults:`'s) fields, reporting unknown keys and wrong values.
    mutating func readFields(_ pairs: [YAMLPair], inDefaults: Bool) -> FieldSet {
        var fields = FieldSet()
        for pair in pairs {
            guard let name = keyName(pair.key) else { continue }
            guard let field = JobField(rawValue: name) else {
                fields.unknownKeys.append(name)
                // Made only for an error that is shown (`report` takes the message lazily).
                func message() -> String {
                    if let suggested = Self.closest(to: name, among: JobField.names) { return "unknown key '\(name)' (did you mean '\(suggested)'?)" }
                    return "unknown key '\(name)'; a job takes \(JobField.names.joined(separator: ", "))"
                }
                report(.unknownKey, message(), at: pair.key.mark)
                continue
            }
            let keyMark = pair.key.mark
            fields.written[field] = keyMark
            if inDefaults, let reason = field.notADefaultReason {
                report(.fieldNotAllowed, "'\(name)' cannot be a default: \(reason)", at: keyMark)
                continue
            }
            let valueMark = Self.isNull(pair.value) ? keyMark : pair.value.mark
            func located<Value>(_ value: Value?) -> Located<Value>? {
                value.map { Located(value: $0, keyMark: keyMark, valueMark: valueMark) }
            }
            switch field {
            case .kind:
                fields.kind = located(readKind(pair))
            case .source:
                fields.source = located(string(pair, expected: "a local path or storage reference"))
            case .destination:
                fields.destination = located(string(pair, expected: "a local path or storage reference"))
            case .data:
                if case .scalar(let scalar) = pair.value, scalar.tag == YAMLScalar.binaryTag {
                    // `data: !!binary aGk=` is YAML's own way to write bytes.
                    fields.data = located(readBase64(pair))
                } else {
                    fields.data = located(string(pair, expected: "the text to upload").map { Data($0.utf8) })
                }
            case .dataBase64:
                fields.dataBase64 = located(readBase64(pair))
            case .maxSize:
                fields.maxSize = located(readSize(pair))
            case .metadata:
                fields.metadata = located(readMetadata(pair, removals: &fields.metadataRemovals, clears: &fields.metadataClears))
                if inDefaults {
                    for (name, mark) in fields.metadataRemovals.sorted(by: { $0.value < $1.value }) {
                        report(.wrongType, "custom metadata value for '\(name)' must be a string, not null (defaults delete no keys)", at: mark)
                    }
                    for (field, mark) in fields.metadataClears.sorted(by: { $0.value < $1.value }) {
                        report(.wrongType, "'\(field.rawValue)' must not be null in defaults (defaults remove no fields)", at: mark)
                    }
                }
            case .key:
                fields.key = located(string(pair, expected: "an idempotency key").flatMap { key in
                    guard !key.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                        report(.invalidValue, "'key' must be a non-empty idempotency key", at: valueMark)
                        return nil
                    }
                    guard key.utf8.count <= ManifestValueRange.maximumKeyBytes else {
                        report(.invalidValue, "'key' is \(key.utf8.count) bytes long; an idempotency key may have at most "
                                   + "\(ManifestValueRange.maximumKeyBytes) (hash a longer one)", at: valueMark)
                        return nil
                    }
                    guard !Self.hasControlCharacter(key) else {
                        report(.invalidValue, "'key' must not contain control characters (NUL, line breaks, escapes), not "
                                   + "'\(TerminalText.printable(key))'", at: valueMark)
                        return nil
                    }
                    return key
                })
            case .priority:
                fields.priority = located(integer(pair, in: ManifestValueRange.priority, expected: "an integer (higher runs first)"))
            case .maxAttempts:
                fields.maxAttempts = located(integer(pair, in: ManifestValueRange.maxAttempts, expected: "an integer of at least 1"))
            case .checkSource:
                fields.checkSource = located(boolean(pair, expected: "true or false (false: the file may be missing at submit)"))
            case .queue:
                fields.queue = located(string(pair, expected: "a queue name").flatMap { queue in
                    guard QueueName.isValid(queue) else {
                        report(.invalidValue, "'queue' must be \(QueueName.rule), not '\(TerminalText.printable(queue))'", at: valueMark)
                        return nil
                    }
                    return queue
                })
            case .timeout:
                fields.timeout = located(readTimeout(pair))
            case .checksums:
                fields.checksums = located(readChecksums(pair))
            case .ifExists:
                fields.ifExists = located(readIfExists(pair))
            case .maxRate:
                fields.maxRate = located(readRate(pair))
            case .include:
                fields.include = located(readPatterns(pair))
            case .exclude:
                fields.exclude = located(readPatterns(pair))
            case .runAfter:
                fields.runAfter = located(readRunAfter(pair))
            case .delay:
                fields.delay = located(readDelay(pair))
            case .after:
                fields.after = located(readAfter(pair))
            case .bucket:
                fields.bucket = located(readBucket(pair))
            case .ifGeneration:
                fields.ifGeneration = located(integer(pair, in: JobSpec.generationRange,
                                                      expected: "the object's generation, a positive integer").map { Int64($0) })
            }
        }
        if let runAfter = fields.written[.runAfter], let delay = fields.written[.delay] {
            report(.conflictingFields, "'run_after' and 'delay' exclude each other; keep one", at: max(runAfter, delay))
            fields.runAfter = nil
            fields.delay = nil
        }
        return fields
    }

    /// `bucket:`: a gs:// or file:// bucket root, as `Storage.storage(url:)` takes one.
    private mutating func readBucket(_ pair: YAMLPair) -> StorageReference? {
        let expected = "a bucket such as gs://my-app.appspot.com or file://name"
        guard let text = string(pair, expected: expected) else { return nil }
        let reference: StorageReference
        do {
            reference = try submittedReference(text)
        } catch {
            report(.invalidReference, "'bucket' is not a valid bucket: \(error.message); expected \(expected)", at: pair.value.mark)
            return nil
        }
        guard reference.scheme == .gs || reference.scheme == .file, !reference.bucket.isEmpty else {
            report(.invalidReference, "'bucket' '\(text)' is not a gs:// or file:// bucket; expected \(expected)", at: pair.value.mark)
            return nil
        }
        guard reference.isRoot else {
            report(.invalidReference, "'bucket' '\(text)' names an object path inside a bucket; write the bucket alone, such as \(reference.root)",
                   at: pair.value.mark)
            return nil
        }
        return reference
    }

    private mutating func readKind(_ pair: YAMLPair) -> JobKind? {
        guard let text = string(pair, expected: "one of \(Self.kindList)") else { return nil }
        if let kind = JobKind(rawValue: text) { return kind }
        // The suggestion is made only for an error that is shown (`report` takes the message lazily).
        report(.unknownKind, "unknown kind '\(text)'\(Self.suggestion(for: text, among: JobKind.allCases.map(\.rawValue))); "
                   + "expected one of \(Self.kindList)", at: pair.value.mark)
        return nil
    }

    private mutating func readBase64(_ pair: YAMLPair) -> Data? {
        guard let text = string(pair, expected: "base64 text", allowing: YAMLScalar.binaryTag) else { return nil }
        // Block scalars wrap long base64 over lines; the line breaks are not part of it.
        let compact = String(text.unicodeScalars.filter { !CharacterSet.whitespacesAndNewlines.contains($0) })
        guard let data = Data(base64Encoded: compact) else {
            let name = keyName(pair.key) ?? "data_base64"
            report(.invalidBase64, "'\(name)' is not valid base64 (A-Z, a-z, 0-9, '+', '/', padded with '=' to a multiple of 4 characters)",
                   at: pair.value.mark)
            return nil
        }
        return data
    }

    private mutating func readSize(_ pair: YAMLPair) -> Int64? {
        let expected = "a size like 1048576, 512KiB or 2MB"
        guard let scalar = quantity(pair, name: "max_size", expected: expected, integerTag: true, nullCode: .invalidSize) else { return nil }
        let range = ManifestValueRange.maxSize
        let tooLarge = "'max_size' must be at most 512MiB (\(range.upperBound) bytes): a memory download is kept in memory and in the job database; "
            + "use download-file for larger objects, not '\(scalar.value)'"
        let bytes: Int64?
        switch scalar.decimalReading {
        case .value(let value):
            bytes = Int64(value)
        case .outOfRange:
            // Too many digits: too large, unless it is a negative number (no size is).
            report(.invalidSize, scalar.value.hasPrefix("-") ? "'max_size' must be \(expected), not '\(scalar.value)'" : tooLarge,
                   at: scalar.mark)
            return nil
        case .leadingZero:
            report(.invalidSize, "'max_size' must be \(expected): \(Self.leadingZeroRule), not '\(scalar.value)'", at: scalar.mark)
            return nil
        case .notAnInteger:
            switch ByteSize.read(scalar.value) {
            case .bytes(let value):
                bytes = value
            case .fractionOfAByte:
                report(.invalidSize, "'max_size' must be a whole number of bytes (\(expected)), not '\(scalar.value)'", at: scalar.mark)
                return nil
            case .tooLarge:
                report(.invalidSize, tooLarge, at: scalar.mark)
                return nil
            case .notASize:
                bytes = nil
            }
        }
        guard let bytes, bytes > 0 else {
            report(.invalidSize, "'max_size' must be \(expected), not '\(scalar.value)'\(ByteSize.grammarNote(for: scalar.value))", at: scalar.mark)
            return nil
        }
        guard bytes <= range.upperBound else {
            report(.invalidSize, tooLarge, at: scalar.mark)
            return nil
        }
        return bytes
    }

    /// `checksums:` — a list of hash names (`[md5, crc32c]`), each reported where it was written when
    /// unknown; kept in `ChecksumAlgorithm` order without repeats.
    private mutating func readChecksums(_ pair: YAMLPair) -> [ChecksumAlgorithm]? {
        let names = ChecksumAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")
        let expected = "a list of hash names from \(names), like [md5, crc32c]"
        guard case .sequence(let items, _) = pair.value else {
            let isNull = Self.isNull(pair.value)
            report(isNull ? .invalidValue : .wrongType, "'checksums' must be \(expected), not \(pair.value.summary)",
                   at: isNull ? pair.key.mark : pair.value.mark)
            return nil
        }
        var chosen: Set<ChecksumAlgorithm> = []
        var valid = true
        for item in items {
            guard case .scalar(let scalar) = item, !scalar.isNull,
                  let algorithm = ChecksumAlgorithm(rawValue: scalar.value.lowercased()) else {
                if case .scalar(let scalar) = item, !scalar.isNull {
                    report(.invalidValue, "unknown checksum '\(scalar.value)'"
                               + "\(Self.suggestion(for: scalar.value, among: ChecksumAlgorithm.allCases.map(\.rawValue))) in 'checksums'; use \(names)",
                           at: item.mark)
                } else {
                    report(.wrongType, "each of 'checksums' must be a hash name (\(names)), not \(item.summary)", at: item.mark)
                }
                valid = false
                continue
            }
            chosen.insert(algorithm)
        }
        guard valid else { return nil }
        return ChecksumAlgorithm.allCases.filter(chosen.contains)
    }

    /// `after:` — a list of job names (keys, ids or id prefixes), each a non-empty string written once.
    private mutating func readAfter(_ pair: YAMLPair) -> [Located<String>]? {
        let expected = "a list of the keys or ids of the jobs this one waits for, like [upload-photos]"
        guard case .sequence(let items, _) = pair.value else {
            let isNull = Self.isNull(pair.value)
            report(isNull ? .invalidValue : .wrongType, "'after' must be \(expected), not \(pair.value.summary)",
                   at: isNull ? pair.key.mark : pair.value.mark)
            return nil
        }
        var entries: [Located<String>] = []
        var seen: [UTF8Key: SourceMark] = [:]
        var valid = true
        for item in items {
            guard case .scalar(let scalar) = item, !scalar.isNull,
                  !scalar.value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                report(.wrongType, "each of 'after' must be the key or id of a job, not \(item.summary)", at: item.mark)
                valid = false
                continue
            }
            if Self.hasControlCharacter(scalar.value) {
                report(.invalidDependency, "each of 'after' must be the key or id of a job, without control characters, not "
                           + "'\(TerminalText.printable(scalar.value))'", at: item.mark)
                valid = false
                continue
            }
            if let first = seen[UTF8Key(scalar.value)] {
                report(.invalidDependency, "'\(scalar.value)' is already in 'after' (column \(first.column) of line \(first.line)); "
                           + "list each job once", at: item.mark)
                valid = false
                continue
            }
            seen[UTF8Key(scalar.value)] = item.mark
            entries.append(Located(value: scalar.value, keyMark: pair.key.mark, valueMark: item.mark))
        }
        return valid ? entries : nil
    }

    /// Whether `text` holds a control character (C0, DEL, C1): no key or job id has one, and PostgreSQL
    /// refuses a NUL in text outright (SQLite took it), so an idempotency key must not either.
    static func hasControlCharacter(_ text: String) -> Bool {
        text.unicodeScalars.contains(where: TerminalText.isControl)
    }

    /// Reports each cycle of `after:` entries among the manifest's keyed jobs once, at the entry that
    /// closes it (`a → b → a`: at b's `a`).
    ///
    /// Whether an entry's job is on the path followed is looked up in `positions` (the path's index of
    /// each of its keys), not by scanning the path: a chain written dependant first (each job `after:`
    /// the next one) is a path as long as the manifest, and scanning it at every entry made 20,000 jobs
    /// take 29 s to check, 100,000 longer than anyone waited.
    mutating func reportDependencyCycles() {
        // By bytes, as the log keys jobs (`==` calls NFC and NFD spellings of one key equal).
        var edges: [UTF8Key: [Located<String>]] = [:]
        for (key, entries) in dependenciesByKey where edges[UTF8Key(key)] == nil { edges[UTF8Key(key)] = entries }
        var done: Set<UTF8Key> = []
        for (start, _) in dependenciesByKey where !done.contains(UTF8Key(start)) {
            var path: [String] = [start]
            var positions: [UTF8Key: Int] = [UTF8Key(start): 0]
            var stack: [(key: String, next: Int)] = [(start, 0)]
            while let top = stack.last {
                let targets = edges[UTF8Key(top.key)] ?? []
                guard top.next < targets.count else {
                    stack.removeLast()
                    path.removeLast()
                    positions[UTF8Key(top.key)] = nil
                    done.insert(UTF8Key(top.key))
                    continue
                }
                stack[stack.count - 1].next += 1
                let target = targets[top.next]
                if let from = positions[UTF8Key(target.value)] {
                    let cycle = (path[from...] + [target.value]).joined(separator: " → ")
                    report(.invalidDependency, "'after' makes a cycle (\(cycle)): these jobs would wait for each other forever; "
                               + "remove one of the entries", at: target.valueMark)
                    continue
                }
                guard !done.contains(UTF8Key(target.value)), edges[UTF8Key(target.value)] != nil else { continue }
                stack.append((target.value, 0))
                positions[UTF8Key(target.value)] = path.count
                path.append(target.value)
            }
        }
    }

    /// `if_exists:` — one of `IfExists`'s names.
    private mutating func readIfExists(_ pair: YAMLPair) -> IfExists? {
        let names = IfExists.allCases.map(\.rawValue)
        let expected = "one of \(names.joined(separator: ", "))"
        guard let text = string(pair, expected: expected) else { return nil }
        if let value = IfExists(rawValue: text) { return value }
        report(.invalidValue, "unknown 'if_exists' value '\(text)'\(Self.suggestion(for: text, among: names)); expected \(expected)",
               at: pair.value.mark)
        return nil
    }

    /// `max_rate:` — bytes per second written as rclone writes `--bwlimit` (`512k`, `10M`), within `TransferRate.range`.
    private mutating func readRate(_ pair: YAMLPair) -> Int64? {
        let expected = "a rate like 512k or 10M (bytes per second)"
        guard let scalar = quantity(pair, name: "max_rate", expected: expected, integerTag: true) else { return nil }
        if let problem = TransferRate.problem(with: scalar.value, what: "'max_rate'") {
            report(.invalidValue, problem, at: scalar.mark)
            return nil
        }
        return TransferRate.parse(scalar.value)
    }

    /// `timeout:` — one attempt's limit — as seconds, within `JobSpec.timeoutRange`.
    private mutating func readTimeout(_ pair: YAMLPair) -> Int? {
        let expected = "a duration like 90s, 30m or 1h30m"
        guard let scalar = quantity(pair, name: "timeout", expected: expected) else { return nil }
        let range = JobSpec.timeoutRange
        let seconds: Int
        switch DurationText.read(scalar.value, defaultUnitMs: nil) {
        case .milliseconds(let ms) where ms % 1_000 == 0 && ms / 1_000 <= Int64(Int.max):
            seconds = Int(ms / 1_000)
        case .milliseconds(let ms) where ms % 1_000 != 0:
            report(.invalidValue, "'timeout' must be whole seconds (\(expected)), not '\(scalar.value)'", at: scalar.mark)
            return nil
        case .milliseconds, .tooLarge:
            report(.invalidValue, "'timeout' must be at most \(DurationText.format(range.upperBound)), not '\(scalar.value)'", at: scalar.mark)
            return nil
        case .invalid:
            report(.invalidValue, "'timeout' must be \(expected) (a unit is required), not '\(scalar.value)'", at: scalar.mark)
            return nil
        }
        guard range.contains(seconds) else {
            report(.invalidValue, "'timeout' must be at least \(DurationText.format(range.lowerBound)) and at most "
                   + "\(DurationText.format(range.upperBound)), not '\(scalar.value)'", at: scalar.mark)
            return nil
        }
        return seconds
    }

    // MARK: - Metadata

    /// The metadata keys, snake_case first, then the Firebase spelling.
    static let metadataKeys: [(snake: String, camel: String)] = [
        ("content_type", "contentType"), ("cache_control", "cacheControl"), ("content_disposition", "contentDisposition"),
        ("content_encoding", "contentEncoding"), ("content_language", "contentLanguage"), ("custom_metadata", "customMetadata"),
    ]

    private mutating func readMetadata(_ pair: YAMLPair, removals: inout [String: SourceMark],
                                       clears: inout [MetadataField: SourceMark]) -> UploadMetadata? {
        guard case .mapping(let pairs, _) = pair.value else {
            report(.wrongType, "'metadata' must be a mapping (content_type, cache_control, content_disposition, content_encoding, content_language, custom_metadata), not \(pair.value.summary)",
                   at: Self.isNull(pair.value) ? pair.key.mark : pair.value.mark)
            return nil
        }
        var metadata = UploadMetadata()
        var seen: [String: (spelling: String, mark: SourceMark)] = [:]
        var valid = true
        for entry in pairs {
            guard let name = keyName(entry.key) else { valid = false; continue }
            guard let field = Self.metadataKeys.first(where: { $0.snake == name || $0.camel == name }) else {
                let candidates = Self.metadataKeys.flatMap { [$0.snake, $0.camel] }
                func hint() -> String {
                    let suggestion = Self.suggestion(for: name, among: candidates)
                    return suggestion.isEmpty ? "; expected \(Self.metadataKeys.map(\.snake).joined(separator: ", "))" : suggestion
                }
                report(.unknownKey, "unknown metadata key '\(name)'\(hint())", at: entry.key.mark)
                valid = false
                continue
            }
            if let first = seen[field.snake] {
                report(.duplicateKey, "'\(name)' repeats '\(first.spelling)' (line \(first.mark.line)); write the field once", at: entry.key.mark)
                valid = false
                continue
            }
            seen[field.snake] = (name, entry.key.mark)
            // `field: null` (or `~`) removes the field (update-metadata; the caller reports it elsewhere).
            if Self.isNull(entry.value), let cleared = MetadataField(rawValue: field.snake) {
                clears[cleared] = entry.key.mark
                continue
            }
            if field.snake == "custom_metadata" {
                guard let custom = readCustomMetadata(entry, removals: &removals) else { valid = false; continue }
                metadata.customMetadata = custom
                continue
            }
            guard let value = string(entry, expected: "a string") else { valid = false; continue }
            guard headerSafe(value, "'\(name)'", at: entry.value.mark) else { valid = false; continue }
            switch field.snake {
            case "content_type":
                guard value.contains("/"), !value.contains(where: \.isWhitespace) || value.contains(";") else {
                    report(.invalidValue, "'\(name)' must be a media type like text/plain or image/png, not '\(value)'", at: entry.value.mark)
                    valid = false
                    continue
                }
                metadata.contentType = value
            case "cache_control": metadata.cacheControl = value
            case "content_disposition": metadata.contentDisposition = value
            case "content_encoding": metadata.contentEncoding = value
            default: metadata.contentLanguage = value
            }
        }
        return valid ? metadata : nil
    }

    /// The custom metadata's strings; a key with a null value goes to `removals` (a deletion for
    /// update-metadata, reported by the caller for every other kind).
    private mutating func readCustomMetadata(_ pair: YAMLPair, removals: inout [String: SourceMark]) -> [String: String]? {
        guard case .mapping(let pairs, _) = pair.value else {
            let name = keyName(pair.key) ?? "custom_metadata"
            report(.wrongType, "'\(name)' must be a mapping of names to strings, not \(pair.value.summary)",
                   at: Self.isNull(pair.value) ? pair.key.mark : pair.value.mark)
            return nil
        }
        var custom: [String: String] = [:]
        var valid = true
        for entry in pairs {
            guard let name = keyName(entry.key) else { valid = false; continue }
            if Self.isNull(entry.value) {
                removals[name] = entry.key.mark
                continue
            }
            // Values go to other systems verbatim; `yes` or `1.10` written plainly would be a boolean or a number
            // to any other YAML reader, so only strings are taken.
            guard case .scalar(let scalar) = entry.value, scalar.resolvedType == .string else {
                // The value of a key named like a secret is not repeated in the message.
                let secret = SecretText.isSecretName(name)
                let hint = if case .scalar(let scalar) = entry.value, !scalar.isNull {
                    secret ? "; quote it" : "; quote it: \"\(scalar.value)\""
                } else { "" }
                let summary = secret ? entry.value.typeSummary : entry.value.summary
                report(.wrongType, "custom metadata value for '\(name)' must be a string, not \(summary)\(hint)",
                       at: Self.isNull(entry.value) ? entry.key.mark : entry.value.mark)
                valid = false
                continue
            }
            guard headerSafe(name, "the custom metadata key '\(ManifestError.printable(name))'", at: entry.key.mark),
                  headerSafe(scalar.value, "the custom metadata value of '\(ManifestError.printable(name))'", at: entry.value.mark) else {
                valid = false
                continue
            }
            custom[name] = scalar.value
        }
        return valid ? custom : nil
    }

    /// Whether `value` is free of control characters (horizontal tab aside), as an HTTP header value must
    /// be: metadata becomes request headers (`Content-Type`, `x-goog-meta-KEY`, a plain-HTTP PUT's) and
    /// headers GCS serves back. Otherwise reports it — by position and code point, never echoing the
    /// value (it may carry terminal escapes) — and returns false, so the job is refused at submit rather
    /// than failing when it runs.
    private mutating func headerSafe(_ value: String, _ what: String, at mark: SourceMark) -> Bool {
        for (index, scalar) in value.unicodeScalars.enumerated() where (scalar.value < 0x20 && scalar != "\t") || scalar.value == 0x7F {
            let code = "U+" + String(repeating: "0", count: max(0, 4 - String(scalar.value, radix: 16).count))
                + String(scalar.value, radix: 16, uppercase: true)
            report(.invalidValue, "\(what) holds a control character (\(code) at character \(index + 1)); metadata becomes HTTP "
                   + "headers, which cannot hold one", at: mark)
            return false
        }
        return true
    }

    // MARK: - Scalars

    /// A key's text; reports keys that are collections (YAML allows them, a manifest does not).
    private mutating func keyName(_ key: YAMLNode) -> String? {
        guard case .scalar(let scalar) = key else {
            report(.wrongType, "keys must be names, not \(key.summary)", at: key.mark)
            return nil
        }
        return scalar.value
    }

    /// A scalar's text as written (so `key: 2024` is the string "2024"); reports null and collections.
    /// `allowing`: a tag the field reads besides `!!str` (`!!binary` on base64 text).
    private mutating func string(_ pair: YAMLPair, expected: String, allowing allowedTag: String? = nil) -> String? {
        let name = keyName(pair.key) ?? "value"
        switch pair.value {
        case .scalar(let scalar) where scalar.isNull:
            report(.invalidValue, "'\(name)' has no value; expected \(expected)", at: pair.key.mark)
            return nil
        case .scalar(let scalar) where scalar.tag != nil && scalar.tag != YAMLScalar.stringTag && scalar.tag != allowedTag:
            // `!!int hello`, `!!binary …` on text: the tag asks for something this field does not take.
            report(.wrongType, "'\(name)' must be \(expected), not a value tagged \(scalar.shownTag)", at: scalar.mark)
            return nil
        case .scalar(let scalar):
            return scalar.value
        case .mapping, .sequence:
            report(.wrongType, "'\(name)' must be \(expected), not \(pair.value.summary)", at: pair.value.mark)
            return nil
        }
    }

    /// The scalar of a field whose value is a quantity written as text (a size, a rate, a duration, a
    /// time); reports null and collections as each of them did. A tag must ask for text the field reads:
    /// none or `!!str`, or `!!int` on a plain whole number where `integerTag` (a size or a rate may be
    /// digits alone). Any other (`!!float 5`, `!!bool 5m`), or `!!int` on text that is no whole number
    /// (`!!int 5MiB`), asks for a value the field does not take: the text was read as if the tag were not
    /// there. (Tags jobctl does not know at all, `!!timestamp` among them, are refused before this.)
    mutating func quantity(_ pair: YAMLPair, name: String, expected: String, integerTag: Bool = false,
                           nullCode: ManifestError.Code = .invalidValue) -> YAMLScalar? {
        guard case .scalar(let scalar) = pair.value, !scalar.isNull else {
            let isNull = Self.isNull(pair.value)
            report(isNull ? nullCode : .wrongType, "'\(name)' must be \(expected), not \(pair.value.summary)",
                   at: isNull ? pair.key.mark : pair.value.mark)
            return nil
        }
        switch scalar.tag {
        case nil, YAMLScalar.stringTag?:
            return scalar
        case YAMLScalar.intTag? where integerTag:
            guard case .notAnInteger = scalar.decimalReading else { return scalar }
            report(.wrongType, "'\(name)' must be \(expected), not '\(scalar.value)' tagged !!int, which is no whole number; "
                   + "drop the tag", at: scalar.mark)
            return nil
        default:
            report(.wrongType, "'\(name)' must be \(expected), not a value tagged \(scalar.shownTag)", at: scalar.mark)
            return nil
        }
    }

    /// Why `010` is refused where a manifest takes a number.
    static let leadingZeroRule = "a number may not start with 0 (YAML 1.1 reads 010 as octal 8, YAML 1.2 as decimal 10): "
        + "write it without the leading zero"

    /// A plain integer in `range`; quoted numbers are strings and are refused, as are null, collections,
    /// floats (`1e400`) and integers outside the range (reported with the range, never trapped on).
    private mutating func integer(_ pair: YAMLPair, in range: ClosedRange<Int>, expected: String) -> Int? {
        let name = keyName(pair.key) ?? "value"
        if case .scalar(let scalar) = pair.value {
            let outOfRange = "'\(name)' must be between \(range.lowerBound) and \(range.upperBound), not \(scalar.value)"
            if scalar.decimalReading == .notAnInteger, scalar.integerReading != .notAnInteger {
                report(.invalidValue, "'\(name)' must be \(expected) written in decimal digits only (no sign, separator or "
                       + "0x/0o prefix), not \(scalar.value)", at: scalar.mark)
                return nil
            }
            switch scalar.decimalReading {
            case .value(let value) where range.contains(value):
                return value
            case .value(let value) where value < range.lowerBound && range.lowerBound == 1:
                report(.invalidValue, "'\(name)' must be at least 1, not \(value)", at: scalar.mark)
                return nil
            case .value, .outOfRange:
                report(.invalidValue, outOfRange, at: scalar.mark)
                return nil
            case .leadingZero:
                report(.invalidValue, "'\(name)' must be \(expected): \(Self.leadingZeroRule), not \(scalar.value)", at: scalar.mark)
                return nil
            case .notAnInteger:
                break
            }
        }
        let isNull = Self.isNull(pair.value)
        report(isNull ? .invalidValue : .wrongType, "'\(name)' must be \(expected), not \(pair.value.summary)",
               at: isNull ? pair.key.mark : pair.value.mark)
        return nil
    }

    /// A YAML boolean (`true`/`false`, and YAML 1.1's `yes`/`no`, `on`/`off`); quoted text is refused.
    private mutating func boolean(_ pair: YAMLPair, expected: String) -> Bool? {
        let name = keyName(pair.key) ?? "value"
        // A `!!bool` tag makes any text a boolean to `resolvedType`: only YAML's words for one are taken.
        if case .scalar(let scalar) = pair.value, scalar.resolvedType == .bool {
            let word = scalar.value.lowercased()
            if ["true", "yes", "on", "y"].contains(word) { return true }
            if ["false", "no", "off", "n"].contains(word) { return false }
        }
        let isNull = Self.isNull(pair.value)
        report(isNull ? .invalidValue : .wrongType, "'\(name)' must be \(expected), not \(pair.value.summary)",
               at: isNull ? pair.key.mark : pair.value.mark)
        return nil
    }

    static func isNull(_ node: YAMLNode) -> Bool {
        if case .scalar(let scalar) = node { return scalar.isNull }
        return false
    }

    // MARK: - Suggestions

    /// ` (did you mean 'x'?)` for the closest candidate within a few edits, or "".
    static func suggestion(for name: String, among candidates: [String]) -> String {
        closest(to: name, among: candidates).map { " (did you mean '\($0)'?)" } ?? ""
    }

    /// The candidate `name` was most likely meant to be: the same but for case, `_` and `-`, or the
    /// nearest within about a third of its length in edits.
    static func closest(to name: String, among candidates: [String]) -> String? {
        func folded(_ text: String) -> String { text.lowercased().filter { $0 != "_" && $0 != "-" } }
        let foldedName = folded(name)
        if let same = candidates.first(where: { folded($0) == foldedName }) { return same }
        // A suggestion is at most a third of its length away, and an edit distance is at least the difference
        // in length: a name more than twice as long as every candidate is taken for a misspelling of none.
        // Not comparing it keeps a long value linear (a 16 MiB `kind:` took minutes, letter by letter).
        guard name.count <= 2 * (candidates.map(\.count).max() ?? 0) else { return nil }
        // Ties go to the spelling closest as written, so `contentTyp` suggests `contentType`, not `content_type`.
        let scored = candidates.map { ($0, NearestName.editDistance(foldedName, folded($0)), NearestName.editDistance(name, $0)) }
        guard let best = scored.min(by: { ($0.1, $0.2) < ($1.1, $1.2) }), best.1 <= max(1, best.0.count / 3) else { return nil }
        return best.0
    }
}
