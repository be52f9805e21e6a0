import Foundation
@testable import JobModel
import Testing

// MARK: - Fixtures

/// A spec with every field set, so a field lost or shared by the box shows in the JSON and in `==`.
private func fullSpec() -> JobSpec {
    var spec = JobSpec(kind: .uploadData, source: "/src/a.txt", destination: "gs://b/o", data: Data("hello".utf8),
                       maxSize: 99, metadata: UploadMetadata(contentType: "text/plain", customMetadata: ["k": "v"]),
                       key: "key-1", priority: 3, maxAttempts: 4, queue: "q", timeoutSeconds: 60,
                       checksums: [.md5, .crc32c], ifExists: .skip, maxRate: 1_000, runAfterMs: 50,
                       batch: JobBatch(id: "B1", source: "/src", include: ["*.txt"], path: "a.txt"), after: ["J0"])
    spec.removeCustomMetadata = ["gone"]
    spec.ifGeneration = 7
    return spec
}

/// A result with every field set.
private func fullResult() -> JobResult {
    JobResult(object: StorageObject(bucket: "b", name: "o", size: 5, contentType: "text/plain", md5Hash: "m",
                                    crc32c: "c", generation: "1", metageneration: "1"),
              path: "/dst/o", size: 5, md5: "XUFAKrxLKna5cZ2REBfFkg==", crc32c: "mnG7TA==", blob: "ab",
              data: Data([1, 2, 3]), url: "https://example.test/o", verified: [.crc32c], skipped: false,
              deleted: "gs://b/old")
}

/// An error with every field set.
private func fullError() -> StorageError {
    StorageError(.retryLimitExceeded, "gave up after 5 attempts", httpStatus: 503, url: "https://example.test/o",
                 retryable: true, retryAfter: 1.5, cause: "curl error 56", total: 10, maximum: 5)
}

/// The error as it was laid out before its box.
private struct PlainError: Codable {
    var code: StorageErrorCode
    var message: String
    var httpStatus: Int?
    var url: String?
    var retryable: Bool
    var retryAfter: Double?
    var cause: String?
    var total: Int64?
    var maximum: Int64?
}

/// The spec as it was laid out before its fields moved into a box: the same stored properties in the same
/// order, with the synthesized `Codable`. Its JSON is what the spec must keep producing and reading.
private struct PlainSpec: Codable, Equatable {
    var kind: JobKind
    var source: String?
    var destination: String?
    var data: Data?
    var maxSize: Int64?
    var metadata: UploadMetadata?
    var key: String?
    var priority: Int
    var maxAttempts: Int
    var queue: String
    var timeoutSeconds: Int?
    var checksums: [ChecksumAlgorithm]?
    var ifExists: IfExists?
    var maxRate: Int64?
    var runAfterMs: Int64?
    var batch: JobBatch?
    var after: [String]?
    var removeCustomMetadata: [String]?
    var ifGeneration: Int64?
}

/// The result as it was laid out before the box.
private struct PlainResult: Codable, Equatable {
    var object: StorageObject?
    var path: String?
    var size: Int64?
    var md5: String?
    var crc32c: String?
    var verified: [ChecksumAlgorithm]?
    var blob: String?
    var data: Data?
    var url: String?
    var skipped: Bool?
    var deleted: String?
}

/// The JSON of `value`; sorted keys as the log writes them (unsorted, Foundation's key order is not stable
/// from one encode to the next).
private func json<T: Encodable>(_ value: T, sorted: Bool) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = sorted ? [.sortedKeys] : []
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

/// One change to one field of a spec, for every field.
private let specChanges: [(String, @Sendable (inout JobSpec) -> Void)] = [
    ("kind", { $0.kind = .downloadFile }), ("source", { $0.source = nil }), ("destination", { $0.destination = "gs://b/p" }),
    ("data", { $0.data = Data("bye".utf8) }), ("maxSize", { $0.maxSize = 100 }), ("metadata", { $0.metadata = nil }),
    ("key", { $0.key = "key-2" }), ("priority", { $0.priority = 4 }), ("maxAttempts", { $0.maxAttempts = 5 }),
    ("queue", { $0.queue = "r" }), ("timeoutSeconds", { $0.timeoutSeconds = 61 }), ("checksums", { $0.checksums = [.md5] }),
    ("ifExists", { $0.ifExists = nil }), ("maxRate", { $0.maxRate = 2_000 }), ("runAfterMs", { $0.runAfterMs = 51 }),
    ("batch", { $0.batch = nil }), ("after", { $0.after = ["J1"] }), ("removeCustomMetadata", { $0.removeCustomMetadata = nil }),
    ("ifGeneration", { $0.ifGeneration = 8 }),
]

/// One change to one field of a result, for every field.
private let resultChanges: [(String, @Sendable (inout JobResult) -> Void)] = [
    ("object", { $0.object = nil }), ("path", { $0.path = "/dst/p" }), ("size", { $0.size = 6 }), ("md5", { $0.md5 = nil }),
    ("crc32c", { $0.crc32c = "x" }), ("verified", { $0.verified = [] }), ("blob", { $0.blob = nil }),
    ("data", { $0.data = Data([9]) }), ("url", { $0.url = nil }), ("skipped", { $0.skipped = true }),
    ("deleted", { $0.deleted = nil }),
]

// MARK: - Tests

@Suite("Specs, results and payloads are boxed: a copy is one reference")
struct BoxedValueTests {
    @Test("the boxed values are one reference wide")
    func oneReferenceWide() {
        // Inline, a spec was 361 bytes, a result 384 and a payload 144; each copy moved all of it.
        #expect(MemoryLayout<JobSpec>.size == MemoryLayout<AnyObject>.size)
        #expect(MemoryLayout<JobResult>.size == MemoryLayout<AnyObject>.size)
        #expect(MemoryLayout<EventPayload>.size == MemoryLayout<AnyObject>.size)
        #expect(MemoryLayout<StorageError>.size == MemoryLayout<AnyObject>.size)
        #expect(MemoryLayout<ResumePoint>.size == MemoryLayout<AnyObject>.size)
    }

    @Test("a spec's JSON is the plain struct's, both ways, full and sparse")
    func specJSONUnchanged() throws {
        for spec in [fullSpec(), JobSpec(kind: .downloadMemory, source: "file:///b/o")] {
            let plain = try JSONDecoder().decode(PlainSpec.self, from: Data(try json(spec, sorted: false).utf8))
            #expect(try json(plain, sorted: true) == json(spec, sorted: true))
            let back = try JSONDecoder().decode(JobSpec.self, from: Data(try json(plain, sorted: false).utf8))
            #expect(back == spec)
        }
        #expect(try json(fullSpec(), sorted: true).contains("\"ifGeneration\":7"))
    }

    @Test("a result's JSON is the plain struct's, both ways, full and sparse")
    func resultJSONUnchanged() throws {
        for result in [fullResult(), JobResult(size: 64)] {
            let plain = try JSONDecoder().decode(PlainResult.self, from: Data(try json(result, sorted: false).utf8))
            #expect(try json(plain, sorted: true) == json(result, sorted: true))
            let back = try JSONDecoder().decode(JobResult.self, from: Data(try json(plain, sorted: false).utf8))
            #expect(back == result)
        }
    }

    @Test("an error's JSON is the plain struct's, both ways; a copy shares the box until one side changes")
    func errorBoxed() throws {
        for error in [fullError(), StorageError(.unknown, "x")] {
            let plain = try JSONDecoder().decode(PlainError.self, from: Data(try json(error, sorted: true).utf8))
            #expect(try json(plain, sorted: true) == json(error, sorted: true))
            #expect(try JSONDecoder().decode(StorageError.self, from: Data(try json(plain, sorted: true).utf8)) == error)
        }
        let original = fullError()
        var copy = original
        #expect(copy.storageIdentity == original.storageIdentity)
        copy.retryable = false
        #expect(copy.storageIdentity != original.storageIdentity)
        #expect(original == fullError())
        #expect(copy != original)
        #expect(original.description == "retryLimitExceeded (-13030): gave up after 5 attempts [HTTP 503] <https://example.test/o>")
    }

    @Test("a spec copy shares the box until one side changes a field; the other keeps its value")
    func specCopyOnWrite() {
        for (name, change) in specChanges {
            let original = fullSpec()
            var copy = original
            #expect(copy.storageIdentity == original.storageIdentity, "\(name)")
            change(&copy)
            #expect(copy.storageIdentity != original.storageIdentity, "\(name)")
            #expect(original == fullSpec(), "\(name)")
            #expect(copy != original, "\(name)")
            var alone = fullSpec()
            let box = alone.storageIdentity
            change(&alone)
            #expect(alone.storageIdentity == box, "an unshared spec changes in place: \(name)")
            #expect(alone == copy, "\(name)")
        }
    }

    @Test("a result copy shares the box until one side changes a field; the other keeps its value")
    func resultCopyOnWrite() {
        for (name, change) in resultChanges {
            let original = fullResult()
            var copy = original
            #expect(copy.storageIdentity == original.storageIdentity, "\(name)")
            change(&copy)
            #expect(copy.storageIdentity != original.storageIdentity, "\(name)")
            #expect(original == fullResult(), "\(name)")
            #expect(copy != original, "\(name)")
        }
    }

    @Test("values built apart are equal and hash alike by their fields")
    func equalityByValue() {
        #expect(fullSpec() == fullSpec())
        #expect(fullSpec().hashValue == fullSpec().hashValue)
        #expect(Set([fullSpec(), fullSpec()]).count == 1)
        #expect(fullResult() == fullResult())
        #expect(Set([fullResult(), fullResult()]).count == 1)
        for (name, change) in specChanges {
            var other = fullSpec()
            change(&other)
            #expect(other != fullSpec(), "\(name)")
        }
        for (name, change) in resultChanges {
            var other = fullResult()
            change(&other)
            #expect(other != fullResult(), "\(name)")
        }
    }

    @Test("printed, a boxed value shows its fields, as the plain struct did")
    func printedWithFields() {
        let spec = String(describing: fullSpec())
        #expect(spec.hasPrefix("JobSpec(kind: "), "\(spec)")
        #expect(spec.contains("destination: Optional(\"gs://b/o\")"), "\(spec)")
        let result = String(describing: JobResult(size: 5))
        #expect(result.hasPrefix("JobResult(object: nil, path: nil, size: Optional(5)"), "\(result)")
    }
}
