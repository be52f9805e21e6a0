import Foundation
import Testing
import TestSupport

/// `make install`, the worker's systemd unit and the generated man page, checked with the tools that
/// consume them (make, systemd-analyze, groff).
@Suite("Packaging", .onTestThreads)
struct PackagingTests {
    /// The unit as the project ships it.
    static let unitSource = "\(PackagePaths.root)/packaging/jobctl-worker@.service"

    /// The man page the binary prints.
    private func manPage() throws -> String {
        let output = try runProcess(PackagePaths.jobctlBinary, ["help", "--man"])
        try #require(output.status == 0, "help --man exited \(output.status): \(output.stderr)")
        return output.stdout
    }

    @Test("systemd-analyze verify accepts the worker unit with no warning")
    func unitVerifies() throws {
        let directory = try TemporaryDirectory("unit")
        defer { directory.remove() }
        // verify needs ExecStart's binary and the Documentation= page to exist: the built binary, and the
        // page it generates on a MANPATH of its own.
        let binDirectory = (PackagePaths.jobctlBinary as NSString).deletingLastPathComponent
        let unit = try String(contentsOfFile: Self.unitSource, encoding: .utf8)
        #expect(unit.contains("ExecStart=@BINDIR@/jobctl worker --queue %i"))
        try unit.replacingOccurrences(of: "@BINDIR@", with: binDirectory)
            .write(toFile: directory.file("jobctl-worker@.service"), atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: directory.file("man/man1"), withIntermediateDirectories: true)
        try manPage().write(toFile: directory.file("man/man1/jobctl.1"), atomically: true, encoding: .utf8)

        let output = try runProcess("/usr/bin/systemd-analyze", ["verify", directory.file("jobctl-worker@nightly.service")],
                                    environment: ["MANPATH": directory.file("man")], currentDirectory: directory.path)
        // Unknown or misspelt keys only warn (exit 0), so any output is a failure too.
        #expect(output.status == 0, "systemd-analyze verify exited \(output.status)")
        #expect(output.stderr.isEmpty && output.stdout.isEmpty, "systemd-analyze verify: \(output.stderr)\(output.stdout)")
    }

    @Test("The unit says when the worker is ready, feeds a watchdog, stops gracefully, restarts on failure and writes only its state directory")
    func unitSettings() throws {
        let unit = try String(contentsOfFile: Self.unitSource, encoding: .utf8)
        let settings = unit.split(separator: "\n").filter { !$0.hasPrefix("#") && $0.contains("=") }.map(String.init)
        for expected in ["KillSignal=SIGTERM", "Restart=on-failure", "TimeoutStopSec=30s", "ProtectSystem=strict",
                         "ReadWritePaths=/var/lib/jobctl", "StateDirectory=jobctl", "NoNewPrivileges=yes", "PrivateTmp=yes",
                         "ProtectHome=yes", "User=jobctl", "WorkingDirectory=/var/lib/jobctl",
                         "EnvironmentFile=-/etc/jobctl/worker.env", "Group=jobctl", "StateDirectoryMode=2770", "UMask=0007",
                         "Type=notify", "NotifyAccess=main", "WatchdogSec=3min"] {
            #expect(settings.contains(expected), "missing \(expected)")
        }
    }

    /// The unit set `JOBCTL_DB`, which wins over the configuration file: an operator who named the log in
    /// /etc/jobctl/config.yaml (`db: postgres://…`, as the README shows) submitted there while the
    /// service worker ran on a SQLite file of its own, and nothing said so. With the unit's environment,
    /// the worker's database is the configuration file's.
    @Test("The unit's environment leaves the database to the configuration file the operators' commands read")
    func unitLeavesTheDatabaseToTheConfiguration() throws {
        let unit = try String(contentsOfFile: Self.unitSource, encoding: .utf8)
        var environment: [String: String] = [:]
        for line in unit.split(separator: "\n") where line.hasPrefix("Environment=") {
            for assignment in line.dropFirst("Environment=".count).split(separator: " ") {
                let parts = assignment.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { environment[String(parts[0])] = String(parts[1]) }
            }
        }
        let directory = try TemporaryDirectory("unit-config")
        defer { directory.remove() }
        let configuration = directory.file("config.yaml")
        try "db: \(directory.file("operators.db"))\n".write(toFile: configuration, atomically: true, encoding: .utf8)
        environment["JOBCTL_CONFIG"] = configuration
        // --json: the table wraps a long value (a temporary folder's path) over lines.
        let shown = try runProcess(PackagePaths.jobctlBinary, ["config", "--json"], environment: environment, currentDirectory: directory.path)
        try #require(shown.status == 0, "\(shown.stderr)")
        let settings = try #require((try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])?["settings"]
            as? [[String: Any]], "\(shown.stdout)")
        let database = try #require(settings.first { $0["key"] as? String == "db" }, "\(shown.stdout)")
        #expect(database["value"] as? String == directory.file("operators.db"), "\(database)")
        #expect((database["source"] as? String)?.contains("config.yaml") == true, "\(database)")
    }

    @Test("make install DESTDIR lays out every file with its mode; make uninstall removes them")
    func makeInstall() throws {
        let directory = try TemporaryDirectory("install")
        defer { directory.remove() }
        let destination = directory.file("root")
        let variables = ["DESTDIR=\(destination)", "PREFIX=/usr", "BINARY=\(PackagePaths.jobctlBinary)", "INSTALL_BUILD="]
        let install = try runProcess("/usr/bin/make", ["-s", "-C", PackagePaths.root, "install"] + variables)
        try #require(install.status == 0, "make install exited \(install.status): \(install.stderr)")

        let expected: [(path: String, mode: Int)] = [
            ("usr/bin/jobctl", 0o755),
            ("usr/share/man/man1/jobctl.1", 0o644),
            ("usr/lib/systemd/system/jobctl-worker@.service", 0o644),
            ("usr/lib/sysusers.d/jobctl.conf", 0o644),
            ("usr/share/bash-completion/completions/jobctl", 0o644),
            ("usr/share/zsh/site-functions/_jobctl", 0o644),
            ("usr/share/doc/jobctl/worker.env.example", 0o644),
        ]
        for (path, mode) in expected {
            let attributes = try FileManager.default.attributesOfItem(atPath: "\(destination)/\(path)")
            let permissions = (attributes[.posixPermissions] as? NSNumber)?.intValue
            #expect(permissions == mode, "\(path): mode \(String(permissions ?? -1, radix: 8)), expected \(String(mode, radix: 8))")
            #expect(((attributes[.size] as? NSNumber)?.intValue ?? 0) > 0, "\(path) is empty")
        }
        let unit = try String(contentsOfFile: "\(destination)/usr/lib/systemd/system/jobctl-worker@.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/bin/jobctl worker --queue %i"))
        #expect(!unit.contains("@BINDIR@"))
        let page = try String(contentsOfFile: "\(destination)/usr/share/man/man1/jobctl.1", encoding: .utf8)
        #expect(page == (try manPage()))

        let uninstall = try runProcess("/usr/bin/make", ["-s", "-C", PackagePaths.root, "uninstall"] + variables)
        try #require(uninstall.status == 0, "make uninstall exited \(uninstall.status): \(uninstall.stderr)")
        for (path, _) in expected {
            #expect(!FileManager.default.fileExists(atPath: "\(destination)/\(path)"), "\(path) is still there")
        }
    }

    /// The unit's `ExecStart=` carries PREFIX/bin: systemd reads `%` as a specifier, `$` as a variable and a
    /// space as the end of the path, sed `&` and `|`. `PREFIX=/opt/jobctl%v` installed the binary in
    /// `/opt/jobctl%v/bin` and a unit that ran `/opt/jobctl<kernel release>/bin/jobctl`; such a PREFIX
    /// (and a relative one, which ExecStart= refuses) is refused before anything is installed.
    @Test("make install refuses a PREFIX the unit cannot carry", arguments: ["/opt/jobctl%v", "/opt/a&b", "/opt/a b", "/opt/$$HOME", "opt"])
    func makeInstallRefusesAPrefixTheUnitCannotCarry(_ prefix: String) throws {
        let directory = try TemporaryDirectory("install-prefix")
        defer { directory.remove() }
        let destination = directory.file("root")
        let variables = ["DESTDIR=\(destination)", "PREFIX=\(prefix)", "BINARY=\(PackagePaths.jobctlBinary)", "INSTALL_BUILD="]
        let install = try runProcess("/usr/bin/make", ["-s", "-C", PackagePaths.root, "install"] + variables)
        #expect(install.status != 0, "make install PREFIX=\(prefix) exited 0")
        #expect(install.stderr.contains("make install: "), "\(prefix): \(install.stderr)")
        #expect(!FileManager.default.fileExists(atPath: destination), "\(prefix): files were installed")
    }

    /// The check above pasted PREFIX into shell code: a quote or a line break in it ended in a shell
    /// syntax error instead of the refusal, and a backquoted command in it ran — in the message that
    /// refused it (`PREFIX=/opt/a\`id\`` printed `/opt/auid=0(root)…`). DESTDIR and uninstall's paths
    /// were pasted unchecked into `install` and `rm -f` (`DESTDIR="/tmp/stage dir"` installed into `dir/`
    /// in the current folder). Every such PREFIX or DESTDIR is refused by name, and nothing in it runs.
    @Test("make install and uninstall refuse a hostile PREFIX or DESTDIR without running any of it",
          arguments: ["PREFIX=/opt/a`touch MARKER`", "PREFIX=/opt/a$$(touch MARKER)", "PREFIX=/opt/a'b", "PREFIX=/opt/a\"b",
                      "PREFIX=/opt/a\nb", "DESTDIR=ROOT/stage dir", "DESTDIR=ROOT/a`touch MARKER`", "DESTDIR=ROOT/a'b"])
    func hostilePathsAreRefusedUnrun(_ assignment: String) throws {
        let directory = try TemporaryDirectory("install-hostile")
        defer { directory.remove() }
        let marker = directory.file("marker")
        let root = directory.file("root")
        let variable = assignment.replacingOccurrences(of: "MARKER", with: marker).replacingOccurrences(of: "ROOT", with: root)
            .replacingOccurrences(of: "\\n", with: "\n")
        let defaults = ["DESTDIR=\(root)", "PREFIX=/usr"].filter { !$0.hasPrefix(variable.prefix { $0 != "=" } + "=") }
        for target in ["install", "uninstall"] {
            let output = try runProcess("/usr/bin/make", ["-s", "-C", PackagePaths.root, target, variable] + defaults
                                        + ["BINARY=\(PackagePaths.jobctlBinary)", "INSTALL_BUILD="], currentDirectory: directory.path)
            #expect(output.status != 0, "make \(target) \(variable) exited 0")
            #expect(output.stderr.contains("make \(target): "), "make \(target) \(variable): \(output.stderr)")
            #expect(!FileManager.default.fileExists(atPath: marker), "make \(target) \(variable) ran the command in it")
            let left = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            #expect(left.isEmpty, "make \(target) \(variable) wrote \(left)")
        }
    }

    @Test("The man page is valid roff and documents every command and option of the binary")
    func manPageCoversEveryCommand() throws {
        let page = try manPage()
        let directory = try TemporaryDirectory("man")
        defer { directory.remove() }
        try page.write(toFile: directory.file("jobctl.1"), atomically: true, encoding: .utf8)
        let groff = try runProcess("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", directory.file("jobctl.1")])
        #expect(groff.status == 0 && groff.stderr.isEmpty, "groff: \(groff.stderr)")

        let rendered = try runProcess("/usr/bin/man", ["-l", directory.file("jobctl.1")], environment: ["MANWIDTH": "200", "MAN_KEEP_FORMATTING": ""])
        try #require(rendered.status == 0)
        for command in try CompletionTests.commandNames() {
            #expect(page.contains(".SS \(command)\n"), "no section for \(command)")
            for option in try CompletionTests.helpOptions(command) {
                #expect(rendered.stdout.contains(option), "\(command): \(option) is not in the man page")
            }
        }
        #expect(rendered.stdout.contains("MANIFEST REFERENCE"))
    }

    /// The page had two `.SS completion` sections (the command's and a hand-written one), a hand-written
    /// `.SS help`, and a SYNOPSIS naming --db alone of the global options.
    @Test("The man page has one section per command, help's among them, and its SYNOPSIS names every global option")
    func manPageSectionsAndSynopsis() throws {
        let page = try manPage()
        for command in try CompletionTests.commandNames() + ["help"] {
            #expect(page.components(separatedBy: ".SS \(command)\n").count == 2, "sections for \(command)")
        }
        let synopsis = try #require(page.components(separatedBy: ".SH SYNOPSIS\n").dropFirst().first?
            .components(separatedBy: "\n.SH ").first, "no SYNOPSIS")
        let overview = try runProcess(PackagePaths.jobctlBinary, ["--help"]).stdout
        let globals = CompletionTests.options(inHelp: overview).map(\.long)
        #expect(globals.contains("--config") && globals.contains("--no-color"), "\(globals)")
        for option in globals {
            #expect(synopsis.contains("\\fB\(option.replacingOccurrences(of: "-", with: "\\-"))\\fR"), "SYNOPSIS lacks \(option): \(synopsis)")
        }
    }

    /// The man page's ENVIRONMENT named six of the variables; the README documents every one jobctl
    /// reads (its storage settings table, and the database, configuration and output variables).
    @Test("The man page's ENVIRONMENT names every variable the README documents")
    func manPageNamesEveryVariable() throws {
        let page = try manPage()
        let environment = try #require(page.components(separatedBy: ".SH ENVIRONMENT\n").dropFirst().first?
            .components(separatedBy: "\n.SH ").first, "no ENVIRONMENT section")
        let readme = try String(contentsOfFile: "\(PackagePaths.root)/README.md", encoding: .utf8)
        let table = try #require(readme.components(separatedBy: "### Storage settings (environment)\n").dropFirst().first?
            .components(separatedBy: "\n### ").first, "README has no storage settings section")
        var variables = ["JOBCTL_DB", "JOBCTL_CONFIG", "XDG_CONFIG_HOME", "NO_COLOR", "JOURNAL_STREAM"]
        for row in table.split(separator: "\n") where row.hasPrefix("| `") {
            let firstCell = row.dropFirst(2).prefix { $0 != "|" }
            // `HTTP_PROXY` is named there as the one jobctl does not read.
            variables += firstCell.matches(of: /`([A-Za-z_]+)`/).map { String($0.1) }.filter { $0 != "HTTP_PROXY" }
        }
        #expect(variables.count > 20, "found only \(variables) in README")
        for variable in variables {
            #expect(environment.contains("\\fB\(variable)\\fR"), "the man page's ENVIRONMENT does not name \(variable)")
        }
    }
}

/// The README's copy of the manifest reference is what `jobctl help manifest` prints.
@Suite("Manifest reference in the README", .onTestThreads)
struct ManifestReferenceReadmeTests {
    @Test("The README quotes jobctl help manifest exactly")
    func readmeMatchesTheCLI() throws {
        let output = try runProcess(PackagePaths.jobctlBinary, ["help", "manifest"])
        try #require(output.status == 0)
        #expect(output.stdout.hasPrefix("MANIFEST REFERENCE\n"))
        let readme = try String(contentsOfFile: "\(PackagePaths.root)/README.md", encoding: .utf8)
        let begin = "<!-- BEGIN jobctl help manifest -->\n```text\n", end = "```\n<!-- END jobctl help manifest -->"
        let quoted = try #require(readme.components(separatedBy: begin).dropFirst().first?.components(separatedBy: end).first,
                                  "the README has no block between \(begin) and \(end)")
        #expect(quoted == output.stdout, "README.md's manifest reference differs from 'jobctl help manifest': copy it again")
    }
}
