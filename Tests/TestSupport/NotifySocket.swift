import Foundation

/// A datagram socket bound where `NOTIFY_SOCKET` will name it, as the service manager binds one: what a
/// worker under a `Type=notify` unit says (sd_notify(3)) is read here as systemd reads it.
public final class NotifySocket: @unchecked Sendable {
    public let descriptor: Int32
    /// The value for `NOTIFY_SOCKET`.
    public let name: String

    /// Bound at `path`, or (nil) at a fresh name in the abstract namespace.
    public init(path: String? = nil) throws {
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw TestServerError("socket: \(String(cString: strerror(errno)))") }
        name = path ?? "@jobctl-notify-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(name.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + (path == nil ? 0 : 1))
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
        }
        guard bound == 0 else { throw TestServerError("bind \(name): \(String(cString: strerror(errno)))") }
    }

    deinit { close(descriptor) }

    /// The next datagram, or nil when none came within `seconds`.
    public func receive(within seconds: Double) -> String? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(seconds * 1_000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4_096)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    /// Every datagram that comes within `seconds`.
    public func receiveAll(for seconds: Double) -> [String] {
        var messages: [String] = []
        let end = Date().addingTimeInterval(seconds)
        while case let left = end.timeIntervalSinceNow, left > 0 {
            if let message = receive(within: left) { messages.append(message) }
        }
        return messages
    }
}

/// The watchdog's pings (`WATCHDOG=1`) a `NotifySocket` receives, with the time each came, recorded by a
/// thread of its own from `init` until `stop()`.
public final class WatchdogPings: @unchecked Sendable {
    private let socket: NotifySocket
    private let lock = NSLock()
    private var times: [Date] = []
    private var ended = false
    private let done = DispatchSemaphore(value: 0)

    public init(_ socket: NotifySocket) {
        self.socket = socket
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            while !lock.withLock({ ended }) {
                guard let message = socket.receive(within: 0.05) else { continue }
                if message.split(separator: "\n").contains("WATCHDOG=1") {
                    let now = Date()
                    lock.withLock { times.append(now) }
                }
            }
        }
    }

    /// When each ping came, in order.
    public var received: [Date] { lock.withLock { times } }

    /// The longest time without a ping between `from` and `to`, counting from `from` to the first ping
    /// after it and from the last one to `to`.
    public func longestGap(from: Date, to: Date) -> TimeInterval {
        let inside = received.filter { $0 > from && $0 < to }
        let marks = [from] + inside + [to]
        return zip(marks, marks.dropFirst()).map { $1.timeIntervalSince($0) }.max() ?? to.timeIntervalSince(from)
    }

    /// Ends the recording thread.
    public func stop() {
        lock.withLock { ended = true }
        done.wait()
    }
}
