import Foundation
import JobModel
import Testing
@testable import EventStore
@testable import StorePort
import TestSupport

/// The hand-written JSON reader (`JSONReader`, `FastJSON`) decodes exactly what Foundation's decoder
/// decodes, and whatever they decline still decodes — or fails — through Foundation as before.
@Suite("Fast JSON decoding", .onTestThreads)
struct FastJSONTests {
    // MARK: - Comparing with Foundation

    /// Decodes `text` as `T` both ways: `StoreJSON.decode` (fast first) and Foundation alone. Both must
    /// succeed with equal values (and re-encode to the same bytes), or both fail. Returns whether the
    /// fast reader decided it itself.
    @discardableResult
    static func agree<T: Codable & Equatable>(_ type: T.Type, _ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let fast = FastJSON.decode(type, text)
        let foundation = Result { () throws(StoreError) -> T in try StoreJSON.foundationDecode(type, text, what: "value") }
        let store = Result { () throws(StoreError) -> T in try StoreJSON.decode(type, text, what: "value") }
        switch (foundation, store) {
        case (.success(let expected), .success(let value)):
            #expect(value == expected, "\(text)", sourceLocation: sourceLocation)
            // Equal is not enough where Swift's String equality is canonical: compare the bytes too.
            let expectedBytes = try? StoreJSON.encode(expected)
            let valueBytes = try? StoreJSON.encode(value)
            #expect(expectedBytes.map { Array($0.utf8) } == valueBytes.map { Array($0.utf8) }, "\(text)", sourceLocation: sourceLocation)
        case (.failure(let expected), .failure(let error)):
            #expect("\(expected)" == "\(error)", sourceLocation: sourceLocation)
            #expect(fast == nil, "the fast reader accepted what Foundation rejects: \(text)", sourceLocation: sourceLocation)
        case (.success, .failure(let error)):
            Issue.record("Foundation decodes \(text) but the store fails: \(error)", sourceLocation: sourceLocation)
        case (.failure(let error), .success):
            Issue.record("Foundation rejects \(text) (\(error)) but the store decodes it", sourceLocation: sourceLocation)
        }
        return fast != nil
    }

    // MARK: - Every payload case

    @Test("every payload case decodes as Foundation decodes it, and the common shapes take the fast path")
    func everyPayloadCase() throws {
        var fast = 0
        var payloads = PayloadJSONTests.payloads
        payloads += Self.specs().map { EventPayload.submitted(spec: $0) }
        payloads += Self.results().map { EventPayload.succeeded(TransferProgress(attempt: 1, bytesDone: 64, bytesTotal: 64), result: $0) }
        for payload in payloads {
            let text = try StoreJSON.encode(payload.wire)
            if Self.agree(EventData.self, text) { fast += 1 }
            // The typed payload too, as the stores build it.
            let wire = try StoreJSON.decode(EventData.self, text, what: "event")
            #expect(try EventPayload(type: payload.type, wire: wire) == payload)
        }
        #expect(fast > payloads.count * 3 / 4, "\(fast) of \(payloads.count) decided by the fast reader")
        // What a big log holds: each of a finished job's events is decided without Foundation.
        let common: [EventPayload] = [
            .submitted(spec: JobSpec(kind: .downloadMemory, source: "file:///b/o.bin", maxSize: 1 << 20)),
            .claimed(leaseOwner: "worker:h:1", leaseExpiresAtMs: 1_700_000_030_000, attempt: 1),
            .started(TransferProgress(attempt: 1)),
            .succeeded(TransferProgress(attempt: 1, bytesDone: 64, bytesTotal: 64), result: Self.results()[1]),
            .failed(.none, error: StorageError(.objectNotFound, "no \"such\" object", httpStatus: 404, retryAfter: 3), reason: "é"),
            // A dependant's cancel, with the dependency that ended (the field the fast reader must not skip).
            .cancelled(.none, error: StorageError(.cancelled, "dependency 01DEP (key up) failed"),
                       reason: "retrying the dependency does not revive this job", dependency: "01DEP"),
        ]
        for payload in common {
            let text = try StoreJSON.encode(payload.wire)
            #expect(FastJSON.decode(EventData.self, text) == payload.wire, "\(text)")
        }
        // A resume point or an archive record is left to Foundation.
        #expect(FastJSON.decode(EventData.self, try StoreJSON.encode(PayloadJSONTests.payloads.last?.wire)) == nil)
    }

    @Test("specs, results and errors alone (the projection's columns)")
    func projectionColumns() throws {
        for spec in Self.specs() { #expect(Self.agree(JobSpec.self, try StoreJSON.encode(spec))) }
        for result in Self.results() { #expect(Self.agree(JobResult.self, try StoreJSON.encode(result))) }
        let error = StorageError(.retryLimitExceeded, "gave up\n", httpStatus: 503, url: "https://h/o?x=1", retryable: true,
                                 retryAfter: 2.5, cause: "timeout", total: 9, maximum: 8)
        // A fractional retryAfter is Foundation's; a whole one is read by hand.
        #expect(!Self.agree(StorageError.self, try StoreJSON.encode(error)))
        var whole = error
        whole.retryAfter = 30
        #expect(Self.agree(StorageError.self, try StoreJSON.encode(whole)))
    }

    // MARK: - The release-1 fixture

    @Test("every event and projection column of the release-1 database decodes as Foundation decodes it")
    func releaseFixture() throws {
        let (directory, path) = try ReleaseFixtureTests.copy("fast-json-release", migrated: true)
        defer { directory.remove() }
        let store = try EventStore(path: path, mode: .readOnly)
        let rows = try store.logRows(afterSeq: 0, limit: 10_000)
        #expect(rows.count == 111)
        var fast = 0
        for row in rows where Self.agree(EventData.self, row.data) { fast += 1 }
        #expect(fast > 90, "\(fast) of \(rows.count) events decided by the fast reader")
        let columns = try store.withConnection { (connection) throws(StoreError) in
            // The spec and the result as JSON of their own (the projection reads them inside their events'
            // payloads, which the events' check above covers).
            try connection.query("""
                SELECT json_extract(\(JobRecord.specSQL), '$.spec'), json_extract(\(JobRecord.resultSQL), '$.result'), error FROM jobs
                """) { row in (row.text(0), row.optionalText(1), row.optionalText(2)) }
        }
        #expect(columns.count == 16)
        for (spec, result, error) in columns {
            #expect(Self.agree(JobSpec.self, spec))
            if let result { Self.agree(JobResult.self, result) }
            if let error { Self.agree(StorageError.self, error) }
        }
    }

    // MARK: - Generated values

    @Test("generated specs and results, written compactly and pretty-printed in any key order")
    func generatedValues() throws {
        var random = SeededRandom(seed: 0x10_9_6)
        let pretty = JSONEncoder()
        pretty.outputFormatting = [.prettyPrinted]
        var fast = 0
        for _ in 0..<300 {
            let spec = Self.randomSpec(&random)
            let result = Self.randomResult(&random)
            let payload = EventPayload.failed(TransferProgress(attempt: random.int(1...9), bytesDone: random.int64()), error:
                StorageError(.unauthorized, random.text(), httpStatus: random.bool() ? 403 : nil, retryable: random.bool()),
                reason: random.bool() ? random.text() : nil)
            for text in [try StoreJSON.encode(spec), String(decoding: try pretty.encode(spec), as: UTF8.self)] where Self.agree(JobSpec.self, text) {
                fast += 1
            }
            Self.agree(JobResult.self, try StoreJSON.encode(result))
            Self.agree(JobResult.self, String(decoding: try pretty.encode(result), as: UTF8.self))
            Self.agree(EventData.self, try StoreJSON.encode(payload.wire))
            Self.agree(EventData.self, try StoreJSON.encode(EventPayload.succeeded(.none, result: result).wire))
            Self.agree(EventData.self, try StoreJSON.encode(EventPayload.submitted(spec: spec).wire))
        }
        #expect(fast == 600)
    }

    // MARK: - Hand-written text

    /// Text no encoder of ours writes, but a reader must answer as Foundation does.
    static let edgeSpecs: [String] = [
        #" { "kind" : "delete", "priority" : 0, "maxAttempts" : 1, "queue" : "q" } "#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","unknown":[1,{"a":null}],"other":1.5e3}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"\u00e9\ud83d\ude80\/\b\f\n\r\t\"\\"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","source":null,"checksums":null,"after":["a","b"]}"#,
        #"{"kind":"delete","priority":-9223372036854775808,"maxAttempts":9223372036854775807,"queue":"q"}"#,
        #"{"kind":"upload-data","priority":0,"maxAttempts":1,"queue":"q","data":"aGVsbG8="}"#,
        #"{"kind":"upload-data","priority":0,"maxAttempts":1,"queue":"q","data":""}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","metadata":{"customMetadata":{"a":"1","b":"2"}}}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","x":1,"x":{"y":2,"y":[]}}"#,
        // Each of these Foundation decides (some it accepts, some it rejects); the fast reader declines.
        #"{"kind":"delete","priority":1.0,"maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":1e2,"maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":-0,"maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":9223372036854775808,"maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","queue":"r"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","data":"not base64!"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","metadata":{"customMetadata":{"a":"1","a":"2"}}}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"\ud83d"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"\udc00x"}"#,
        #"{"kind":"teleport","priority":0,"maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1}"#,
        #"{"kind":"delete","priority":"0","maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":null}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q"} x"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q",}"#,
        #"{"kind":"delete","priority":00,"maxAttempts":1,"queue":"q"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q"#,
        "{\"kind\":\"delete\",\"priority\":0,\"maxAttempts\":1,\"queue\":\"tab\there\"}",
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"\x"}"#,
        #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","skipped":tru}"#,
        "", " ", "null", "[]", "{}", "[", "\"text\"", "1",
        String(repeating: "[", count: 100) + String(repeating: "]", count: 100),
    ]

    @Test("edge cases and malformed text are answered as Foundation answers them", arguments: edgeSpecs)
    func edgeCases(text: String) {
        Self.agree(JobSpec.self, text)
    }

    @Test("valid text of every form the store's shapes take is read by hand, not left to Foundation")
    func readByHand() {
        for text in Self.edgeSpecs.prefix(9) {
            #expect(FastJSON.decode(JobSpec.self, text) != nil, "\(text)")
        }
        #expect(FastJSON.decode(JobSpec.self, Self.edgeSpecs[2])?.queue == "é🚀/\u{8}\u{C}\n\r\t\"\\")
    }

    /// Members the readers do not know, skipped by the pull reader: valid ones of every shape, nested up to
    /// the depth limit; and what it must not skip — malformed values, nesting past the limit — or match
    /// other than by bytes — keys with escapes or outside ASCII, which it leaves to Foundation.
    static func unknownMember(_ value: String, key: String = "unknown") -> String {
        #"{"kind":"delete","priority":0,"maxAttempts":1,"\#(key)":\#(value),"queue":"q"}"#
    }

    @Test("members the readers do not know are skipped as strictly as the rest is read, and odd keys are Foundation's")
    func skippedMembers() throws {
        let readByHand = [
            #"{"a":[1,-2,3.5e-1,true,false,null,"s\n\u00e9",{"b":{}},[]],"c":""}"#, "[]", "{}", #""\ud83d\ude80""#, "-0", "0",
            "1E+9", "123456789012345678901234567890", "null",
            // The document is at depth 0 and this member at 1: values down to depth 32 are read.
            String(repeating: "[", count: 31) + "1" + String(repeating: "]", count: 31),
        ]
        for value in readByHand {
            let text = Self.unknownMember(value)
            #expect(Self.agree(JobSpec.self, text), "\(text)")
            #expect(FastJSON.decode(JobSpec.self, text)?.queue == "q", "\(text)")
            // The same member in an event payload and inside its spec, one level deeper: there the deepest
            // value passes the limit and is left to Foundation.
            #expect(Self.agree(EventData.self, #"{"v":1,"x":\#(value),"spec":\#(text)}"#) == (value != readByHand.last), "\(value)")
        }
        let declined = [
            Self.unknownMember("01"), Self.unknownMember("1."), Self.unknownMember("-"), Self.unknownMember("[1,]"),
            Self.unknownMember(#"{"a" 1}"#), Self.unknownMember(#"{"a":1,}"#), Self.unknownMember("\"tab\there\""),
            Self.unknownMember(#""\ud800""#), Self.unknownMember("nul"), Self.unknownMember("[1 2]"),
            Self.unknownMember(String(repeating: "[", count: 32) + "1" + String(repeating: "]", count: 32)),
            // Keys matched by their bytes only: an escape or a byte outside ASCII goes to Foundation.
            #"{"kind":"delete","priority":0,"maxAttempts":1,"\u0071ueue":"q"}"#,
            #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q","\u0071ueue":"r"}"#,
            Self.unknownMember("1", key: "é"), Self.unknownMember("1", key: "a\\b"),
            #"{"kind":"delete","priority":0,"maxAttempts":1,"queue":"q"}  {}"#,
        ]
        for text in declined {
            Self.agree(JobSpec.self, text)
            #expect(FastJSON.decode(JobSpec.self, text) == nil, "\(text)")
        }
        // A key with an escape is still a key to Foundation: the value it decodes is Foundation's.
        #expect(try StoreJSON.decode(JobSpec.self, declined[11], what: "spec").queue == "q")
    }

    @Test("malformed payloads fail with an error that names the value and what is wrong")
    func malformedPayloads() throws {
        for text in ["", "{", #"{"v":1,"attempt":"one"}"#, #"{"attempt":1}"#, #"{"v":1} trailing"#, #"{"v":1,"spec":{"kind":"x"}}"#] {
            Self.agree(EventData.self, text)
            #expect(throws: StoreError.self) { try StoreJSON.decode(EventData.self, text, what: "event 7 data") }
            do {
                _ = try StoreJSON.decode(EventData.self, text, what: "event 7 data")
            } catch {
                #expect("\(error)".contains("event 7 data is not valid EventData JSON"), "\(error)")
            }
        }
        // Valid JSON of the wrong shape for a strict integer: Foundation's answer either way.
        Self.agree(EventData.self, #"{"v":1,"attempt":2147483648000}"#)
        Self.agree(EventData.self, #"{"v":1.0}"#)
        #expect(Self.agree(EventData.self, #"{"v":1,"reason":"x","resumePoint":null,"archive":null}"#))
    }

    // MARK: - Writing

    /// `value` written by `StoreJSON.encode` is Foundation's bytes; returns whether it was written by hand.
    @discardableResult
    static func writesAsFoundation<T: Encodable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws -> Bool {
        let expected = try StoreJSON.foundationEncode(value)
        #expect(Array(try StoreJSON.encode(value).utf8) == Array(expected.utf8), sourceLocation: sourceLocation)
        guard let fast = FastJSON.encode(value) else { return false }
        #expect(Array(fast.utf8) == Array(expected.utf8), sourceLocation: sourceLocation)
        return true
    }

    @Test("specs and results are written byte for byte as Foundation writes them")
    func writing() throws {
        var handWritten = 0
        for spec in Self.specs() where try Self.writesAsFoundation(spec) { handWritten += 1 }
        for result in Self.results() where try Self.writesAsFoundation(result) { handWritten += 1 }
        // All but those with text to escape (a line feed, a backslash, non-ASCII) or two metadata keys.
        #expect(handWritten == 5)
        var random = SeededRandom(seed: 0x2_0_2_6)
        for _ in 0..<300 {
            try Self.writesAsFoundation(Self.randomSpec(&random))
            try Self.writesAsFoundation(Self.randomResult(&random))
        }
        // Text as the big logs hold it (ASCII paths and URLs): every value written by hand.
        random.plain = true
        for _ in 0..<300 {
            #expect(try Self.writesAsFoundation(Self.randomSpec(&random)))
            #expect(try Self.writesAsFoundation(Self.randomResult(&random)))
        }
        // Text that needs escaping, and dictionaries of several keys, are Foundation's.
        #expect(FastJSON.encode(JobSpec(kind: .delete, source: "a\"b")) == nil)
        #expect(FastJSON.encode(JobSpec(kind: .delete, source: "é")) == nil)
        #expect(FastJSON.encode(JobResult(object: StorageObject(bucket: "b", name: "n", size: 1, customMetadata: ["B": "1", "a": "2"]))) == nil)
        #expect(FastJSON.encode(JobResult(object: StorageObject(bucket: "b", name: "n", size: 1, customMetadata: ["a": "2"]))) != nil)
        // Not a shape it knows: Foundation.
        #expect(FastJSON.encode(StorageError(.unknown, "x")) == nil)
    }

    @Test("a list of ids is written byte for byte as Foundation writes it, or left to Foundation")
    func writingIDLists() throws {
        for ids in [[], ["01M8YDE6C512KRBE92NN4NJNBP"], ["a", "b/c", "with space", "x'y", "0"]] {
            #expect(try Self.writesAsFoundation(ids), "\(ids)")
        }
        // Text that needs escaping: Foundation's (and the hand-written attempt appends nothing it keeps).
        #expect(FastJSON.encode(["plain", "quote\"d"]) == nil)
        #expect(FastJSON.encode(["é"]) == nil)
        #expect(try StoreJSON.encode(["plain", "quote\"d", "é"]) == "[\"plain\",\"quote\\\"d\",\"é\"]")
    }

    // MARK: - Values

    static func specs() -> [JobSpec] {
        var upload = JobSpec(kind: .uploadData, destination: "gs://b/o", data: Data("hello, world".utf8),
                             metadata: UploadMetadata(contentType: "text/plain", cacheControl: "no-cache", contentDisposition: "inline",
                                                      contentEncoding: "gzip", contentLanguage: "en", customMetadata: ["k": "v", "é": "\"q\""]),
                             key: "idem-1", priority: -3, maxAttempts: 9, queue: "bulk", timeoutSeconds: 60, checksums: [.md5, .crc32c],
                             ifExists: .skipIdentical, maxRate: 1 << 20, runAfterMs: 1_700_000_000_000,
                             batch: JobBatch(id: "b1", source: "/src/*", include: ["*.bin"], exclude: [], path: "a/b.bin"),
                             after: ["j1", "j2"])
        upload.removeCustomMetadata = ["old"]
        upload.ifGeneration = Int64.max
        return [
            JobSpec(kind: .downloadMemory, source: "file:///tmp/b/o.bin", maxSize: 1 << 20),
            JobSpec(kind: .downloadFile, source: "gs://bucket/a b/ü.txt", destination: "/home/u/ü.txt"),
            JobSpec(kind: .uploadFile, source: "/tmp/x\ny", destination: "http://127.0.0.1:8080/put/x?y=1&z=\\"),
            JobSpec(kind: .fetchURL, source: "gs://b/o", priority: Int.min, maxAttempts: Int.max),
            upload,
        ]
    }

    static func results() -> [JobResult] {
        let object = StorageObject(bucket: "b", name: "dir/o.bin", size: 64, contentType: "application/octet-stream",
                                   customMetadata: ["a": "1"], md5Hash: "1B2M2Y8AsgTpgAmY7PhCfg==", crc32c: "AAAAAA==",
                                   generation: "1700000000000000", metageneration: "1", timeCreated: "2026-11-30T10:00:00.000Z",
                                   updated: "2026-11-30T10:00:00.000Z", downloadTokens: "t1,t2")
        return [
            JobResult(),
            JobResult(object: object, size: 64, crc32c: "AAAAAA==", blob: String(repeating: "ab", count: 32), verified: [.crc32c]),
            JobResult(path: "/tmp/ü", size: 0, md5: "x", crc32c: "y", verified: [], skipped: true),
            JobResult(data: Data([0, 1, 2, 255]), url: "https://h/o?alt=media&token=t", deleted: "gs://b/o"),
        ]
    }

    static func randomSpec(_ random: inout SeededRandom) -> JobSpec {
        var spec = JobSpec(kind: JobKind.allCases[random.int(0...(JobKind.allCases.count - 1))],
                           source: random.bool() ? random.text() : nil, destination: random.bool() ? random.text() : nil,
                           data: random.bool() ? Data(random.text().utf8) : nil, maxSize: random.bool() ? random.int64() : nil,
                           metadata: random.bool() ? UploadMetadata(contentType: random.text(), customMetadata: [random.text(): random.text()]) : nil,
                           key: random.bool() ? random.text() : nil, priority: Int(random.int64()), maxAttempts: random.int(1...50),
                           queue: random.text(), timeoutSeconds: random.bool() ? random.int(1...86_400) : nil,
                           checksums: random.bool() ? [.crc32c] : nil, ifExists: random.bool() ? .fail : nil,
                           maxRate: random.bool() ? random.int64() : nil, runAfterMs: random.bool() ? random.int64() : nil,
                           batch: random.bool() ? JobBatch(id: random.text(), source: random.text(), path: random.text()) : nil,
                           after: random.bool() ? [random.text(), random.text()] : nil)
        if random.bool() { spec.ifGeneration = random.int64() }
        return spec
    }

    static func randomResult(_ random: inout SeededRandom) -> JobResult {
        JobResult(object: random.bool() ? StorageObject(bucket: random.text(), name: random.text(), size: random.int64(),
                                                        md5Hash: random.bool() ? random.text() : nil) : nil,
                  path: random.bool() ? random.text() : nil, size: random.bool() ? random.int64() : nil,
                  md5: random.bool() ? random.text() : nil, crc32c: random.text(), blob: random.bool() ? random.text() : nil,
                  data: random.bool() ? Data(random.text().utf8) : nil, url: random.bool() ? random.text() : nil,
                  verified: random.bool() ? [.md5, .crc32c] : nil, skipped: random.bool() ? random.bool() : nil)
    }
}

/// A deterministic generator (SplitMix64), so a failure names values that can be made again.
struct SeededRandom {
    private var generator: SeededGenerator
    /// Only text that needs no escaping in JSON.
    var plain = false

    init(seed: UInt64) { generator = SeededGenerator(seed: seed) }

    mutating func next() -> UInt64 { generator.next() }

    mutating func bool() -> Bool { next() & 1 == 1 }
    mutating func int(_ range: ClosedRange<Int>) -> Int { range.lowerBound + Int(next() % UInt64(range.count)) }

    /// Small and extreme values alike.
    mutating func int64() -> Int64 {
        switch next() % 4 {
        case 0: Int64(bitPattern: next())
        case 1: [Int64.min, Int64.max, 0, -1][Int(next() % 4)]
        default: Int64(next() % 100_000)
        }
    }

    /// Text with the characters a reader must unescape: quotes, backslashes, slashes, control
    /// characters, non-ASCII and astral scalars, combining marks.
    mutating func text() -> String {
        let pieces = plain ? ["a", "Z", "/", " ", "gs://b/o", "%20", "~", "0"]
            : ["a", "Z", "/", "\\", "\"", "\n", "\u{0}", "\u{1F}", "\u{7F}", "é", "e\u{301}", "🚀", "\u{2028}", " ", "gs://b/o", "%20"]
        return (0..<int(0...8)).map { _ in pieces[int(0...(pieces.count - 1))] }.joined()
    }
}
