import JobLifecycle
import JobModel

/// `audit`'s plain rows written straight from a job as bytes, for `--json` and `--csv`.
///
/// The same bytes `AuditRow` gives through Foundation's encoder (`--json`: sorted keys, pretty-printed,
/// slashes not escaped) and through `csvLine`, without the row's intermediate strings: building an
/// `AuditRow`, printing it as a `String`, copying that into `Data` and indenting it line by line was a
/// quarter of `audit --json`'s CPU on a big log. Only rows that need nothing special are written here —
/// no error, no batch, every text printable ASCII without a quote or a backslash (JSON) or without a
/// comma or quote and not starting like a formula (CSV: `CSVField.isPlain`), every time between 1970
/// and 9999. For any other row the writers return false and leave the bytes untouched; the caller then
/// takes `AuditRow`, so the two cannot disagree on the rows that are hard (`OutputUnitTests` compares
/// them on every kind of row).
enum AuditRowWriter {
    /// Appends the job's row as a pretty-printed JSON object, each line after the first indented by
    /// `indent` spaces (2 for an element of `audit --json`'s array); false, with nothing appended, when
    /// the row is not a plain one.
    static func appendJSON(_ job: JobRecord, display: Display, indent: Int, to bytes: inout [UInt8]) -> Bool {
        guard job.error == nil, job.spec.batch == nil else { return false }
        let mark = bytes.count
        var first = true
        func key(_ name: StaticString) {
            if first {
                bytes.append(UInt8(ascii: "\n"))
                first = false
            } else {
                bytes.append(UInt8(ascii: ","))
                bytes.append(UInt8(ascii: "\n"))
            }
            for _ in 0..<(indent + 2) { bytes.append(UInt8(ascii: " ")) }
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: " "), UInt8(ascii: ":"), UInt8(ascii: " ")])
        }
        func text(_ name: StaticString, _ value: String?) -> Bool {
            guard let value else { return true }
            guard value.utf8.allSatisfy(isPlainJSON) else { return false }
            key(name)
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: value.utf8)
            bytes.append(UInt8(ascii: "\""))
            return true
        }
        /// An array of plain strings as the encoder prints it: one element a line, and an empty one as
        /// `[`, an empty line, `]`.
        func list(_ name: StaticString, _ values: [String]) {
            key(name)
            bytes.append(UInt8(ascii: "["))
            bytes.append(UInt8(ascii: "\n"))
            for _ in 0..<indent { bytes.append(UInt8(ascii: " ")) }
            for (index, value) in values.enumerated() {
                if index > 0 {
                    bytes.append(UInt8(ascii: ","))
                    bytes.append(UInt8(ascii: "\n"))
                    for _ in 0..<indent { bytes.append(UInt8(ascii: " ")) }
                }
                for _ in 0..<4 { bytes.append(UInt8(ascii: " ")) }
                bytes.append(UInt8(ascii: "\""))
                bytes.append(contentsOf: value.utf8)
                bytes.append(UInt8(ascii: "\""))
            }
            bytes.append(UInt8(ascii: "\n"))
            for _ in 0..<(indent + 2) { bytes.append(UInt8(ascii: " ")) }
            bytes.append(UInt8(ascii: "]"))
        }
        func number(_ name: StaticString, _ value: Int64?) {
            guard let value else { return }
            key(name)
            DecimalText.append(value, to: &bytes)
        }
        func time(_ name: StaticString, _ ms: Int64?) -> Bool {
            guard let ms else { return true }
            key(name)
            bytes.append(UInt8(ascii: "\""))
            guard RFC3339.append(ms, to: &bytes) else { return false }
            bytes.append(UInt8(ascii: "\""))
            return true
        }
        let result = job.result
        let written = { () -> Bool in
            bytes.append(UInt8(ascii: "{"))
            number("attempts", Int64(job.attempts))
            guard text("crc32c", result?.crc32c ?? result?.object?.crc32c),
                  text("destination", job.spec.destination.map(display.url)),
                  time("finished_at", job.finishedAtMs) else { return false }
            number("finished_at_ms", job.finishedAtMs)
            guard text("id", job.id), text("kind", job.spec.kind.rawValue), text("md5", result?.md5 ?? result?.object?.md5Hash) else {
                return false
            }
            number("size", result?.size ?? result?.object?.knownSize ?? job.bytesTotal)
            if result?.skipped == true {
                key("skipped")
                bytes.append(contentsOf: "true".utf8)
            }
            guard text("source", job.spec.source.map(display.url)), time("started_at", job.startedAtMs) else { return false }
            number("started_at_ms", job.startedAtMs)
            guard text("state", job.state.rawValue), time("submitted_at", job.createdAtMs) else { return false }
            number("submitted_at_ms", job.createdAtMs)
            if let verified = result?.verified { list("verified", verified.map(\.rawValue)) }
            bytes.append(UInt8(ascii: "\n"))
            for _ in 0..<indent { bytes.append(UInt8(ascii: " ")) }
            bytes.append(UInt8(ascii: "}"))
            return true
        }()
        if !written { bytes.removeSubrange(mark...) }
        return written
    }

    /// Appends the job's CSV line (without its line feed); false, with nothing appended, when the row
    /// is not a plain one.
    static func appendCSV(_ job: JobRecord, display: Display, to bytes: inout [UInt8]) -> Bool {
        guard job.error == nil, job.spec.batch == nil else { return false }
        let mark = bytes.count
        func field(_ value: String?, comma: Bool = true) -> Bool {
            if comma { bytes.append(UInt8(ascii: ",")) }
            guard let value else { return true }
            guard CSVField.isPlain(value) else { return false }
            bytes.append(contentsOf: value.utf8)
            return true
        }
        func number(_ value: Int64?) {
            bytes.append(UInt8(ascii: ","))
            if let value { DecimalText.append(value, to: &bytes) }
        }
        func time(_ ms: Int64?) -> Bool {
            bytes.append(UInt8(ascii: ","))
            guard let ms else { return true }
            return RFC3339.append(ms, to: &bytes)
        }
        let result = job.result
        let written = field(job.id, comma: false) && field(job.spec.kind.rawValue) && field(job.state.rawValue)
            && { number(Int64(job.attempts)); return true }()
            && field(job.spec.source.map(display.url)) && field(job.spec.destination.map(display.url))
            && { number(result?.size ?? result?.object?.knownSize ?? job.bytesTotal); return true }()
            && field(result?.md5 ?? result?.object?.md5Hash) && field(result?.crc32c ?? result?.object?.crc32c)
            && time(job.createdAtMs) && time(job.startedAtMs) && time(job.finishedAtMs)
        if written {
            // No error (code, name, message) and no batch (id, source): five empty fields; then `verified`
            // and `skipped`.
            bytes.append(contentsOf: [UInt8](repeating: UInt8(ascii: ","), count: 5))
            _ = field(VerifiedHashes.csvText(result?.verified?.map(\.rawValue)))
            _ = field(result?.skipped == true ? "true" : nil)
        } else {
            bytes.removeSubrange(mark...)
        }
        return written
    }

    /// Text JSON prints as it is: printable ASCII other than the quote and the backslash.
    private static func isPlainJSON(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }
}
