import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Why a test server could not be started (missing tool, did not come up).
public struct TestServerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
public func loopbackPortAnswers(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    return result == 0
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port` (from /proc/net/tcp and the
/// process's descriptors).
func listensOn(pid: Int32, port: Int) -> Bool {
    // Read to the end in a loop: procfs files report size 0 and come a page at a time.
    guard let handle = FileHandle(forReadingAtPath: "/proc/net/tcp") else { return true }
    defer { try? handle.close() }
    let table = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    let wanted = String(format: "0100007F:%04X", port)
    var inodes: Set<String> = []
    for line in table.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        guard fields.count > 9, fields[1] == wanted, fields[3] == "0A" else { continue }
        inodes.insert(String(fields[9]))
    }
    guard !inodes.isEmpty, let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return false }
    return descriptors.contains { descriptor in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(descriptor)"),
              target.hasPrefix("socket:[") else { return false }
        return inodes.contains(String(target.dropFirst("socket:[".count).dropLast()))
    }
}

/// A server's port was taken by another process between picking it and binding it.
struct PortTaken: Error {
    let port: Int
}

/// Starts a server, picking a fresh port again (up to 5 times) when another one took the last.
func retryingTakenPorts<T>(_ start: () throws -> T) throws -> T {
    for _ in 1..<5 {
        do { return try start() } catch is PortTaken { continue }
    }
    return try start()
}

/// A child process serving on a loopback port, killed and reaped by `stop()`.
public class LoopbackServer: @unchecked Sendable {
    // @unchecked: the process is started in init and only stopped afterwards (once, under a lock).
    public let port: Int
    public let directory: TemporaryDirectory
    private let process: Process
    private let lock = NSLock()
    private var stopped = false
    /// The signal `stop()` sends first.
    private let stopSignal: Int32
    /// What the server is (for messages).
    private let name: String

    /// `http://127.0.0.1:PORT`
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    init(executable: String, arguments: [String], port: Int, directory: TemporaryDirectory, name: String,
         stopSignal: Int32 = SIGTERM) throws {
        self.stopSignal = stopSignal
        self.name = name
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            directory.remove()
            throw TestServerError("\(name) is not installed at \(executable); the storage tests need it (create the test venv / install it)")
        }
        self.port = port
        self.directory = directory
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let log = FileHandle(forWritingAtPath: directory.file("server.log")) ?? FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Generous: a Python server importing its packages on a machine busy with the whole suite (2
        // cores, 8 tests at once) once took longer than 20 s; a server that dies says so at once.
        let deadline = Date().addingTimeInterval(60)
        // The port was free when picked, but another test's server may have taken it since: only our
        // own process listening on it counts (otherwise this test would talk to the other server).
        while !(loopbackPortAnswers(port) && listensOn(pid: process.processIdentifier, port: port)) {
            if !process.isRunning && loopbackPortAnswers(port) {
                stop()
                throw PortTaken(port: port)
            }
            if !process.isRunning || Date() > deadline {
                let output = (try? String(contentsOfFile: directory.file("server.log"), encoding: .utf8)) ?? ""
                let how = process.isRunning ? "still not listening after 60 s"
                                            : "exited with status \(process.terminationStatus) (reason \(process.terminationReason.rawValue))"
                stop()
                throw TestServerError("\(name) did not start on port \(port) (\(how)): \(output.suffix(2000))")
            }
            usleep(20_000)
        }
    }

    /// Stops the server (SIGTERM by default, so nginx's master also stops its workers; SIGKILL after
    /// 5 s) and reaps it.
    public func stop(removeFiles: Bool = true) {
        lock.lock()
        defer { lock.unlock() }
        guard !stopped else { return }
        stopped = true
        if !process.isRunning {
            // Nothing but stop() ends these servers: one that ended by itself (or was signalled by
            // someone else) is what a test's connection failure needs explained, so say it.
            let how = process.terminationReason == .uncaughtSignal ? "killed by signal" : "exited with status"
            let log = (try? String(contentsOfFile: directory.file("server.log"), encoding: .utf8)) ?? ""
            let errors = (try? String(contentsOfFile: directory.file("error.log"), encoding: .utf8)) ?? ""
            FileHandle.standardError.write(Data("""
                test server \(name) on port \(port) (pid \(process.processIdentifier)) ended before stop(): \
                \(how) \(process.terminationStatus); its output: \(log.suffix(1000)) \(errors.suffix(1000))

                """.utf8))
        }
        if process.isRunning {
            kill(process.processIdentifier, stopSignal)
            let deadline = Date().addingTimeInterval(5)
            while process.isRunning && Date() < deadline { usleep(10_000) }
            if process.isRunning { process.signalTree(SIGKILL) }
        }
        process.waitForExit(seconds: 30)
        if removeFiles { directory.remove() }
    }

    deinit { stop() }
}

/// gcp-storage-emulator from the test venv, with a default bucket, storing under a temporary directory.
public final class EmulatorServer: LoopbackServer, @unchecked Sendable {
    public let bucket: String

    /// Starts an emulator on a free port; fails with a clear message when the venv is missing.
    /// A port another test's server took meanwhile is retried with a fresh one.
    public static func start(bucket: String = "test-bucket") throws -> EmulatorServer {
        try retryingTakenPorts {
            let directory = try TemporaryDirectory("jobctl-gcs")
            try FileManager.default.createDirectory(atPath: directory.file("data"), withIntermediateDirectories: true)
            return try EmulatorServer(bucket: bucket, directory: directory)
        }
    }

    private init(bucket: String, directory: TemporaryDirectory) throws {
        self.bucket = bucket
        let port = freeLoopbackPort()
        try super.init(executable: "\(PackagePaths.venv)/bin/gcp-storage-emulator",
                       arguments: ["-d", directory.file("data"), "start", "--host", "127.0.0.1", "--port", "\(port)",
                                   "--default-bucket", bucket, "-q"],
                       port: port, directory: directory, name: "gcp-storage-emulator",
                       // Its HTTP thread ignores SIGTERM; it writes every request to disk before answering.
                       stopSignal: SIGKILL)
    }
}

/// nginx serving (GET with Range/If-Range/ETag) and accepting (WebDAV PUT/DELETE) files under `root`.
public final class NginxServer: LoopbackServer, @unchecked Sendable {
    /// The directory served at `/`.
    public var root: String { directory.file("root") }

    public static let executable = "/usr/sbin/nginx"

    /// The certificate served when this is an HTTPS server, else nil.
    public let tls: TLSServerCertificate?

    /// `https://127.0.0.1:PORT` for an HTTPS server, else `http://127.0.0.1:PORT`.
    public override var baseURL: String { "\(tls == nil ? "http" : "https")://127.0.0.1:\(port)" }

    /// Starts nginx; `extraServerConfig` is inserted into the `server` block before `location /` and
    /// `extraHTTPConfig` into the `http` block (e.g. a `log_format`); `$ROOT` in either is replaced by the
    /// served directory. With `tls`, nginx speaks HTTPS (only) with that certificate and key, and with
    /// `http2` too it offers HTTP/2 (ALPN), which libcurl then takes.
    public static func start(extraServerConfig: String = "", extraHTTPConfig: String = "",
                             tls: TLSServerCertificate? = nil, http2: Bool = false) throws -> NginxServer {
        try retryingTakenPorts {
            let directory = try TemporaryDirectory("jobctl-nginx")
            try FileManager.default.createDirectory(atPath: directory.file("root"), withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: directory.file("tmp"), withIntermediateDirectories: true)
            return try NginxServer(directory: directory, extraServerConfig: extraServerConfig, extraHTTPConfig: extraHTTPConfig,
                                   tls: tls, http2: http2)
        }
    }

    private init(directory: TemporaryDirectory, extraServerConfig: String, extraHTTPConfig: String,
                 tls: TLSServerCertificate?, http2: Bool) throws {
        self.tls = tls
        let port = freeLoopbackPort()
        let dir = directory.path
        let listen = tls.map { """
            listen 127.0.0.1:\(port) ssl\(http2 ? " http2" : "");
                    ssl_certificate \($0.certificatePath);
                    ssl_certificate_key \($0.keyPath);
            """ } ?? "listen 127.0.0.1:\(port);"
        let config = """
        \(getuid() == 0 ? "user root;" : "")
        daemon off;
        worker_processes 1;
        pid \(dir)/nginx.pid;
        error_log \(dir)/error.log;
        events { worker_connections 256; }
        http {
            log_format transfers '$remote_addr [$time_local] "$request" $status $body_bytes_sent "$http_range" $connection $connection_requests';
            access_log \(dir)/access.log transfers;
            client_body_temp_path \(dir)/tmp/body;
            proxy_temp_path \(dir)/tmp/proxy;
            fastcgi_temp_path \(dir)/tmp/fastcgi;
            uwsgi_temp_path \(dir)/tmp/uwsgi;
            scgi_temp_path \(dir)/tmp/scgi;
            sendfile on;
            \(extraHTTPConfig.replacingOccurrences(of: "$ROOT", with: "\(dir)/root"))
            server {
                \(listen)
                root \(dir)/root;
                \(extraServerConfig.replacingOccurrences(of: "$ROOT", with: "\(dir)/root"))
                location / {
                    dav_methods PUT DELETE;
                    create_full_put_path on;
                    client_max_body_size 0;
                }
            }
        }
        """
        try config.write(toFile: "\(dir)/nginx.conf", atomically: true, encoding: .utf8)
        try super.init(executable: Self.executable, arguments: ["-p", dir, "-c", "\(dir)/nginx.conf", "-e", "\(dir)/error.log"],
                       port: port, directory: directory, name: "nginx")
    }

    /// nginx's access log, one request a line:
    /// `ADDR [TIME] "REQUEST" STATUS BODY_BYTES "RANGE" CONNECTION_ID REQUESTS_ON_CONNECTION`.
    public var accessLog: String { (try? String(contentsOfFile: directory.file("access.log"), encoding: .utf8)) ?? "" }

    /// The access log once every request nginx answered before this call has its line: for a check that a
    /// request did NOT come. Read at once, the log could lack the line of one that did (nginx writes it
    /// after the response, which the client may already hold), and the check pass whatever happened. A
    /// marker request (curl, straight to the server, no proxy) follows them; its line comes after theirs,
    /// since nginx's one worker logs each request before it reads the next. The marker's own line is in
    /// the text returned (its path is `/.log-marker-…`). Throws when the marker's line never comes (the
    /// server stopped, or refused the marker before logging it): the log then settles nothing, and a check
    /// that a request is absent from it would pass whatever happened.
    public func settledAccessLog() throws -> String {
        let marker = "/.log-marker-\(UUID().uuidString)"
        _ = try? runProcess("/usr/bin/curl", ["-sk", "--noproxy", "*", "-o", "/dev/null", "--max-time", "5", baseURL + marker])
        guard !accessLogLines(atLeast: 1, matching: { $0.contains(marker) }).isEmpty else {
            throw TestServerError("the marker request \(marker) never reached nginx's access log: it cannot tell which requests came")
        }
        return accessLog
    }

    /// The access log's lines that `matching` accepts, once there are at least `count` of them. nginx writes
    /// a request's line after it has sent the response, so a client can be done before the line is there:
    /// this polls for up to `seconds`, then returns what there is (the caller's expectation then fails).
    public func accessLogLines(atLeast count: Int, seconds: Double = 5,
                               matching: (Substring) -> Bool = { _ in true }) -> [Substring] {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let lines = accessLog.split(separator: "\n").filter(matching)
            if lines.count >= count || Date() >= deadline { return lines }
            usleep(20_000)
        }
    }
}

/// Peak resident memory of this process so far (`VmHWM` in /proc/self/status), in bytes.
public func peakResidentBytes() -> Int64 {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        let digits = line.split(separator: " ").compactMap { Int64($0) }.first ?? 0
        return digits * 1024
    }
    return 0
}

/// Current resident memory (`VmRSS`), in bytes.
public func residentBytes() -> Int64 {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return (line.split(separator: " ").compactMap { Int64($0) }.first ?? 0) * 1024
    }
    return 0
}

/// Writes `size` bytes of a deterministic, non-repeating-per-block pattern quickly (1 MiB blocks, each
/// stamped with its index so a misplaced block changes the checksum).
public func writePatternFile(_ path: String, size: Int64, seed: UInt8 = 7) throws {
    guard FileManager.default.createFile(atPath: path, contents: nil),
          let handle = FileHandle(forWritingAtPath: path) else { throw TestServerError("cannot create \(path)") }
    defer { try? handle.close() }
    let blockSize = 1 << 20
    var block = [UInt8](repeating: 0, count: blockSize)
    for i in 0..<blockSize { block[i] = UInt8(truncatingIfNeeded: i &* 31 &+ Int(seed) &+ (i >> 8)) }
    var written: Int64 = 0
    var index: UInt64 = 0
    while written < size {
        withUnsafeBytes(of: index.bigEndian) { stamp in
            for j in 0..<8 { block[j] = stamp[j] }
        }
        let count = Int(min(Int64(blockSize), size - written))
        try handle.write(contentsOf: block[0..<count])
        written += Int64(count)
        index += 1
    }
}

/// Deterministic pseudo-random bytes (xorshift), for small payloads that must not compress or repeat.
public func patternData(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> Data {
    var state = seed | 1
    var bytes = [UInt8](repeating: 0, count: count)
    for i in 0..<count {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[i] = UInt8(truncatingIfNeeded: state)
    }
    return Data(bytes)
}

/// A small tmpfs mounted at a new folder `path` (needs root), to fill a filesystem on purpose; `unmount`
/// when done (a test that crashes leaves it mounted: `mount | grep` finds it).
public struct SmallFilesystem {
    public let path: String

    /// Makes `path` and mounts a tmpfs of `size` (`1m`, `8m`) there.
    public init(at path: String, size: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mount = try runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
        guard mount.status == 0 else { throw TestServerError("mount failed: \(mount.stderr)") }
        self.path = path
    }

    public func unmount() {
        _ = try? runProcess("/bin/umount", [path])
    }
}
