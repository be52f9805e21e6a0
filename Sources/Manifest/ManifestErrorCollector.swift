// MARK: - Collecting a file's errors

/// The errors of one file as they are found: the first `limit` in source order kept whole, every other
/// one only counted, as a compiler stops printing after its error limit.
///
/// An error costs its message (a "did you mean" suggestion is an edit distance against every name it
/// could have meant), the redaction of its message and of the line it quotes, and its rendering: a
/// manifest of 200,000 unknown kinds took about a minute to refuse, nearly all of it spent on errors no
/// one reads. An error placed after the `limit` kept so far is not made at all: its code and position are
/// kept, so it is counted — once per code and place (a node that aliases repeat is reported again each
/// time it is read), and not where an error of that code and place is shown.
struct ManifestErrorCollector {
    /// Where an error is, and what kind: enough to count it without making it.
    private struct Place: Hashable {
        var code: ManifestError.Code
        var line: Int
        var column: Int

        init(code: ManifestError.Code, line: Int, column: Int) {
            self.code = code
            self.line = line
            self.column = column
        }

        init(_ error: ManifestError) {
            self.init(code: error.code, line: error.line, column: error.column)
        }
    }

    /// The most errors kept whole.
    let limit: Int
    /// The errors kept, in source order (stable for equal positions), without duplicates.
    private var kept: [ManifestError] = []
    private var keptSet: Set<ManifestError> = []
    /// How many kept errors have each code and place.
    private var keptPlaces: [Place: Int] = [:]
    /// Errors counted but not kept.
    private var unkeptPlaces: Set<Place> = []
    /// Every report, duplicates included: a caller compares it before and after a step to learn whether
    /// that step found a problem.
    private(set) var reportCount = 0

    init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// Whether nothing was reported.
    var isEmpty: Bool { reportCount == 0 }

    /// Records an error of `code` at `mark`; `make` is called only when the error is kept.
    mutating func report(_ code: ManifestError.Code, at mark: SourceMark, make: () -> ManifestError) {
        if keeps(at: mark) { add(make()) } else { count(code, at: mark) }
    }

    /// Whether an error at `mark` would be kept: fewer than `limit` are, or it comes before the last
    /// one kept (an error at that one's position comes after it: source order is stable).
    func keeps(at mark: SourceMark) -> Bool {
        guard kept.count >= limit else { return true }
        guard let last = kept.last else { return false }
        return (mark.line, mark.column) < (last.line, last.column)
    }

    /// Records an error that `keeps(at:)` said is kept (any error, in fact: one past the limit is then
    /// counted instead, or pushes the last one kept out).
    mutating func add(_ error: ManifestError) {
        reportCount += 1
        guard keptSet.insert(error).inserted else { return }
        let index = kept.lastIndex { ($0.line, $0.column) <= (error.line, error.column) }.map { $0 + 1 } ?? 0
        kept.insert(error, at: index)
        keptPlaces[Place(error), default: 0] += 1
        if kept.count > limit {
            let dropped = kept.removeLast()
            keptSet.remove(dropped)
            let place = Place(dropped)
            keptPlaces[place] = keptPlaces[place].flatMap { $0 > 1 ? $0 - 1 : nil }
            unkeptPlaces.insert(place)
        }
    }

    /// Records an error that is not kept: counted once per code and place.
    mutating func count(_ code: ManifestError.Code, at mark: SourceMark) {
        reportCount += 1
        let place = Place(code: code, line: mark.line, column: mark.column)
        if keptPlaces[place] == nil { unkeptPlaces.insert(place) }
    }

    /// The errors found: those kept, and how many more there are; nil when none was reported.
    var errors: ManifestErrors? {
        isEmpty ? nil : ManifestErrors(kept, notShownCount: unkeptPlaces.count)
    }
}
