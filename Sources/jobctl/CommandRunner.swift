import EventStore
import Foundation
import JobLifecycle
import JobModel
import Manifest
import PostgresStore
import StorePort

/// The version printed by `--version`.
let jobctlVersion = "0.1.0"

/// Finds the command, parses its arguments, runs it, and turns errors into messages and exit codes.
enum CommandRunner {
    static let commands: [CommandSpec] = [
        Commands.submit, Commands.list, Commands.show, Commands.history, Commands.audit,
        Commands.watch, Commands.result,
        Commands.pause, Commands.resume, Commands.cancel, Commands.retry,
        Commands.worker, Commands.stats, Commands.replay, Commands.migrate, Commands.orphans,
        Commands.completion, Commands.archive, Commands.backup, Commands.config,
    ]

    /// Runs one command line. SIGTERM and SIGINT are blocked on entry (see `main.swift`); only `worker`
    /// keeps them blocked, for its own handlers — every other command gets the default behaviour back.
    static func run(_ rawArguments: [String]) -> Int32 {
        // Global options may come before the command (`jobctl --db x.db list`): move them after it.
        var globals: [String] = []
        var rest = rawArguments[...]
        while let next = rest.first {
            if GlobalOptions.takingValue.contains(next), rest.count >= 2 {
                globals += rest.prefix(2)
                rest = rest.dropFirst(2)
            } else if GlobalOptions.takingValue.contains(where: { next.hasPrefix($0 + "=") }) || GlobalOptions.flags.contains(next) {
                globals.append(next)
                rest = rest.dropFirst()
            } else {
                break
            }
        }
        let arguments = rest.first.map { [$0] + globals + rest.dropFirst() } ?? globals
        if arguments.first != Commands.worker.name {
            ShutdownSignals.unblock()
        }
        guard let first = arguments.first else {
            emit(overview(.forStandardOutput()))
            return ExitCode.ok
        }
        switch first {
        case "--version", "version":
            if let extra = rest.dropFirst().first {
                return usageFailure("'\(first)' takes no arguments (got '\(extra)')", usage: "jobctl --version\n  See 'jobctl --help'.")
            }
            // With the log schemas it knows: two builds of one version may differ there, and a jobctl
            // that refuses a log as newer names the schema it found (which one to upgrade to).
            emit("jobctl \(jobctlVersion) (event log schema: SQLite \(EventStore.knownSchemaVersion), "
                 + "PostgreSQL \(PostgresStore.knownSchemaVersion))")
            return ExitCode.ok
        case "help", "-h", "--help":
            // `jobctl --help list` is `jobctl help list`, as git takes it.
            let usage = Commands.help.usageHint
            do {
                return try help(try ParsedArguments.parse(Array(arguments.dropFirst()), for: Commands.help, checkingArity: false),
                                layout: .forStandardOutput())
            } catch let error as UsageError {
                return usageFailure(error.message, usage: usage)
            } catch {
                return usageFailure(String(describing: error), usage: usage)
            }
        default:
            break
        }
        guard let command = commands.first(where: { $0.name == first }) else {
            let hint = NearestName.nearest(to: first, among: documentedCommands.map(\.name), within: 2)
                .map { " (did you mean '\($0)'?)" } ?? ""
            return usageFailure("unknown command '\(first)'\(hint)", usage: topUsage)
        }
        let parsed: ParsedArguments
        do {
            parsed = try ParsedArguments.parse(Array(arguments.dropFirst()), for: command)
        } catch let error as UsageError {
            return usageFailure(error.message, usage: command.usageHint)
        } catch {
            return usageFailure(String(describing: error), usage: command.usageHint)
        }
        if parsed[Options.help] {
            emit(command.helpText(.forStandardOutput()))
            return ExitCode.ok
        }
        let processEnvironment = ProcessInfo.processInfo.environment
        let configuration: Configuration
        do {
            configuration = try Configuration.load(flag: try parsed.value(Options.config), environment: processEnvironment)
        } catch {
            emitError("Error: configuration: \(TerminalText.clipped(String(describing: error), limit: 4 * TerminalText.maximumMessageLength))")
            return ExitCode.usage
        }
        // OpenSSL reads $OPENSSL_CONF at its first use, whatever the command (opening a log hashes its
        // migrations): one that would hold it up stops every command here, but `config`, which shows and
        // names it — its own checks (OpenSSL reads a service-account key) run without it.
        if let problem = OpenSSLConfiguration.problem(processEnvironment) {
            guard command.name == Commands.config.name else { return usageFailure(problem, usage: command.usageHint) }
            unsetenv(OpenSSLConfiguration.variable)
        }
        let filled = configuration.arguments(parsed, for: command)
        let context = Context(arguments: filled, environment: configuration.environment(over: processEnvironment),
                              configuration: configuration, processEnvironment: processEnvironment)
        do {
            return try command.run(filled, context)
        } catch let error as UsageError {
            if FailureReport.report(error.message, exitCode: ExitCode.usage) { return ExitCode.usage }
            return usageFailure(error.message, usage: command.usageHint)
        } catch let error as CommandFailure {
            if FailureReport.report(error.message, exitCode: error.exitCode) { return error.exitCode }
            emitError("Error: \(TerminalText.printable(TerminalText.clipped(error.message)))")
            return error.exitCode
        } catch {
            if FailureReport.report(String(describing: error), exitCode: ExitCode.failure) { return ExitCode.failure }
            emitError("Error: \(TerminalText.printable(TerminalText.clipped(String(describing: error))))")
            return ExitCode.failure
        }
    }

    /// An error is one line: a line break in a value it quotes (a path, an id typed on the command line)
    /// is shown as `\u{A}`, so no input can fake a line of output after it.
    static func usageFailure(_ message: String, usage: String) -> Int32 {
        emitError("Error: \(TerminalText.printable(TerminalText.clipped(message)))\nUsage: \(usage)")
        return ExitCode.usage
    }

    /// The usage of a command line whose command is unknown (or not yet known), with where to read more
    /// in the form every command's usage error gives it (`See 'jobctl help list'.`).
    static let topUsage = "jobctl <command> [<options>]\n  See 'jobctl --help'."

    /// The overview: `jobctl`, `jobctl help`, `jobctl --help`.
    static func overview(_ layout: HelpLayout) -> String {
        var lines = layout.hanging("OVERVIEW: ", "jobctl \(jobctlVersion) — a durable, event-sourced queue of file transfers") + [""]
        lines += layout.prose("""
            Jobs (upload a file or data, download to a file or to memory, fetch a download URL) are described
            in YAML manifests, appended to an event log (a SQLite file, or PostgreSQL once workers span
            machines), and run by worker processes under leases.
            """)
        lines += ["", "USAGE: jobctl <command> [<options>]", "", "COMMANDS:"]
        let nameWidth = (documentedCommands.map(\.name.count).max() ?? 0) + 2
        for command in documentedCommands {
            lines += layout.entry(command.name, command.abstract, column: nameWidth + 2)
        }
        lines += ["", "OPTIONS:"]
        // Every global option, from the declarations each command's help lists too (in the same order,
        // -h last): this list used to be written out by hand and had lost --config and --no-color.
        let options = CommandSpec.globalOptions.map(\.spec)
        lines += options.filter { $0.long != Options.help.spec.long }.flatMap(layout.option)
        lines += layout.option(OptionSpec("version", help: "Show the version."))
        lines += layout.option(Options.help.spec)
        lines += [""] + layout.prose("See 'jobctl help <command>' for detailed help, 'jobctl help manifest' for the manifest reference, "
                                     + "'jobctl help --man' for the manual page in roff.", indent: "  ")
        lines += [""] + layout.table(ExitCode.helpText)
        return lines.joined(separator: "\n")
    }
}

/// The global options (`CommandSpec.globalOptions`) as the command line is read before the command's
/// name, from the same declarations as every help and the completions.
enum GlobalOptions {
    /// `--db`, `--config`: each takes the word after it (or `=VALUE`).
    static let takingValue = CommandSpec.globalOptions.map(\.spec).filter { $0.valueName != nil }.map { "--" + $0.long }
    /// `--no-color`. (`--help` before the command is `jobctl help`.)
    static let flags = CommandSpec.globalOptions.map(\.spec)
        .filter { $0.valueName == nil && $0.long != Options.help.spec.long }.map { "--" + $0.long }
}
