import Foundation

/// `OPENSSL_CONF`, which OpenSSL reads itself the first time it is used in a process — jobctl's own
/// hashing (the migrations' SHA-256 when any command opens a log), a service-account key, libcurl's and
/// libpq's TLS — with a blocking `fopen` and reads. Named a FIFO, `submit` and the worker waited there
/// for ever (deaf to SIGTERM, their signals blocked), as jobctl's own CA settings once did before they were
/// refused (`CertificateTrust`). Checked when a command starts instead, as those are.
public enum OpenSSLConfiguration {
    public static let variable = "OPENSSL_CONF"

    /// Why the file `environment`'s `OPENSSL_CONF` names would hold OpenSSL up, or nil: anything there
    /// but a regular file (links followed) — a FIFO, a socket, a device, a directory — except `/dev/null`,
    /// the usual way to have OpenSSL read no configuration. A path with nothing there, or one this user
    /// cannot look at, passes: OpenSSL cannot open it either, and reads no configuration, as documented.
    public static func problem(_ environment: [String: String]) -> String? {
        guard let path = environment[variable], !path.isEmpty else { return nil }
        var info = stat()
        guard stat(path, &info) == 0, let kind = FileKind.notRegular(mode: info.st_mode) else { return nil }
        var null = stat()
        if info.st_mode & S_IFMT == S_IFCHR, stat("/dev/null", &null) == 0, info.st_rdev == null.st_rdev { return nil }
        return "$\(variable) names '\(path)', which is \(kind) where OpenSSL expects its configuration file: OpenSSL opens it "
            + "at its first use (a log's checksums, TLS) and would wait there; point it at a regular file, "
            + "or at /dev/null for none, or unset it"
    }
}
