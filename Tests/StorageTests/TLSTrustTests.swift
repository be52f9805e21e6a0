import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// HTTPS for real: a CA and server certificates made with `openssl` in a temporary directory, nginx
/// serving TLS on 127.0.0.1, and the HTTP backend trusting (or not) that CA through the environment.
@Suite("HTTPS with a private CA", .onTestThreads)
struct TLSTrustTests {
    /// A CA, a server certificate for 127.0.0.1 and localhost, and nginx serving it.
    private struct Fixture {
        let authority: TestCertificateAuthority
        let server: NginxServer

        init(names: [String] = ["IP:127.0.0.1", "DNS:localhost"]) throws {
            authority = try TestCertificateAuthority.create()
            do {
                server = try NginxServer.start(tls: try authority.issueServerCertificate(names: names))
            } catch {
                authority.remove()
                throw error
            }
        }

        func stop() {
            server.stop()
            authority.remove()
        }
    }

    private func backend(_ environment: [String: String]) throws -> HTTPBackend {
        var configuration = try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: "/tmp/buckets")
        configuration.connectTimeout = 5
        return HTTPBackend(configuration: configuration)
    }

    /// Uploads, then downloads to a file and to memory, over HTTPS.
    private func roundTrip(_ backend: HTTPBackend, _ server: NginxServer, name: String) async throws {
        #expect(server.baseURL.hasPrefix("https://127.0.0.1:"))
        let payload = patternData(300_000, seed: 11)
        let url = "\(server.baseURL)/tls/\(name).bin"
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadData, destination: url, data: payload)))
        #expect(uploaded.md5 == nil && uploaded.crc32c == hashes(payload).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(server.root)/tls/\(name).bin")) == payload)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let destination = directory.file("\(name).bin")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadFile, source: url, destination: destination)))
        #expect(downloaded.md5 == nil && downloaded.crc32c == hashes(payload).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: url, maxSize: 1 << 20)))
        #expect(memory.data == payload)
    }

    @Test("JOBCTL_CA_BUNDLE as a PEM file or a hashed directory: upload and download over HTTPS")
    func trustedBundle() async throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        try await roundTrip(try backend(["JOBCTL_CA_BUNDLE": fixture.authority.certificatePath]), fixture.server, name: "file")
        try await roundTrip(try backend(["JOBCTL_CA_BUNDLE": try fixture.authority.hashedDirectory()]), fixture.server, name: "directory")
    }

    @Test("SSL_CERT_FILE and SSL_CERT_DIR are honoured as OpenSSL-based tools do")
    func opensslVariables() async throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        try await roundTrip(try backend(["SSL_CERT_FILE": fixture.authority.certificatePath]), fixture.server, name: "cert-file")
        try await roundTrip(try backend(["SSL_CERT_DIR": try fixture.authority.hashedDirectory()]), fixture.server, name: "cert-dir")
    }

    @Test("without the CA the certificate is refused: a distinct, non-retryable error naming the remedy")
    func untrusted() async throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: fixture.server.root + "/x.txt"))
        let error = try failure(await run(try backend([:]), JobSpec(kind: .downloadMemory, source: "\(fixture.server.baseURL)/x.txt")))
        #expect(error.code == .unknown)
        #expect(!error.retryable)
        #expect(error.httpStatus == nil)
        #expect(error.message.contains("TLS certificate") && error.message.contains("not trusted"), "\(error)")
        #expect(error.message.contains("JOBCTL_CA_BUNDLE"), "\(error)")
        // Nothing reached nginx's handlers: the handshake failed.
        #expect(!(try fixture.server.settledAccessLog()).contains("GET /x.txt"))
    }

    @Test("JOBCTL_CA_BUNDLE wins over SSL_CERT_FILE")
    func jobctlVariableWins() async throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let other = try TestCertificateAuthority.create()
        defer { other.remove() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: fixture.server.root + "/x.txt"))
        let error = try failure(await run(try backend(["JOBCTL_CA_BUNDLE": other.certificatePath,
                                                       "SSL_CERT_FILE": fixture.authority.certificatePath]),
                                          JobSpec(kind: .downloadMemory, source: "\(fixture.server.baseURL)/x.txt")))
        #expect(error.message.contains("not trusted"), "\(error)")
        let fine = try finished(await run(try backend(["JOBCTL_CA_BUNDLE": fixture.authority.certificatePath,
                                                       "SSL_CERT_FILE": other.certificatePath]),
                                          JobSpec(kind: .downloadMemory, source: "\(fixture.server.baseURL)/x.txt")))
        #expect(fine.data == Data("x".utf8))
    }

    @Test("a certificate for another host is refused even with its CA trusted")
    func wrongHost() async throws {
        let fixture = try Fixture(names: ["DNS:example.test"])
        defer { fixture.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: fixture.server.root + "/x.txt"))
        let error = try failure(await run(try backend(["JOBCTL_CA_BUNDLE": fixture.authority.certificatePath]),
                                          JobSpec(kind: .downloadMemory, source: "\(fixture.server.baseURL)/x.txt")))
        #expect(error.code == .unknown)
        #expect(!error.retryable)
        #expect(error.message.contains("127.0.0.1"), "\(error)")
        #expect(error.message.contains("not valid for"), "\(error)")
        #expect(!(try fixture.server.settledAccessLog()).contains("GET /x.txt"))
    }

    /// A job whose URL says https was promised TLS: a redirect to plain http would fetch the bytes where
    /// anyone on the path reads and rewrites them. It is refused as the server's answer (not retried);
    /// redirects that keep TLS are still followed.
    @Test("an https download redirected to plain http is refused; redirects that keep TLS are followed")
    func redirectToPlainHTTPIsRefused() async throws {
        let plain = try NginxServer.start()
        defer { plain.stop() }
        try Data("plain".utf8).write(to: URL(fileURLWithPath: plain.root + "/x.txt"))
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let server = try NginxServer.start(extraServerConfig: """
            location /down { return 302 \(plain.baseURL)/x.txt; }
            location /moved { return 302 /x.txt; }
            """, tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { server.stop() }
        try Data("tls".utf8).write(to: URL(fileURLWithPath: server.root + "/x.txt"))
        let backend = try backend(["JOBCTL_CA_BUNDLE": authority.certificatePath])
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for spec in [JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/down", maxSize: 1 << 20),
                     JobSpec(kind: .downloadFile, source: "\(server.baseURL)/down", destination: directory.file("x.txt"))] {
            let error = try failure(await run(backend, spec))
            #expect(!error.retryable && error.code == .unknown, "\(error)")
            #expect(error.httpStatus == 302 && error.message.contains("https"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("x.txt")))
        #expect(!(try plain.settledAccessLog()).contains("GET /x.txt"), "\(plain.accessLog)")
        let moved = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/moved", maxSize: 1 << 20)))
        #expect(moved.data == Data("tls".utf8))
    }

    /// An https URL aimed at a plain-http port gets an answer that is not TLS, the same at every attempt:
    /// a permanent error saying so, not "the connection failed" retried until the attempts run out.
    @Test("https to a plain-http port is a permanent error saying the server did not answer in TLS")
    func tlsToPlainPort() async throws {
        let plain = try NginxServer.start()
        defer { plain.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: plain.root + "/x.txt"))
        let url = plain.baseURL.replacingOccurrences(of: "http://", with: "https://") + "/x.txt"
        let error = try failure(await run(try backend([:]), JobSpec(kind: .downloadMemory, source: url, maxSize: 1 << 20)))
        #expect(error.code == .unknown && !error.retryable, "\(error)")
        #expect(error.message.contains("did not answer in TLS") && error.message.contains("plain-http port"), "\(error)")
        #expect(!(try plain.settledAccessLog()).contains("GET /x.txt"))
    }

    /// A CA file replaced while the worker runs (a private CA rotated) is read again: a transfer after the
    /// change trusts the new CAs and no longer the old ones.
    @Test("a CA file replaced while the worker runs is read again")
    func bundleReplacedWhileRunning() async throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let other = try TestCertificateAuthority.create()
        defer { other.remove() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: fixture.server.root + "/x.txt"))
        let bundle = fixture.authority.directory.file("rotating.pem")
        try FileManager.default.copyItem(atPath: fixture.authority.certificatePath, toPath: bundle)
        let backend = try backend(["JOBCTL_CA_BUNDLE": bundle])
        let spec = JobSpec(kind: .downloadMemory, source: "\(fixture.server.baseURL)/x.txt", maxSize: 1 << 20)
        #expect(try finished(await run(backend, spec)).data == Data("x".utf8))
        // A second server of the same CA: a new connection, so a new handshake (a connection kept from
        // before the change stays as trusted as it was).
        let second = try NginxServer.start(tls: try fixture.authority.issueServerCertificate(names: ["IP:127.0.0.1"], label: "second"))
        defer { second.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: second.root + "/x.txt"))
        try FileManager.default.removeItem(atPath: bundle)
        try FileManager.default.copyItem(atPath: other.certificatePath, toPath: bundle)
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(second.baseURL)/x.txt", maxSize: 1 << 20)))
        #expect(error.message.contains("not trusted"), "\(error)")
    }

    /// A GCS endpoint on https whose upload session starts at a plain http URL would take the object's
    /// bytes out of TLS: the upload fails instead, and nothing is sent to the session.
    @Test("an upload session at a plain http URL of an https endpoint is refused")
    func plainSessionOfHTTPSEndpointRefused() async throws {
        let plain = try NginxServer.start()
        defer { plain.stop() }
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let server = try NginxServer.start(extraServerConfig: """
            location /upload/ { add_header Location "\(plain.baseURL)/session?upload_id=SESSIONSECRET" always; return 200 "{}"; }
            """, tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { server.stop() }
        var configuration = try StorageConfiguration.fromEnvironment(
            ["STORAGE_EMULATOR_HOST": server.baseURL, "JOBCTL_CA_BUNDLE": authority.certificatePath, "JOBCTL_RESUMABLE_THRESHOLD": "off"],
            localBucketsDirectory: "/tmp/buckets")
        configuration.connectTimeout = 5
        let spec = JobSpec(kind: .uploadData, destination: "gs://bucket/a.bin", data: patternData(1000, seed: 3))
        let error = try failure(await run(GCSBackend(configuration: configuration), spec))
        #expect(!error.retryable && error.message.contains("not sent without TLS"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("SESSIONSECRET"))
        #expect(!server.accessLogLines(atLeast: 1, matching: { $0.contains("POST /upload/") }).isEmpty, "\(server.accessLog)")
        #expect(!(try plain.settledAccessLog()).contains("/session"), "\(plain.accessLog)")
    }

    /// The same session read back from the log (only an edited log can hold one): the resumed upload
    /// sends it nothing — no status query, no bytes, no cancellation — and starts a session of its own.
    @Test("a plain http upload session in the resume point of an https endpoint is not used")
    func plainSessionInTheLogIsNotUsed() async throws {
        let plain = try NginxServer.start()
        defer { plain.stop() }
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let server = try NginxServer.start(extraServerConfig: """
            location /upload/ { return 503; }
            """, tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { server.stop() }
        var configuration = try StorageConfiguration.fromEnvironment(
            ["STORAGE_EMULATOR_HOST": server.baseURL, "JOBCTL_CA_BUNDLE": authority.certificatePath, "JOBCTL_RESUMABLE_THRESHOLD": "off"],
            localBucketsDirectory: "/tmp/buckets")
        configuration.connectTimeout = 5
        let data = patternData(1000, seed: 3)
        let spec = JobSpec(kind: .uploadData, destination: "gs://bucket/a.bin", data: data)
        let tampered = ResumePoint.upload(sessionURI: "\(plain.baseURL)/session?upload_id=SESSIONSECRET", confirmedOffset: 0,
                                          total: Int64(data.count), source: nil)
        let error = try failure(await run(GCSBackend(configuration: configuration), spec, resume: tampered))
        #expect(error.httpStatus == 503, "\(error)")
        #expect(!server.accessLogLines(atLeast: 1, matching: { $0.contains("POST /upload/") }).isEmpty, "\(server.accessLog)")
        #expect(!(try plain.settledAccessLog()).contains("/session"), "\(plain.accessLog)")
    }

    @Test("a CA file or directory that cannot serve is a clear error at start", arguments: ["JOBCTL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"])
    func unusableBundle(variable: String) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let missing = directory.file("missing.pem")
        let notPEM = directory.file("not-a-certificate.pem")
        try "hello".write(toFile: notPEM, atomically: true, encoding: .utf8)
        let unhashed = directory.file("unhashed")
        try FileManager.default.createDirectory(atPath: unhashed, withIntermediateDirectories: true)
        var values = [missing]
        if variable != "SSL_CERT_DIR" { values.append(notPEM) }
        if variable != "SSL_CERT_FILE" { values.append(unhashed) }
        for value in values {
            let error = #expect(throws: StorageError.self, "\(variable)=\(value)") {
                try StorageConfiguration.fromEnvironment([variable: value], localBucketsDirectory: "/tmp/buckets")
            }
            #expect(error?.code == .invalidArgument)
            #expect(error?.message.contains(variable) == true, "\(error?.message ?? "")")
            #expect(error?.message.contains(value) == true, "\(error?.message ?? "")")
        }
    }

    /// A FIFO under a subject-hash name in a CA directory passed the start check, and OpenSSL's open of it
    /// (when a server's issuer had that hash) held libcurl's one thread — every transfer of the worker,
    /// past their timeouts — for ever. Each hash name is now checked for a regular file at start.
    @Test("a CA directory's hash name that is a FIFO or a directory is refused at start", arguments: ["JOBCTL_CA_BUNDLE", "SSL_CERT_DIR"])
    func hashNameThatIsNotAFile(variable: String) throws {
        let authority = try TestCertificateAuthority.create()
        defer { authority.directory.remove() }
        let hashed = try authority.hashedDirectory()
        #expect(try StorageConfiguration.fromEnvironment([variable: hashed], localBucketsDirectory: "/tmp/buckets").certificateTrust
            .caDirectory == hashed)
        #expect(mkfifo(hashed + "/0badcafe.0", 0o600) == 0)
        let error = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment([variable: hashed], localBucketsDirectory: "/tmp/buckets")
        }
        #expect(error?.message.contains("holds '0badcafe.0', a FIFO where a certificate file is expected") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains(variable) == true, "\(error?.message ?? "")")
        unlink(hashed + "/0badcafe.0")
        try FileManager.default.createDirectory(atPath: hashed + "/0badcafe.1", withIntermediateDirectories: false)
        let folder = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment([variable: hashed], localBucketsDirectory: "/tmp/buckets")
        }
        #expect(folder?.message.contains("holds '0badcafe.1', a directory where") == true, "\(folder?.message ?? "")")
    }

    @Test("a CA file is read only up to its first certificate, wherever that lies; a marker across two reads counts")
    func certificateFoundWhereverItLies() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let marker = "-----BEGIN CERTIFICATE-----"
        // The check reads 64 KiB at a time: one marker right after 200 KB of comment lines, one cut by the
        // first block's end, and a file that never has one.
        let late = directory.file("late.pem")
        try (String(repeating: "# a comment line of a long bundle\n", count: 6_000) + marker + "\nMIIB\n").write(toFile: late, atomically: true, encoding: .utf8)
        let split = directory.file("split.pem")
        try (String(repeating: "x", count: 64 * 1024 - 10) + marker + "\n").write(toFile: split, atomically: true, encoding: .utf8)
        let none = directory.file("none.pem")
        try String(repeating: "-----BEGIN CERTIFICATE----\n", count: 10_000).write(toFile: none, atomically: true, encoding: .utf8)
        for path in [late, split] {
            let trust = try StorageConfiguration.fromEnvironment(["SSL_CERT_FILE": path], localBucketsDirectory: "/tmp/buckets").certificateTrust
            #expect(trust.caFile == path)
        }
        let error = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment(["SSL_CERT_FILE": none], localBucketsDirectory: "/tmp/buckets")
        }
        #expect(error?.message.contains("holds no PEM certificate") == true, "\(error?.message ?? "")")
    }

    @Test("a CA file that vanished after start fails the transfer with a clear, non-retryable error")
    func bundleRemovedAfterStart() async throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let copy = fixture.authority.directory.file("copy.pem")
        try FileManager.default.copyItem(atPath: fixture.authority.certificatePath, toPath: copy)
        let backend = try backend(["JOBCTL_CA_BUNDLE": copy])
        try FileManager.default.removeItem(atPath: copy)
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(fixture.server.baseURL)/x.txt")))
        #expect(!error.retryable)
        #expect(error.message.contains("CA certificates could not be loaded from only file \(copy)"), "\(error)")
        #expect(error.message.contains("JOBCTL_CA_BUNDLE"), "\(error)")
    }
}
