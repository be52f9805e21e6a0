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

    init(_ header: String, fit: Fit = .fixed, dropRank: Int? = nil, painted: Bool = false,
         elide: ((String, Int) -> String)? = nil) {
        self.header = header
        self.fit = fit
        self.dropRank = dropRank
        self.painted = painted
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
            case .wrap: return wrap(cell, width: width)
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

/// Columns a string takes on a terminal: ANSI colour sequences take none.
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
        count += 1
    }
    return count
}

/// Wraps text at spaces into lines of at most `width` characters (a longer word is split); lines
/// after the first start with `indent`.
func wrap(_ text: String, width: Int, indent: String = "") -> [String] {
    var lines: [String] = []
    var current = ""
    func limit() -> Int { max(1, lines.isEmpty ? width : width - indent.count) }
    for word in text.split(separator: " ", omittingEmptySubsequences: false) {
        if current.isEmpty {
            current = String(word)
        } else if current.count + 1 + word.count <= limit() {
            current += " " + word
        } else {
            lines.append(current)
            current = String(word)
        }
        while current.count > limit() {
            let cut = limit()
            lines.append(String(current.prefix(cut)))
            current = String(current.dropFirst(cut))
        }
    }
    lines.append(current)
    return lines.enumerated().map { $0.offset == 0 ? $0.element : indent + $0.element }
}

/// Cutting text to a width with an ellipsis.
enum Elide {
    /// `gs://bucket/ver…/file.txt`: the start and the end stay, the middle goes.
    static func middle(_ text: String, to width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 1 else { return String(text.prefix(width)) }
        let keep = width - 1
        let head = (keep + 1) / 2
        return String(text.prefix(head)) + "…" + String(text.suffix(keep - head))
    }

    /// `source → destination` with each side elided in the middle, so both stay visible.
    static func route(_ text: String, to width: Int) -> String {
        guard text.count > width else { return text }
        let arrow = " → "
        guard let range = text.range(of: arrow) else { return middle(text, to: width) }
        let source = String(text[..<range.lowerBound])
        let destination = String(text[range.upperBound...])
        let room = width - arrow.count
        guard room >= 2 else { return middle(text, to: width) }
        // Share the room; a side shorter than its half gives the rest to the other.
        var sourceWidth = room / 2
        var destinationWidth = room - sourceWidth
        if source.count < sourceWidth {
            destinationWidth += sourceWidth - source.count
            sourceWidth = source.count
        } else if destination.count < destinationWidth {
            sourceWidth += destinationWidth - destination.count
            destinationWidth = destination.count
        }
        return middle(source, to: sourceWidth) + arrow + middle(destination, to: destinationWidth)
    }

    /// Cut at the end: `a long message…`.
    static func end(_ text: String, to width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 1 else { return String(text.prefix(width)) }
        return String(text.prefix(width - 1)) + "…"
    }
}

extension String {
    func trimmingTrailingSpaces() -> String {
        var text = self
        while text.hasSuffix(" ") { text.removeLast() }
        return text
    }
}
