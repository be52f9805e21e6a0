import Foundation
import Testing
import TestSupport
@testable import EventStore

/// The prepared-statement cache hashes a few samples of each SQL text, not all of it: texts alike in
/// every sampled byte must still get their own statements.
@Suite(.onTestThreads) struct StatementCacheTests {
    /// Two texts of one length that differ only where the hash does not look, and a third that differs
    /// only in its last byte: each query answers with its own value, in any order, many times.
    @Test func textsAlikeInTheSampledBytesKeepTheirOwnStatements() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let connection = try SQLiteConnection(path: directory.path + "/cache.db", readOnly: false, create: true)
        let padding = String(repeating: " ", count: 60)
        let texts = ["SELECT 1 AS v" + padding + "-- x", "SELECT 2 AS v" + padding + "-- x", "SELECT 1 AS v" + padding + "-- y"]
        #expect(Set(texts.map(\.utf8.count)).count == 1)
        // Alike in every sampled byte (a quarter, half, three quarters in): only the first differ there.
        let samples = texts.map { text -> [UInt8] in
            let bytes = Array(text.utf8)
            let count = bytes.count
            return [count / 4, count / 2, count * 3 / 4].flatMap { Array(bytes[$0..<($0 + 8)]) }
        }
        #expect(samples[0] == samples[1] && samples[1] == samples[2])
        #expect(SQLText(texts[0]).hashValue == SQLText(texts[1]).hashValue)
        for round in 0..<50 {
            for (index, text) in (round % 2 == 0 ? Array(texts.enumerated()) : texts.enumerated().reversed()) {
                let value = try connection.first(text) { row in row.int64(0) }
                #expect(value == (index == 1 ? 2 : 1), "\(text)")
            }
        }
        // Short texts (under 8 bytes are hashed whole) and the empty-result case still work.
        #expect(try connection.first("SELECT 7") { row in row.int64(0) } == 7)
        #expect(try connection.first("SELECT 8") { row in row.int64(0) } == 8)
    }
}
