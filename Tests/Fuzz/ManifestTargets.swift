import Foundation
@testable import jobctl
@testable import JobModel
@testable import Manifest
@testable import StorePort

// MARK: - manifest: `jobctl submit FILE`

/// The manifest reader end to end, as `submit` runs it: bytes → UTF-8 check → libyaml → `ManifestReader`
/// (every field's grammar: sizes, rates, durations, times, references, metadata, after:, folders and
/// globs under a small scratch folder) → either the `FILE:LINE:COL` errors, rendered with their quoted
/// lines, or jobs, whose specs must survive the store's JSON (what the worker later reads back).
let manifestTarget = FuzzTarget(
    name: "manifest",
    summary: "ManifestParser.parseJobs(data:) + ManifestErrors.render(); specs round-trip through StoreJSON",
    setUp: {
        let base = "\(Harness.scratch)/base"
        for folder in ["", "/dir", "/dir/sub", "/empty"] {
            try? FileManager.default.createDirectory(atPath: base + folder, withIntermediateDirectories: true)
        }
        for (name, text) in [("a.txt", "alpha\n"), ("b.bin", "\u{0}\u{1}"), ("dir/x.txt", "x"), ("dir/sub/y.json", "{}"),
                             ("dir/z.tmp", ""), ("space name.txt", "s")] {
            _ = Harness.scratchFile("base/\(name)", Data(text.utf8))
        }
    },
    run: { input in
        var parser = ManifestParser(baseDirectory: "\(Harness.scratch)/base", checksSources: true)
        parser.nowMs = 1_764_410_400_000
        switch parser.parseJobs(data: input.data, path: "jobs/fuzz.yaml") {
        case .failure(let errors):
            let rendered = errors.render()
            _ = errors.description
            Harness.note(rendered)
        case .success(let jobs):
            for job in jobs {
                Harness.note("job at \(job.line):\(job.column): \((try? StoreJSON.encode(job.spec)) ?? "?")")
                checkSpecRoundTrip(job.spec)
                for dependency in job.dependencies { _ = dependency.sourceLine }
            }
        }
    })

/// A spec as the store writes it must read back as itself, by the hand-written reader and by Foundation's,
/// and the hand-written writer must give Foundation's bytes.
func checkSpecRoundTrip(_ spec: JobSpec) {
    guard let text = try? StoreJSON.encode(spec) else { fatalError("round trip: a parsed spec cannot be encoded: \(spec)") }
    let foundation = try? StoreJSON.foundationEncode(spec)
    expect(foundation == text, "FastJSON wrote \(text) where Foundation writes \(foundation ?? "nothing")")
    let back = try? StoreJSON.decode(JobSpec.self, text, what: "spec")
    expect(back == spec, "spec \(text) reads back as \(String(describing: back))")
    let slow = try? StoreJSON.foundationDecode(JobSpec.self, text, what: "spec")
    expect(slow == spec, "spec \(text) reads back through Foundation as \(String(describing: slow))")
}

// MARK: - config: the configuration file (`--config FILE`, /etc/jobctl/config.yaml)

/// `Configuration.load`: the file's checks (a regular file only its owner may write), `SettingsFile` (YAML),
/// then each setting's form as the variable or flag it stands for checks it.
let configTarget = FuzzTarget(
    name: "config",
    summary: "Configuration.load(flag:environment:) on the input as a config.yaml (SettingsFile + each setting's check)",
    run: { input in
        let path = Harness.scratchFile("config.yaml", input.data)
        do {
            let configuration = try Configuration.load(flag: path, environment: [:])
            _ = configuration.environment(over: [:])
            for setting in Setting.all {
                if let values = configuration.fileValues[setting.key] { _ = values.values.map(setting.show) }
            }
        } catch {
            Harness.note(String(describing: error))
        }
    })

// MARK: - arguments: the command line

/// `ParsedArguments.parse` against a command chosen by the first byte, the rest split at NUL bytes into
/// arguments: every option's own check (sizes, rates, durations, times, queue names, numbers) runs there.
let argumentsTarget = FuzzTarget(
    name: "arguments",
    summary: "ParsedArguments.parse(_:for:) for CommandRunner.commands[first byte], arguments split at NUL",
    run: { input in
        let commands = CommandRunner.commands
        let command = commands[Int(input.selector) % commands.count]
        let arguments = input.bytes.count > 1 ? input.restParts : []
        do {
            let parsed = try ParsedArguments.parse(arguments, for: command)
            _ = parsed
        } catch {
            _ = String(describing: error)
        }
    })
