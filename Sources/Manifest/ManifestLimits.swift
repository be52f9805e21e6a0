// MARK: - Input limits

/// Every bound the manifest reader puts on its input, in one place.
///
/// A manifest is a short list of transfers, so each limit sits far above what a real one needs and far
/// below what would exhaust memory, the stack or the clock. Crossing any of them refuses the manifest
/// with a `limitExceeded` error at the first place the limit is crossed (the byte for the file size, the
/// first too-deep collection, the first scalar too long, the alias that adds too much, the first job
/// too many). The README's manifest section lists the defaults.
public struct ManifestLimits: Sendable, Hashable {
    /// The largest manifest, in bytes (64 MiB: room for the most jobs below).
    public var maximumBytes: Int
    /// The deepest nesting of collections, aliases expanded (a manifest needs five: top, `jobs`, a job,
    /// `metadata`, `custom_metadata`). Checked as the YAML events arrive, before any node is built, so no
    /// code recurses deeper than this.
    public var maximumDepth: Int
    /// The most nodes (scalars, sequences, mappings) the text itself may hold: each costs about 150 bytes
    /// of memory while the manifest is read, so this bounds a submit at about 600 MB. A job takes 7 to 25.
    public var maximumNodes: Int
    /// Aliases may add this many nodes in all, or `aliasExpansionFactor` times the nodes written so far,
    /// whichever is larger (never more than `maximumNodes`): `<<: *common` in every job is fine, a
    /// "billion laughs" is not. The scalar text aliases repeat is bounded too, by `maximumBytes`.
    public var maximumAliasNodes: Int
    /// See `maximumAliasNodes`.
    public var aliasExpansionFactor: Int
    /// The longest scalar, in UTF-8 bytes (inline `data:` is the only long one; 16 MiB).
    public var maximumScalarBytes: Int
    /// The most jobs in one manifest (they are stored in one transaction).
    public var maximumJobs: Int
    /// The most errors shown for one manifest (the first in source order); the others are counted and
    /// said to be not shown, as a compiler's error limit does. Not made at all, so a manifest of 200,000
    /// errors is refused in about the time it takes to read.
    public var maximumShownErrors: Int
    /// The most bytes of text libyaml may read for one value before handing it over: the scalar as
    /// written (quotes, escapes, indentation, line breaks) or a run of comments and blank lines.
    /// libyaml holds a scalar whole before the reader sees its length, so this is checked while it
    /// reads: twice `maximumScalarBytes` (room for escapes and indentation), and 64 KiB for its buffers.
    public var maximumScalarTextBytes: Int {
        maximumScalarBytes.multipliedReportingOverflow(by: 2).partialValue.addingReportingOverflow(64 << 10).partialValue
    }

    public init(maximumBytes: Int = 64 << 20, maximumDepth: Int = 64, maximumNodes: Int = 4_000_000,
                maximumAliasNodes: Int = 100_000, aliasExpansionFactor: Int = 10,
                maximumScalarBytes: Int = 16 << 20, maximumJobs: Int = 500_000, maximumShownErrors: Int = 100) {
        self.maximumBytes = maximumBytes
        self.maximumDepth = maximumDepth
        self.maximumNodes = maximumNodes
        self.maximumAliasNodes = maximumAliasNodes
        self.aliasExpansionFactor = aliasExpansionFactor
        self.maximumScalarBytes = maximumScalarBytes
        self.maximumJobs = maximumJobs
        self.maximumShownErrors = maximumShownErrors
    }

    /// The limits `jobctl submit` applies.
    public static let `default` = ManifestLimits()
}

// MARK: - Limits on values

/// The ranges of the numbers a manifest may hold, with the reason for each bound.
public enum ManifestValueRange {
    /// `priority`: a 32-bit range with room to spare, so any store (SQLite today, PostgreSQL `integer`
    /// later) keeps it exactly.
    public static let priority: ClosedRange<Int> = -1_000_000_000...1_000_000_000
    /// `max_attempts`: at least one attempt; a thousand attempts at the one-minute backoff ceiling already
    /// retry for most of a day.
    public static let maxAttempts: ClosedRange<Int> = 1...1_000
    /// `max_size` in bytes, at most 512 MiB: a memory download is held in the worker's memory and then
    /// kept in the job database, whose rows hold less than 10⁹ bytes (SQLite's `SQLITE_MAX_LENGTH`, which
    /// counts the whole row); larger objects need download-file.
    public static let maxSize: ClosedRange<Int64> = 1...(512 << 20)
    /// The longest idempotency `key`, in UTF-8 bytes: every job's key is kept in the log and an index.
    public static let maximumKeyBytes = 1_024
    /// `run_after` (and `delay` added to now) at most 9999-12-31T23:59:59.999Z, at least 1970-01-01: times
    /// every store and RFC 3339 can write. A time in the past runs at once.
    public static let earliestRunAfterMs: Int64 = 0
    public static let latestRunAfterMs: Int64 = 253_402_300_799_999
    /// Custom metadata of one object, its keys' and values' UTF-8 bytes together: at most 8 KiB, Cloud
    /// Storage's limit (an upload or update past it is refused by the server, after the bytes went out).
    public static let maximumCustomMetadataBytes = 8 << 10
    /// `delay`: at most 3650 days (ten years).
    public static let maximumDelayMs: Int64 = 3_650 * 86_400_000
}
