import Foundation
import JobModel

/// A column of a plain-text table and how it gives way when the table is wider than the terminal.
struct TableColumn {
    /// How a column fits a narrower table.
    enum Fit {
        /// Never narrower than its widest cell.
        case fixed
        /// Cells cut to the width by `elide`, never below `minimum` columns.
        case elide(minimum: Int)
        /// Cells wrapped at spaces onto more lines, never below `minimum` columns.
        case wrap(minimum: Int)
    }

    var header: String
    var fit: Fit = .fixed
    /// The column's cells carry this program's own colours (a job's state) and nothing from outside, so
    /// their escape sequences are kept; every other cell has its control characters shown as `\u{…}`
    /// (`printableRow`): cells hold server replies, manifest values and other processes' words.
    var painted = false
    /// Columns with a drop rank are hidden, lowest first, when even their minimum widths do not fit.
    var dropRank: Int?
    /// How an `.elide` column's cell is cut to a width (default: in the middle).
    var elide: (String, Int) -> String = { Elide.middle($0, to: $1) }
    /// What a `.wrap` column's continuation lines start with (a hanging indent: `config`'s variable under its key).
    var wrapIndent = ""

    init(_ header: String, fit: Fit = .fixed, dropRank: Int? = nil, painted: Bool = false,
         elide: ((String, Int) -> String)? = nil, wrapIndent: String = "") {
        self.header = header
        self.fit = fit
        self.dropRank = dropRank
        self.painted = painted
        self.wrapIndent = wrapIndent
        if let elide { self.elide = elide }
    }

    var minimumWidth: Int? {
        switch fit {
        case .fixed: nil
        case .elide(let minimum), .wrap(let minimum): max(minimum, header.count)
        }
    }
}

/// A rendered table and the headers of columns hidden to fit the width.
struct RenderedTable {
    let text: String
    let hidden: [String]
}

/// Renders rows under headers, left-aligned, two spaces apart. With a `width`, the table is fitted:
/// elastic columns shrink (eliding or wrapping their cells), then columns with a drop rank are hidden.
func renderTable(_ columns: [TableColumn], _ rows: [[String]], width: Int?) -> RenderedTable {
    let rows = rows.map { printableRow($0, columns) }
    let natural = columns.indices.map { index in
        rows.reduce(columns[index].header.count) { max($0, visibleWidth($1[index])) }
    }
    let layout = TableLayout(columns, natural: natural, width: width)
    let output = layout.lines(for: columns.map(\.header)) + rows.flatMap { layout.lines(for: $0) }
    return RenderedTable(text: output.joined(separator: "\n"), hidden: layout.hidden)
}

/// A row's cells as a terminal may show them: control characters in every cell of a column that is not
/// `painted` written as `\u{…}` (`TerminalText.printable`).
func printableRow(_ cells: [String], _ columns: [TableColumn]) -> [String] {
    cells.enumerated().map { index, cell in
        index < columns.count && columns[index].painted ? cell : TerminalText.printable(cell)
    }
}

/// Where a table's columns go, from each column's widest cell (`natural`): what `renderTable` does
/// with all rows in hand, for a caller that streams its rows — it measures them in one pass, then
/// prints them line by line in another.
struct TableLayout {
    let columns: [TableColumn]
    /// The columns shown, in order.
    let visible: [Int]
    /// Each column's width (hidden ones included).
    let widths: [Int]
    /// The headers of the columns hidden to fit the width.
    let hidden: [String]
    private let gap = 2

    /// Fits columns whose widest cells (header included) are `natural` into `width` (nil: no limit).
    init(_ columns: [TableColumn], natural: [Int], width: Int?) {
        self.columns = columns
        let gap = 2
        var visible = Array(columns.indices)
        var widths = natural
        var hidden: [String] = []
        if let width {
            while true {
                // Shrink the elastic columns, widest first, down to their minimums.
                widths = natural
                func total() -> Int { visible.reduce(0) { $0 + widths[$1] } + gap * max(0, visible.count - 1) }
                while total() > width {
                    let elastic = visible.filter { index in columns[index].minimumWidth.map { widths[index] > $0 } ?? false }
                    guard let widest = elastic.max(by: { widths[$0] < widths[$1] }), let minimum = columns[widest].minimumWidth else { break }
                    let secondWidest = elastic.filter { $0 != widest }.map { widths[$0] }.max() ?? minimum
                    let step = min(total() - width, widths[widest] - max(minimum, secondWidest - 1))
                    widths[widest] -= max(1, step)
                }
                guard total() > width else { break }
                // Still too wide: hide the lowest-ranked droppable column and fit again.
                if let drop = visible.filter({ columns[$0].dropRank != nil })
                    .min(by: { (columns[$0].dropRank ?? 0) < (columns[$1].dropRank ?? 0) }) {
                    visible.removeAll { $0 == drop }
                    hidden.append(columns[drop].header)
                    continue
                }
                // Nothing left to hide: elastic columns go below their minimums, to a floor that still reads.
                let floor = 8
                for index in visible where columns[index].minimumWidth != nil && total() > width {
                    widths[index] = max(floor, widths[index] - (total() - width))
                }
                break
            }
        }
        self.visible = visible
        self.widths = widths
        self.hidden = hidden
    }

    /// A row's lines: each visible cell cut or wrapped to its column, two spaces apart.
    func lines(for cells: [String]) -> [String] {
        // Each visible column's cell as one or more lines.
        let pieces: [[String]] = visible.map { index in
            let cell = cells[index]
            let width = widths[index]
            guard visibleWidth(cell) > width else { return [cell] }
            switch columns[index].fit {
            case .fixed: return [cell]
            case .elide: return [columns[index].elide(cell, width)]
            case .wrap: return wrap(cell, width: width, indent: columns[index].wrapIndent)
            }
        }
        let height = pieces.map(\.count).max() ?? 1
        return (0..<height).map { line in
            pieces.enumerated().map { position, piece in
                let text = line < piece.count ? piece[line] : ""
                let last = position == pieces.count - 1
                return last ? text : text + String(repeating: " ", count: max(0, widths[visible[position]] - visibleWidth(text)))
            }.joined(separator: String(repeating: " ", count: gap)).trimmingTrailingSpaces()
        }
    }
}

/// Columns a string takes on a terminal: ANSI colour sequences take none, a wide character (CJK,
/// Hangul, fullwidth forms, emoji) two, a combining mark or zero-width format character none
/// (`TerminalWidth`): counting characters put a Japanese file name's row past the terminal's edge.
func visibleWidth(_ text: String) -> Int {
    // Printable ASCII (most cells: ids, times, sizes, checksums) is one column per byte; walking the
    // string by `Character` was a tenth of `audit`'s table on a big log. Anything else — an escape,
    // a control character (`\r\n` is one `Character`), a byte outside ASCII — is counted as before.
    if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return text.utf8.count }
    var count = 0
    var inEscape = false
    for character in text {
        if character == "\u{1B}" { inEscape = true; continue }
        if inEscape { if character == "m" { inEscape = false }; continue }
        count += TerminalWidth.of(character)
    }
    return count
}

/// The columns a character takes on a terminal, as wcwidth(3) counts them: two for East Asian Wide and
/// Fullwidth characters (Unicode's EastAsianWidth W and F: CJK ideographs, kana, Hangul syllables,
/// fullwidth forms) and emoji shown as emoji, none for a cluster that is only a combining mark or a
/// zero-width format character (a mark after a base is part of the base's `Character`), one otherwise.
enum TerminalWidth {
    /// The East Asian Wide and Fullwidth ranges that are not emoji (emoji go by `isEmojiPresentation`).
    private static let wide: [ClosedRange<UInt32>] = [
        0x1100...0x115F, 0x2329...0x232A, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF,
        0xA000...0xA4CF, 0xA960...0xA97F, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE10...0xFE19, 0xFE30...0xFE6F,
        0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x16FE0...0x16FE4, 0x16FF0...0x16FF1, 0x17000...0x187F7, 0x18800...0x18CD5,
        0x18D00...0x18D08, 0x1AFF0...0x1B2FB, 0x1F200...0x1F202, 0x1F210...0x1F23B, 0x1F240...0x1F248,
        0x1F250...0x1F251, 0x20000...0x2FFFD, 0x30000...0x3FFFD,
    ]

    static func of(_ character: Character) -> Int {
        guard let first = character.unicodeScalars.first else { return 0 }
        if first.isASCII { return 1 }
        let properties = first.properties
        switch properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        if (0x1160...0x11FF).contains(first.value) { return 0 }  // Hangul medial vowels and final consonants
        if properties.isEmojiPresentation { return 2 }
        // Text-style emoji asked for as emoji (VS16) are drawn wide.
        if properties.isEmoji, character.unicodeScalars.contains("\u{FE0F}") { return 2 }
        return wide.contains { $0.contains(first.value) } ? 2 : 1
    }

    /// The longest start of `text` at most `width` columns wide.
    static func prefix(_ text: String, width: Int) -> String {
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            let next = used + of(text[index])
            if next > width { break }
            used = next
            end = text.index(after: index)
        }
        return String(text[..<end])
    }

    /// The longest end of `text` at most `width` columns wide.
    static func suffix(_ text: String, width: Int) -> String {
        var used = 0
        var start = text.endIndex
        while start > text.startIndex {
            let before = text.index(before: start)
            let next = used + of(text[before])
            if next > width { break }
            used = next
            start = before
        }
        return String(text[start...])
    }
}

/// Wraps text at spaces into lines of at most `width` columns (a longer word is split); lines after
/// the first start with `indent`.
func wrap(_ text: String, width: Int, indent: String = "") -> [String] {
    var lines: [String] = []
    var current = ""
    func limit() -> Int { max(1, lines.isEmpty ? width : width - visibleWidth(indent)) }
    for word in text.split(separator: " ", omittingEmptySubsequences: false) {
        if current.isEmpty {
            current = String(word)
        } else if visibleWidth(current) + 1 + visibleWidth(String(word)) <= limit() {
            current += " " + word
        } else {
            lines.append(current)
            current = String(word)
        }
        while visibleWidth(current) > limit() {
            // At least one character a line, so a character wider than the line still moves on.
            var cut = TerminalWidth.prefix(current, width: limit())
            if cut.isEmpty { cut = String(current.prefix(1)) }
            lines.append(cut)
            current = String(current.dropFirst(cut.count))
        }
    }
    lines.append(current)
    return lines.enumerated().map { $0.offset == 0 ? $0.element : indent + $0.element }
}

/// Cutting text to a width with an ellipsis.
/// Widths are terminal columns (`visibleWidth`): a wide character counts two.
enum Elide {
    /// `gs://bucket/ver…/file.txt`: the start and the end stay, the middle goes.
    static func middle(_ text: String, to width: Int) -> String {
        guard visibleWidth(text) > width else { return text }
        guard width > 1 else { return TerminalWidth.prefix(text, width: width) }
        let keep = width - 1
        let head = TerminalWidth.prefix(text, width: (keep + 1) / 2)
        return head + "…" + TerminalWidth.suffix(text, width: keep - visibleWidth(head))
    }

    /// `source → destination` with each side elided in the middle, so both stay visible.
    static func route(_ text: String, to width: Int) -> String {
        guard visibleWidth(text) > width else { return text }
        let arrow = " → "
        guard let range = text.range(of: arrow) else { return middle(text, to: width) }
        let source = String(text[..<range.lowerBound])
        let destination = String(text[range.upperBound...])
        let room = width - visibleWidth(arrow)
        guard room >= 2 else { return middle(text, to: width) }
        // Share the room; a side shorter than its half gives the rest to the other.
        var sourceWidth = room / 2
        var destinationWidth = room - sourceWidth
        let sourceNeeds = visibleWidth(source), destinationNeeds = visibleWidth(destination)
        if sourceNeeds < sourceWidth {
            destinationWidth += sourceWidth - sourceNeeds
            sourceWidth = sourceNeeds
        } else if destinationNeeds < destinationWidth {
            sourceWidth += destinationWidth - destinationNeeds
            destinationWidth = destinationNeeds
        }
        return middle(source, to: sourceWidth) + arrow + middle(destination, to: destinationWidth)
    }

    /// Cut at the end: `a long message…`.
    static func end(_ text: String, to width: Int) -> String {
        guard visibleWidth(text) > width else { return text }
        guard width > 1 else { return TerminalWidth.prefix(text, width: width) }
        return TerminalWidth.prefix(text, width: width - 1) + "…"
    }
}

extension String {
    func trimmingTrailingSpaces() -> String {
        var text = self
        while text.hasSuffix(" ") { text.removeLast() }
        return text
    }
}
