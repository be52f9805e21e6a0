import Foundation
import Testing
import TestSupport

/// nginx for the worker suite: besides WebDAV PUT and ranged GET at `/`, a rate-limited `/slow/` (so
/// transfers are still running when a test pauses, cancels or kills them), `/flaky/` answering
/// 503 + Retry-After while a marker file exists, and `/broken/` always answering 503.
func startWorkerNginx(slowRate: String = "8m", retryAfterSeconds: Int = 2) throws -> NginxServer {
    let nginx = try NginxServer.start(extraServerConfig: """
    location /slow/ {
        set $limit_rate \(slowRate);
        if (-f $ROOT/slow.fast) { set $limit_rate 0; }
    }
    location /flaky/ {
        if (-f $ROOT/flaky.fail) {
            add_header Retry-After \(retryAfterSeconds) always;
            return 503;
        }
    }
    location /broken/ {
        add_header Retry-After 1 always;
        return 503;
    }
    """)
    for folder in ["slow", "flaky", "broken"] {
        try FileManager.default.createDirectory(atPath: "\(nginx.root)/\(folder)", withIntermediateDirectories: true)
    }
    return nginx
}

extension NginxServer {
    /// Creates or removes the marker that lifts `/slow/`'s rate limit for requests from then on: a test
    /// keeps a transfer slow (a wide window for its pause, cancel or kill) and lets the rest run fast.
    func setFast(_ fast: Bool) {
        let marker = "\(root)/slow.fast"
        if fast {
            #expect(FileManager.default.createFile(atPath: marker, contents: Data("fast".utf8)), "could not create a file the test needs")
        } else {
            try? FileManager.default.removeItem(atPath: marker)
        }
    }

    /// Creates or removes the marker that makes `/flaky/` answer 503.
    func setFlaky(_ flaky: Bool) {
        let marker = "\(root)/flaky.fail"
        if flaky {
            #expect(FileManager.default.createFile(atPath: marker, contents: Data("fail".utf8)), "could not create a file the test needs")
        } else {
            try? FileManager.default.removeItem(atPath: marker)
        }
    }

    /// Whether the access log shows a ranged GET of `path` answered 206 starting at byte `offset`.
    func servedRange(_ path: String, from offset: Int64) -> Bool {
        !accessLogLines(atLeast: 1) { line in
            line.contains("\"GET \(path) HTTP/1.1\" 206 ") && line.contains("\"bytes=\(offset)-\"")
        }.isEmpty
    }
}

/// A TCP listener on 127.0.0.1 that completes handshakes (the kernel does) but never reads or answers:
/// a server that hangs, on demand.
final class SilentListener: @unchecked Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        guard let bound = bindToLoopback(fd), listen(fd, 16) == 0 else {
            port = 0
            throw WorkerTestError("cannot listen on 127.0.0.1")
        }
        port = bound
    }

    func close() { _ = Glibc.close(fd) }
}
