import Foundation
import Synchronization
@testable import JobModel
@testable import Storage
#if canImport(Glibc)
import Glibc
#endif

// MARK: - httplive: whole answers from a server, through libcurl and the backends

/// A real transfer (`StorageRouter.perform`, as the worker runs a job) against a server on 127.0.0.1
/// that answers each request with the next raw answer of the input, then closes the connection: libcurl
/// reads the status line and headers, `CurlExchange.receiveHeader` keeps them (and refuses a
/// `Content-Length` that frames nothing), and the HTTP or GCS backend reads the answer (ranges, hashes,
/// lengths, JSON object resources, upload session answers). The first byte picks the job; the rest is
/// the answers, separated by NUL bytes (a request past the last gets the last again).
let httpLiveTarget = FuzzTarget(
    name: "httplive",
    summary: "StorageRouter.perform of a job (first byte) against a 127.0.0.1 server answering with the input's raw answers (NUL-separated)",
    setUp: { LiveServer.shared.start() },
    run: { input in
        let port = LiveServer.shared.port
        let answers = input.bytes.dropFirst().split(separator: 0, omittingEmptySubsequences: false).map { Array($0) }
        LiveServer.shared.serve(answers)
        let http = "http://127.0.0.1:\(port)/dir/file.txt"
        let download = "\(Harness.scratch)/downloads/out.bin"
        let specs: [JobSpec] = [
            JobSpec(kind: .downloadMemory, source: http, maxSize: 1 << 20),
            JobSpec(kind: .downloadFile, source: http, destination: download),
            JobSpec(kind: .getMetadata, source: http),
            JobSpec(kind: .uploadData, destination: http, data: Data("hello".utf8)),
            JobSpec(kind: .downloadMemory, source: "gs://bucket/dir/file.txt", maxSize: 1 << 20),
            JobSpec(kind: .downloadFile, source: "gs://bucket/dir/file.txt", destination: download),
            JobSpec(kind: .getMetadata, source: "gs://bucket/dir/file.txt"),
            JobSpec(kind: .uploadData, destination: "gs://bucket/dir/file.txt", data: Data("hello".utf8)),
            JobSpec(kind: .uploadData, destination: "gs://bucket/dir/file.txt", data: Data("hello".utf8), ifExists: .fail),
            JobSpec(kind: .fetchURL, source: "gs://bucket/dir/file.txt"),
            JobSpec(kind: .updateMetadata, destination: "gs://bucket/dir/file.txt", metadata: UploadMetadata(contentType: "text/plain")),
            JobSpec(kind: .delete, destination: "gs://bucket/dir/file.txt"),
            JobSpec(kind: .downloadFile, source: http, destination: download, checksums: [.md5]),
            JobSpec(kind: .uploadData, destination: "gs://bucket/dir/file.txt", data: Data(repeating: 7, count: 300), checksums: [.md5]),
        ]
        let spec = specs[Int(input.selector) % specs.count]
        try? FileManager.default.removeItem(atPath: "\(Harness.scratch)/downloads")
        try? FileManager.default.createDirectory(atPath: "\(Harness.scratch)/downloads", withIntermediateDirectories: true)
        let done = DispatchSemaphore(value: 0)
        LiveServer.shared.router.perform(spec, resumingFrom: nil, control: TransferControl(jobID: "fuzz"), report: { _ in }) { result in
            switch result {
            case .success(let outcome): Harness.note("\(spec.kind.rawValue) \(spec.source ?? spec.destination ?? ""): \(outcome)")
            case .failure(let error): Harness.note("\(spec.kind.rawValue) \(spec.source ?? spec.destination ?? ""): \(error.description)")
            }
            done.signal()
        }
        done.wait()
    })

/// The server of `httplive`: one thread accepting on 127.0.0.1, one connection at a time.
final class LiveServer: @unchecked Sendable {
    static let shared = LiveServer()
    private(set) var port: UInt16 = 0
    private var listener: Int32 = -1
    private let state = Mutex<(answers: [[UInt8]], next: Int)>(([], 0))
    private(set) lazy var router: StorageRouter = {
        var configuration = StorageConfiguration(gcsEndpoint: "http://127.0.0.1:\(port)", usesEmulator: true, localBucketsDirectory: "\(Harness.scratch)/buckets",
                                                 stallTimeout: 2, connectTimeout: 2)
        configuration.firebaseEndpoint = "http://127.0.0.1:\(port)"
        return StorageRouter(configuration: configuration)
    }()

    func serve(_ answers: [[UInt8]]) {
        state.withLock { $0 = (answers, 0) }
    }

    private func nextAnswer() -> [UInt8] {
        state.withLock { state in
            guard !state.answers.isEmpty else { return [] }
            let answer = state.answers[min(state.next, state.answers.count - 1)]
            state.next += 1
            return answer
        }
    }

    func start() {
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        precondition(bound == 0 && listen(listener, 64) == 0, "cannot listen on 127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(listener, $0, &length) } }
        port = UInt16(bigEndian: address.sin_port)
        _ = router
        let thread = Thread { [self] in
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 { continue }   // EINTR among others: wait again
                handle(connection)
            }
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Reads one request (headers, and a body of its Content-Length), answers, and closes.
    private func handle(_ connection: Int32) {
        defer { close(connection) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var headerEnd: Int?
        while headerEnd == nil {
            let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return }
            request += buffer[..<count]
            if let range = request.firstRange(of: Array("\r\n\r\n".utf8)) { headerEnd = range.upperBound }
        }
        let head = String(decoding: request[..<headerEnd!], as: UTF8.self).lowercased()
        var bodyLength = 0
        for line in head.split(separator: "\r\n") where line.hasPrefix("content-length:") {
            bodyLength = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        while request.count - headerEnd! < bodyLength {
            let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            request += buffer[..<count]
        }
        let answer = nextAnswer()
        var offset = 0
        while offset < answer.count {
            let sent = answer.withUnsafeBytes { send(connection, $0.baseAddress! + offset, answer.count - offset, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            if sent <= 0 { break }
            offset += sent
        }
        shutdown(connection, Int32(SHUT_WR))
        // Whatever else the client sent is read first: a close with unread bytes resets the connection,
        // and the client could lose the answer.
        _ = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
    }
}
