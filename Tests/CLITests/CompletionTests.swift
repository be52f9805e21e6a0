import Foundation
import Testing
import TestSupport

/// `jobctl completion bash|zsh`, loaded into the real shells.
@Suite("Shell completion", .onTestThreads)
struct CompletionTests {
    /// The command names `jobctl --help` lists (its entries' first lines: a wrapped description goes on
    /// under its column).
    static func commandNames() throws -> [String] {
        let overview = try runProcess(PackagePaths.jobctlBinary, ["--help"]).stdout
        let section = overview.components(separatedBy: "COMMANDS:\n")[1].components(separatedBy: "\n\n")[0]
        return section.split(separator: "\n").filter { !$0.hasPrefix("   ") }.compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    /// The long options `jobctl help COMMAND` lists (its entries' first lines: a wrapped description's
    /// lines are indented further, and may name other options).
    static func helpOptions(_ command: String) throws -> [String] {
        try options(inHelp: runProcess(PackagePaths.jobctlBinary, ["help", command]).stdout).map(\.long)
    }

    /// The options of the OPTIONS list of a help text: each long name, and its value's name if it takes one.
    static func options(inHelp help: String) -> [(long: String, value: String?)] {
        let section = help.components(separatedBy: "OPTIONS:\n")[1].components(separatedBy: "\n\n")[0]
        return section.split(separator: "\n").filter { $0.hasPrefix("  -") }.compactMap { line in
            let words = line.split(separator: " ")
            guard let index = words.firstIndex(where: { $0.hasPrefix("--") }) else { return nil }
            let value = words.dropFirst(index + 1).first.flatMap { $0.hasPrefix("<") ? String($0) : nil }
            return (String(words[index].trimmingCharacters(in: CharacterSet(charactersIn: ","))), value)
        }
    }

    /// The global options that take a value (`--db`, `--config`), as `jobctl --help` lists them.
    static func globalOptionsTakingValue() throws -> [String] {
        options(inHelp: try runProcess(PackagePaths.jobctlBinary, ["--help"]).stdout).filter { $0.value != nil }.map(\.long)
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

    /// Whether bash would complete file names for the last of `words`: the script is registered with
    /// `-o default`, which offers them when the function leaves COMPREPLY empty, unless it turned that off
    /// for this word (`compopt +o default`, seen here through a function of that name: the builtin works
    /// only while readline completes).
    private func bashOffersFiles(_ words: [String]) throws -> Bool {
        let array = words.map { "'\($0)'" }.joined(separator: " ")
        let program = """
        source <('\(PackagePaths.jobctlBinary)' completion bash) || exit 3
        files=yes
        compopt() { [[ "$*" == "+o default" ]] && files=no; return 0; }
        COMP_WORDS=(\(array)); COMP_CWORD=\(words.count - 1)
        _jobctl
        (( ${#COMPREPLY[@]} > 0 )) && files=no
        echo "$files"
        """
        let output = try runProcess("/bin/bash", ["--norc", "--noprofile", "-c", program])
        try #require(output.status == 0, "bash exited \(output.status): \(output.stderr)")
        return output.stdout == "yes\n"
    }

    /// `jobctl --config c.yaml <TAB>` offered nothing, and `jobctl --config <TAB>` offered command names:
    /// the script skipped only `--db`'s value when looking for the command.
    @Test("bash finds the command after every global option that takes a value, and completes that value with files")
    func bashAfterGlobalOptions() throws {
        let commands = try Self.commandNames()
        let globals = try Self.globalOptionsTakingValue()
        #expect(Set(globals).isSuperset(of: ["--db", "--config"]), "\(globals)")
        for global in globals {
            #expect(Set(try bashCompletions(["jobctl", global, "x.yaml", ""])).isSuperset(of: commands), "\(global)")
            #expect(try bashCompletions(["jobctl", global, "x.yaml", "list", "--st"]) == ["--state"], "\(global)")
            #expect(try bashCompletions(["jobctl", global, "=", "x.yaml", "li"]) == ["list"], "\(global)=")
            #expect(try bashCompletions(["jobctl", "--no-color", global, "x.yaml", "worker", "--log-format", ""]) == ["text", "json"])
            #expect(try bashCompletions(["jobctl", global, ""]).isEmpty, "\(global) <TAB> offered commands")
            #expect(try bashOffersFiles(["jobctl", global, ""]), "\(global)'s value is a file")
            #expect(try bashOffersFiles(["jobctl", "list", global, ""]), "list \(global)'s value is a file")
        }
    }

    /// File names are offered for files only: `list --queue <TAB>`, `show <TAB>` listed the folder.
    @Test("bash offers file names for files, and nothing for a queue, a time, a number or a job id")
    func bashFilesOnlyForFiles() throws {
        for words in [["jobctl", "submit", ""], ["jobctl", "--db", ""], ["jobctl", "result", "-o", ""], ["jobctl", "archive", "--to", ""],
                      ["jobctl", "audit", "--from", ""], ["jobctl", "archive", "verify", ""], ["jobctl", "list", "--config", ""]] {
            #expect(try bashOffersFiles(words), "\(words)")
        }
        for words in [["jobctl", "list", "--queue", ""], ["jobctl", "list", "--batch", ""], ["jobctl", "list", "--limit", ""],
                      ["jobctl", "submit", "--at", ""], ["jobctl", "archive", "--before", ""], ["jobctl", "worker", "-c", ""],
                      ["jobctl", "worker", "--lease", ""], ["jobctl", "show", ""], ["jobctl", "cancel", "x", ""], ["jobctl", "zz"],
                      ["jobctl", "help", "zz"], ["jobctl", "completion", "bash", ""]] {
            #expect(try !bashOffersFiles(words), "\(words)")
        }
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

    /// What zsh's completion offers for each of `lines` (the text typed before TAB), with the script
    /// `jobctl completion zsh` printed on `fpath` and `compinit` run: a real interactive zsh on a
    /// pseudo-terminal (zsh/zpty), its matches read where `_arguments` and `_describe` add them (compadd),
    /// typed in a folder holding one file, `probe-file.yaml`.
    private func zshCompletions(_ lines: [String]) throws -> [String: [String]] {
        let directory = try TemporaryDirectory("zsh-complete")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.file("functions"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory.file("work"), withIntermediateDirectories: true)
        try "".write(toFile: directory.file("work/probe-file.yaml"), atomically: true, encoding: .utf8)
        let script = try runProcess(PackagePaths.jobctlBinary, ["completion", "zsh"])
        try #require(script.status == 0)
        try script.stdout.write(toFile: directory.file("functions/_jobctl"), atomically: true, encoding: .utf8)
        // Each match is printed as it is added; TAB is bound to a widget that completes, prints an end
        // mark and clears the line for the next one.
        try #"""
        PROMPT=''
        unsetopt autolist
        autoload -Uz compinit; compinit -u -D
        compadd() {
            if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi
            typeset -a hits
            builtin compadd -A hits "$@"
            local hit
            for hit in $hits; do print -r -- "MATCH:$hit:END"; done
        }
        _capture_complete() { zle complete-word; print -r -- "DONE""MARK"; zle kill-whole-line }
        zle -N _capture_complete
        bindkey '^I' _capture_complete
        print -r -- "READY""MARK"
        """#.write(toFile: directory.file("setup.zsh"), atomically: true, encoding: .utf8)
        try #"""
        zmodload zsh/zpty || exit 3
        zpty shell zsh -f -i
        zpty -w shell "fpath=(${(q)1}/functions \$fpath); source ${(q)1}/setup.zsh"
        local line
        while zpty -r shell line; do [[ $line == *READYMARK* ]] && break; done
        for typed in "${@[2,-1]}"; do
            print -r -- "LINE:$typed"
            zpty -w -n shell "$typed"$'	'
            while zpty -r shell line; do
                [[ $line == *DONEMARK* ]] && break
                [[ $line =~ 'MATCH:(.*):END' ]] && print -r -- "$match[1]"
            done
        done
        zpty -d shell
        """#.write(toFile: directory.file("capture.zsh"), atomically: true, encoding: .utf8)
        let output = try runProcess("/usr/bin/zsh", ["-f", directory.file("capture.zsh"), directory.path] + lines,
                                    currentDirectory: directory.file("work"), seconds: 120)
        try #require(output.status == 0, "zsh exited \(output.status): \(output.stderr)")
        var offered: [String: [String]] = [:]
        var current: String?
        for line in output.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("LINE:") {
                current = String(line.dropFirst(5))
                offered[current!] = []
            } else if let current, !line.isEmpty {
                offered[current]?.append(line.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        #expect(Set(offered.keys) == Set(lines), "\(output.stdout)")
        return offered
    }

    /// zsh took `$words[2]` for the command, so `jobctl --db x.db list --<TAB>` offered nothing, and at the
    /// top it offered commands only (never --db, --config, --version, --no-color); a queue, a time or a
    /// number was completed with file names.
    @Test("zsh completes after global options, offers them first, and offers file names only for files",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh"), "zsh is not installed"))
    func zshCompletes() throws {
        let commands = try Self.commandNames()
        let overview = try runProcess(PackagePaths.jobctlBinary, ["--help"]).stdout
        let globals = try Self.globalOptionsTakingValue()
        #expect(Set(globals).isSuperset(of: ["--db", "--config"]), "\(globals)")
        let listOptions = try Self.helpOptions("list")
        let probe = "probe-file.yaml"
        let noFiles = ["jobctl list --queue ", "jobctl list --batch ", "jobctl list --limit ", "jobctl submit --at ",
                       "jobctl archive --before ", "jobctl worker -c ", "jobctl worker --lease ", "jobctl show ", "jobctl cancel "]
        let files = ["jobctl submit ", "jobctl --db ", "jobctl result -o ", "jobctl archive --to ", "jobctl list --config "]
        var lines = ["jobctl ", "jobctl --", "jobctl list --state ", "jobctl help he", "jobctl archive ", "jobctl archive verify "]
            + noFiles + files
        for global in globals {
            lines += ["jobctl \(global) x.yaml ", "jobctl \(global) x.yaml list --", "jobctl \(global) "]
        }
        let offered = try zshCompletions(lines)
        #expect(Set(offered["jobctl "] ?? []).isSuperset(of: commands), "\(offered["jobctl "] ?? [])")
        #expect(Set(offered["jobctl --"] ?? []) == Set(Self.options(inHelp: overview).map(\.long)), "\(offered["jobctl --"] ?? [])")
        #expect(offered["jobctl list --state "] == ["queued", "running", "paused", "succeeded", "failed", "cancelled"])
        #expect(offered["jobctl help he"] == ["help"])
        // `archive verify FILE`: the choice first, then the file after it (not the choice again).
        #expect(offered["jobctl archive "]?.contains("verify") == true, "\(offered["jobctl archive "] ?? [])")
        #expect(offered["jobctl archive verify "] == [probe], "\(offered["jobctl archive verify "] ?? [])")
        for global in globals {
            #expect(Set(offered["jobctl \(global) x.yaml "] ?? []).isSuperset(of: commands), "\(global)")
            #expect(Set(offered["jobctl \(global) x.yaml list --"] ?? []) == Set(listOptions), "\(global)")
            #expect(offered["jobctl \(global) "] == [probe], "\(global)")
        }
        for line in noFiles { #expect(offered[line] == [], "'\(line)' offered \(offered[line] ?? [])") }
        for line in files { #expect(offered[line]?.contains(probe) == true, "'\(line)' offered \(offered[line] ?? [])") }
    }

    @Test("An unknown shell is a usage error")
    func unknownShell() throws {
        let output = try runProcess(PackagePaths.jobctlBinary, ["completion", "fish"])
        #expect(output.status == 64)
        #expect(output.stderr.contains("unknown shell 'fish'; expected bash or zsh"))
    }
}
