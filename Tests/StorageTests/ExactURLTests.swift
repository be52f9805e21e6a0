import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// Plain http(s) URLs are requested exactly as written: percent escapes are not decoded or re-encoded,
/// `//` is not collapsed, the query is untouched. Presigned URLs sign the exact path, so any rewrite
/// breaks them.
///
/// nginx decodes `%2F`, `%7E`, `%61` before it maps a URI to a file, so its plain file serving cannot
/// tell the forms apart; the `/raw/` location below serves the file named by the *undecoded* path
/// (`try_files` on `$request_uri`), as a server that checks the raw path does. Each test creates both the
/// file the raw path names and the file a rewritten path would name, with different contents.
@Suite("Exact HTTP URLs against nginx", .onTestThreads)
struct ExactURLTests {
    private func startRawNginx() throws -> NginxServer {
        let server = try NginxServer.start(
            extraServerConfig: "location /raw/ { try_files $raw_path =404; }",
            extraHTTPConfig: #"map $request_uri $raw_path { "~^(?<p>[^?]*)" $p; }"#)
        try FileManager.default.createDirectory(atPath: server.root + "/raw/a", withIntermediateDirectories: true)
        return server
    }

    private func write(_ text: String, _ path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    /// The request lines nginx logged, once there are `count` (it logs a request after answering it).
    private func requestLines(_ server: NginxServer, count: Int = 1) -> [String] {
        server.accessLogLines(atLeast: count).compactMap { line in
            line.split(separator: "\"", maxSplits: 2).dropFirst().first.map(String.init)
        }
    }

    @Test("the raw path picks the file: a%2Fb, %7Ex, ~x, %61.txt, lower-case escapes", arguments: [
        // (written path, file the raw path names, file a rewritten request would name)
        ("/raw/a%2Fb", "raw/a%2Fb", "raw/a/b"),
        ("/raw/%7Ex", "raw/%7Ex", "raw/~x"),
        ("/raw/~x", "raw/~x", "raw/%7Ex"),
        ("/raw/%61.txt", "raw/%61.txt", "raw/a.txt"),
        ("/raw/caf%c3%a9", "raw/caf%c3%a9", "raw/caf%C3%A9"),
    ])
    func rawPathNamesTheFile(written: String, rawFile: String, rewrittenFile: String) async throws {
        let server = try startRawNginx()
        defer { server.stop() }
        try write("the raw path's file", "\(server.root)/\(rawFile)")
        try write("a rewritten path's file", "\(server.root)/\(rewrittenFile)")
        let backend = HTTPBackend(configuration: StorageConfiguration(connectTimeout: 5))
        let url = server.baseURL + written
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: url)))
        #expect(memory.data == Data("the raw path's file".utf8))

        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: url, destination: destination)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == Data("the raw path's file".utf8))
        #expect(requestLines(server, count: 2) == ["GET \(written) HTTP/1.1", "GET \(written) HTTP/1.1"])
    }

    @Test("the query is sent as written, escapes and order kept")
    func queryAsWritten() async throws {
        let server = try startRawNginx()
        defer { server.stop() }
        try write("signed", "\(server.root)/raw/%61.txt")
        let written = "/raw/%61.txt?X-Amz-Signature=ab%2Fcd&b=%7E&a=1&empty="
        let backend = HTTPBackend(configuration: StorageConfiguration(connectTimeout: 5))
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: server.baseURL + written)))
        #expect(memory.data == Data("signed".utf8))
        #expect(requestLines(server) == ["GET \(written) HTTP/1.1"])
    }

    @Test("an upload PUTs to the path as written (escapes and // kept)")
    func uploadAsWritten() async throws {
        let server = try startRawNginx()
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(connectTimeout: 5))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/up/%7Edir//f%2Ex.txt",
                                                    data: Data("put".utf8))))
        #expect(requestLines(server) == ["PUT /up/%7Edir//f%2Ex.txt HTTP/1.1"])
    }

    @Test("characters a URL cannot hold are escaped, nothing else changes")
    func unsafeCharactersEscaped() async throws {
        let server = try startRawNginx()
        defer { server.stop() }
        try write("spaced", "\(server.root)/a b.txt")
        let backend = HTTPBackend(configuration: StorageConfiguration(connectTimeout: 5))
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/a b.txt?q=x y")))
        #expect(memory.data == Data("spaced".utf8))
        #expect(requestLines(server) == ["GET /a%20b.txt?q=x%20y HTTP/1.1"])
    }

    @Test("curl sends the path it is given without folding dot segments (server-made URLs, e.g. a Location)")
    func curlKeepsDotSegments() async throws {
        let server = try startRawNginx()
        defer { server.stop() }
        try write("folded", "\(server.root)/raw/a.txt")
        let url = "\(server.baseURL)/raw/x/../a.txt"
        _ = try await CurlEngine.shared.perform(HTTPRequest(method: "GET", url: url), control: nil,
                                                options: StorageConfiguration(connectTimeout: 5).curlOptions)
        #expect(requestLines(server) == ["GET /raw/x/../a.txt HTTP/1.1"])
    }
}
