import Foundation
import JobLifecycle
import JobModel
import Manifest
import StorePort

extension Commands {
    static let submit = CommandSpec(
        name: "submit",
        abstract: "Append the jobs of one or more YAML manifests to the event log.",
        arguments: [ArgumentSpec("manifest", variadic: true, help: "A manifest file, or - for standard input.")],
        options: [Options.json.help("Print an array of {id, key, kind, created} instead of one id per line."), Options.dryRun, Options.noCheckSources],
        discussion: """
        Every manifest is validated before anything is stored: one bad job anywhere submits nothing and
        prints FILE:LINE:COL: error: lines (exit 65). Jobs whose idempotency key already exists are not
        created again; their existing id is printed. When submit returns 0 the jobs are on disk.
        """
    ) { arguments, context in
        var specs: [JobSpec] = []
        var failures: [String] = []
        var readStdin = false
        for path in arguments.positionals {
            let data: Data
            let displayPath: String
            let baseDirectory: String
            if path == "-" {
                guard !readStdin else { throw UsageError("'-' (standard input) can be given only once") }
                readStdin = true
                data = ManifestParser().readContents(ofDescriptor: STDIN_FILENO) ?? Data()
                displayPath = "<stdin>"
                baseDirectory = FileManager.default.currentDirectoryPath
            } else {
                guard let contents = ManifestParser().readContents(atPath: path) else {
                    failures.append("\(path): error: cannot read the manifest (\(String(cString: strerror(errno))))")
                    continue
                }
                data = contents
                displayPath = path
                baseDirectory = URL(fileURLWithPath: path).standardizedFileURL.deletingLastPathComponent().path
            }
            switch ManifestParser(baseDirectory: baseDirectory, checksSources: !arguments[Options.noCheckSources]).parse(data: data, path: displayPath) {
            case .success(let parsed): specs += parsed
            case .failure(let errors): failures.append(errors.render())
            }
        }
        if !failures.isEmpty {
            emitError(failures.joined(separator: "\n"))
            emitError("Error: nothing was submitted")
            return ExitCode.dataError
        }
        let display = Display.redacting
        if arguments[Options.dryRun] {
            if arguments[Options.json] {
                emit(try jsonText(specs.map { SpecView($0, display: display) }))
            } else {
                for spec in specs {
                    emit("\(spec.kind.rawValue)  \(spec.source.map(display.location) ?? "-") → \(spec.destination.map(display.location) ?? "-")")
                }
                emit("\(plural(specs.count, "job")) valid; nothing submitted (--dry-run)")
            }
            return ExitCode.ok
        }
        let store = try context.openStore(create: true)
        let outcomes = try store.submit(specs, actor: context.actor, now: Clock.nowMs())
        if arguments[Options.json] {
            struct Row: Encodable { let id: String; let key: String?; let kind: String; let created: Bool }
            emit(try jsonText(outcomes.map { Row(id: $0.id, key: $0.key, kind: $0.kind.rawValue, created: $0.created) }))
        } else {
            for outcome in outcomes { emit(outcome.id) }
            let existing = outcomes.filter { !$0.created }.count
            if existing > 0 {
                emitError("note: \(plural(existing, "job")) already existed with the same key and \(existing == 1 ? "was" : "were") not submitted again")
            }
        }
        return ExitCode.ok
    }
}
