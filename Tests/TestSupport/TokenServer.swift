import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// An RSA key pair made with the `openssl` CLI for the token-server tests: the private key as PEM text
/// (for a service-account key file) and the public half's file (for the server to verify with).
public struct TestRSAKey: Sendable {
    public let privateKeyPEM: String
    public let publicKeyPath: String

    /// Two distinct keys, generated once per test process (2048-bit generation takes a moment).
    public static let pair: Result<(TestRSAKey, TestRSAKey), TestServerError> = {
        do {
            let directory = try TemporaryDirectory("jobctl-rsa")
            return .success((try make(in: directory, name: "a"), try make(in: directory, name: "b")))
        } catch {
            return .failure(TestServerError("cannot make a test RSA key with openssl: \(error)"))
        }
    }()

    public static var first: TestRSAKey { get throws { try pair.get().0 } }
    public static var second: TestRSAKey { get throws { try pair.get().1 } }

    private static func make(in directory: TemporaryDirectory, name: String) throws -> TestRSAKey {
        let privatePath = directory.file("\(name).pem"), publicPath = directory.file("\(name).pub.pem")
        let generated = try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                                                            "-out", privatePath])
        guard generated.status == 0 else { throw TestServerError("openssl genpkey failed: \(generated.stderr)") }
        let extracted = try runProcess("/usr/bin/openssl", ["pkey", "-in", privatePath, "-pubout", "-out", publicPath])
        guard extracted.status == 0 else { throw TestServerError("openssl pkey failed: \(extracted.stderr)") }
        return TestRSAKey(privateKeyPEM: try String(contentsOfFile: privatePath, encoding: .utf8), publicKeyPath: publicPath)
    }
}

/// A local OAuth 2.0 token endpoint, metadata server and GCS-shaped resource server in one (Python,
/// from the test venv, `http.server` + `cryptography`), on 127.0.0.1.
///
/// - `POST /token` checks a JWT bearer grant (RFC 7523) — RS256 signature against `verifyingKey`'s
///   public half, header, `aud` (this URL), `iss`, scope, `exp − iat = 3600`, `iat` near now — or a
///   refresh-token grant against the configured client and refresh token; refuses with
///   `400 {"error":"invalid_grant"}`, else issues `tok-1`, `tok-2`, … with `expiresIn`.
/// - `GET /computeMetadata/v1/instance/service-accounts/default/token` issues a token when the request
///   carries `Metadata-Flavor: Google` (403 otherwise).
/// - `GET /storage/v1/…` answers `object.json`, `GET /download/storage/v1/…` answers `object.bin`
///   (see `serve(_:metadata:)`), when the bearer token is one it issued and did not revoke; else 401.
///   With `revokeFirstResourceRequest`, the token of the first such request is revoked (a 401).
/// - Every request is logged (`requests`), the Authorization header included — the test reads it, the
///   tokens are fake.
public final class TokenServer: LoopbackServer, @unchecked Sendable {
    /// How the server behaves.
    public struct Options: Sendable {
        /// The `expires_in` of issued tokens.
        public var expiresIn = 3600
        /// Seconds each token request waits before it is answered (to make concurrent callers overlap).
        public var delay = 0.0
        /// `normal`, or a malformed answer: `notjson`, `badtoken` (CR LF in the token), `huge` (100 kB),
        /// `badexpiry` (negative `expires_in`).
        public var answer = "normal"
        public var revokeFirstResourceRequest = false
        public var issuer = "jobctl-test@example.iam.gserviceaccount.com"
        public var clientID = "client-id-123.apps.example.com"
        public var clientSecret = "CLIENT-SECRET-VALUE"
        public var refreshToken = "REFRESH-TOKEN-VALUE"

        public init() {}
    }

    public let options: Options
    /// The key whose public half verifies assertions.
    public let verifyingKey: TestRSAKey

    /// `http://127.0.0.1:PORT/token`
    public var tokenURL: String { "\(baseURL)/token" }

    /// Starts the server on a free port.
    public static func start(_ options: Options = Options(), verifyingKey: TestRSAKey? = nil) throws -> TokenServer {
        let directory = try TemporaryDirectory("jobctl-token")
        try script.write(toFile: directory.file("token_server.py"), atomically: true, encoding: .utf8)
        let key = try verifyingKey ?? TestRSAKey.first
        try FileManager.default.copyItem(atPath: key.publicKeyPath, toPath: directory.file("public.pem"))
        return try TokenServer(options: options, key: key, directory: directory)
    }

    private init(options: Options, key: TestRSAKey, directory: TemporaryDirectory) throws {
        self.options = options
        self.verifyingKey = key
        let port = freeLoopbackPort()
        let settings: [String: Any] = [
            "port": port, "directory": directory.path, "expires_in": options.expiresIn, "delay": options.delay,
            "answer": options.answer, "revoke_first": options.revokeFirstResourceRequest, "issuer": options.issuer,
            "client_id": options.clientID, "client_secret": options.clientSecret, "refresh_token": options.refreshToken,
        ]
        let json = String(decoding: try JSONSerialization.data(withJSONObject: settings), as: UTF8.self)
        try super.init(executable: "\(PackagePaths.venv)/bin/python", arguments: [directory.file("token_server.py"), json],
                       port: port, directory: directory, name: "the token server (python with cryptography)",
                       // Children inherit the test process's blocked signals, so SIGTERM would wait out the
                       // 5 s grace; the server keeps nothing worth a clean exit.
                       stopSignal: SIGKILL)
    }

    /// Writes a service-account key file for `key` (default: the verifying key) naming this server's
    /// token endpoint (or `tokenURI`), and returns its path.
    public func serviceAccountKeyFile(key: TestRSAKey? = nil, tokenURI: String? = nil) throws -> String {
        let object: [String: Any] = [
            "type": "service_account", "project_id": "jobctl-test", "private_key_id": "0123456789abcdef",
            "private_key": (key ?? verifyingKey).privateKeyPEM, "client_email": options.issuer,
            "client_id": "1234567890", "token_uri": tokenURI ?? tokenURL,
        ]
        return try writeJSON(object, name: "service-account.json")
    }

    /// Writes an authorized-user ADC file for this server and returns its path.
    /// `tokenURI`: another token endpoint (a fault proxy in front of this one), written to file `name`.
    public func authorizedUserFile(tokenURI: String? = nil, name: String = "authorized-user.json") throws -> String {
        try writeJSON(["type": "authorized_user", "client_id": options.clientID, "client_secret": options.clientSecret,
                       "refresh_token": options.refreshToken, "token_uri": tokenURI ?? tokenURL], name: name)
    }

    /// Writes `object` as JSON to a file in the server's directory (mode 0600) and returns its path.
    public func writeJSON(_ object: [String: Any], name: String) throws -> String {
        let path = directory.file(name)
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        return path
    }

    /// Serves `data` as every object's media and `metadata` (JSON) as every object's resource.
    public func serve(_ data: Data, metadata: String) throws {
        try data.write(to: URL(fileURLWithPath: directory.file("object.bin")))
        try Data(metadata.utf8).write(to: URL(fileURLWithPath: directory.file("object.json")))
    }

    /// One logged request.
    public struct Request: Sendable, Equatable {
        public let method: String
        public let path: String
        /// The grant type of a token request.
        public let grant: String?
        /// Why a token request was refused (nil: accepted).
        public let problem: String?
        public let authorization: String?
        public let metadataFlavor: String?
        public let contentType: String?
        /// When the server logged it (seconds since 1970, to the millisecond).
        public let at: Double?
        /// The token an `ISSUED` entry of `log` handed out.
        public let issued: String?
    }

    /// Every request so far, in order.
    public var requests: [Request] { log.filter { $0.method != "ISSUED" } }

    /// The requests and, as entries of method `ISSUED` with the token in `issued`, each token handed out
    /// (logged once its answer is sent), in order: what a failure message shows.
    public var log: [Request] {
        let text = (try? String(contentsOfFile: directory.file("requests.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else { return nil }
            return Request(method: object["method"] as? String ?? "", path: object["path"] as? String ?? "",
                           grant: object["grant"] as? String, problem: object["problem"] as? String,
                           authorization: object["authorization"] as? String, metadataFlavor: object["flavor"] as? String,
                           contentType: object["content_type"] as? String, at: object["at"] as? Double,
                           issued: object["issued"] as? String)
        }
    }

    /// The token requests (POST /token and the metadata path) so far.
    public var tokenRequests: [Request] { requests.filter { $0.method == "POST" || $0.path.hasPrefix("/computeMetadata/") } }

    private static let script = #"""
import base64, json, sys, threading, time, urllib.parse
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

args = json.loads(sys.argv[1])
port = args["port"]
directory = args["directory"]
audience = "http://127.0.0.1:%d/token" % port
lock = threading.Lock()
state = {"issued": [], "revoked": set(), "resource_requests": 0}

def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

def log(entry):
    entry["at"] = round(time.time(), 3)
    with lock:
        with open(directory + "/requests.log", "a") as f:
            f.write(json.dumps(entry) + "\n")

def check_assertion(assertion):
    parts = assertion.split(".")
    if len(parts) != 3:
        return "not three parts"
    header = json.loads(b64url(parts[0]))
    claims = json.loads(b64url(parts[1]))
    if header != {"alg": "RS256", "typ": "JWT"}:
        return "header %r" % header
    with open(directory + "/public.pem", "rb") as f:
        key = serialization.load_pem_public_key(f.read())
    try:
        key.verify(b64url(parts[2]), (parts[0] + "." + parts[1]).encode(), padding.PKCS1v15(), hashes.SHA256())
    except Exception:
        return "bad signature"
    if claims.get("aud") != audience:
        return "aud %r" % claims.get("aud")
    if claims.get("iss") != args["issuer"]:
        return "iss %r" % claims.get("iss")
    if claims.get("scope") != "https://www.googleapis.com/auth/devstorage.read_write":
        return "scope %r" % claims.get("scope")
    if claims.get("exp", 0) - claims.get("iat", 0) != 3600 or abs(claims.get("iat", 0) - time.time()) > 60:
        return "times iat=%r exp=%r" % (claims.get("iat"), claims.get("exp"))
    return None

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def issue(self):
        time.sleep(args.get("delay", 0))
        kind = args.get("answer", "normal")
        with lock:
            token = "tok-%d" % (len(state["issued"]) + 1)
            state["issued"].append(token)
        body = {"access_token": token, "expires_in": args.get("expires_in", 3600), "token_type": "Bearer"}
        if kind == "badtoken":
            body["access_token"] = token + "\r\nX-Injected: yes"
        if kind == "badexpiry":
            body["expires_in"] = -5
        if kind == "huge":
            body["padding"] = "x" * 100000
        if kind == "notjson":
            self.answer(200, b"<html>" + token.encode() + b"</html>", "text/html")
        else:
            self.answer(200, json.dumps(body).encode())
        log({"method": "ISSUED", "path": self.path, "issued": token})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        grant = form.get("grant_type", [""])[0]
        entry = {"method": "POST", "path": self.path, "grant": grant,
                 "content_type": self.headers.get("Content-Type")}
        problem = None
        if self.path != "/token":
            problem = "path"
        elif grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            problem = check_assertion(form.get("assertion", [""])[0])
        elif grant == "refresh_token":
            for name in ("client_id", "client_secret", "refresh_token"):
                if form.get(name, [""])[0] != args.get(name):
                    problem = "wrong " + name
        else:
            problem = "grant"
        entry["problem"] = problem
        log(entry)
        if problem:
            return self.answer(400, json.dumps({"error": "invalid_grant", "error_description": problem}).encode())
        self.issue()

    def do_GET(self):
        auth = self.headers.get("Authorization")
        path = urllib.parse.urlparse(self.path).path
        log({"method": "GET", "path": path, "authorization": auth,
             "flavor": self.headers.get("Metadata-Flavor")})
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.answer(403, b"missing Metadata-Flavor")
            return self.issue()
        token = auth[len("Bearer "):] if auth and auth.startswith("Bearer ") else None
        with lock:
            state["resource_requests"] += 1
            first = state["resource_requests"] == 1
            if first and args.get("revoke_first") and token:
                state["revoked"].add(token)
            valid = token in state["issued"] and token not in state["revoked"]
        if not valid:
            return self.answer(401, b'{"error":{"code":401,"message":"Invalid Credentials"}}')
        if path.startswith("/storage/v1/"):
            with open(directory + "/object.json", "rb") as f:
                return self.answer(200, f.read())
        if path.startswith("/download/storage/v1/"):
            with open(directory + "/object.bin", "rb") as f:
                return self.answer(200, f.read(), "application/octet-stream")
        self.answer(404, b'{"error":{"code":404,"message":"Not Found"}}')

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""#
}
