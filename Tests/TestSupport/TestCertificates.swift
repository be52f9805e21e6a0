import Foundation
import Testing

/// A server certificate and its private key, as PEM files (for an HTTPS `NginxServer`).
public struct TLSServerCertificate: Sendable {
    public let certificatePath: String
    public let keyPath: String
}

/// A throwaway certificate authority made with the `openssl` command at test time: a CA certificate and
/// key in a fresh temporary directory, which issues server certificates for the names a test asks for.
///
/// Nothing here is trusted by the system: only a client told about `certificatePath` (or a directory
/// prepared by `hashedDirectory()`) accepts what it issues.
public struct TestCertificateAuthority: Sendable {
    public static let openssl = "/usr/bin/openssl"

    /// Holds every file this authority made; `remove()` deletes them.
    public let directory: TemporaryDirectory
    /// The CA certificate (PEM).
    public var certificatePath: String { directory.file("ca.pem") }
    private var keyPath: String { directory.file("ca.key") }

    /// Creates a new CA (an EC P-256 key; valid for two days).
    public static func create() throws -> TestCertificateAuthority {
        guard FileManager.default.isExecutableFile(atPath: openssl) else {
            throw TestServerError("openssl is not installed at \(openssl); the TLS tests need it (apt-get install openssl)")
        }
        let authority = TestCertificateAuthority(directory: try TemporaryDirectory("jobctl-ca"))
        try authority.run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                           "-keyout", authority.keyPath, "-out", authority.certificatePath, "-days", "2",
                           "-subj", "/CN=jobctl test CA",
                           "-addext", "basicConstraints=critical,CA:TRUE",
                           "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        return authority
    }

    /// Issues a server certificate whose subject alternative names are `names` (`IP:127.0.0.1`,
    /// `DNS:localhost`, …), stored as `LABEL.pem` and `LABEL.key`.
    public func issueServerCertificate(names: [String], label: String = "server") throws -> TLSServerCertificate {
        let certificate = directory.file("\(label).pem")
        let key = directory.file("\(label).key")
        let request = directory.file("\(label).csr")
        let extensions = directory.file("\(label).ext")
        try """
        subjectAltName=\(names.joined(separator: ","))
        extendedKeyUsage=serverAuth
        basicConstraints=CA:FALSE
        """.write(toFile: extensions, atomically: true, encoding: .utf8)
        try run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", key, "-out", request, "-subj", "/CN=jobctl test server \(label)"])
        try run(["x509", "-req", "-in", request, "-CA", certificatePath, "-CAkey", keyPath, "-CAcreateserial",
                 "-out", certificate, "-days", "2", "-extfile", extensions])
        return TLSServerCertificate(certificatePath: certificate, keyPath: key)
    }

    /// A directory holding the CA certificate under its subject-hash name (`openssl rehash`), the form
    /// OpenSSL's CApath lookup (and so `CURLOPT_CAPATH`) reads.
    public func hashedDirectory() throws -> String {
        let folder = directory.file("hashed")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: certificatePath, toPath: folder + "/jobctl-test-ca.pem")
        try run(["rehash", folder])
        return folder
    }

    public func remove() { directory.remove() }

    private func run(_ arguments: [String]) throws {
        let output = try runProcess(Self.openssl, arguments, currentDirectory: directory.path)
        guard output.status == 0 else {
            throw TestServerError("openssl \(arguments.first ?? "") failed (\(output.status)): \(output.stderr.suffix(1000))")
        }
    }
}
