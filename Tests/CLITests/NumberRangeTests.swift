import Foundation
import Testing
import TestSupport

/// Every number a user types is range-checked: hostile values are usage errors (exit 64) naming the
/// option and its range, never a trap (exit 132) or a silent wrap.
@Suite("numbers from users", .onTestThreads) struct NumberRangeTests {
    /// (arguments, the option the message must name, a fragment of the range it must state)
    static let hostile: [([String], String, String)] = [
        (["audit", "--since", "99999999999999d"], "--since", "36500d"),
        (["audit", "--until", "9223372036854775807s"], "--until", "36500d"),
        (["audit", "--since", "9223372036854775808ms"], "--since", "36500d"),
        (["audit", "--since", "36501d"], "--since", "36500d"),
        (["audit", "--since", "-5d"], "--since", "1970-01-01"),
        (["audit", "--since", "1e300s"], "--since", "1970-01-01"),
        (["audit", "--until", "inf"], "--until", "1970-01-01"),
        (["audit", "--until", "nan"], "--until", "1970-01-01"),
        (["audit", "--since", "99999-01-01"], "--since", "9999-12-31"),
        (["audit", "--since", "292277026596-12-04T15:30:07Z"], "--since", "9999-12-31"),
        (["audit", "--until", "1969-12-31"], "--until", "1970-01-01"),
        (["worker", "--lease", "inf"], "--lease", "24h"),
        (["worker", "--lease", "1e300"], "--lease", "24h"),
        (["worker", "--lease", "nan"], "--lease", "24h"),
        (["worker", "--lease", "9223372036854775"], "--lease", "24h"),
        (["worker", "--lease", "99999999999999999999"], "--lease", "24h"),
        (["worker", "--lease", "9223372036854775807ms"], "--lease", "24h"),
        (["worker", "--lease", "0"], "--lease", "1s"),
        (["worker", "--lease", "-1"], "--lease", "1s"),
        (["worker", "--lease", "86401"], "--lease", "24h"),
        (["worker", "--lease", "1.5"], "--lease", "24h"),
        (["worker", "--concurrency", "0"], "--concurrency", "1 to 256"),
        (["worker", "--concurrency", "-3"], "--concurrency", "1 to 256"),
        (["worker", "--concurrency", "257"], "--concurrency", "1 to 256"),
        (["worker", "-c", "9223372036854775808"], "--concurrency", "1 to 256"),
        (["worker", "--concurrency", "1e3"], "--concurrency", "1 to 256"),
        (["worker", "--claim-ahead", "-1"], "--claim-ahead", "0 to 1024"),
        (["worker", "--claim-ahead", "1025"], "--claim-ahead", "0 to 1024"),
        (["worker", "--claim-ahead", "99999999999999999999"], "--claim-ahead", "0 to 1024"),
        (["list", "--limit", "-1"], "--limit", "0 to 1000000000"),
        (["list", "--limit", "1000000001"], "--limit", "0 to 1000000000"),
        (["list", "--limit", "99999999999999999999"], "--limit", "0 to 1000000000"),
        (["list", "--limit", "1e300"], "--limit", "0 to 1000000000"),
        (["list", "--limit=nan"], "--limit", "0 to 1000000000"),
        (["audit", "--since", "1h", "--until", "2h"], "--since", "is not before --until"),
        (["audit", "--since", "2026-01-02", "--until", "2026-01-01T00:00:00Z"], "--since", "is not before --until"),
        (["audit", "--since", "2026-01-01", "--until", "2026-01-01"], "--since", "is not before --until"),
    ]

    @Test(arguments: hostile)
    func hostileNumbersAreUsageErrors(arguments: [String], option: String, range: String) throws {
        let workspace = try CLIWorkspace("numbers")
        defer { workspace.directory.remove() }
        let output = try workspace.jobctl(arguments)
        #expect(output.status == 64, "jobctl \(arguments.joined(separator: " ")) exited \(output.status): \(output.stderr)")
        #expect(output.stderr.hasPrefix("Error: \(option)"), "\(output.stderr)")
        #expect(output.stderr.contains(range), "\(output.stderr)")
        #expect(!output.stderr.contains("Fatal error") && !output.stderr.contains("crashed"), "\(output.stderr)")
        #expect(output.stdout.isEmpty)
        // Refused before anything happened: no database was created.
        #expect(!FileManager.default.fileExists(atPath: workspace.database))
    }

    /// The bounds themselves are accepted.
    @Test func boundsAreAccepted() throws {
        let workspace = try CLIWorkspace("number-bounds")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        for arguments in [["audit", "--since", "36500d", "--until", "9999-12-31"], ["audit", "--since", "1970-01-01"],
                          ["list", "--limit", "1000000000"], ["list", "--limit", "0"], ["worker", "--help"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0, "jobctl \(arguments.joined(separator: " ")): \(output.stderr)")
        }
        let drained = try workspace.jobctl(["worker", "--drain", "--lease", "24h", "--concurrency", "256"])
        #expect(drained.status == 0, "\(drained.stderr)")
        let seconds = try workspace.jobctl(["worker", "--drain", "--lease", "1"])
        #expect(seconds.status == 0, "\(seconds.stderr)")
        for claimAhead in ["0", "1024"] {
            let drained = try workspace.jobctl(["worker", "--drain", "--claim-ahead", claimAhead])
            #expect(drained.status == 0, "--claim-ahead \(claimAhead): \(drained.stderr)")
        }
    }

    /// COLUMNS, like `ls` reads it: a value out of range is ignored with a warning naming it.
    @Test(arguments: ["99999999999999999999999", "-1", "0", "abc", "1e9"])
    func hostileColumnsAreIgnored(value: String) throws {
        let workspace = try CLIWorkspace("columns")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        let output = try workspace.jobctl(["list"], environment: ["COLUMNS": value])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("file://b/x.txt"))
        #expect(output.stderr.contains("COLUMNS") && output.stderr.contains("10 to 10000"), "\(output.stderr)")
    }

    /// COLUMNS is read in the grammar of every number a user types: `Int` took `+80` (and `080`) and
    /// warned about ` 80 `, which every flag and variable takes.
    @Test(arguments: [(" 80 ", true), ("80\t", true), ("+80", false), ("080", false), ("80\u{A0}", false)])
    func columnsFollowTheNumberGrammar(value: String, accepted: Bool) throws {
        let workspace = try CLIWorkspace("columns-grammar")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        let output = try workspace.jobctl(["list"], environment: ["COLUMNS": value])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("file://b/x.txt"))
        #expect(output.stderr.contains("ignoring COLUMNS") != accepted, "COLUMNS=\(value.debugDescription): \(output.stderr)")
    }

    /// JOBCTL_DB_ANSWER_TIMEOUT is a duration as every other: a no-break space around it was trimmed
    /// (Foundation's whitespace) where every duration refuses one, and `0s` was refused where `0` means
    /// no limit. Only PostgreSQL commands read it: `config` of an SQLite log notes a bad value and exits 0
    /// (it exited 1 where every command on that log ignores the variable).
    @Test(arguments: [("0s", true), ("0m", true), (" 30s\t", true), ("\u{A0}30s", false), ("30s\u{2003}", false)])
    func answerTimeoutFollowsTheDurationGrammar(value: String, accepted: Bool) throws {
        let workspace = try CLIWorkspace("answer-timeout-grammar")
        defer { workspace.directory.remove() }
        // config parses a PostgreSQL URL without connecting: nothing listens there.
        let postgres = try runProcess(PackagePaths.jobctlBinary, ["--db", "postgres://jobctl@127.0.0.1:1/none", "config"],
                                      environment: ["JOBCTL_DB_ANSWER_TIMEOUT": value, "NO_COLOR": "1"],
                                      currentDirectory: workspace.directory.path)
        #expect(postgres.status == (accepted ? 0 : 1), "\(value.debugDescription): \(postgres.stderr)")
        #expect(postgres.stderr.contains("JOBCTL_DB_ANSWER_TIMEOUT") != accepted, "\(value.debugDescription): \(postgres.stderr)")
        let sqlite = try workspace.jobctl(["config"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": value])
        #expect(sqlite.status == 0, "\(value.debugDescription): \(sqlite.stderr)")
        #expect(sqlite.stderr.contains("not read here: the log is SQLite") != accepted, "\(value.debugDescription): \(sqlite.stderr)")
    }

    /// A time option trims what a number or a relative time trims (spaces and tabs): `--since " 1h"` was
    /// taken and `--since " 2026-01-01"` refused.
    @Test(arguments: [(["--since", " 2026-01-01 "], true), (["--until", "\t9999-12-31T00:00:00Z"], true),
                      (["--since", "2026-01-01T10:00:00+01:00 "], true), (["--since", "\u{A0}2026-01-01"], false)])
    func timesTrimAsNumbersDo(arguments: [String], accepted: Bool) throws {
        let workspace = try CLIWorkspace("time-blanks")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let output = try workspace.jobctl(["audit"] + arguments)
        #expect(output.status == (accepted ? 0 : 64), "\(arguments.map(\.debugDescription)): \(output.stderr)")
    }

    /// A path option given an empty value (`--db=`, `--from=`, `-o ''`) is a usage error before the
    /// command runs, as `archive --to=` was: it was refused only once the command ran, exit 1.
    @Test(arguments: [["--db=", "list"], ["audit", "--from="], ["result", "01ABCDEFGHJKMNPQRSTVWXYZ00", "-o", ""]])
    func emptyPathsAreUsageErrors(arguments: [String]) throws {
        let workspace = try CLIWorkspace("empty-paths")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        // `--db=` replaces the workspace's --db (given twice it is refused for that).
        let withDatabase = arguments.first == "--db=" ? arguments : ["--db", workspace.database] + arguments
        let output = try runProcess(PackagePaths.jobctlBinary, withDatabase, environment: ["NO_COLOR": "1"],
                                    currentDirectory: workspace.directory.path)
        #expect(output.status == 64, "\(arguments): \(output.stderr)")
        #expect(output.stderr.contains("not an empty text"), "\(arguments): \(output.stderr)")
    }

    /// One grammar for every number a user types: `--concurrency +4` ran 4 transfers while a size or a
    /// duration refused a sign; a no-break space around a size, a rate or a duration was trimmed while
    /// `--concurrency` refused even a plain space; `1k` and `1T` were rates but not sizes; JOBCTL_SLICES
    /// took `+4`. Now digits only everywhere, spaces and tabs around ignored, anything else refused.
    @Test(arguments: [
        (["--concurrency", "+4"], [:], false), (["--claim-ahead", "+0"], [:], false), (["--concurrency", " 4 "], [:], true),
        (["--concurrency", "4\u{A0}"], [:], false), (["--concurrency", "\u{0664}"], [:], false),
        (["--stall-timeout", "\u{A0}60s"], [:], false), (["--stall-timeout", " 60s\t"], [:], true),
        (["--bwlimit", "\u{A0}1M"], [:], false), (["--bwlimit", "+1M"], [:], false), (["--bwlimit", "1T"], [:], true),
        (["--sliced-threshold", "1T"], [:], true), (["--sliced-threshold", "150m"], [:], true),
        (["--sliced-threshold", "\u{A0}150MiB"], [:], false), (["--sliced-threshold", "+150MiB"], [:], false),
        (["--slices", "+4"], [:], false), (["--slices", " 4"], [:], true),
        ([], ["JOBCTL_SLICES": "+4"], false), ([], ["JOBCTL_SLICES": "4"], true),
        ([], ["JOBCTL_CHUNK_SIZE": "8m"], true), ([], ["JOBCTL_CHUNK_SIZE": "\u{A0}8MiB"], false),
        ([], ["JOBCTL_STALL_TIMEOUT": "\u{2003}60s"], false),
        // No leading zero on a plain number (010: octal 8 to YAML 1.1, C and shells; 10 to others); one
        // before a unit is no number's (060s).
        (["--concurrency", "04"], [:], false), (["--claim-ahead", "00"], [:], false), (["--lease", "030"], [:], false),
        (["--metrics", "127.0.0.1:09464"], [:], false), (["--bwlimit", "01024"], [:], false),
        (["--sliced-threshold", "01048576"], [:], false), (["--stall-timeout", "060s"], [:], true),
        ([], ["JOBCTL_SLICES": "04"], false), ([], ["JOBCTL_CHUNK_SIZE": "08388608"], false),
    ] as [([String], [String: String], Bool)])
    func oneGrammarForNumbers(arguments: [String], environment: [String: String], accepted: Bool) throws {
        let workspace = try CLIWorkspace("number-grammar")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let output = try workspace.jobctl(["worker", "--drain"] + arguments, environment: environment)
        let shown = (arguments + environment.map { "\($0.key)=\($0.value)" }).map(\.debugDescription).joined(separator: " ")
        if accepted {
            #expect(output.status == 0, "\(shown) was refused: \(output.stderr)")
        } else {
            // A flag is a usage error (64); a variable the worker refuses ends it with 1, naming it.
            #expect(output.status == (arguments.isEmpty ? 1 : 64), "\(shown) exited \(output.status): \(output.stderr)")
            #expect(output.stderr.contains(arguments.first ?? environment.keys.first ?? ""), "\(output.stderr)")
            #expect(!output.stderr.contains("Fatal error"), "\(output.stderr)")
        }
    }
}
