import Foundation
import JobModel

/// Where Google access tokens come from when neither a fixed token nor a token command is set.
///
/// Found by `StorageConfiguration.fromEnvironment` in this order: the file `GOOGLE_APPLICATION_CREDENTIALS`
/// names, else the gcloud well-known file (`$HOME/.config/gcloud/application_default_credentials.json`,
/// not consulted with an emulator), else the metadata server at `GCE_METADATA_HOST` when it is set, or at
/// `metadata.google.internal` when the machine's DMI product name says it is a Google Compute Engine
/// machine (not with an emulator either).
/// `description` never shows a secret.
public enum GoogleCredentials: Sendable, Equatable, CustomStringConvertible {
    /// A service-account key: JWT bearer flow (RFC 7523).
    case serviceAccount(ServiceAccountKey)
    /// An authorized-user file (`gcloud auth application-default login`): refresh-token flow.
    case authorizedUser(AuthorizedUserCredentials)
    /// The GCE metadata server at `host` (`host[:port]`).
    case metadataServer(host: String)

    /// Where Linux shows the machine's DMI product name: "Google Compute Engine" (or "Google") on GCE.
    public static let gceProductNameFile = "/sys/class/dmi/id/product_name"
    /// The metadata server's name on GCE (it resolves to 169.254.169.254 there).
    public static let gceMetadataHost = "metadata.google.internal"

    /// Where Google's token endpoint lives when a file names none.
    static let defaultTokenURI = "https://oauth2.googleapis.com/token"
    /// Credentials files are small; anything larger is not one.
    static let fileSizeLimit = 64 * 1024

    public var description: String {
        switch self {
        case .serviceAccount(let key): key.description
        case .authorizedUser(let user): user.description
        case .metadataServer(let host): "metadata server \(host)"
        }
    }

    // MARK: - Reading credentials files

    /// Reads a service-account or authorized-user JSON file. Errors name `source` (how the file was
    /// found), the file and the field, never a value.
    static func load(file path: String, source: String) throws(StorageError) -> GoogleCredentials {
        func problem(_ what: String) -> StorageError {
            StorageError(.unauthenticated, "\(source) names \(path), which \(what)")
        }
        // Opened without waiting: a FIFO there held the worker's start for ever, deaf to SIGTERM.
        let (descriptor, _, notRegular) = LocalFiles.openRegularForReading(path, allowingDirectories: false)
        if let notRegular {
            throw problem("is \(notRegular), not a file; point it at a service-account key or ADC file")
        }
        guard descriptor >= 0 else {
            throw problem("cannot be read (missing, or not readable by this user); point it at a service-account key or ADC file")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: false)
        defer { close(descriptor) }
        let data = (try? handle.read(upToCount: fileSizeLimit + 1)) ?? Data()
        guard data.count <= fileSizeLimit else {
            throw problem("is larger than 64 KiB, so it is not a credentials file")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw problem("is not a JSON object; download the key again (JSON form) or run gcloud auth application-default login")
        }
        func field(_ name: String) throws(StorageError) -> String {
            guard let value = object[name] as? String, !value.isEmpty else {
                throw problem("has no '\(name)' text field; download the key again")
            }
            return value
        }
        func tokenURI() throws(StorageError) -> String {
            guard object["token_uri"] != nil else { return defaultTokenURI }
            let uri = try field("token_uri")
            guard isAcceptableTokenURI(uri) else {
                throw problem("has a 'token_uri' that is not an https URL (http only to this machine); fix or remove the field")
            }
            return uri
        }
        let type = try field("type")
        switch type {
        case "service_account":
            let (email, pem, uri) = (try field("client_email"), try field("private_key"), try tokenURI())
            do {
                return .serviceAccount(try ServiceAccountKey(path: path, clientEmail: email, privateKeyPEM: pem, tokenURI: uri))
            } catch {
                throw problem("has a 'private_key' that \(error.reason)")
            }
        case "authorized_user":
            return .authorizedUser(AuthorizedUserCredentials(path: path, clientID: try field("client_id"),
                                                             clientSecret: try field("client_secret"),
                                                             refreshToken: try field("refresh_token"),
                                                             tokenURI: try tokenURI()))
        default:
            let shown = type.count <= 40 && type.allSatisfy({ $0 == "_" || ("a"..."z").contains($0) }) ? " (\(type))" : ""
            throw problem("has a 'type'\(shown) jobctl does not support; use a service_account key or an authorized_user file")
        }
    }

    /// https anywhere; plain http only to a loopback host (a local endpoint), never across a network.
    static func isAcceptableTokenURI(_ text: String) -> Bool {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(),
              !host.isEmpty, url.user == nil, url.password == nil else { return false }
        if scheme == "https" { return true }
        return scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)
    }

    /// Whether the DMI product name in `productNameFile` says this is a Google Compute Engine machine,
    /// as Google's auth libraries decide on Linux: the name starts with "Google". Reading a local file
    /// is the whole test: nothing is sent on the network, so off GCE no metadata server is ever probed.
    /// A missing or unreadable file (not Linux, a container without /sys) means no.
    static func isGoogleComputeEngine(productNameFile: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: productNameFile) else { return false }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 256),
              let name = String(data: data, encoding: .utf8) else { return false }
        return name.trimmingCharacters(in: .whitespacesAndNewlines).hasPrefix("Google")
    }

    /// `GCE_METADATA_HOST` as Google's libraries read it: `host` or `host:port`, no scheme, no path.
    static func metadataHost(_ text: String) throws(StorageError) -> String {
        let allowed = text.unicodeScalars.allSatisfy { scalar in
            switch scalar {
            case "a"..."z", "A"..."Z", "0"..."9", ".", "-", ":", "[", "]": true
            default: false
            }
        }
        guard allowed, !text.isEmpty, text.count <= 255, URL(string: "http://\(text)/")?.host != nil else {
            throw StorageError(.invalidArgument,
                               "GCE_METADATA_HOST must be HOST or HOST:PORT (no scheme, no path), e.g. metadata.google.internal or 127.0.0.1:8080")
        }
        return text
    }
}

/// An authorized-user ADC file: an OAuth client and a refresh token.
///
/// `description` names the file only.
public struct AuthorizedUserCredentials: Sendable, Equatable, CustomStringConvertible {
    let path: String
    let clientID: String
    let clientSecret: String
    let refreshToken: String
    let tokenURI: String

    public var description: String { "authorized user (file \(path))" }
}
