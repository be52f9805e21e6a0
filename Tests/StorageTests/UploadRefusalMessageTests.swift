import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// What an upload's refusal says when the server redirects it or has no place for it. A redirect read
/// "unexpected HTTP 307 for the upload to …", naming neither where it led nor that uploads do not follow
/// redirects; a 404 read "the upload to http://…/x does not exist" (GCS: "the upload of gs://b/x does
/// not exist; check the path"), as if the upload were a thing looked for.
@Suite("Upload refusals say what the server meant", .onTestThreads)
struct UploadRefusalMessageTests {
    /// nginx redirecting (to a URL with a signature, which stays hidden) and refusing one folder.
    static func server() throws -> NginxServer {
        try NginxServer.start(extraServerConfig: """
            location /moved/ { return 307 http://127.0.0.1:9/final/up.bin?sig=r3d1rect-s1g; }
            location /relative/ { return 301 /final/up.bin; }
            location /nowhere/ { return 404; }
            """)
    }

    @Test("an HTTP upload redirected names where to and says uploads do not follow redirects; it is not retried",
          arguments: ["moved", "relative"])
    func redirectedUpload(_ folder: String) async throws {
        let server = try Self.server()
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 8, connectTimeout: 5))
        let destination = "\(server.baseURL)/\(folder)/up.bin"
        let target = folder == "moved" ? "http://127.0.0.1:9/final/up.bin?sig=REDACTED" : "\(server.baseURL)/final/up.bin"
        for spec in [JobSpec(kind: .uploadData, destination: destination, data: Data("hello".utf8)),
                     // `if_exists: fail` looks first (a HEAD), which is not followed either.
                     JobSpec(kind: .uploadData, destination: destination, data: Data("hello".utf8), ifExists: .fail)] {
            let refused = try failure(await run(backend, spec))
            #expect(refused.code == .unknown && !refused.retryable, "\(refused)")
            #expect(refused.message.contains("the server redirected the "), "\(refused)")
            #expect(refused.message.contains(" to \(target) (HTTP \(folder == "moved" ? 307 : 301)); uploads do not follow redirects: "
                                             + "point the destination at the final URL"), "\(refused)")
            #expect(!refused.description.contains("r3d1rect-s1g"), "\(refused)")
        }
        #expect(!FileManager.default.fileExists(atPath: server.root + "/final/up.bin"))
    }

    @Test("an HTTP upload answered 404 says the server has no place for it there")
    func uploadToAPathTheServerDoesNotHave() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 8, connectTimeout: 5))
        let refused = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/nowhere/uf",
                                                             data: Data("hello".utf8))))
        #expect(refused.code == .objectNotFound && refused.httpStatus == 404 && !refused.retryable, "\(refused)")
        #expect(refused.message.contains("the server has no place to upload to at \(server.baseURL)/nowhere/uf (HTTP 404): "
                                         + "the path is wrong, or the server takes no uploads (PUT) there"), "\(refused)")
        #expect(!refused.message.contains("does not exist"), "\(refused)")
    }

    @Test("a GCS upload answered 404 while its bucket exists says the endpoint serves no uploads there")
    func gcsUploadAnswered404() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/upload/storage/v1/"), .respond(.response(404, reason: "Not Found")),
                      times: 10),
        ])
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let reference = "gs://\(server.bucket)/up/x"
        let refused = try failure(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Data("hello".utf8))))
        #expect(refused.code == .objectNotFound && refused.httpStatus == 404, "\(refused)")
        #expect(refused.message.contains("the server answered 404 to the upload of \(reference) though the bucket '\(server.bucket)' "
                                         + "exists: the endpoint serves no uploads at /upload/storage/v1"), "\(refused)")
        #expect(!refused.message.contains("does not exist"), "\(refused)")
    }
}
