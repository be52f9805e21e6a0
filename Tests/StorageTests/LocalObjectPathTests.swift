import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JobModel
@testable import Storage
import TestSupport
import Testing

/// `LocalObjectPath` cuts an ASCII object path on its bytes, and checks its parts for reserved names on
/// bytes: it must give exactly the parts, reserved name, folder path and place that the Character-wise
/// code before it gave, for every kind of path.
@Suite("file:// object paths", .onTestThreads)
struct LocalObjectPathTests {
    /// `HiddenName.isReserved` as the filesystem sees names: whether the bytes end in a reserved suffix
    /// (not Character-wise `hasSuffix`, which a mark joining the suffix's `.` to the character before it
    /// answered false for `\u{600}.jobctl-upload`).
    private static func reservedBefore(_ name: String) -> Bool {
        [".jobctl-meta.json", ".jobctl-upload", ".jobctl-partial", ".jobctl-meta.tmp", ".jobctl-cut"].contains {
            Array(name.utf8).reversed().starts(with: Array($0.utf8).reversed())
        }
    }

    @Test("a name ending in a reserved suffix is reserved whatever joins its first dot")
    func reservedOnBytes() {
        #expect(HiddenName.isReserved("\u{600}.jobctl-upload") && HiddenName.isReserved("x\u{600}.jobctl-meta.json"))
        #expect(!HiddenName.isReserved("x.jobctl-upload\u{301}"))
        #expect(LocalObjectPath("d/y\u{600}.jobctl-partial/z").firstReserved == "y\u{600}.jobctl-partial")
        #expect(LocalObjectPath("a/\u{301}x").parts == ["a", "\u{301}x"])
    }

    /// `LocalObjectPlace.of` as it was written before: split twice, joined, with the same bucket rules.
    private static func placeBefore(_ reference: StorageReference, bucketsDirectory: String?) -> LocalObjectPlace? {
        var parts = SlashSeparatedPath.parts(of: reference.fullPath).map(String.init)
        guard reference.scheme == .file, let name = parts.popLast() else { return nil }
        if reference.bucket.isEmpty {
            return LocalObjectPlace(rootPath: "/" + parts.joined(separator: "/"), components: [], name: name, inNamedBucket: false)
        }
        guard let bucketsDirectory else { return nil }
        let base = LocalFiles.absolute(bucketsDirectory)
        return LocalObjectPlace(rootPath: (base.hasSuffix("/") ? base : base + "/") + reference.bucket, components: parts,
                                name: name, inNamedBucket: true)
    }

    private static let longName = String(repeating: "n", count: 300) + ".bin"

    static let paths = [
        "", "/", "//", "a", "a/", "/a", "/a/", "a//b", "a/b/c.txt", "/a/b//", "tmp/objects/o-000000.bin",
        ".", "..", "a/../b", "./x", "a/./b", "...", "a\r\n/b", "a\r/\nb", "srv/a b/c d.bin", "\t/x",
        longName, "d/" + longName, String(repeating: "deep/", count: 64) + "leaf",
        // Reserved names, in the object's place and in a folder's, and names that only look like one.
        "x.jobctl-meta.json", "d/.o.jobctl-upload/x", "d/.o.01JOB.jobctl-partial", "d/.o.jobctl-meta.json.ab12cd34.jobctl-meta.tmp",
        ".jobctl-upload", "jobctl-upload", "x.jobctl-uploa", "x.JOBCTL-UPLOAD", "x.jobctl-upload.bak", "x.jobctl-meta.json/",
        "a/x.jobctl-partial//", "x.jobctl-meta.jsonx", "d/x~0f.jobctl-cut", "d/x.jobctl-cut/y", "x.jobctl-cutx", "x.jobctl-cu",
        // Not ASCII: where a combining mark joins a `/` or a suffix's first dot into another Character.
        "é/ü.txt", "données/été.bin", "dir/\u{301}x", "a/\u{301}", "/\u{301}", "日本/語", "x.jobctl-meta.json\u{301}",
        "x.jobctl-upload\u{301}/y", "\u{600}.jobctl-upload", "é/x.jobctl-partial", "a\u{0}b/c",
    ]

    @Test("the parts, reserved name and folders are what the Character-wise code gave", arguments: paths)
    func sameAsBefore(path: String) {
        let cut = LocalObjectPath(path)
        let before = SlashSeparatedPath.parts(of: path).map(String.init)
        #expect(cut.parts == before)
        #expect(cut.firstReserved == before.first(where: Self.reservedBefore))
        #expect(cut.joinedFolders == before.dropLast().joined(separator: "/"))
    }

    @Test("the reserved check on bytes answers as hasSuffix did", arguments: paths)
    func reservedAsBefore(path: String) {
        for part in SlashSeparatedPath.parts(of: path).map(String.init) {
            #expect(HiddenName.isReserved(part) == Self.reservedBefore(part), "\(part)")
            if part.utf8.allSatisfy({ $0 < 0x80 }) {
                let bytes = Array(part.utf8)
                #expect(bytes.withUnsafeBufferPointer(LocalObjectPath.isReserved) == Self.reservedBefore(part), "\(part)")
            }
        }
    }

    @Test("an object's place is what the Character-wise code gave, in named buckets and file:///", arguments: paths)
    func placeAsBefore(path: String) throws {
        for bucket in ["", "b"] {
            for buckets in [nil, "/srv/buckets", "/srv/buckets/", "relative/buckets", "/"] as [String?] {
                guard let reference = try? StorageReference(scheme: .file, bucket: bucket, path: path) else { continue }
                #expect(LocalObjectPlace.of(reference, bucketsDirectory: buckets) == Self.placeBefore(reference, bucketsDirectory: buckets),
                        "\(reference) in \(buckets ?? "nil")")
            }
        }
    }

    @Test("a folder's path below another is childPath applied component by component")
    func pathOfComponents() {
        for folder in ["/", "/srv", "/srv/", "", "relative", "/é"] {
            for components in [[], ["a"], ["a", "b"], ["é", "日本", "x y"], [Self.longName, "c"]] as [[String]] {
                let before = components.reduce(folder) { SafeDirectory.childPath($1, in: $0) }
                #expect(SafeDirectory.path(of: components[...], in: folder) == before, "\(folder) \(components)")
            }
        }
    }
}

/// The `file://` backend refuses links and reserved names, and names the path it refused, exactly as it
/// did before its paths were cut on bytes and built only for messages: a symbolic link or a file
/// planted at each folder of an object's path, at the object and at its sidecar.
@Suite("file:// link refusal at every component", .onTestThreads)
struct LocalComponentRefusalTests {
    private static let components = ["c1", "c2", "c3"]

    private struct Scene {
        let directory: TemporaryDirectory
        var buckets: String { directory.file("buckets") }
        var folder: String { buckets + "/b/" + LocalComponentRefusalTests.components.joined(separator: "/") }

        init(_ label: String) throws {
            directory = try TemporaryDirectory(label)
            try FileManager.default.createDirectory(atPath: directory.file("elsewhere/c2/c3"), withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: directory.file("elsewhere/c2/c3/x.txt")))
        }

        var configuration: StorageConfiguration { StorageConfiguration(localBucketsDirectory: buckets) }

        /// Every job run through the backend directly (the reference parsed by the transfer) and through
        /// the router (the reference parsed once, by the router): both must give the same outcome.
        func runBothWays(_ spec: JobSpec) async throws -> Result<TransferOutcome, StorageError> {
            let direct = await run(LocalBackend(configuration: configuration), spec)
            let routed = await run(StorageRouter(configuration: configuration), spec)
            switch (direct, routed) {
            case (.failure(let one), .failure(let other)):
                #expect(one.code == other.code && one.message == other.message, "\(one) / \(other)")
            case (.success(.finished(let one)), .success(.finished(let other))):
                #expect(one.data == other.data && one.size == other.size && one.crc32c == other.crc32c)
            default:
                Issue.record("the backend and the router disagree: \(direct) / \(routed)")
            }
            return direct
        }
    }

    @Test("a symbolic link at each folder inside a bucket is refused, naming that folder", arguments: 0..<3)
    func linkAtEachFolder(index: Int) async throws {
        let scene = try Scene("refuse-link-\(index)")
        defer { scene.directory.remove() }
        _ = try finished(await run(LocalBackend(configuration: scene.configuration),
                                   JobSpec(kind: .uploadData, destination: "file://b/c1/c2/c3/x.txt", data: Data("x".utf8))))
        let linked = scene.buckets + "/b/" + Self.components[...index].joined(separator: "/")
        try FileManager.default.removeItem(atPath: linked)
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: scene.directory.file("elsewhere/c2"))
        for spec in [JobSpec(kind: .downloadMemory, source: "file://b/c1/c2/c3/x.txt"),
                     JobSpec(kind: .uploadData, destination: "file://b/c1/c2/c3/y.txt", data: Data("y".utf8))] {
            let error = try failure(await scene.runBothWays(spec))
            #expect(error.code == .pathError)
            #expect(error.message.hasPrefix("a symbolic link was found at '\(linked)' and was not followed (opening directory)"),
                    "\(error.message)")
        }
        #expect(!FileManager.default.fileExists(atPath: scene.directory.file("elsewhere/c2/c3/y.txt")))
    }

    @Test("a file at each folder's place is refused, naming that folder", arguments: 0..<3)
    func fileAtEachFolder(index: Int) async throws {
        let scene = try Scene("refuse-file-\(index)")
        defer { scene.directory.remove() }
        let blocked = scene.buckets + "/b/" + Self.components[...index].joined(separator: "/")
        try FileManager.default.createDirectory(atPath: LocalFiles.directory(of: blocked), withIntermediateDirectories: true)
        try Data("file".utf8).write(to: URL(fileURLWithPath: blocked))
        let error = try failure(await scene.runBothWays(JobSpec(kind: .uploadData, destination: "file://b/c1/c2/c3/y.txt",
                                                                data: Data("y".utf8))))
        #expect(error.code == .pathError)
        #expect(error.message == "'\(blocked)' is not a directory (a file sits on the path): choose another path")
    }

    @Test("a missing folder reads as a missing object, naming the whole folder")
    func missingFolder() async throws {
        let scene = try Scene("refuse-missing")
        defer { scene.directory.remove() }
        try FileManager.default.createDirectory(atPath: scene.buckets + "/b/c1", withIntermediateDirectories: true)
        let error = try failure(await scene.runBothWays(JobSpec(kind: .downloadMemory, source: "file://b/c1/c2/c3/x.txt")))
        #expect(error.code == .objectNotFound)
        #expect(error.message == "object 'file://b/c1/c2/c3/x.txt' does not exist (no folder '\(scene.folder)')")
    }

    @Test("a symbolic link at the object and at its sidecar is refused, naming it")
    func linkAtObjectAndSidecar() async throws {
        let scene = try Scene("refuse-object")
        defer { scene.directory.remove() }
        _ = try finished(await run(LocalBackend(configuration: scene.configuration),
                                   JobSpec(kind: .uploadData, destination: "file://b/c1/c2/c3/x.txt", data: Data("x".utf8))))
        let target = scene.directory.file("elsewhere/c2/c3/x.txt")
        for name in ["x.txt", ".x.txt.jobctl-meta.json"] {
            let path = scene.folder + "/" + name
            let saved = try Data(contentsOf: URL(fileURLWithPath: path))
            try FileManager.default.removeItem(atPath: path)
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
            let error = try failure(await scene.runBothWays(JobSpec(kind: .downloadMemory, source: "file://b/c1/c2/c3/x.txt")))
            #expect(error.code == .pathError)
            #expect(error.message.hasPrefix("a symbolic link was found at '\(path)' and was not followed (opening)"), "\(error.message)")
            try FileManager.default.removeItem(atPath: path)
            try saved.write(to: URL(fileURLWithPath: path))
        }
        #expect(try finished(await scene.runBothWays(JobSpec(kind: .downloadMemory, source: "file://b/c1/c2/c3/x.txt"))).data
                    == Data("x".utf8))
    }

    @Test("reserved names are refused by name, in the object's place and in a folder's, ASCII or not")
    func reservedNames() async throws {
        let scene = try Scene("refuse-reserved")
        defer { scene.directory.remove() }
        let cases = [("file://b/d/.o.jobctl-upload/x", ".o.jobctl-upload"), ("file://b/d/x.jobctl-meta.json", "x.jobctl-meta.json"),
                     ("file://b/é/x.jobctl-partial", "x.jobctl-partial"), ("file:///tmp/x.jobctl-meta.tmp", "x.jobctl-meta.tmp"),
                     ("file://b/d/x~0f.jobctl-cut", "x~0f.jobctl-cut")]
        for (source, reserved) in cases {
            let error = try failure(await scene.runBothWays(JobSpec(kind: .downloadMemory, source: source)))
            #expect(error.code == .invalidArgument)
            #expect(error.message == "'\(reserved)' is reserved for jobctl's temporary and metadata files: choose another name")
        }
    }
}

/// In-memory downloads read straight into their result: every size gives the object's bytes, and the
/// progress reports of objects larger than one read are those reading through the buffer gave.
@Suite("file:// in-memory downloads", .onTestThreads)
struct LocalMemoryDownloadTests {
    @Test("objects of awkward sizes come back whole, with the progress reports of buffer-sized reads",
          arguments: [0, 1, 64, LocalFiles.bufferSize - 1, LocalFiles.bufferSize, LocalFiles.bufferSize + 1, 2 * LocalFiles.bufferSize + 5])
    func wholeObjects(size: Int) async throws {
        let directory = try TemporaryDirectory("memory-\(size)")
        defer { directory.remove() }
        let bytes = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) })
        try bytes.write(to: URL(fileURLWithPath: directory.file("o.bin")))
        let recorder = EventRecorder()
        let result = try finished(await run(LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("b"))),
                                            JobSpec(kind: .downloadMemory, source: "file://" + directory.file("o.bin"),
                                                    maxSize: Int64(size)),
                                            recorder: recorder))
        #expect(result.data == bytes)
        #expect(result.size == Int64(size))
        #expect(result.crc32c == hashes(bytes).crc32c)
        let expected: [Int64] = size > LocalFiles.bufferSize
            ? [0] + stride(from: LocalFiles.bufferSize, to: size, by: LocalFiles.bufferSize).map(Int64.init) + [Int64(size)]
            : []
        #expect(recorder.progress == expected)
    }
}

/// A directory's real path is read from `/proc/self/fd` into a small stack buffer first: a path too long
/// for it is read again at full size, and names the directory all the same.
@Suite("real paths of open directories", .onTestThreads)
struct NamedByRealPathTests {
    @Test("short and long real paths, reached through a link, are named as realpath names them", arguments: [1, 8])
    func realPaths(depth: Int) throws {
        let directory = try TemporaryDirectory("real-path")
        defer { directory.remove() }
        let segment = String(repeating: "r", count: 200)
        let real = directory.file(Array(repeating: segment, count: depth).joined(separator: "/"))
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: directory.file("link"), withDestinationPath: real)
        let opened = try SafeDirectory.open(trusted: directory.file("link"), create: false)
        let expected = try #require(LocalFiles.resolved(real))
        #expect((depth == 1) == (expected.utf8.count < 1023))
        #expect(opened.namedByRealPath()?.path == expected)
    }
}

/// Sidecars are written by hand for objects without custom metadata whose strings are printable ASCII:
/// byte for byte what `JSONEncoder` (pretty-printed, sorted keys) writes, which every other object still
/// goes through.
@Suite("sidecar JSON", .onTestThreads)
struct SidecarJSONTests {
    private static let uploaded = StorageObject(
        bucket: "bench", name: "d1/d2/o-000001.txt", size: 64, contentType: "text/plain", md5Hash: "rL0Y20zC+Fzt72VPzMSk2A==",
        crc32c: "yZRlqg==", generation: "1764592800123456", metageneration: "1", timeCreated: "2026-12-01T12:00:00.123Z",
        updated: "2026-12-01T12:00:00.123Z")

    static let handWritten: [StorageObject] = [
        uploaded,
        StorageObject(bucket: "", name: "a", size: 0),
        StorageObject(bucket: "b", name: "x", size: Int64.max, contentType: "application/octet-stream", cacheControl: "no-cache, max-age=0",
                      contentDisposition: "attachment; filename=\"a \\\\ b.txt\"", contentEncoding: "gzip", contentLanguage: "en",
                      md5Hash: "/+/=", crc32c: "AAAAAA==", generation: "1", metageneration: "7", timeCreated: "t", updated: "u",
                      downloadTokens: "0f1e2d3c-aaaa-bbbb-cccc-000000000000,second"),
        StorageObject(bucket: "b", name: "odd ~`!@#$%^&*()_+-={}[]|:;'<>,.?/x", size: -1, contentType: ""),
    ]

    static let leftToTheEncoder: [StorageObject] = [
        StorageObject(bucket: "b", name: "é.txt", size: 1),
        StorageObject(bucket: "b", name: "tab\there", size: 1),
        StorageObject(bucket: "b", name: "del\u{7F}", size: 1),
        StorageObject(bucket: "b", name: "x", size: 1, customMetadata: ["k": "v"]),
        StorageObject(bucket: "b", name: "x", size: 1, customMetadata: [:]),
        StorageObject(bucket: "b", name: "x", size: 1, contentType: "text/plain; charset=\u{0}"),
    ]

    /// The files a sidecar may describe: none (one written before sidecars named their file) and others.
    static let files: [FileIdentity?] = [nil, FileIdentity(device: 2049, inode: 1_234_567), FileIdentity(device: .max, inode: 0)]

    @Test("objects of printable ASCII are written byte for byte as JSONEncoder writes them", arguments: handWritten, files)
    func sameBytes(object: StorageObject, file: FileIdentity?) throws {
        let written = try #require(SidecarJSON.encode(object, describing: file))
        #expect(String(decoding: written, as: UTF8.self)
                    == String(decoding: SidecarJSON.encodeWithFoundation(object, describing: file), as: UTF8.self))
        #expect(try JSONDecoder().decode(StorageObject.self, from: written) == object)
        #expect(String(decoding: written, as: UTF8.self).contains("\"objectFile\" : ") == (file != nil))
    }

    @Test("custom metadata and other characters are left to JSONEncoder", arguments: leftToTheEncoder)
    func leftAlone(object: StorageObject) throws {
        #expect(SidecarJSON.encode(object, describing: nil) == nil)
        // JSONEncoder writes the file beside the object's members, and both are read back.
        let file = FileIdentity(device: 7, inode: 8)
        let contents = try SidecarJSON.decodeWithFoundation(SidecarJSON.encodeWithFoundation(object, describing: file))
        #expect(contents.object == object && contents.file == file)
    }

    @Test("sidecars written by hand are read back by hand as JSONDecoder reads them", arguments: handWritten, files)
    func readBack(object: StorageObject, file: FileIdentity?) throws {
        let written = try #require(SidecarJSON.encode(object, describing: file))
        let byHand = try #require(SidecarJSON.decode(written))
        #expect(byHand.object == object && byHand.file == file)
        let foundation = try #require(SidecarJSON.decode(SidecarJSON.encodeWithFoundation(object, describing: file)))
        #expect(foundation.object == object && foundation.file == file)
        let decoded = try SidecarJSON.decodeWithFoundation(written)
        #expect(decoded.object == object && decoded.file == file)
    }

    /// An `objectFile` that names no file is not taken for one (nor for no file at all): the sidecar is
    /// refused, by hand and by JSONDecoder.
    @Test(arguments: ["\"\"", "\"12\"", "\"1:2:3\"", "\"-1:2\"", "\"1:x\"", "12", "null"])
    func objectFileThatNamesNoFile(value: String) {
        let text = Self.withFile.replacingOccurrences(of: "\"objectFile\" : \"2049:99\"", with: "\"objectFile\" : " + value)
        #expect(text != Self.withFile)
        #expect(SidecarJSON.decode(Data(text.utf8)) == nil)
        if value != "null" {
            #expect(throws: (any Error).self) { try SidecarJSON.decodeWithFoundation(Data(text.utf8)) }
        }
    }

    private static let canonical = String(decoding: SidecarJSON.encodeWithFoundation(uploaded, describing: nil), as: UTF8.self)
    private static let withFile = String(decoding: SidecarJSON.encodeWithFoundation(uploaded, describing: FileIdentity(device: 2049, inode: 99)),
                                         as: UTF8.self)

    /// Sidecars as a person or another version might have left them: each is either read by hand as
    /// JSONDecoder reads it, or left to JSONDecoder.
    static let edited: [String] = [
        canonical,
        canonical.replacingOccurrences(of: " : ", with: ":"),
        canonical.replacingOccurrences(of: "\n  ", with: "\n    "),
        canonical + "\n",
        canonical + "x",
        " " + canonical,
        canonical.replacingOccurrences(of: "\"bucket\" : \"bench\",", with: ""),
        canonical.replacingOccurrences(of: "\"name\" : \"d1\\/d2\\/o-000001.txt\",", with: ""),
        canonical.replacingOccurrences(of: ",\n  \"size\" : 64", with: ""),
        canonical.replacingOccurrences(of: "\"bucket\" : \"bench\",", with: "\"bucket\" : \"bench\",\n  \"bucket\" : \"other\","),
        canonical.replacingOccurrences(of: "\"bucket\" : \"bench\",", with: "\"bucket\" : \"bench\",\n  \"zzz\" : \"x\","),
        canonical.replacingOccurrences(of: "\"bucket\" : \"bench\",", with: "\"bucket\" : \"bench\",\n  \"customMetadata\" : {\n    \"k\" : \"v\"\n  },"),
        canonical.replacingOccurrences(of: "\"crc32c\" : \"yZRlqg==\",", with: "\"crc32c\" : null,"),
        canonical.replacingOccurrences(of: "\"crc32c\" : \"yZRlqg==\",\n  ", with: "").replacingOccurrences(of: "\"updated\"", with: "\"crc32c\" : \"yZRlqg==\",\n  \"updated\""),
        canonical.replacingOccurrences(of: "text\\/plain", with: "text/plain"),
        canonical.replacingOccurrences(of: "text\\/plain", with: "text\\u002Fplain"),
        canonical.replacingOccurrences(of: "text\\/plain", with: "t\\\"x\\\\t"),
        canonical.replacingOccurrences(of: "text\\/plain", with: "text\\nplain"),
        canonical.replacingOccurrences(of: "text\\/plain", with: "texté"),
        canonical.replacingOccurrences(of: "text\\/plain", with: "text\tplain"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : 064"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : -0"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : 0"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : -64"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : 64.0"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : 6.4e1"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : 99999999999999999999"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : 9223372036854775807"),
        canonical.replacingOccurrences(of: "\"size\" : 64", with: "\"size\" : \"64\""),
        "{}", "{\n\n}", "", "[]", "{\n  \"bucket\" : \"b\",\n  \"name\" : \"n\",\n  \"size\" : 1\n}",
    ]

    @Test("an edited sidecar is read by hand as JSONDecoder reads it, or left to JSONDecoder", arguments: edited)
    func editedSidecars(text: String) {
        let data = Data(text.utf8)
        let foundation = try? JSONDecoder().decode(StorageObject.self, from: data)
        if let byHand = SidecarJSON.decode(data) {
            #expect(byHand.object == foundation)
            #expect(byHand.file == nil)
        }
        if text == Self.canonical {
            #expect(SidecarJSON.decode(data)?.object == Self.uploaded)
        }
    }
}
