import Foundation
import JobModel
import Testing
@testable import Manifest

/// `after:` chains as long as a manifest: one written dependant first (each job waits for the next) is a
/// path of every job for the cycle check, which looked each entry up on that path by scanning it (20,000
/// jobs: 29 s in `submit --dry-run`). It keeps each key's place on the path now; what it reports is the same.
@Suite("after: chains") struct DependencyChainTests {
    /// `count` fetch-url jobs keyed k0…, each `after:` the next one; the last waits for `lastAfter`, if any.
    static func chain(_ count: Int, lastAfter: String? = nil) -> String {
        (0..<count).map { index in
            let next = index + 1 < count ? "k\(index + 1)" : lastAfter
            return "- {kind: fetch-url, source: gs://bkt/\(index), key: k\(index)\(next.map { ", after: [\($0)]" } ?? "")}\n"
        }.joined()
    }

    @Test func aLongChainWrittenDependantFirstIsRead() throws {
        let count = 20_000
        let jobs = try #require(parse(Self.chain(count)).jobs)
        #expect(jobs.count == count)
        #expect(jobs.dropLast().enumerated().allSatisfy { $0.element.after == ["k\($0.offset + 1)"] })
        #expect(jobs.last?.after == nil)
    }

    /// The whole chain closed by its last job is one cycle, reported once at the entry that closes it,
    /// naming its members in order (k0 → k1 → … → k1999 → k0).
    @Test func aLongCycleIsReportedOnceAtTheEntryClosingIt() throws {
        let count = 2_000
        let errors = try #require(parse(Self.chain(count, lastAfter: "k0")).errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.code == .invalidDependency)
        #expect(error.line == count)
        let written = "- {kind: fetch-url, source: gs://bkt/\(count - 1), key: k\(count - 1), after: ["
        #expect(error.column == written.count + 1, "\(error)")
        // A message is cut in its middle past 1,000 characters: its start and its end name the members.
        #expect(error.message.hasPrefix("'after' makes a cycle (k0 → k1 → k2 → k3 → k4 → "), "\(error.message)")
        #expect(error.message.contains("k1997 → k1998 → k1999 → k0): these jobs would wait for each other forever"), "\(error.message)")
    }

    /// A cycle in the middle of a long chain (k5 → … → k9 → k5) is reported at the entry closing it, and
    /// only its members are named; the jobs before it lead into it and are not part of it.
    @Test func aCycleInsideAChainNamesOnlyItsMembers() throws {
        var lines = Self.chain(10, lastAfter: "k5").split(separator: "\n").map(String.init)
        lines += (10..<1_000).map { "- {kind: fetch-url, source: gs://bkt/\($0), key: k\($0), after: [k\($0 - 1)]}" }
        let errors = try #require(parse(lines.joined(separator: "\n") + "\n").errors)
        #expect(errors.map(\.line) == [10], "\(errors)")
        #expect(errors.first?.message.hasPrefix("'after' makes a cycle (k5 → k6 → k7 → k8 → k9 → k5)") == true, "\(errors)")
    }
}
