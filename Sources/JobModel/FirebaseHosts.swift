import Foundation

/// The hosts whose Firebase-form URLs (`/v0/b/BUCKET/o/PATH`) name a `gs://` object: Firebase's own,
/// and the emulator's that the storage settings name (`STORAGE_EMULATOR_HOST`, or a configuration file's
/// `storage_emulator_host`: where `gs://` requests go), each `host[:port]` in lower case.
///
/// As Firebase's `refFromURL` reads only its host and the emulator's: the same path on any other host
/// read as `gs://` sent a pasted emulator URL (`http://127.0.0.1:9199/v0/b/…`) to Google's servers, with
/// whatever Google credentials the worker had; there it is a plain URL, requested as written.
///
/// A value, given to the parse by whoever has the settings (`StorageConfiguration.firebaseHosts`, a
/// submit's manifest parser): it was read from the process's environment once, so an emulator named
/// only in a configuration file was not recognised, and its Firebase URLs were requested as plain ones.
public struct FirebaseHosts: Sendable, Hashable, ExpressibleByArrayLiteral {
    /// Each `host[:port]`, in lower case.
    public let names: Set<String>

    /// Firebase's own host, with and without its port: what any reference may name.
    public static let firebase: FirebaseHosts = ["firebasestorage.googleapis.com", "firebasestorage.googleapis.com:443"]

    public init(arrayLiteral names: String...) {
        self.names = Set(names.map { $0.lowercased() })
    }

    /// Firebase's own hosts, and `emulator`'s when given: the emulator setting's value (`HOST:PORT` or
    /// `http(s)://HOST:PORT[/]`, as `STORAGE_EMULATOR_HOST` takes it); nil or blank for none.
    public init(emulator: String?) {
        var names = Self.firebase.names
        if var value = emulator?.trimmingCharacters(in: .whitespaces).lowercased() {
            if let separator = value.range(of: "://") { value = String(value[separator.upperBound...]) }
            while value.hasSuffix("/") { value.removeLast() }
            if !value.isEmpty { names.insert(value) }
        }
        self.names = names
    }

    /// Whether a URL's `host[:port]` (any case) is one of them.
    public func contains(_ host: String) -> Bool {
        names.contains(host.lowercased())
    }
}
