@testable import Storage
import Testing
import TestSupport

/// The status code read from a status line's bytes gives what the former parse (split on spaces, the
/// second part made a `String`, then an `Int`) gave for every line a server can send, and 0 where that
/// parse gave a sign or more digits than a status code has.
@Suite("HTTP status line", .onTestThreads)
struct StatusLineTests {
    /// The former parse, kept here as the reference.
    private static func formerCode(_ line: String) -> Int {
        let parts = Array(line.utf8).split(separator: UInt8(ascii: " "), maxSplits: 2)
        return parts.count > 1 ? Int(String(decoding: parts[1], as: UTF8.self)) ?? 0 : 0
    }

    private static func code(_ line: String) -> Int {
        Array(line.utf8).withUnsafeBytes { bytes in HTTPStatusLine.code(bytes[...]) }
    }

    @Test(arguments: [
        "HTTP/1.1 200 OK", "HTTP/1.1 201 Created", "HTTP/1.0 404 Not Found", "HTTP/2 200", "HTTP/2 308",
        "HTTP/1.1 100 Continue", "HTTP/1.1 503 Service Unavailable", "HTTP/1.1 200", "HTTP/1.1  206  Partial",
        "HTTP/1.1 999 Odd", "HTTP/1.1 000 Zero", "HTTP/1.1", "HTTP/1.1 ", "HTTP/1.1 abc", "HTTP/1.1 20x OK",
        "HTTP/1.1 2OO OK", "HTTP/1.1 \u{00E9}00 OK", "HTTP/3 200 OK extra words here",
    ])
    func theCodeIsWhatTheFormerParseGave(line: String) {
        #expect(Self.code(line) == Self.formerCode(line), "\(line)")
    }

    /// Where the former parse took a sign or a long number through `Int`, the code is 0 (unknown): no
    /// status has a sign or more than three digits.
    @Test func signsAndLongNumbersAreNoCode() {
        #expect(Self.formerCode("HTTP/1.1 +200 OK") == 200)
        #expect(Self.code("HTTP/1.1 +200 OK") == 0)
        #expect(Self.code("HTTP/1.1 -1 OK") == 0)
        #expect(Self.code("HTTP/1.1 1234567890 OK") == 0)
        #expect(Self.code("HTTP/1.1 99999999999999999999999 OK") == 0)
        #expect(Self.code("HTTP/1.1 123456789 OK") == 123_456_789)
    }
}
