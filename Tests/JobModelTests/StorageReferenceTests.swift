import Foundation
import Testing
@testable import JobModel

// MARK: - Parsing table

/// One row of the parsing table: an input and either the reference it must produce or the error.
struct ReferenceCase: Sendable, CustomTestStringConvertible {
    enum Expected: Sendable {
        /// scheme, bucket, fullPath, canonical description (and, for http(s), the query).
        case reference(StorageReference.Scheme, bucket: String, path: String, description: String, query: String? = nil)
        /// The error code and a fragment of its message.
        case failure(StorageErrorCode, String)
    }

    let input: String
    let expected: Expected

    init(_ input: String, _ expected: Expected) {
        self.input = input
        self.expected = expected
    }

    var testDescription: String { "'\(input)'" }
}

private let referenceCases: [ReferenceCase] = [
    // gs://
    .init("gs://bucket/images/stars.jpg",
          .reference(.gs, bucket: "bucket", path: "images/stars.jpg", description: "gs://bucket/images/stars.jpg")),
    .init("gs://bucket", .reference(.gs, bucket: "bucket", path: "", description: "gs://bucket/")),
    .init("gs://bucket/", .reference(.gs, bucket: "bucket", path: "", description: "gs://bucket/")),
    // Cloud Storage names are flat: `a//b` is not `a/b`, which jobctl's collapsing `/` would have named
    // (a download read the other object, a delete removed it). Refused; one `/` at the end is a prefix's.
    .init("gs://bucket//a///b/", .failure(.invalidArgument, "would act on 'a/b', another object")),
    .init("gs://bucket///", .failure(.invalidArgument, "an empty segment")),
    .init("gs://bucket/d/x//y", .failure(.invalidArgument, "would act on 'd/x/y', another object")),
    .init("gs://bucket/d/x%2F%2Fy", .failure(.invalidArgument, "would act on 'd/x/y', another object")),
    .init("gs://bucket/%2Fx", .failure(.invalidArgument, "would act on 'x', another object")),
    .init("gs://bucket/d/x%2F", .reference(.gs, bucket: "bucket", path: "d/x", description: "gs://bucket/d/x")),
    .init("https://storage.googleapis.com/bucket/d/x//y", .failure(.invalidArgument, "would act on 'd/x/y', another object")),
    .init("https://firebasestorage.googleapis.com/v0/b/bucket/o/d%2Fx%2F%2Fy", .failure(.invalidArgument, "would act on 'd/x/y'")),
    .init("https://firebasestorage.googleapis.com/v0/b/bucket/o/d//x", .failure(.invalidArgument, "an empty segment")),
    .init("https://firebasestorage.googleapis.com/v0/b/bucket/o/%2Fx", .failure(.invalidArgument, "an empty segment")),
    .init("GS://bucket/x", .reference(.gs, bucket: "bucket", path: "x", description: "gs://bucket/x")),
    .init("  gs://bucket/x  ", .reference(.gs, bucket: "bucket", path: "x", description: "gs://bucket/x")),
    .init("gs://my-app.appspot.com/a_b/c~d.txt",
          .reference(.gs, bucket: "my-app.appspot.com", path: "a_b/c~d.txt", description: "gs://my-app.appspot.com/a_b/c~d.txt")),
    // Percent-escaping both ways.
    .init("gs://bucket/images%20stars.jpg",
          .reference(.gs, bucket: "bucket", path: "images stars.jpg", description: "gs://bucket/images%20stars.jpg")),
    .init("gs://bucket/images stars.jpg",
          .reference(.gs, bucket: "bucket", path: "images stars.jpg", description: "gs://bucket/images%20stars.jpg")),
    .init("gs://bucket/images%2Fstars.jpg",
          .reference(.gs, bucket: "bucket", path: "images/stars.jpg", description: "gs://bucket/images/stars.jpg")),
    .init("gs://bucket/caf%C3%A9.txt", .reference(.gs, bucket: "bucket", path: "café.txt", description: "gs://bucket/caf%C3%A9.txt")),
    .init("gs://bucket/café.txt", .reference(.gs, bucket: "bucket", path: "café.txt", description: "gs://bucket/caf%C3%A9.txt")),
    .init("gs://bucket/%E2%9C%93/%f0%9f%93%81", .reference(.gs, bucket: "bucket", path: "✓/📁", description: "gs://bucket/%E2%9C%93/%F0%9F%93%81")),
    .init("gs://bucket/what?.txt", .reference(.gs, bucket: "bucket", path: "what?.txt", description: "gs://bucket/what%3F.txt")),
    // Firebase form on Firebase's host (and the emulator's: `FirebaseHostTests`).
    .init("https://firebasestorage.googleapis.com/v0/b/my-app.appspot.com/o/images%2Fstars.jpg",
          .reference(.gs, bucket: "my-app.appspot.com", path: "images/stars.jpg", description: "gs://my-app.appspot.com/images/stars.jpg")),
    .init("https://firebasestorage.googleapis.com/v0/b/b/o/images%20stars.jpg?alt=media&token=0f1e",
          .reference(.gs, bucket: "b", path: "images stars.jpg", description: "gs://b/images%20stars.jpg")),
    .init("https://FirebaseStorage.googleapis.com/v0/b/demo/o/a%2Fb%2F", .reference(.gs, bucket: "demo", path: "a/b", description: "gs://demo/a/b")),
    .init("https://firebasestorage.googleapis.com/v0/b/bucket", .reference(.gs, bucket: "bucket", path: "", description: "gs://bucket/")),
    .init("https://firebasestorage.googleapis.com/v0/b/bucket/o/", .reference(.gs, bucket: "bucket", path: "", description: "gs://bucket/")),
    // An IPv4 address in any form inet_aton reads is its dotted quad, a port without leading zeros: one
    // server is one text, so comparisons of servers (JOBCTL_REFUSE_EXECUTABLES) cannot be written past.
    .init("http://2130706433:018080/x", .reference(.http, bucket: "127.0.0.1:18080", path: "x", description: "http://127.0.0.1:18080/x")),
    .init("http://0x7F000001/x", .reference(.http, bucket: "127.0.0.1", path: "x", description: "http://127.0.0.1/x")),
    .init("http://0177.0.0.1:80/x", .reference(.http, bucket: "127.0.0.1:80", path: "x", description: "http://127.0.0.1:80/x")),
    .init("http://127.1/x", .reference(.http, bucket: "127.0.0.1", path: "x", description: "http://127.0.0.1/x")),
    .init("http://deadbeef/x", .reference(.http, bucket: "deadbeef", path: "x", description: "http://deadbeef/x")),
    .init("http://1.2.3.4.5/x", .reference(.http, bucket: "1.2.3.4.5", path: "x", description: "http://1.2.3.4.5/x")),
    // The same path on any other host is a plain URL, requested as written (not sent to Google).
    .init("http://127.0.0.1:9023/v0/b/b/o/a%2Fb.txt",
          .reference(.http, bucket: "127.0.0.1:9023", path: "v0/b/b/o/a/b.txt", description: "http://127.0.0.1:9023/v0/b/b/o/a%2Fb.txt")),
    .init("https://example.com/v0/b/bucket/o/x?alt=media&token=t",
          .reference(.https, bucket: "example.com", path: "v0/b/bucket/o/x", description: "https://example.com/v0/b/bucket/o/x?alt=media&token=t",
                     query: "alt=media&token=t")),
    // storage.googleapis.com/BUCKET/PATH
    .init("https://storage.googleapis.com/my-bucket/dir/file.bin",
          .reference(.gs, bucket: "my-bucket", path: "dir/file.bin", description: "gs://my-bucket/dir/file.bin")),
    .init("https://STORAGE.googleapis.com/my-bucket/a%20b", .reference(.gs, bucket: "my-bucket", path: "a b", description: "gs://my-bucket/a%20b")),
    // file://
    .init("file:///abs/path/file.txt", .reference(.file, bucket: "", path: "abs/path/file.txt", description: "file:///abs/path/file.txt")),
    .init("file://demo/hello.txt", .reference(.file, bucket: "demo", path: "hello.txt", description: "file://demo/hello.txt")),
    .init("file://localhost/abs/x", .reference(.file, bucket: "", path: "abs/x", description: "file:///abs/x")),
    .init("file:///tmp//x/", .reference(.file, bucket: "", path: "tmp/x", description: "file:///tmp/x")),
    .init("file://demo/dir%20one/a.json", .reference(.file, bucket: "demo", path: "dir one/a.json", description: "file://demo/dir%20one/a.json")),
    // Plain http(s): port, query, fragment, IPv6.
    .init("http://example.com:8080/files/a.txt?sig=1&x=2",
          .reference(.http, bucket: "example.com:8080", path: "files/a.txt", description: "http://example.com:8080/files/a.txt?sig=1&x=2", query: "sig=1&x=2")),
    .init("https://example.com/a.txt#section", .reference(.https, bucket: "example.com", path: "a.txt", description: "https://example.com/a.txt")),
    .init("http://[::1]:8080/x", .reference(.http, bucket: "[::1]:8080", path: "x", description: "http://[::1]:8080/x")),
    .init("https://example.com", .reference(.https, bucket: "example.com", path: "", description: "https://example.com/")),
    .init("https://example.com?to=me@example.org",
          .reference(.https, bucket: "example.com", path: "", description: "https://example.com/?to=me@example.org", query: "to=me@example.org")),

    // MARK: Bad input
    .init("", .failure(.invalidArgument, "not a storage URL")),
    .init("bucket/path.txt", .failure(.invalidArgument, "not a storage URL")),
    .init("gs:/bucket/path", .failure(.invalidArgument, "not a storage URL")),
    .init("s3://bucket/x", .failure(.invalidArgument, "unknown scheme 's3'")),
    .init("ftp://host/x", .failure(.invalidArgument, "unknown scheme 'ftp'")),
    .init("gs://", .failure(.invalidArgument, "no bucket")),
    .init("gs:///path", .failure(.invalidArgument, "no bucket")),
    .init("https://firebasestorage.googleapis.com/v0/b//o/x", .failure(.invalidArgument, "no bucket")),
    .init("https://firebasestorage.googleapis.com/v0/b//o/o/x", .failure(.invalidArgument, "no bucket")),
    .init("http:///x", .failure(.invalidArgument, "no host")),
    .init("gs://bucket/%zz", .failure(.invalidArgument, "malformed percent escape")),
    .init("gs://bucket/abc%", .failure(.invalidArgument, "malformed percent escape")),
    .init("gs://bucket/%4", .failure(.invalidArgument, "malformed percent escape")),
    .init("https://firebasestorage.googleapis.com/v0/b/b/o/a%2", .failure(.invalidArgument, "malformed percent escape")),
    .init("gs://bucket/%FF", .failure(.invalidArgument, "invalid UTF-8")),
    .init("gs://bucket/a/../b", .failure(.pathError, "'..'")),
    .init("gs://bucket/./a", .failure(.pathError, "'.'")),
    .init("https://firebasestorage.googleapis.com/v0/b/b/o/a%2F..%2Fb", .failure(.pathError, "'..'")),
    .init("file:///tmp/../etc/passwd", .failure(.pathError, "'..'")),
    .init("gs://bucket/a%00b", .failure(.pathError, "NUL")),
    .init("https://user:secret@example.com/x", .failure(.invalidArgument, "credentials")),
    .init("https://token@firebasestorage.googleapis.com/v0/b/b/o/x", .failure(.invalidArgument, "credentials")),
    .init("gs://user:secret@bucket/x", .failure(.invalidArgument, "credentials")),
    .init("http://example.com:0/x", .failure(.invalidArgument, "invalid port")),
    .init("http://example.com:70000/x", .failure(.invalidArgument, "invalid port")),
    .init("http://example.com:abc/x", .failure(.invalidArgument, "invalid port")),
    .init("http://example.com:/x", .failure(.invalidArgument, "invalid port")),
    .init("http://[::1]:99999/x", .failure(.invalidArgument, "invalid port")),
    .init("http://exa_mple.com/x", .failure(.invalidArgument, "invalid host")),
    .init("gs://bad bucket/x", .failure(.invalidArgument, "invalid bucket name")),
    .init("gs://bucket!/x", .failure(.invalidArgument, "invalid bucket name")),
    .init("https://firebasestorage.googleapis.com/v0/b/b%21/o/x", .failure(.invalidArgument, "invalid bucket name")),
    .init("file://../etc/passwd", .failure(.invalidArgument, "invalid bucket name")),
    .init("gs://./x", .failure(.invalidArgument, "invalid bucket name")),
    .init("https://firebasestorage.googleapis.com/v0/b/b/x/y", .failure(.invalidArgument, "/v0/b/BUCKET/o/PATH")),
    // The byte-level scheme search and trim give what Foundation's search and `.whitespaces` trim gave.
    .init("\tgs://bucket/x\t", .reference(.gs, bucket: "bucket", path: "x", description: "gs://bucket/x")),
    .init("\u{00A0}gs://bucket/x\u{3000}", .reference(.gs, bucket: "bucket", path: "x", description: "gs://bucket/x")),
    .init("gs://bucket/caf\u{E9}", .reference(.gs, bucket: "bucket", path: "caf\u{E9}", description: "gs://bucket/caf%C3%A9")),
    .init("Https://h/a?next=http://x/y",
          .reference(.https, bucket: "h", path: "a", description: "https://h/a?next=http://x/y", query: "next=http://x/y")),
    .init("http://h/a b?q={1}", .reference(.http, bucket: "h", path: "a b", description: "http://h/a%20b?q=%7B1%7D", query: "q=%7B1%7D")),
    .init("http://h\u{E9}te/x", .failure(.invalidArgument, "host that is not ASCII, 'h\u{E9}te'")),
    .init("http://h\u{0663}/x", .failure(.invalidArgument, "host that is not ASCII")),
    .init("http://a\r\nb/x", .failure(.invalidArgument, "invalid host")),
    .init("http://My-Host.example.COM:8080/x",
          .reference(.http, bucket: "My-Host.example.COM:8080", path: "x", description: "http://My-Host.example.COM:8080/x")),
    .init("gs:/bucket/x", .failure(.invalidArgument, "is not a storage URL")),
    .init("gs:", .failure(.invalidArgument, "is not a storage URL")),
    .init("\ngs://bucket/x", .failure(.invalidArgument, "unknown scheme")),
    .init("http://h@evil/x?u=a@b", .failure(.invalidArgument, "credentials in URLs are refused")),
]

/// A Firebase-form URL names a `gs://` object on Firebase's host and on the emulator's that
/// `STORAGE_EMULATOR_HOST` names; a pasted emulator URL read as `gs://` on any host was sent to Google.
@Suite struct FirebaseHostTests {
    @Test func theEmulatorsHostReadsAsGS() throws {
        let hosts = FirebaseHosts(emulator: "http://127.0.0.1:9199/")
        let emulator = try StorageReference(parsing: "http://127.0.0.1:9199/v0/b/demo/o/a%2Fb.txt?alt=media", firebaseHosts: hosts)
        #expect(emulator.description == "gs://demo/a/b.txt")
        let other = try StorageReference(parsing: "http://127.0.0.1:9200/v0/b/demo/o/a%2Fb.txt", firebaseHosts: hosts)
        #expect(other.scheme == .http && other.bucket == "127.0.0.1:9200")
        #expect(hosts.contains("FirebaseStorage.googleapis.com") && FirebaseHosts.firebase.contains("firebasestorage.googleapis.com"))
        // Without the settings' hosts a parse reads Firebase's own host only, whatever the process's environment says.
        #expect(try StorageReference(parsing: "http://127.0.0.1:9199/v0/b/demo/o/a%2Fb.txt").scheme == .http)
    }
}

@Suite struct StorageReferenceTests {
    @Test(arguments: referenceCases)
    func parsing(_ row: ReferenceCase) throws {
        switch row.expected {
        case let .reference(scheme, bucket, path, description, query):
            let reference = try StorageReference(parsing: row.input)
            #expect(reference.scheme == scheme)
            #expect(reference.bucket == bucket)
            #expect(reference.fullPath == path)
            #expect(reference.query == query)
            #expect(reference.description == description)
            // The canonical text parses back to the same reference.
            #expect(try StorageReference(parsing: reference.description) == reference)
        case let .failure(code, fragment):
            let error = #expect(throws: StorageError.self) { try StorageReference(parsing: row.input) }
            #expect(error?.code == code)
            #expect(error?.message.contains(fragment) == true, "message: \(error?.message ?? "none")")
        }
    }

    @Test func tableIsLargeEnough() {
        #expect(referenceCases.count >= 40)
    }

    @Test func credentialsNeverAppearInTheMessage() {
        let error = #expect(throws: StorageError.self) { try StorageReference(parsing: "https://user:hunter2@example.com/x") }
        #expect(error?.message.contains("hunter2") == false)
        let gsError = #expect(throws: StorageError.self) { try StorageReference(parsing: "gs://me:hunter2@bucket/x") }
        #expect(gsError?.message.contains("hunter2") == false)
    }

    // MARK: - Navigation

    /// Cloud Storage names are 1 to 1,024 bytes of UTF-8 without CR or LF; other schemes have no such limit.
    @Test func cloudStorageNamesKeepToCloudStorageRules() throws {
        let longest = String(repeating: "n", count: 1_024)
        #expect(try StorageReference(parsing: "gs://b/" + longest).fullPath == longest)
        // A file:// name may be longer than 1,024 bytes, in names a file system takes (at most 255 bytes each).
        let segmented = String(repeating: String(repeating: "n", count: 204) + "/", count: 5) + "n"
        #expect(try StorageReference(parsing: "file://b/" + segmented).fullPath.utf8.count == 1_026)
        for text in ["gs://b/\(longest)n", "gs://b/a/\(longest)", "https://firebasestorage.googleapis.com/v0/b/b/o/\(longest)n", "gs://b/a%0Ab", "gs://b/a\rb",
                     "https://storage.googleapis.com/b/\(longest)%C3%A9"] {
            #expect(throws: StorageError.self, "\(text)") { try StorageReference(parsing: text) }
        }
        #expect(throws: StorageError.self) { try StorageReference(parsing: "gs://b/a").child(longest) }
        #expect(try StorageReference(parsing: "http://h/a%0Ab").fullPath == "a\nb")
    }

    @Test func childNormalisesAndNests() throws {
        let root = try StorageReference(parsing: "gs://bucket")
        let child = try root.child("images//stars.jpg/")
        #expect(child.fullPath == "images/stars.jpg")
        #expect(child.description == "gs://bucket/images/stars.jpg")
        let deeper = try child.parent?.child("moon/craters.png")
        #expect(deeper?.fullPath == "images/moon/craters.png")
        #expect(try root.child("").isRoot)
        let error = #expect(throws: StorageError.self) { try child.child("../../escape") }
        #expect(error?.code == .pathError)
    }

    @Test func parentWalksUpToRootThenNil() throws {
        let reference = try StorageReference(parsing: "gs://bucket/a/b/c.txt")
        #expect(reference.parent?.fullPath == "a/b")
        #expect(reference.parent?.parent?.fullPath == "a")
        let root = reference.parent?.parent?.parent
        #expect(root?.isRoot == true)
        #expect(root?.description == "gs://bucket/")
        #expect(root?.parent == nil)
    }

    @Test func rootNameAndBucket() throws {
        let reference = try StorageReference(parsing: "file://demo/reports/2024/summary.json")
        #expect(reference.root == (try StorageReference(parsing: "file://demo/")))
        #expect(reference.root.fullPath == "")
        #expect(reference.root.name == "")
        #expect(reference.name == "summary.json")
        #expect(reference.fullPath == "reports/2024/summary.json")
        #expect(reference.bucket == "demo")
        #expect(reference.scheme == .file)
    }

    @Test func encodedPathEscapesSlashesAndSpaces() throws {
        #expect(try StorageReference(parsing: "gs://b/images/stars.jpg").encodedPath == "images%2Fstars.jpg")
        #expect(try StorageReference(parsing: "gs://b/images stars.jpg").encodedPath == "images%20stars.jpg")
        #expect(try StorageReference(parsing: "gs://b/café").encodedPath == "caf%C3%A9")
        #expect(try StorageReference(parsing: "gs://b").encodedPath == "")
    }

    @Test func firebaseAndGsFormsAreTheSameReference() throws {
        let firebase = try StorageReference(parsing: "https://firebasestorage.googleapis.com/v0/b/b/o/images%2Fstars.jpg")
        let gcs = try StorageReference(parsing: "https://storage.googleapis.com/b/images/stars.jpg")
        let gs = try StorageReference(parsing: "gs://b/images/stars.jpg")
        #expect(firebase == gs)
        #expect(gcs == gs)
    }

    @Test func requireObjectRefusesTheRoot() throws {
        let root = try StorageReference(parsing: "gs://bucket/")
        let error = #expect(throws: StorageError.self) { try root.requireObject(for: "an upload") }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("bucket root") == true)
        #expect(error?.message.contains("an upload") == true)
        try StorageReference(parsing: "gs://bucket/x").requireObject()
    }

    @Test func codableUsesTheCanonicalText() throws {
        let reference = try StorageReference(parsing: "https://firebasestorage.googleapis.com/v0/b/b/o/a%20b.txt")
        let data = try JSONEncoder().encode([reference])
        #expect(String(decoding: data, as: UTF8.self) == #"["gs:\/\/b\/a%20b.txt"]"#)
        #expect(try JSONDecoder().decode([StorageReference].self, from: data) == [reference])
    }
}

@Suite struct ByteSizeTests {
    @Test(arguments: [
        ("1048576", Int64(1_048_576)), ("512KiB", 524_288), ("1MiB", 1_048_576), ("2MB", 2_000_000),
        ("1.5GiB", 1_610_612_736), ("10 B", 10), ("0", 0), ("1K", 1024), ("3KB", 3000),
        ("0.5KiB", 512), ("0.25K", 256), ("1.00B", 1), ("010M", 10_485_760), ("00.5M", 524_288), ("0.000001MB", 1), ("0.3MB", 300_000), ("1.1TB", 1_100_000_000_000),
        ("1.099511627776TB", 1_099_511_627_776), ("8388607.75TiB", 9_223_371_761_976_868_864), ("9223372036854775807", .max), ("9223372036854775807B", .max),
    ])
    func parsesSizes(_ text: String, _ bytes: Int64) {
        #expect(ByteSize.parse(text) == bytes)
    }

    @Test(arguments: ["", "lots", "-1", "1.5", "MiB", "1 XiB", "-2MB", "1e3", "99999999TiB", "1.5B", "0.0001KiB", ".", "1..5K",
                      "1.2.3K", "\u{0661}K", "+1K", " 1 . 5K", "inf", "nanB",
                      // A fraction has digits on both sides of its point, and only with a unit: `1.0` was 1 byte.
                      ".25K", ".5M", "5.M", "5./s", "1.0", "1.00", "0.0", "010", "00"])
    func refusesNonSizes(_ text: String) {
        #expect(ByteSize.parse(text) == nil)
    }

    /// Sizes are read exactly: a fraction of a byte is no size (it was rounded: `1.5B` was 2 bytes, and
    /// a size too precise for a Double was off by some bytes), and the reading says which refusal.
    @Test(arguments: [
        ("1.5B", ByteSize.Reading.fractionOfAByte), ("1.5", .notASize), ("1.0", .notASize), ("0.0001KiB", .fractionOfAByte),
        ("1.0000000000000000000000001KiB", .fractionOfAByte), ("0.00000000000000000000001B", .fractionOfAByte),
        ("9223372036854775808", .tooLarge), ("8388608TiB", .tooLarge), ("99999999999999999999999MB", .tooLarge),
        ("18446744073709551616.5B", .tooLarge), ("2.5 XB", .notASize), ("-1.5K", .notASize), ("1,5K", .notASize),
        ("1.000KiB", .bytes(1024)), ("9007199254740993", .bytes(9_007_199_254_740_993)),
        ("9007199254740993B", .bytes(9_007_199_254_740_993)), ("0.1KB", .bytes(100)),
    ])
    func readsExactly(_ text: String, _ reading: ByteSize.Reading) {
        #expect(ByteSize.read(text) == reading)
    }
}

// MARK: - The byte-level helpers against the Foundation calls they replace

/// Inputs chosen around the edges the byte-level helpers decide on: spaces and tabs, Unicode spaces,
/// non-ASCII letters at either end, `:` and `/` near-misses, combining marks, empty text.
private let helperInputs: [String] = [
    "", " ", "\t", "gs://b/x", " gs://b/x", "gs://b/x ", "\tgs://b/x\t", "\u{00A0}gs://b/x", "gs://b/x\u{3000}",
    "\u{2003}", "é", "gs://b/é", "égs://b/x", "\ngs://b/x\n", "gs:/b", "gs:", ":", "://", "a://", "::///",
    "gs:://b", "gs:/x://y", "http://h/a?next=http://x", "x:\u{301}//y", "é://x", "日本://x", "a :// b",
]

@Suite struct StorageReferenceHelperTests {
    /// Skipping the trim is only ever done when Foundation's trim would change nothing.
    @Test(arguments: helperInputs)
    func trimIsSkippedOnlyWhenItChangesNothing(_ text: String) {
        if !StorageReference.hasEdgeWhitespace(text) {
            #expect(text.trimmingCharacters(in: .whitespaces) == text)
        }
    }

    /// The first `://` is found where Foundation's `range(of:)` finds it, and what precedes and follows
    /// it is the same text.
    @Test(arguments: helperInputs)
    func schemeSeparatorMatchesFoundationsSearch(_ text: String) {
        let ours = StorageReference.schemeSeparator(in: text)
        let theirs = text.range(of: "://")
        #expect((ours == nil) == (theirs == nil), "'\(text)'")
        if let (end, start) = ours, let theirs {
            #expect(String(text.unicodeScalars[..<end]) == String(text[..<theirs.lowerBound]), "'\(text)'")
            #expect(String(text.unicodeScalars[start...]) == String(text[theirs.upperBound...]), "'\(text)'")
        }
    }
}

/// A host in another script was refused as "invalid" with no word on what to write: its ASCII form is
/// named now (RFC 3492's own samples check the encoding).
@Suite("hosts in other scripts")
struct InternationalHostTests {
    @Test("Punycode as RFC 3492 §7.1 and IDNA write it", arguments: [
        ("bücher", "bcher-kva"), ("münchen", "mnchen-3ya"), ("ü", "tda"),
        ("\u{644}\u{64A}\u{647}\u{645}\u{627}\u{628}\u{62A}\u{643}\u{644}\u{645}\u{648}\u{634}\u{639}\u{631}\u{628}\u{64A}\u{61F}",
         "egbpdaj6bu4bxfgehfvwxn"),
        ("\u{4ED6}\u{4EEC}\u{4E3A}\u{4EC0}\u{4E48}\u{4E0D}\u{8BF4}\u{4E2D}\u{6587}", "ihqwcrb4cv8a8dqg056pqjye"),
        ("\u{3072}\u{3068}\u{3064}\u{5C4B}\u{6839}\u{306E}\u{4E0B}2", "2-u9tlzr9756bt3uc0v"),
    ])
    func encodes(label: String, encoded: String) {
        #expect(Punycode.encode(Array(label.unicodeScalars)) == encoded)
    }

    @Test("a URL whose host is not ASCII is refused naming the ASCII form to write")
    func namesTheASCIIForm() throws {
        let refused = #expect(throws: StorageError.self) { try StorageReference(parsing: "https://Bücher.example:8443/a.txt") }
        #expect(refused?.message.contains("write it in its ASCII (IDNA) form, 'xn--bcher-kva.example:8443'") == true, "\(String(describing: refused))")
        #expect(Punycode.asciiHost("bücher.Example") == "xn--bcher-kva.example")
        #expect(Punycode.asciiHost("a b.example") == "a b.example")
        #expect(Punycode.asciiHost("tab\u{9}ü.example") == nil)
    }
}
