import Foundation
import TestSupport

/// nginx on 127.0.0.1 for the worker suite: WebDAV PUT, a rate-limited `/slow/` (so transfers are
/// still running when a test pauses, cancels or kills them) and a `/flaky/` that answers
/// 503 + Retry-After while a marker file exists. The access log records each request's Range header.
final class WorkerNginx: @unchecked Sendable {
    let directory: TemporaryDirectory
    let port: Int
    let process = Process()
    var root: String { directory.file("www") }
    var baseURL: String { "http://127.0.0.1:\(port)" }
    var accessLog: String { (try? String(contentsOfFile: directory.file("access.log"), encoding: .utf8)) ?? "" }

    init(slowRate: String = "8m", retryAfterSeconds: Int = 2) throws {
        directory = try TemporaryDirectory("nginx")
        port = freeLoopbackPort()
        let dir = directory.path
        try FileManager.default.createDirectory(atPath: "\(dir)/www/slow", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "\(dir)/www/flaky", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "\(dir)/tmp", withIntermediateDirectories: true)
        let user = getuid() == 0 ? "user root;" : ""
        let config = """
        \(user)
        worker_processes 1;
        pid \(dir)/nginx.pid;
        error_log \(dir)/error.log;
        events { worker_connections 256; }
        http {
            log_format ranges '$request_method $uri $status range=$http_range sent=$body_bytes_sent';
            access_log \(dir)/access.log ranges;
            client_body_temp_path \(dir)/tmp/body;
            proxy_temp_path \(dir)/tmp/proxy;
            fastcgi_temp_path \(dir)/tmp/fastcgi;
            uwsgi_temp_path \(dir)/tmp/uwsgi;
            scgi_temp_path \(dir)/tmp/scgi;
            server {
                listen 127.0.0.1:\(port);
                root \(dir)/www;
                location / {
                    dav_methods PUT DELETE;
                    create_full_put_path on;
                    client_max_body_size 0;
                }
                location /slow/ { limit_rate \(slowRate); }
                location /broken/ {
                    add_header Retry-After 1 always;
                    return 503;
                }
                location /flaky/ {
                    if (-f $document_root/flaky.fail) {
                        add_header Retry-After \(retryAfterSeconds) always;
                        return 503;
                    }
                }
            }
        }
        """
        try config.write(toFile: "\(dir)/nginx.conf", atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
        process.arguments = ["-p", dir, "-c", "\(dir)/nginx.conf", "-e", "\(dir)/error.log", "-g", "daemon off;"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        guard waitForPort(port, seconds: 10) else {
            let log = (try? String(contentsOfFile: "\(dir)/error.log", encoding: .utf8)) ?? ""
            throw WorkerTestError("nginx did not start on port \(port): \(log)")
        }
    }

    /// Creates or removes the marker that makes `/flaky/` answer 503.
    func setFlaky(_ flaky: Bool) throws {
        let marker = "\(root)/flaky.fail"
        if flaky {
            FileManager.default.createFile(atPath: marker, contents: Data("fail".utf8))
        } else {
            try? FileManager.default.removeItem(atPath: marker)
        }
    }

    func stop() {
        stopProcess(process)
        directory.remove()
    }

    deinit { stop() }
}

/// gcp-storage-emulator on 127.0.0.1 with a default bucket, storing on disk.
final class WorkerEmulator: @unchecked Sendable {
    let directory: TemporaryDirectory
    let port: Int
    let bucket: String
    let process = Process()
    var endpoint: String { "http://127.0.0.1:\(port)" }

    init(bucket: String = "jobs-bucket") throws {
        directory = try TemporaryDirectory("emulator")
        port = freeLoopbackPort()
        self.bucket = bucket
        let executable = "\(PackagePaths.venv)/bin/gcp-storage-emulator"
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw WorkerTestError("\(executable) is missing: run 'make test', which creates the venv with the test peers")
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["start", "--host", "127.0.0.1", "--port", "\(port)", "--default-bucket", bucket, "-q"]
        process.currentDirectoryURL = URL(fileURLWithPath: directory.path)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        guard waitForPort(port, seconds: 20) else { throw WorkerTestError("the storage emulator did not start on port \(port)") }
    }

    func stop() {
        stopProcess(process)
        directory.remove()
    }

    deinit { stop() }
}

/// Whether something accepts TCP connections on 127.0.0.1:port within `seconds`.
func waitForPort(_ port: Int, seconds: Double) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
        if result == 0 { return true }
        usleep(50_000)
    }
    return false
}

/// SIGTERM, then SIGKILL if the process is still there after two seconds (the emulator ignores SIGTERM).
func stopProcess(_ process: Process) {
    guard process.isRunning else { return }
    process.terminate()
    let deadline = Date().addingTimeInterval(2)
    while process.isRunning && Date() < deadline { usleep(20_000) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
}

/// A TCP listener on 127.0.0.1 that completes handshakes (the kernel does) but never reads or answers:
/// a server that hangs, on demand.
final class SilentListener: @unchecked Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            port = 0
            throw WorkerTestError("cannot listen on 127.0.0.1")
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(fd) }
}
