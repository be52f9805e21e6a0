import Foundation
import JobModel

/// Which certificate authorities an HTTPS server's certificate is checked against.
///
/// Verification is always on; this only chooses the trusted CAs:
/// - `JOBCTL_CA_BUNDLE` — a PEM file or a directory prepared with `openssl rehash` — names the *only* CAs
///   trusted (`exclusive`), so a private CA can be pinned; append the system bundle to the file to trust
///   public CAs as well.
/// - otherwise `SSL_CERT_FILE` and `SSL_CERT_DIR` replace libcurl's default file and directory one by
///   one, as OpenSSL-based tools read them (`SSL_CERT_DIR` may list several directories, `:`-separated).
/// - otherwise libcurl's defaults (on Debian `/etc/ssl/certs/ca-certificates.crt` and `/etc/ssl/certs`).
///
/// Paths are checked when read (`fromEnvironment`), so a missing or unusable bundle stops the worker at
/// start; one removed later fails the transfer with a clear error.
public struct CertificateTrust: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// A PEM file of CA certificates (`CURLOPT_CAINFO`); nil keeps libcurl's default unless `exclusive`.
    public var caFile: String?
    /// Directories of CA certificates under subject-hash names (`CURLOPT_CAPATH`), `:`-separated; nil keeps
    /// libcurl's default unless `exclusive`.
    public var caDirectory: String?
    /// When true, only `caFile` / `caDirectory` are trusted: libcurl's defaults are switched off.
    public var exclusive: Bool
    /// Which setting chose this trust, for messages about jobs ("JOBCTL_CA_BUNDLE", "the configuration
    /// file's ca_bundle", …); nil for the defaults.
    public var source: String?
    /// The setting a job's message says to change to trust other CAs: the configuration file's
    /// `ca_bundle` when that chose these; nil: JOBCTL_CA_BUNDLE, SSL_CERT_FILE or SSL_CERT_DIR.
    public var settingToChange: String?

    public init(caFile: String? = nil, caDirectory: String? = nil, exclusive: Bool = false, source: String? = nil,
                settingToChange: String? = nil) {
        self.caFile = caFile
        self.caDirectory = caDirectory
        self.exclusive = exclusive
        self.source = source
        self.settingToChange = settingToChange
    }

    /// libcurl's own CA file and directory.
    public static let systemDefault = CertificateTrust()

    /// Reads `JOBCTL_CA_BUNDLE`, else `SSL_CERT_FILE` / `SSL_CERT_DIR`; empty values count as unset.
    /// Throws `invalidArgument` naming the setting (as `origins` says it was given) and the path when a
    /// path cannot serve.
    public static func fromEnvironment(_ environment: [String: String],
                                       origins: SettingOrigins = SettingOrigins()) throws(StorageError) -> CertificateTrust {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let bundle = value("JOBCTL_CA_BUNDLE") {
            var trust = try only(bundle, variable: origins.name("JOBCTL_CA_BUNDLE"))
            trust.source = origins.jobName("JOBCTL_CA_BUNDLE")
            if origins.isFromFile("JOBCTL_CA_BUNDLE") { trust.settingToChange = trust.source }
            return trust
        }
        var trust = CertificateTrust()
        if let file = value("SSL_CERT_FILE") {
            try checkFile(file, variable: "SSL_CERT_FILE")
            trust.caFile = file
            trust.source = "SSL_CERT_FILE"
        }
        if let directories = value("SSL_CERT_DIR") {
            for directory in directories.split(separator: ":").map(String.init) {
                try checkDirectory(directory, variable: "SSL_CERT_DIR")
            }
            trust.caDirectory = directories
            trust.source = trust.source.map { "\($0) and SSL_CERT_DIR" } ?? "SSL_CERT_DIR"
        }
        return trust
    }

    /// Trusts only the CAs at `path`: a PEM file, or a directory prepared with `openssl rehash`; errors
    /// name the setting `variable` (as the user gave it).
    public static func only(_ path: String, variable: String = "JOBCTL_CA_BUNDLE") throws(StorageError) -> CertificateTrust {
        if try kind(of: path, variable: variable) == S_IFDIR {
            try checkDirectory(path, variable: variable)
            return CertificateTrust(caDirectory: path, exclusive: true, source: variable)
        }
        try checkFile(path, variable: variable)
        return CertificateTrust(caFile: path, exclusive: true, source: variable)
    }

    public var description: String {
        guard caFile != nil || caDirectory != nil else { return exclusive ? "no CA" : "the system's CAs" }
        let parts = [caFile.map { "file \($0)" }, caDirectory.map { "directory \($0)" }].compactMap { $0 }
        return (exclusive ? "only " : "") + parts.joined(separator: " and ")
    }

    // MARK: - Checks

    private static let remedy = "point it at a PEM file of CA certificates or a directory prepared with `openssl rehash`"

    private static func unusable(_ variable: String, _ path: String, _ problem: String) -> StorageError {
        StorageError(.invalidArgument, "\(variable) names '\(path)', which \(problem); \(remedy)")
    }

    /// The file type (`S_IFMT` bits) of what `path` names, links followed; "does not exist" only when
    /// nothing is there (`PathLookup`): a bundle in a folder this user may not search was said not to exist.
    private static func kind(of path: String, variable: String) throws(StorageError) -> mode_t {
        let found: stat?
        do throws(PathLookup.Failure) { found = try PathLookup.entry(at: path, followingLinks: true) } catch {
            throw unusable(variable, path, "cannot be looked at (\(error.reason))")
        }
        guard let found else { throw unusable(variable, path, "does not exist") }
        return found.st_mode & S_IFMT
    }

    /// A readable regular file holding at least one PEM certificate.
    private static func checkFile(_ path: String, variable: String) throws(StorageError) {
        guard try kind(of: path, variable: variable) != S_IFDIR else {
            throw unusable(variable, path, "is a directory where a file is expected")
        }
        // Opened without waiting: a FIFO there held the worker's start for ever, deaf to SIGTERM.
        let (descriptor, _, notRegular) = LocalFiles.openRegularForReading(path, allowingDirectories: false)
        if let notRegular { throw unusable(variable, path, "is \(notRegular) where a file is expected") }
        guard descriptor >= 0 else { throw unusable(variable, path, "cannot be read") }
        let file = FileHandle(fileDescriptor: descriptor, closeOnDealloc: false)
        defer { close(descriptor) }
        // Read until the first certificate (a system bundle starts with one), not the whole bundle: the
        // check runs at every worker's start. The tail of each block is kept, so a marker across two
        // blocks is found too.
        let markers = [Data("-----BEGIN CERTIFICATE-----".utf8), Data("-----BEGIN TRUSTED CERTIFICATE-----".utf8)]
        let keep = markers.map(\.count).max() ?? 0
        var window = Data()
        while true {
            let block: Data
            do { block = try file.read(upToCount: 64 * 1024) ?? Data() } catch { throw unusable(variable, path, "cannot be read") }
            if block.isEmpty { break }
            window.append(block)
            if markers.contains(where: { window.range(of: $0) != nil }) { return }
            window = Data(window.suffix(keep))
        }
        throw unusable(variable, path, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    }

    /// A readable directory holding at least one certificate under its subject-hash name (`1a2b3c4d.0`).
    private static func checkDirectory(_ path: String, variable: String) throws(StorageError) {
        guard try kind(of: path, variable: variable) == S_IFDIR else {
            throw unusable(variable, path, "is a file where a directory is expected")
        }
        guard let names = try? DirectoryEntries.read(path: path).names else {
            throw unusable(variable, path, "cannot be read")
        }
        guard names.contains(where: isHashName) else {
            throw StorageError(.invalidArgument,
                               "\(variable) names the directory '\(path)', which holds no certificate under a subject-hash "
                                   + "name (like 1a2b3c4d.0) that OpenSSL looks up; run `openssl rehash '\(path)'` after adding the CA files")
        }
        // OpenSSL opens a hash name when a certificate's issuer has that hash, on libcurl's one thread: a
        // FIFO (or a device) there held that open — and with it every transfer of the worker, deaf to
        // their timeouts — for ever. Each is asked of `stat`, which does not open it.
        for name in names.sorted() where isHashName(name) {
            var status = stat()
            guard stat(path + "/" + name, &status) == 0 else { continue }  // a dangling link: OpenSSL skips it
            if let kind = FileKind.notRegular(mode: status.st_mode) {
                throw unusable(variable, path, "holds '\(name)', \(kind) where a certificate file is expected")
            }
        }
    }

    /// `HHHHHHHH.N` (certificates) or `HHHHHHHH.rN` (CRLs): eight hex digits, a dot, a counter.
    private static func isHashName(_ name: String) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 8, parts[0].allSatisfy(\.isHexDigit) else { return false }
        let counter = parts[1].hasPrefix("r") ? parts[1].dropFirst() : parts[1]
        return !counter.isEmpty && counter.allSatisfy(\.isNumber)
    }
}
