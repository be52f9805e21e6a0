import Foundation

extension Commands {
    static let completion = CommandSpec(
        name: "completion",
        abstract: "Print a shell completion script (bash or zsh).",
        arguments: [ArgumentSpec("shell", choices: ShellCompletion.Shell.allCases.map(\.rawValue), help: "bash or zsh.")],
        discussion: """
        The script is generated from the command table, so it offers exactly the commands, options and
        option values (states, kinds, formats) this binary accepts. Load it for the current shell with
        'source <(jobctl completion bash)'; 'make install' puts both scripts where bash-completion and zsh
        find them.
        """
    ) { arguments, _ in
        let name = arguments.positionals[0]
        guard let shell = ShellCompletion.Shell(rawValue: name) else {
            throw UsageError("unknown shell '\(name)'; expected bash or zsh")
        }
        emit(ShellCompletion.script(for: shell, commands: CommandRunner.documentedCommands))
        return ExitCode.ok
    }
}
