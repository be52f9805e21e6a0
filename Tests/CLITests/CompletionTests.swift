import Foundation
import Testing
import TestSupport

/// `jobctl completion bash|zsh`, loaded into the real shells.
@Suite("Shell completion", .onTestThreads)
struct CompletionTests {
    /// The command names `jobctl --help` lists.
    static func commandNames() throws -> [String] {
        let overview = try runProcess(PackagePaths.jobctlBinary, ["--help"]).stdout
        let section = overview.components(separatedBy: "COMMANDS:\n")[1].components(separatedBy: "\n\n")[0]
        return section.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    /// The long options `jobctl help COMMAND` lists.
    static func helpOptions(_ command: String) throws -> [String] {
        let help = try runProcess(PackagePaths.jobctlBinary, ["help", command]).stdout
        let section = help.components(separatedBy: "OPTIONS:\n")[1].components(separatedBy: "\n\n")[0]
        return section.split(separator: "\n").compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("--") }.map { String($0.trimmingCharacters(in: CharacterSet(charactersIn: ","))) }
        }
    }

    /// What bash's completion function offers for `words` (the last one being completed), with the
    /// script `jobctl completion bash` printed loaded.
    private func bashCompletions(_ words: [String]) throws -> [String] {
        let array = words.map { "'\($0)'" }.joined(separator: " ")
        let program = """
        source <('\(PackagePaths.jobctlBinary)' completion bash) || exit 3
        COMP_WORDS=(\(array)); COMP_CWORD=\(words.count - 1)
        _jobctl
        printf '%s\\n' "${COMPREPLY[@]}"
        """
        let output = try runProcess("/bin/bash", ["--norc", "--noprofile", "-c", program])
        try #require(output.status == 0, "bash exited \(output.status): \(output.stderr)")
        #expect(output.stderr.isEmpty, "bash: \(output.stderr)")
        return output.stdout.split(separator: "\n").map(String.init)
    }

    @Test("bash registers the function, with file names as the fallback")
    func bashRegisters() throws {
        let program = "source <('\(PackagePaths.jobctlBinary)' completion bash) && complete -p jobctl"
        let output = try runProcess("/bin/bash", ["--norc", "--noprofile", "-c", program])
        #expect(output.status == 0)
        #expect(output.stdout == "complete -o default -F _jobctl jobctl\n")
    }

    @Test("bash offers every command, help topics, option values and shells")
    func bashOffers() throws {
        let commands = try Self.commandNames()
        #expect(commands.contains("completion") && commands.contains("worker"))
        #expect(Set(try bashCompletions(["jobctl", ""])).isSuperset(of: commands + ["help", "--db", "--version"]))
        #expect(try bashCompletions(["jobctl", "li"]) == ["list"])
        #expect(try bashCompletions(["jobctl", "--db", "x.db", "wor"]) == ["worker"])
        #expect(try bashCompletions(["jobctl", "list", "--st"]) == ["--state"])
        #expect(try bashCompletions(["jobctl", "list", "--state", ""]) == ["queued", "running", "paused", "succeeded", "failed", "cancelled"])
        #expect(try bashCompletions(["jobctl", "list", "--kind", "down"]) == ["download-file", "download-memory"])
        #expect(try bashCompletions(["jobctl", "worker", "--log-format", ""]) == ["text", "json"])
        // --opt=value: bash hands the option, '=' and the value as separate words.
        #expect(try bashCompletions(["jobctl", "list", "--state", "=", "pa"]) == ["paused"])
        #expect(try bashCompletions(["jobctl", "worker", "--log-format", "="]) == ["text", "json"])
        #expect(try bashCompletions(["jobctl", "help", "man"]) == ["manifest"])
        #expect(try bashCompletions(["jobctl", "completion", ""]) == ["bash", "zsh"])
        // A choice already given is not offered again: after `archive verify` comes a file.
        #expect(try bashCompletions(["jobctl", "archive", ""]) == ["verify"])
        #expect(try bashCompletions(["jobctl", "archive", "verify", ""]).isEmpty)
        #expect(try bashCompletions(["jobctl", "--db", "x.db", "archive", "verify", "v"]).isEmpty)
        // A value with no fixed set and a manifest argument: nothing, so bash falls back to file names.
        #expect(try bashCompletions(["jobctl", "submit", ""]).isEmpty)
        #expect(try bashCompletions(["jobctl", "list", "--queue", ""]).isEmpty)
    }

    @Test("bash offers exactly the options each command's help lists")
    func bashOptionsMatchHelp() throws {
        for command in try Self.commandNames() {
            let offered = try bashCompletions(["jobctl", command, "--"])
            #expect(Set(offered) == Set(try Self.helpOptions(command)), "\(command)")
        }
    }

    @Test("The zsh script is valid zsh and describes every command",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh"), "zsh is not installed"))
    func zshScript() throws {
        let output = try runProcess(PackagePaths.jobctlBinary, ["completion", "zsh"])
        try #require(output.status == 0)
        #expect(output.stdout.hasPrefix("#compdef jobctl\n"))
        let directory = try TemporaryDirectory("zsh")
        defer { directory.remove() }
        try output.stdout.write(toFile: directory.file("_jobctl"), atomically: true, encoding: .utf8)
        let check = try runProcess("/usr/bin/zsh", ["-n", directory.file("_jobctl")])
        #expect(check.status == 0 && check.stderr.isEmpty, "zsh -n: \(check.stderr)")
        for command in try Self.commandNames() {
            #expect(output.stdout.contains("        \(command))\n"), "no case for \(command)")
        }
        #expect(output.stdout.contains("'*--state[") && output.stdout.contains("(queued running paused succeeded failed cancelled)"))
    }

    @Test("An unknown shell is a usage error")
    func unknownShell() throws {
        let output = try runProcess(PackagePaths.jobctlBinary, ["completion", "fish"])
        #expect(output.status == 64)
        #expect(output.stderr.contains("unknown shell 'fish'; expected bash or zsh"))
    }
}
