import Foundation
import JobModel

/// The proxy variables libcurl reads from the environment, read as it reads them, for what jobctl
/// says about them (an error naming the proxy, `jobctl config`); where a request goes is libcurl's
/// decision alone.
///
/// See https://curl.se/libcurl/c/CURLOPT_PROXY.html and https://curl.se/libcurl/c/CURLOPT_NOPROXY.html
/// ("Environment variables"): `[scheme]_proxy` (`http_proxy` in lower case only, `https_proxy` or
/// `HTTPS_PROXY`), then `all_proxy` / `ALL_PROXY`; `no_proxy` / `NO_PROXY` list the hosts that go
/// direct.
public enum ProxyEnvironment {
    /// Every variable libcurl honours for HTTP and HTTPS, in the order it looks them up.
    public static let variables = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"]

    /// A proxy variable's value as it may be shown: the password of a `user:password@` (or a bare
    /// `token@`) replaced, also in a value written without a scheme (`user:pw@proxy:3128`), which
    /// libcurl takes as `http://`.
    public static func redacted(_ value: String) -> String {
        SecretRedaction.redactEndpoint(value)
    }

    /// libcurl's `text` without the passwords of the proxy variables in `environment`: a message naming
    /// a proxy it cannot read quotes the value whole (`Unsupported proxy syntax in 'user:pw@proxy:99999'`),
    /// scheme or not, which then reads as `redacted` shows it (a password of any length); a password
    /// quoted elsewhere is replaced too (`SecretRedaction.scrub`, 4 characters or more).
    static func scrubbed(_ text: String, environment: [String: String]) -> String {
        var output = text
        var secrets: [String] = []
        for name in variables {
            guard let value = environment[name], !value.isEmpty else { continue }
            secrets += SecretRedaction.endpointSecretValues(in: value)
            let shown = redacted(value)
            if shown != value, output.contains(value) { output = output.replacingOccurrences(of: value, with: shown) }
        }
        return SecretRedaction.scrub(output, secrets: secrets)
    }

    /// What the proxies in `environment` are sent that a server's or a proxy's text must not be quoted
    /// with: each password (as written and percent-decoded, as libcurl sends it) and the `Basic` token of
    /// its `user:password`. A proxy answering 407 with the request's head, or "bad credentials user:pw",
    /// as its body put the password, or its base64, into the job's error, the log and every output.
    static func secretValues(environment: [String: String]) -> [String] {
        var secrets: [String] = []
        for name in variables {
            guard let value = environment[name], !value.isEmpty, value.contains("@") else { continue }
            secrets += SecretRedaction.endpointSecretValues(in: value)
            var rest = Substring(value)
            if let schemeEnd = rest.range(of: "://") { rest = rest[schemeEnd.upperBound...] }
            guard let at = rest.lastIndex(of: "@") else { continue }
            let userinfo = rest[..<at]
            let user = userinfo.prefix { $0 != ":" }
            let password = userinfo.dropFirst(user.count + 1)
            let decodedUser = String(user).removingPercentEncoding ?? String(user)
            let decodedPassword = String(password).removingPercentEncoding ?? String(password)
            secrets.append(decodedPassword)
            secrets.append(Data("\(decodedUser):\(decodedPassword)".utf8).base64EncodedString())
        }
        return secrets
    }

    /// The proxy libcurl takes from `environment` for `url`, and the variable it came from; nil when
    /// none is set for the URL's scheme, or `no_proxy` names its host.
    static func proxy(for url: String, environment: [String: String]) -> (value: String, variable: String)? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        var names = ["\(scheme)_proxy"]
        if scheme != "http" { names.append("\(scheme)_proxy".uppercased()) }
        names += ["all_proxy", "ALL_PROXY"]
        guard let found = names.lazy.compactMap({ name in environment[name].flatMap { $0.isEmpty ? nil : ($0, name) } }).first else {
            return nil
        }
        if let host = endpoint(of: url)?.host, let list = environment["no_proxy"] ?? environment["NO_PROXY"],
           excludes(list, host: host) {
            return nil
        }
        return found
    }

    /// The proxy schemes libcurl takes (https://curl.se/libcurl/c/CURLOPT_PROXY.html); none written is http.
    static let schemes: Set<String> = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

    /// Why libcurl cannot use the proxy `value` (a variable's), or nil: a scheme it does not take
    /// (`ftp://`), a user or password holding a raw `/`, `?`, `#` or `@`, no host, or a port that is not
    /// 1–65535. Such a value failed each transfer as "could not connect to the server; it may be down" or
    /// "the proxy's name could not be resolved", retried, while the worker had started and `config` said
    /// nothing — every storage setting is checked at start.
    public static func problem(_ value: String) -> String? {
        var rest = Substring(value)
        if let schemeEnd = rest.range(of: "://") {
            let scheme = rest[..<schemeEnd.lowerBound].lowercased()
            guard schemes.contains(scheme) else {
                return "its scheme '\(scheme)' is not one libcurl takes for a proxy (\(schemes.sorted().joined(separator: ", ")))"
            }
            rest = rest[schemeEnd.upperBound...]
        }
        // As libcurl's URL parser reads it: the authority ends at the first `/`, `?` or `#`, and a user and
        // password in it at its first `@`. Read to the last `@` (as `redactEndpoint` reads a value, to keep
        // such a password from being shown), `alice:SE/CRET@proxy:3128` passed here and failed every
        // transfer as a proxy name that could not be resolved — libcurl's proxy was `alice`, port `SE`.
        // Neither character is quoted: each may be a piece of the password.
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var hostAndPort = authority
        if let at = authority.firstIndex(of: "@") {
            hostAndPort = authority[authority.index(after: at)...]
            if hostAndPort.contains("@") {
                return "an '@' in its user or password ends them for libcurl; percent-encode it there (%40)"
            }
        } else if rest[authority.endIndex...].contains("@") {
            return "a '/', '?' or '#' in its user or password ends the proxy's host for libcurl; percent-encode it there "
                + "(%2F, %3F, %23)"
        }
        var host = hostAndPort
        var port: Substring?
        if hostAndPort.hasPrefix("[") {
            guard let close = hostAndPort.firstIndex(of: "]") else { return "its IPv6 host has no closing ']'" }
            host = hostAndPort[...close]
            let after = hostAndPort[hostAndPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return "something follows its IPv6 host that is not a port" }
                port = after.dropFirst()
            }
        } else if let colon = hostAndPort.lastIndex(of: ":") {
            host = hostAndPort[..<colon]
            port = hostAndPort[hostAndPort.index(after: colon)...]
        }
        if host.isEmpty || host == "[]" { return "it names no host" }
        if let port, !(port.allSatisfy { $0.isASCII && $0.isNumber } && (Int(port).map { (1...65_535).contains($0) } ?? false)) {
            return "its port '\(port)' is not a number from 1 to 65535"
        }
        return nil
    }

    /// Whether a `no_proxy` list names `host`: `*` alone names every host; an entry (a leading `.`
    /// dropped) names the host itself and the names under it.
    static func excludes(_ list: String, host: String) -> Bool {
        let entries = list.split(whereSeparator: { $0 == "," || $0 == " " }).map { String($0) }
        if entries == ["*"] { return true }
        let name = host.lowercased()
        for var entry in entries.map({ $0.lowercased() }) {
            if entry.hasPrefix(".") { entry.removeFirst() }
            guard !entry.isEmpty else { continue }
            if name == entry || name.hasSuffix("." + entry) { return true }
        }
        return false
    }

    /// The host and port of a URL or a proxy value (`[scheme://][user[:password]@]host[:port][/…]`);
    /// `defaultPort` when none is written (a proxy's is 1080, or 443 for an `https://` proxy, as libcurl's).
    static func endpoint(of text: String, defaultPort: Int = 1080) -> (host: String, port: Int)? {
        var rest = Substring(text)
        var fallback = defaultPort
        if let schemeEnd = rest.range(of: "://") {
            if rest[..<schemeEnd.lowerBound].lowercased() == "https" { fallback = 443 }
            rest = rest[schemeEnd.upperBound...]
        }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let hostAndPort = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
        if hostAndPort.hasPrefix("["), let close = hostAndPort.firstIndex(of: "]") {
            let host = String(hostAndPort[hostAndPort.index(after: hostAndPort.startIndex)..<close])
            let after = hostAndPort[hostAndPort.index(after: close)...]
            return (host, after.hasPrefix(":") ? Int(after.dropFirst()) ?? fallback : fallback)
        }
        let parts = hostAndPort.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard let host = parts.first, !host.isEmpty else { return nil }
        return (String(host), parts.count > 1 ? Int(parts[1]) ?? fallback : fallback)
    }

    /// The proxy `environment` sets for `url`, as it may be shown (its password redacted) with its
    /// variable, and its host and port as libcurl names them in its messages (`HOST port PORT`).
    static func describedProxy(for url: String, environment: [String: String]) -> (text: String, endpoint: String)? {
        guard let (value, variable) = proxy(for: url, environment: environment),
              let (host, port) = endpoint(of: value) else { return nil }
        return ("the proxy \(redacted(value)) (from $\(variable))", "\(host) port \(port)")
    }
}
