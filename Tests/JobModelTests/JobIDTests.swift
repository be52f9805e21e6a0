import Foundation
import Testing
@testable import JobModel

@Suite("Job ids")
struct JobIDTests {
    /// The id's 48-bit time part as 10 Crockford base32 characters.
    private func timeText(_ ms: UInt64) -> String {
        String(JobID.Parts(time: ms, high: 0, low: 0).text.prefix(10))
    }

    @Test("ids made at one time sort in the order they were made, each valid and distinct, with that time")
    func oneMillisecond() {
        let generator = JobIDGenerator()
        let ids = (0..<3_000).map { _ in generator.next(atMs: 1_764_000_000_000) }
        #expect(Set(ids).count == ids.count)
        #expect(ids.allSatisfy(JobID.isValid))
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        #expect(ids.allSatisfy { $0.hasPrefix(timeText(1_764_000_000_000)) })
    }

    @Test("a clock that steps back does not make an id sort before the ones made before it")
    func clockSteppedBack() {
        let generator = JobIDGenerator()
        let later = generator.next(atMs: 1_764_000_000_500)
        let earlier = generator.next(atMs: 1_764_000_000_100)
        #expect(later < earlier)
        #expect(earlier.hasPrefix(timeText(1_764_000_000_500)))
        let next = generator.next(atMs: 1_764_000_000_900)
        #expect(earlier < next && next.hasPrefix(timeText(1_764_000_000_900)))
    }

    @Test("the process's ids sort in the order they were made, whatever times other callers pass")
    func processWide() {
        // Other tests make ids at the same time, with other times: the order still holds.
        let ids = (0..<2_000).map { index in JobID.generate(atMs: index % 2 == 0 ? 5 : Clock.nowMs()) }
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        #expect(Set(ids).count == ids.count)
    }

    @Test("the next id: a fresh random part in a later millisecond, plus a step (with its carry) in the same one")
    func nextParts() {
        let fresh = { (high: UInt16(0x1234), low: UInt64(0x5678)) }
        let step = { UInt64(1_000) }
        func next(_ previous: JobID.Parts?, _ time: UInt64) -> JobID.Parts {
            JobID.Parts.next(after: previous, time: time, fresh: fresh, step: step)
        }
        #expect(next(nil, 7) == JobID.Parts(time: 7, high: 0x1234, low: 0x5678))
        let previous = JobID.Parts(time: 7, high: 3, low: 41)
        #expect(next(previous, 8) == JobID.Parts(time: 8, high: 0x1234, low: 0x5678))
        #expect(next(previous, 7) == JobID.Parts(time: 7, high: 3, low: 1_041))
        #expect(next(previous, 2) == JobID.Parts(time: 7, high: 3, low: 1_041))
        let lowFull = JobID.Parts(time: 7, high: 3, low: .max - 10)
        #expect(next(lowFull, 7) == JobID.Parts(time: 7, high: 4, low: 989))
        // The random part run out in one millisecond: the next millisecond.
        let allFull = JobID.Parts(time: 7, high: .max, low: .max - 10)
        #expect(next(allFull, 7) == JobID.Parts(time: 8, high: 0x1234, low: 0x5678))
        // Times past 48 bits keep their low 48.
        #expect(next(nil, (1 << 48) + 5).time == 5)
    }

    @Test("ids of one millisecond differ within their first 15 characters, so short prefixes stay unique")
    func shortPrefixes() {
        let generator = JobIDGenerator()
        let ids = (0..<3_000).map { _ in generator.next(atMs: 1_764_000_000_000) }
        for (a, b) in zip(ids, ids.dropFirst()) {
            let common = zip(a, b).prefix { $0 == $1 }.count
            #expect(common < 15, "\(a) \(b)")
        }
    }

    @Test("the 26 characters: time first, then the random part's 80 bits, most significant first")
    func encoding() {
        #expect(JobID.Parts(time: 0, high: 0, low: 0).text == String(repeating: "0", count: 26))
        #expect(JobID.Parts(time: JobID.maxTime, high: .max, low: .max).text == "7" + String(repeating: "Z", count: 25))
        #expect(JobID.Parts(time: 0, high: 0, low: 1).text == String(repeating: "0", count: 25) + "1")
        // `low`'s top 4 bits and `high`'s lowest share the 14th character.
        #expect(JobID.Parts(time: 0, high: 0, low: 1 << 60).text == String(repeating: "0", count: 13) + "1" + String(repeating: "0", count: 12))
        #expect(JobID.Parts(time: 0, high: 1, low: 0).text == String(repeating: "0", count: 13) + "G" + String(repeating: "0", count: 12))
        #expect(JobID.Parts(time: 0, high: 0x8000, low: 0).text == "0000000000G" + String(repeating: "0", count: 15))
        #expect(JobID.Parts(time: 1, high: 0, low: 0).text == "0000000001" + String(repeating: "0", count: 16))
    }

    @Test("ids compare as text exactly as their parts compare as numbers")
    func textOrderIsNumberOrder() {
        var generator = SystemRandomNumberGenerator()
        func random() -> JobID.Parts {
            // Small ranges too, so equal times and equal highs occur.
            JobID.Parts(time: generator.next() % 4, high: UInt16(truncatingIfNeeded: generator.next()) % 3,
                        low: generator.next() % 2 == 0 ? generator.next() : generator.next() % 5)
        }
        for _ in 0..<5_000 {
            let a = random(), b = random()
            let numeric = (a.time, a.high, a.low) < (b.time, b.high, b.low)
            #expect((a.text < b.text) == numeric)
            #expect(JobID.isValid(a.text))
        }
    }

    @Test("shape check: 26 characters of the alphabet, either case; other text refused")
    func validity() {
        #expect(JobID.isValid("01M8SJ1JQ21DZCAK0CVT99FZ26"))
        #expect(JobID.isValid("01m8sj1jq21dzcak0cvt99fz26"))
        #expect(!JobID.isValid("01M8SJ1JQ21DZCAK0CVT99FZ2"))
        #expect(!JobID.isValid("01M8SJ1JQ21DZCAK0CVT99FZ2U"))
        // A character that upper-cases into the alphabet is still not one of its characters.
        #expect(!JobID.isValid("01M8SJ1JQ21DZCAK0CVT99FZ2\u{17F}"))
        #expect(JobID.isValid(JobID.derived(from: "batch:nightly")))
        // A derived id never changes between releases: a keyed batch maps to its jobs by it.
        #expect(JobID.derived(from: "batch:nightly") == "0VZJS845BHGA3H04EZ3SREKRF7")
    }
}
