import Foundation
import JobModel

/// Turns log entries into lines: plain text or JSON lines. Pure: no clock, no I/O.
///
/// Text: `2026-11-30T12:00:00.123Z info    succeeded 01J… upload-file bytes=1048576 duration_ms=812 …`
/// (without the time when `timestamps` is off, as under systemd, where journald stamps each line).
/// JSON: one object per line, `{"time", "time_ms", "level", "event", "job", "kind", "fields"}`.
/// Every text value passes through `SecretRedaction.redactURLs`, so no URL's secret reaches a log.
public struct WorkerLogFormatter: Sendable {
    /// Plain text or JSON lines.
    public enum Format: String, Sendable, CaseIterable {
        case text
        case json
    }

    public var format: Format
    /// Whether text lines start with an RFC 3339 time (JSON always carries it).
    public var timestamps: Bool
    /// Whether text lines colour the level and outcome (ANSI); never in JSON.
    public var color: Bool

    public init(format: Format = .text, timestamps: Bool = true, color: Bool = false) {
        self.format = format
        self.timestamps = timestamps
        self.color = color
    }

    /// The line for `entry`, without its line feed.
    public func line(_ entry: WorkerLogEntry) -> String {
        switch format {
        case .text:
            var bytes: [UInt8] = []
            appendTextLine(entry, to: &bytes)
            return String(decoding: bytes, as: UTF8.self)
        case .json: return jsonLine(entry)
        }
    }

    /// `line(entry)` and its line feed appended to `text` (the worker writes three lines a job).
    public func appendLine(_ entry: WorkerLogEntry, to text: inout String) {
        var bytes: [UInt8] = []
        appendLine(entry, toBytes: &bytes)
        if text.isEmpty {
            text = String(decoding: bytes, as: UTF8.self)
        } else {
            text += String(decoding: bytes, as: UTF8.self)
        }
    }

    /// `line(entry)` and its line feed appended as UTF-8 bytes: a batch of lines (a claim's) made a
    /// `String` once, not a `String` a line appended to another.
    public func appendLine(_ entry: WorkerLogEntry, toBytes bytes: inout [UInt8]) {
        switch format {
        case .text: appendTextLine(entry, to: &bytes)
        case .json: bytes += jsonLine(entry).utf8
        }
        bytes.append(UInt8(ascii: "\n"))
    }

    // MARK: - Text

    /// The parts joined by single spaces, written as UTF-8 bytes into one buffer and made a `String`
    /// once: appending each part to a `String` (the line before) was ~17 k instructions a line, 4 % of
    /// a small-file drain's, and the worker writes three lines a job. Byte for byte the same text.
    private func appendTextLine(_ entry: WorkerLogEntry, to line: inout [UInt8]) {
        // A claimed line with its source and destination is ~300 bytes; growing past a smaller guess
        // copied the line once or twice more.
        line.reserveCapacity(line.count + 384)
        if timestamps {
            if !RFC3339.append(entry.atMs, to: &line) { line += RFC3339.string(entry.atMs).utf8 }
            line.append(UInt8(ascii: " "))
        }
        appendPainted(Self.paddedLevelName(entry.level), Self.levelColor(entry.level), to: &line)
        line.append(UInt8(ascii: " "))
        appendPainted(entry.event.rawValue, Self.eventColor(entry.event), to: &line)
        if let job = entry.jobID {
            line.append(UInt8(ascii: " "))
            line += job.utf8
        }
        if let kind = entry.kind {
            line.append(UInt8(ascii: " "))
            line += kind.rawValue.utf8
        }
        for (name, value) in entry.fields {
            line.append(UInt8(ascii: " "))
            line += name.utf8
            line.append(UInt8(ascii: "="))
            Self.appendTextValue(value, to: &line)
        }
    }

    /// The level's name padded with spaces to seven characters (the longest, `warning`), as a constant:
    /// no counting of Characters on every line.
    static func paddedLevelName(_ level: WorkerLogLevel) -> String {
        switch level {
        case .debug: "debug  "
        case .info: "info   "
        case .warning: "warning"
        case .error: "error  "
        }
    }

    /// `paint(text, code)` appended as bytes.
    private func appendPainted(_ text: String, _ code: String?, to line: inout [UInt8]) {
        guard color, let code else {
            line += text.utf8
            return
        }
        line += "\u{1B}[".utf8
        line += code.utf8
        line += "m".utf8
        line += text.utf8
        line += "\u{1B}[0m".utf8
    }

    private static func levelColor(_ level: WorkerLogLevel) -> String? {
        switch level {
        case .debug: "2"
        case .info: nil
        case .warning: "33"
        case .error: "31"
        }
    }

    private static func eventColor(_ event: WorkerLogEvent) -> String? {
        switch event {
        case .succeeded: "32"
        case .failed, .leaseLost, .abandoned, .storeError: "31"
        case .retryScheduled, .slowCommit, .cancelled: "33"
        default: nil
        }
    }

    /// A text field value: numbers as they are; text redacted, quoted (JSON string rules) when it holds
    /// a space, a quote, a backslash or a control character, so a line always splits back into its fields.
    static func textValue(_ value: WorkerLogValue) -> String {
        var bytes: [UInt8] = []
        appendTextValue(value, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `textValue(value)` appended as bytes. Plain is decided on UTF-8 bytes: a scalar above 0x7F is all
    /// bytes of 0x80 and up, so "every scalar above 0x20, not DEL, `"` or `\`" is the same test per byte;
    /// a 0xC2 byte (the lead byte of the C1 controls U+0080–U+009F, and of a few Latin-1 signs) or a 0xE2
    /// (that of U+2000–U+2FFF, the layout controls among them: `TerminalText.isLayoutControl`) sends the
    /// value through the quoting, which shows those controls as `\u00xx` and `\u20xx`.
    static func appendTextValue(_ value: WorkerLogValue, to line: inout [UInt8]) {
        switch value {
        case .integer(let number):
            DecimalText.append(number, to: &line)
        case .number(let number):
            line += (number.isFinite ? String(format: "%.1f", number) : "0").utf8
        case .text(let raw):
            let text = SecretRedaction.redactURLs(in: raw)
            let plain = !text.isEmpty && text.utf8.allSatisfy { byte in
                byte > 0x20 && byte != 0x7F && byte != 0xC2 && byte != 0xE2 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
            }
            if plain {
                line += text.utf8
            } else {
                appendJSONString(text, to: &line)
            }
        }
    }

    // MARK: - JSON

    private func jsonLine(_ entry: WorkerLogEntry) -> String {
        var fields: [String: Any] = [:]
        for (name, value) in entry.fields {
            if case .text(let raw) = value {
                fields[name] = SecretRedaction.redactURLs(in: raw)
            } else {
                fields[name] = value.jsonObject
            }
        }
        let object: [String: Any] = [
            "time": RFC3339.string(entry.atMs),
            "time_ms": entry.atMs,
            "level": entry.level.name,
            "event": entry.event.rawValue,
            "job": entry.jobID ?? NSNull(),
            "kind": entry.kind?.rawValue ?? NSNull(),
            "fields": fields,
        ]
        return Self.serialize(object)
    }

    /// `text` as a JSON string literal, quotes included: what `JSONSerialization` makes of it with
    /// `.withoutEscapingSlashes` (`\"`, `\\`, `\b \f \n \r \t`, other C0 controls as `\u00xx`, everything
    /// else as it is) except that DEL, the C1 controls and the layout controls (`TerminalText.isLayoutControl`)
    /// are escaped as `\uxxxx` too (still JSON, and no 8-bit CSI or bidirectional override reaches a terminal
    /// reading the log), written by hand because serialising a one-element array per quoted field (every
    /// `succeeded` line's `rate="… KiB/s"`) cost about 1 % of a small-file drain's CPU.
    static func jsonString(_ text: String) -> String {
        var out: [UInt8] = []
        appendJSONString(text, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `jsonString(text)` appended as bytes.
    static func appendJSONString(_ text: String, to out: inout [UInt8]) {
        out.reserveCapacity(out.count + text.utf8.count + 2)
        out.append(UInt8(ascii: "\""))
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        func escape(_ value: UInt32) {
            out += [UInt8(ascii: "\\"), UInt8(ascii: "u"), hex[Int(value >> 12 & 0xF)], hex[Int(value >> 8 & 0xF)],
                    hex[Int(value >> 4 & 0xF)], hex[Int(value & 0xF)]]
        }
        var text = text
        text.withUTF8 { bytes in
            var index = 0
            while index < bytes.count {
                let byte = bytes[index]
                let next = index + 1 < bytes.count ? bytes[index + 1] : 0
                // C2 80–9F: U+0080–U+009F. E2 80 A8–AE: U+2028–U+202E. E2 81 A6–A9: U+2066–U+2069.
                if byte == 0xC2 && (0x80...0x9F).contains(next) {
                    escape(UInt32(next))
                    index += 2
                    continue
                }
                if byte == 0xE2 && index + 2 < bytes.count {
                    let last = bytes[index + 2]
                    if (next == 0x80 && (0xA8...0xAE).contains(last)) || (next == 0x81 && (0xA6...0xA9).contains(last)) {
                        escape(0x2000 | UInt32(next & 0x3F) << 6 | UInt32(last & 0x3F))
                        index += 3
                        continue
                    }
                }
                switch byte {
                case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
                case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
                case 0x08: out += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
                case 0x0C: out += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
                case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
                case 0x0D: out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
                case 0x09: out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
                case 0x00..<0x20, 0x7F: escape(UInt32(byte))
                default: out.append(byte)
                }
                index += 1
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private static func serialize(_ object: Any) -> String {
        // Only strings, numbers, NSNull, arrays and dictionaries of them are built above, which
        // JSONSerialization always accepts; the fallback keeps the line count right regardless.
        // JSONSerialization escapes only C0: DEL, the C1 controls (an 8-bit CSI) and the layout controls
        // (a bidirectional override, U+2028) in a name reached a terminal reading the log raw, as the text
        // format's `appendJSONString` does not let them.
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]),
              let text = String(data: TerminalText.escapingJSONControls(data), encoding: .utf8) else { return "{}" }
        return text
    }
}
