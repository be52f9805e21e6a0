import Foundation
import StorePort

/// The lines of an archive file: gzip-compressed NDJSON, one JSON object per line, in this order:
///
///     {"record":"header","format":"jobctl-archive","version":1,"before_ms":…,"created_at_ms":…,
///      "jobs":…,"events":…,"blobs":…,"first_seq":…,"last_seq":…}
///     {"record":"event","seq":…,"job_id":…,"version":…,"type":…,"at_ms":…,"actor":…,"lease":…,"data":"…"}   (seq order)
///     {"record":"blob","sha256":…,"size":…,"base64":…}                                                   (sha256 order)
///     {"record":"trailer","lines":…,"sha256":…}
///
/// (Fields shown in this order for reading; each line's keys are written sorted, so its first key
/// names its kind: see `ArchiveRecordKind`.) An event's `data` is the log's JSON text byte for byte,
/// as a string. The trailer's `sha256` covers the uncompressed bytes of every line before it
/// (newlines included) and `lines` counts them.
public struct ArchiveHeader: Codable, Sendable, Equatable {
    /// The `format` value every archive carries.
    public static let formatName = "jobctl-archive"
    /// The format version this jobctl writes and reads.
    public static let currentVersion = 1

    public var record = "header"
    public var format = ArchiveHeader.formatName
    public var version = ArchiveHeader.currentVersion
    /// Jobs that finished before this time (ms since the epoch) were archived.
    public var beforeMs: Int64
    /// When the file was written.
    public var createdAtMs: Int64
    public var jobs: Int
    public var events: Int
    public var blobs: Int
    /// The range of seq the events span (0 when there are none).
    public var firstSeq: Int64
    public var lastSeq: Int64

    /// A header for `selection`, written at `now`.
    public init(selection: ArchiveSelection, now: Int64) {
        beforeMs = selection.beforeMs
        createdAtMs = now
        jobs = selection.jobs.count
        events = selection.rows.count
        blobs = selection.blobs.count
        firstSeq = selection.rows.first?.seq ?? 0
        lastSeq = selection.rows.last?.seq ?? 0
    }
}

/// One event line.
struct ArchiveEventLine: Codable, Equatable {
    var record = "event"
    var seq: Int64
    var jobId: String
    var version: Int
    var type: String
    var atMs: Int64
    var actor: String
    var lease: Int64?
    var data: String

    init(_ row: LogRow) {
        seq = row.seq
        jobId = row.jobID
        version = row.version
        type = row.type
        atMs = row.atMs
        actor = row.actor
        lease = row.leaseToken
        data = row.data
    }

    var row: LogRow {
        LogRow(seq: seq, jobID: jobId, version: version, type: type, atMs: atMs, actor: actor, leaseToken: lease, data: data)
    }
}

/// One blob line.
struct ArchiveBlobLine: Codable, Equatable {
    var record = "blob"
    var sha256: String
    var size: Int
    var base64: String
}

/// The last line.
struct ArchiveTrailer: Codable, Equatable {
    var record = "trailer"
    /// Lines before the trailer, the header included.
    var lines: Int
    /// SHA-256 (hex) of the uncompressed bytes before the trailer.
    var sha256: String
}

/// The kind of record a line holds, told by its first bytes: the writer sorts every line's keys, so
/// each kind begins with a key of its own (`{"before_ms":` header, `{"actor":` event, `{"base64":"`
/// blob, `{"lines":` trailer). Knowing the kind from the first dozen bytes, the reader holds a line
/// only up to what that kind can be and streams a blob's base64 instead of holding it.
enum ArchiveRecordKind: String, CaseIterable {
    case header, event, blob, trailer

    /// The bytes every line of this kind begins with.
    var firstBytes: [UInt8] {
        switch self {
        case .header: Array(#"{"before_ms":"#.utf8)
        case .event: Array(#"{"actor":"#.utf8)
        case .blob: Array(#"{"base64":""#.utf8)
        case .trailer: Array(#"{"lines":"#.utf8)
        }
    }

    /// The most bytes a line of this kind may have (without its newline); a longer one is refused as
    /// soon as it passes this.
    var maximumLineBytes: Int {
        switch self {
        // A header or a trailer is a few hundred bytes of numbers.
        case .header, .trailer: 64 << 10
        // An event's `data` is the log's JSON for it. The largest an event can be is a `submitted`
        // event's spec: an upload-data job's inline bytes, at most a manifest scalar (16 MiB), as
        // base64 (~21.3 MiB, no escapes), plus bounded fields (a reference at most 16 KiB, custom
        // metadata 8 KiB, a key 1 KiB) and `after:`, distinct job ids of 31 bytes each here, quotes
        // escaped (~15 MiB for a job waiting on 500,000, as many as a manifest holds): ~37 MiB. A result's bytes past 256
        // live in blob lines, not in the event, and an error quotes a server's answer cut at 64 KiB.
        // 64 MiB leaves room; a line past it is not one jobctl wrote.
        case .event: 64 << 20
        // The largest download-memory result (max_size at most 512 MiB) in base64, and its fields.
        case .blob: 4 * (((512 << 20) + 2) / 3) + ArchiveRecordKind.maximumBlobTailBytes + 16
        }
    }

    /// The most bytes a blob line may have after its base64's closing quote (`,"record":"blob",
    /// "sha256":"…","size":…}` is ~110): they are held, the base64 before them is not.
    static let maximumBlobTailBytes = 4 << 10

    /// The longest `firstBytes` of any kind: after this many bytes a line's kind is known or it is no record.
    static let longestFirstBytes = allCases.map(\.firstBytes.count).max() ?? 0

    /// What a line's first bytes say about its kind.
    enum Match: Equatable {
        case kind(ArchiveRecordKind)
        /// The bytes so far begin some kind's first bytes: more are needed.
        case undecided
        /// No record begins so.
        case none
    }

    /// The kind of record a line beginning with `bytes` holds, as far as they tell.
    static func of(firstBytes bytes: Data) -> Match {
        var undecided = false
        for kind in allCases {
            let expected = kind.firstBytes
            let compared = min(bytes.count, expected.count)
            guard bytes.prefix(compared).elementsEqual(expected.prefix(compared)) else { continue }
            if compared == expected.count { return .kind(kind) }
            undecided = true
        }
        return undecided ? .undecided : .none
    }

    /// How messages name a line of this kind.
    var lineName: String {
        switch self {
        case .header: "header"
        case .event: "event line"
        case .blob: "blob line"
        case .trailer: "trailer"
        }
    }
}

/// The JSON coding every line uses: snake_case keys, sorted, no escaped slashes.
enum ArchiveJSON {
    static func encode<T: Encodable>(_ value: T) throws(RetentionError) -> Data {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do { return try encoder.encode(value) } catch {
            throw RetentionError.io("cannot encode an archive line: \(error)")
        }
    }

    /// Decodes line `number`; an error names it as `what` ("event line"), never by a Swift type's name.
    static func decode<T: Decodable>(_ type: T.Type, _ line: Data, number: Int, what: String) throws(RetentionError) -> T {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        do { return try decoder.decode(type, from: line) } catch {
            throw RetentionError.invalidArchive("line \(number) is not a valid \(what) (\(Self.reason(error)))")
        }
    }

    private static func reason(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): "no '\(key.stringValue)'"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            "wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case DecodingError.dataCorrupted: "not JSON in UTF-8, or a number out of range"
        default: "\(error)"
        }
    }
}

/// Lowercase hex of bytes.
func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    var text = ""
    text.reserveCapacity(bytes.count * 2)
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 15)])
    }
    return text
}
