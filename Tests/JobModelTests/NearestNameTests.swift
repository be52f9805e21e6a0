import JobModel
import Testing

@Suite("Nearest name")
struct NearestNameTests {
    @Test func suggestsTheNearestWithinTheLimit() {
        let options = ["concurrency", "claim-ahead", "queue", "drain", "lease"]
        #expect(NearestName.nearest(to: "concurency", among: options, within: 2) == "concurrency")
        #expect(NearestName.nearest(to: "drian", among: options, within: 2) == "drain")
        #expect(NearestName.nearest(to: "colour", among: options, within: 2) == nil)
        // Ties go to the earlier candidate.
        #expect(NearestName.nearest(to: "lase", among: ["lease", "last"], within: 2) == "lease")
        #expect(NearestName.nearest(to: "lase", among: ["last", "lease"], within: 2) == "last")
    }

    /// A name far longer than every candidate is more edits away than the limit from each: no
    /// suggestion, whatever it holds (it is not compared: a 128 KB option name took 0.3–0.6 s).
    @Test func aLongNameIsNoMisspellingOfAShortOne() {
        let long = String(repeating: "concurrency", count: 12_000)
        #expect(NearestName.nearest(to: long, among: ["concurrency"], within: 3) == nil)
        #expect(NearestName.nearest(to: "concurrency" + "xyz", among: ["concurrency"], within: 3) == "concurrency")
        #expect(NearestName.nearest(to: "concurrency" + "wxyz", among: ["concurrency"], within: 3) == nil)
    }

    @Test func editDistance() {
        #expect(NearestName.editDistance("kitten", "sitting") == 3)
        #expect(NearestName.editDistance("", "abc") == 3)
        #expect(NearestName.editDistance("abc", "") == 3)
        #expect(NearestName.editDistance("same", "same") == 0)
        #expect(NearestName.editDistance("flaw", "lawn") == 2)
    }
}
