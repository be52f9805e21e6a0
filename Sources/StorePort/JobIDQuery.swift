import Foundation

/// What a job id the user typed asks for: exactly one id, or every id starting with a prefix. The
/// rules (Crockford base32, any case, at least 6 characters, at most 20 matches listed) are the same
/// for every adapter; only the lookup's SQL is theirs.
public enum JobIDQuery: Sendable, Equatable {
    /// A whole 26-character id (upper-cased).
    case exact(String)
    /// A prefix of 6 to 25 id characters (upper-cased); it holds only id characters, so it needs no
    /// escaping in a GLOB or LIKE pattern.
    case prefix(String)

    /// How many matches a prefix lookup needs to read to tell one from many.
    public static let matchLimit = 20

    private static let alphabet = Set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

    /// Reads `text`; `notFound` when it cannot be an id, `invalidControl` when it is too short.
    public init(_ text: String) throws(StoreError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        // ASCII only before upper-casing: `ß` upper-cases to `SS`, and `01ABCß` found `01ABCSS…`.
        guard trimmed.unicodeScalars.allSatisfy(\.isASCII) else { throw StoreError.notFound(text) }
        let normalised = trimmed.uppercased()
        guard !normalised.isEmpty, normalised.count <= 26, normalised.allSatisfy({ Self.alphabet.contains($0) }) else {
            throw StoreError.notFound(text)
        }
        if normalised.count == 26 {
            self = .exact(normalised)
            return
        }
        guard normalised.count >= 6 else {
            throw StoreError.invalidControl("'\(text)' is no job's key, and too short for a job id prefix: give at least 6 characters of the id")
        }
        self = .prefix(normalised)
    }

    /// The one id the lookup found (`matches`, at most `matchLimit`, sorted), or why there is none.
    /// `batchSize`: for a whole id no job has, how many jobs have it as their batch id (a batch's id is
    /// a ULID like a job's, and the one `submit` prints for a folder: `watch ID` with it said only that
    /// no job matches).
    public static func resolve(_ text: String, matches: [String],
                               batchSize: () throws(StoreError) -> Int = { 0 }) throws(StoreError) -> String {
        switch matches.count {
        case 0:
            let batch = try batchSize()
            guard batch == 0 else {
                throw StoreError.invalidControl("'\(text)' is the id of a batch of \(batch == 1 ? "1 job" : "\(batch) jobs"), "
                    + "not of a job: give it with --batch (`jobctl watch --batch \(text)`; list, audit and the controls take "
                    + "--batch too)")
            }
            throw StoreError.notFound(text)
        case 1: return matches[0]
        default: throw StoreError.ambiguous(prefix: text, matches: matches)
        }
    }

    /// The job `name` names, given the job keyed `name` (`keyed`, nil when no key is `name`) and the
    /// lookup of `name` as an id or id prefix (`resolveID`, the store's). A key comes first, as for
    /// `after:`, with two exceptions that keep an id the user was given naming its job whatever keys
    /// others submit: a whole id names the job that has it (`show ID` printed a job keyed ID; a key of
    /// that shape — another system's ULID — still names its job while no job has that id), and a name
    /// that is one job's key and a prefix of another's id is refused as ambiguous rather than read as the
    /// key.
    public static func named(_ name: String, keyed: String?,
                             resolveID: (String) throws(StoreError) -> String) throws(StoreError) -> String {
        guard let keyed else { return try resolveID(name) }
        let byID: [String]
        do throws(StoreError) {
            byID = [try resolveID(name)]
        } catch {
            switch error {
            case .notFound, .invalidControl: return keyed  // not an id, too short, or a batch's id
            case .ambiguous(_, let matches): byID = matches
            default: throw error
            }
        }
        if case .exact? = try? JobIDQuery(name) { return byID[0] }
        guard byID != [keyed] else { return keyed }
        throw StoreError.keyAndIDPrefix(name: name, keyed: keyed, byID: byID)
    }
}
