import Foundation
import JobModel
@testable import Storage
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A keep-alive connection on which the server sent more than its answer was reused, and the next
/// request read the bytes left there (the answer to no request of its own) as its answer: downloads in a
/// row "succeeded" each with the body of the request before.
@Suite("kept connections out of step with their server", .onTestThreads)
struct OutOfStepConnectionTests {
    @Test("HTTP: a second answer sent after the first (at once, or once the connection is idle) never becomes another request's",
          arguments: [0, 300])
    func smuggledAnswerIsNoOnesAnswer(delayMilliseconds: Int) async throws {
        let server = try SmugglingServer(extraAfterMilliseconds: delayMilliseconds)
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        func download(_ path: String) async throws -> String {
            let spec = JobSpec(kind: .downloadMemory, source: "\(server.baseURL)\(path)", maxSize: 1 << 20)
            return String(decoding: try #require(finished(await run(backend, spec)).data), as: UTF8.self)
        }
        #expect(try await download("/smuggle") == "hello")
        // The extra answer is on the connection, idle in libcurl's pool, before the next request.
        try await Task.sleep(for: .milliseconds(delayMilliseconds + 300))
        #expect(try await download("/file-b") == "GOOD/file-b")
        #expect(try await download("/file-c") == "GOOD/file-c")
        let served = server.served
        #expect(served.map(\.path) == ["/smuggle", "/file-b", "/file-c"], "\(served)")
        // The out-of-step connection was left; the healthy one after it was kept and reused.
        if served.count == 3 {
            #expect(served[1].connection != served[0].connection)
            #expect(served[2].connection == served[1].connection)
        }
    }

    @Test("HTTP: an upload after a second answer is sent on a new connection, and its own answer is read")
    func uploadAfterSmuggledAnswer() async throws {
        let server = try SmugglingServer(extraAfterMilliseconds: 300)
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let first = JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/smuggle", maxSize: 1 << 20)
        #expect(try finished(await run(backend, first)).data == Data("hello".utf8))
        try await Task.sleep(for: .milliseconds(600))
        let upload = JobSpec(kind: .uploadData, destination: "\(server.baseURL)/up.bin", data: Data("payload".utf8))
        _ = try finished(await run(backend, upload))
        let served = server.served
        #expect(served.first?.path == "/smuggle" && served.count >= 2, "\(served)")
        // Every request of the upload went out on a connection other than the one left out of step.
        #expect(served.dropFirst().allSatisfy { $0.connection != served[0].connection }, "\(served)")
    }
}

/// A keep-alive HTTP/1.1 server on 127.0.0.1 that answers `/smuggle` with `hello` and then, on the same
/// connection, a second complete answer (`BAD`) no request asked for, `extraAfterMilliseconds` later;
/// any other path `GOOD<path>`. No real server sends this on demand. Requests are read one at a time.
private final class SmugglingServer: Sendable {
    let port: Int
    var baseURL: String { "http://127.0.0.1:\(port)" }
    private let listener: Int32
    private let extraAfterMilliseconds: Int
    private let state = Mutex<(stopped: Bool, clients: [Int32], served: [(connection: Int, path: String)], connections: Int)>(
        (false, [], [], 0))

    init(extraAfterMilliseconds: Int) throws {
        self.extraAfterMilliseconds = extraAfterMilliseconds
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard socket >= 0, bound, listen(socket, 16) == 0 else {
            close(socket)
            throw TestServerError("the smuggling server could not listen: errno \(errno)")
        }
        listener = socket
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in acceptLoop() }.start()
    }

    /// Requests served so far: which connection (numbered from 1 as accepted) and path.
    var served: [(connection: Int, path: String)] { state.withLock { $0.served } }

    func stop() {
        state.withLock { state in
            guard !state.stopped else { return }
            state.stopped = true
            for client in state.clients { shutdown(client, Int32(SHUT_RDWR)) }
            shutdown(listener, Int32(SHUT_RDWR))
        }
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func readable(_ fd: Int32, milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, milliseconds) > 0
    }

    private func acceptLoop() {
        defer { close(listener) }
        while !stopped {
            guard readable(listener, milliseconds: 50) else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            let number = state.withLock { state -> Int? in
                guard !state.stopped else { return nil }
                state.clients.append(client)
                state.connections += 1
                return state.connections
            }
            guard let number else {
                close(client)
                return
            }
            Thread { [self] in serve(client, connection: number) }.start()
        }
    }

    private func serve(_ client: Int32, connection: Int) {
        defer {
            state.withLock { $0.clients.removeAll { $0 == client } }
            close(client)
        }
        var pending = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !stopped {
            guard let end = Self.headerEnd(pending) else {
                guard readable(client, milliseconds: 50) else { continue }
                let count = recv(client, &buffer, buffer.count, 0)
                guard count > 0 else { return }
                pending += buffer[0..<count]
                continue
            }
            let head = String(decoding: pending[..<end], as: UTF8.self)
            pending.removeFirst(end + 4)
            let lines = head.components(separatedBy: "\r\n")
            let path = lines[0].split(separator: " ").dropFirst().first.map(String.init) ?? "/"
            // A request body (an upload's) is read and dropped.
            var bodyLeft = lines.dropFirst().compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first ?? 0
            while bodyLeft > 0 {
                if !pending.isEmpty {
                    let taken = min(bodyLeft, pending.count)
                    pending.removeFirst(taken)
                    bodyLeft -= taken
                    continue
                }
                guard !stopped else { return }
                guard readable(client, milliseconds: 50) else { continue }
                let count = recv(client, &buffer, buffer.count, 0)
                guard count > 0 else { return }
                pending += buffer[0..<count]
            }
            state.withLock { $0.served.append((connection, path)) }
            if lines[0].hasPrefix("HEAD ") {
                guard send(client, Self.answer("")) else { return }
            } else if path.hasPrefix("/smuggle") {
                guard send(client, Self.answer("hello")) else { return }
                if extraAfterMilliseconds > 0 { usleep(UInt32(extraAfterMilliseconds) * 1000) }
                guard send(client, Self.answer("BAD")) else { return }
            } else {
                guard send(client, Self.answer("GOOD" + path)) else { return }
            }
        }
    }

    private static func answer(_ body: String) -> [UInt8] {
        Array("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
    }

    private static func headerEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        return (0...(bytes.count - 4)).first { bytes[$0] == 13 && bytes[$0 + 1] == 10 && bytes[$0 + 2] == 13 && bytes[$0 + 3] == 10 }
    }

    private func send(_ client: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }
}
