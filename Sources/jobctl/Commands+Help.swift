import Foundation
import JobModel
import Manifest

extension Options {
    static let man = Flag("man", help: "Print the manual page (roff) instead: the whole of it, so no topic goes with it.")
}

extension Commands {
    /// The topics `jobctl help` takes besides command names.
    static let helpTopics = ["manifest"]

    /// jobctl help [TOPIC], also `jobctl --help`, `jobctl -h`. Not in `CommandRunner.commands`: the
    /// runner answers it before any configuration is read, so a broken configuration file cannot stop
    /// help from being shown. Declared as a command so that its own help (`jobctl help help`), the
    /// overview, the man page and the completions describe it as they describe every other.
    static let help = CommandSpec(
        name: "help",
        abstract: "Show help for a command, the manifest reference (help manifest), or the manual page (help --man).",
        arguments: [ArgumentSpec("topic", optional: true, choices: CommandRunner.commands.map(\.name) + ["help"] + helpTopics,
                                 help: "A command, or manifest for the manifest reference; none for the overview.")],
        options: [Options.man],
        discussion: """
        jobctl help COMMAND prints the command's help, as jobctl COMMAND --help does; jobctl help manifest
        prints the manifest reference; jobctl help --man prints the manual page, jobctl(1), in roff (make
        install installs it); jobctl help, jobctl --help and jobctl -h print the overview.
        """
    ) { arguments, _ in
        try CommandRunner.help(arguments, layout: .forStandardOutput())
    }
}

extension CommandRunner {
    /// Every command the overview, the man page and the completions describe: the table and `help`.
    static var documentedCommands: [CommandSpec] { commands + [Commands.help] }

    /// Runs `jobctl help`, parsed against `Commands.help`.
    static func help(_ arguments: ParsedArguments, layout: HelpLayout) throws -> Int32 {
        let topics = arguments.positionals
        if arguments[Options.man] {
            // The man page is the whole of it: a topic with it was silently ignored.
            if let topic = topics.first {
                throw UsageError("--man prints the whole manual page and takes no topic (got '\(topic)'): run jobctl help --man")
            }
            emit(ManPage.roff(commands: documentedCommands))
            return ExitCode.ok
        }
        if arguments[Options.help] {
            emit(Commands.help.helpText(layout))
            return ExitCode.ok
        }
        if topics.count > 1 {
            throw UsageError("help takes one topic (got '\(topics.joined(separator: "' '"))')")
        }
        guard let topic = topics.first else {
            emit(overview(layout))
            return ExitCode.ok
        }
        if topic == "manifest" {
            emit(ManifestReference.text)
            return ExitCode.ok
        }
        guard let command = documentedCommands.first(where: { $0.name == topic }) else {
            let hint = NearestName.nearest(to: topic, among: documentedCommands.map(\.name) + Commands.helpTopics, within: 2)
                .map { " (did you mean '\($0)'?)" } ?? ""
            throw UsageError("unknown command '\(topic)'\(hint)")
        }
        emit(command.helpText(layout))
        return ExitCode.ok
    }
}
