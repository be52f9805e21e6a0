import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How help text (`jobctl --help`, `jobctl help list`, `jobctl list --help`) is laid out: prose reflowed
/// and option descriptions wrapped under a hanging indent, every line within `width` columns. The
/// texts are written as single long lines or hand-broken paragraphs; printed as they were, lines ran
/// to 334 columns (a terminal wrapped them mid-word, and the option column was lost).
struct HelpLayout {
    /// The width help fits when standard output is not a terminal (a pager, a file, a test).
    static let defaultWidth = 100
    /// The narrowest a terminal's width makes it: below this the option column leaves too little room.
    static let minimumWidth = 60
    /// Where option descriptions start (two spaces, the flag, at least two more).
    static let descriptionColumn = 26

    let width: Int

    /// The layout for this process: `defaultWidth`, or less when standard output is a terminal whose
    /// width (`COLUMNS`, else the terminal's own) is less — never under `minimumWidth`.
    static func forStandardOutput(environment: [String: String] = ProcessInfo.processInfo.environment) -> HelpLayout {
        let terminal = isatty(STDOUT_FILENO) == 1
        guard terminal, let columns = Terminal.width(environment: environment, stdoutIsTerminal: true) else {
            return HelpLayout(width: defaultWidth)
        }
        return HelpLayout(width: min(defaultWidth, max(minimumWidth, columns)))
    }

    /// Prose: paragraphs (separated by a blank line) reflowed to the width, each line `indent` in.
    func prose(_ text: String, indent: String = "") -> [String] {
        var lines: [String] = []
        for (index, paragraph) in text.components(separatedBy: "\n\n").enumerated() {
            if index > 0 { lines.append("") }
            let words = paragraph.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            lines += wrap(words, width: width - visibleWidth(indent)).map { indent + $0 }
        }
        return lines
    }

    /// `head` followed by `text`, continuation lines indented to where `text` started (`OVERVIEW: …`,
    /// `USAGE: …`, an exit code's line).
    func hanging(_ head: String, _ text: String) -> [String] {
        let indent = String(repeating: " ", count: visibleWidth(head))
        return wrap(text, width: width - indent.count).enumerated().map { ($0.offset == 0 ? head : indent) + $0.element }
    }

    /// A two-column entry of an OPTIONS, ARGUMENTS or COMMANDS list: `left` two spaces in, the
    /// description from `column` (on the next line when `left` reaches it), wrapped under that column.
    func entry(_ left: String, _ description: String, column: Int = descriptionColumn) -> [String] {
        let head = "  " + left
        let indent = String(repeating: " ", count: column)
        let lines = wrap(description, width: width - column)
        if visibleWidth(head) + 2 > column {
            return [head] + lines.map { indent + $0 }
        }
        let padded = head + String(repeating: " ", count: column - visibleWidth(head))
        return lines.enumerated().map { ($0.offset == 0 ? padded : indent) + $0.element }
    }

    /// One option's entry: `-c, --concurrency <n>` and its help.
    func option(_ option: OptionSpec) -> [String] {
        var flag = option.short.map { "-\($0), --\(option.long)" } ?? "--\(option.long)"
        if let value = option.valueName { flag += " <\(value)>" }
        return entry(flag, option.help)
    }

    /// A fixed block (`EXIT CODES:`): each entry line (`  64   usage error …`) wrapped under its text.
    func table(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: false).flatMap { line -> [String] in
            let line = String(line)
            guard visibleWidth(line) > width, let match = line.firstMatch(of: /^\s*\S+\s+/) else { return [line] }
            return hanging(String(match.output), String(line[match.range.upperBound...]))
        }
    }
}
