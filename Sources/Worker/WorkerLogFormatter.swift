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
        case .text: textLine(entry)
        case .json: jsonLine(entry)
        }
    }

    // MARK: - Text

    /// The parts joined by single spaces, appended to one string as they are made (three lines a job
    /// are written while draining: an array of parts and `joined` cost more than the text itself).
    private func textLine(_ entry: WorkerLogEntry) -> String {
        var line = ""
        line.reserveCapacity(160)
        if timestamps {
            line += RFC3339.string(entry.atMs)
            line += " "
        }
        line += paint(Self.padded(entry.level.name, to: 7), Self.levelColor(entry.level))
        line += " "
        line += paint(entry.event.rawValue, Self.eventColor(entry.event))
        if let job = entry.jobID {
            line += " "
            line += job
        }
        if let kind = entry.kind {
            line += " "
            line += kind.rawValue
        }
        for (name, value) in entry.fields {
            line += " "
            line += name
            line += "="
            line += Self.textValue(value)
        }
        return line
    }

    /// `text` cut or padded with spaces to `width` characters (as Foundation's `padding(toLength:)`,
    /// without its cost on every line).
    static func padded(_ text: String, to width: Int) -> String {
        let count = text.count
        if count >= width { return String(text.prefix(width)) }
        return text + String(repeating: " ", count: width - count)
    }

    private func paint(_ text: String, _ code: String?) -> String {
        guard color, let code else { return text }
        return "\u{1B}[\(code)m\(text)\u{1B}[0m"
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
        switch value {
        case .integer(let number):
            return String(number)
        case .number(let number):
            return number.isFinite ? String(format: "%.1f", number) : "0"
        case .text(let raw):
            let text = SecretRedaction.redactURLs(in: raw)
            let plain = !text.isEmpty && text.unicodeScalars.allSatisfy { scalar in
                scalar.value > 0x20 && scalar.value != 0x7F && scalar != "\"" && scalar != "\\"
            }
            if plain { return text }
            return jsonString(text)
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

    /// `text` as a JSON string literal, quotes included: byte for byte what `JSONSerialization` makes of
    /// it with `.withoutEscapingSlashes` (`\"`, `\\`, `\b \f \n \r \t`, other controls as `\u00xx`,
    /// everything else as it is), written by hand because serialising a one-element array per quoted
    /// field (every `succeeded` line's `rate="… KiB/s"`) cost about 1 % of a small-file drain's CPU.
    static func jsonString(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 2)
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x08: out += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: out += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x00..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
        return String(decoding: out, as: UTF8.self)
    }

    private static func serialize(_ object: Any) -> String {
        // Only strings, numbers, NSNull, arrays and dictionaries of them are built above, which
        // JSONSerialization always accepts; the fallback keeps the line count right regardless.
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]),
              let text = String(data: data, encoding: .utf8) else { return "{}" }
        return text
    }
}
