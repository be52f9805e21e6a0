/// "Did you mean" hints: one rule for every name a user may mistype (commands, options, manifest keys,
/// configuration settings).
public enum NearestName {
    /// The candidate nearest to `name` in edits, when it is at most `limit` edits away; nil when none is.
    /// Ties go to the earlier candidate. A candidate whose length differs from `name`'s by more than
    /// `limit` is not compared (an edit distance is at least the difference in length), so a long name
    /// costs linear time, not its length times each candidate's (a 128 KB option name took 0.3–0.6 s).
    public static func nearest(to name: String, among candidates: some Sequence<String>, within limit: Int) -> String? {
        let length = name.count
        var best: (candidate: String, distance: Int)?
        for candidate in candidates where abs(candidate.count - length) <= limit {
            let distance = editDistance(name, candidate)
            if distance <= limit, distance < (best?.distance ?? .max) { best = (candidate, distance) }
        }
        return best?.candidate
    }

    /// Levenshtein distance over characters.
    public static func editDistance(_ lhs: String, _ rhs: String) -> Int {
        let a = Array(lhs), b = Array(rhs)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
