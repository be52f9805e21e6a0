import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "jobctl-test") throws {
        let base = FileManager.default.temporaryDirectory.path
        let path = "\(base)/\(label)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        self.path = path
    }

    /// A path inside the directory.
    public func file(_ name: String) -> String { "\(path)/\(name)" }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Where the package lives (found from this source file), for the built binary, `.venv` and fixtures.
public enum PackagePaths {
    public static var root: String {
        var url = URL(fileURLWithPath: #filePath)
        // Tests/TestSupport/TestSupport.swift → package root
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }

    /// The Python virtual environment with the test peers (`make test` creates it).
    public static var venv: String {
        ProcessInfo.processInfo.environment["JOBCTL_TEST_VENV"] ?? "\(root)/.venv"
    }

    /// The built `jobctl` binary: `JOBCTL_BIN`, else the debug build under `.build`.
    public static var jobctlBinary: String {
        if let explicit = ProcessInfo.processInfo.environment["JOBCTL_BIN"] { return explicit }
        let scratch = ProcessInfo.processInfo.environment["JOBCTL_SCRATCH"] ?? "\(root)/.build"
        return "\(scratch)/debug/jobctl"
    }
}

/// The result of running a program to completion.
public struct ProcessOutput: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// Runs a program with arguments, optional stdin and environment additions, and waits for it — at most
/// `seconds`: a program still running then (a hung command, or its output held open by something it
/// started) is killed with what it started, an issue is recorded and `ProcessTimeout` thrown, so a hang
/// fails its test instead of the run.
@discardableResult
public func runProcess(_ executable: String, _ arguments: [String], stdin: String? = nil,
                       environment: [String: String] = [:], currentDirectory: String? = nil,
                       seconds: Double = 300, sourceLocation: SourceLocation = #_sourceLocation) throws -> ProcessOutput {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (key, value) in environment { env[key] = value }
    process.environment = env
    if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
    let outPipe = Pipe(), errPipe = Pipe(), inPipe = Pipe()
    process.standardOutput = outPipe
    process.standardError = errPipe
    process.standardInput = inPipe
    try process.run()
    if let stdin { inPipe.fileHandleForWriting.write(Data(stdin.utf8)) }
    try inPipe.fileHandleForWriting.close()
    // Read both pipes concurrently so a chatty child cannot block on a full pipe, each on a thread of
    // its own (see `startThread`), while this one keeps the time.
    let outBox = OutputBox(), errBox = OutputBox()
    let read = DispatchSemaphore(value: 0)
    startThread {
        outBox.data = outPipe.fileHandleForReading.readDataToEndOfFile()
        read.signal()
    }
    startThread {
        errBox.data = errPipe.fileHandleForReading.readDataToEndOfFile()
        read.signal()
    }
    let deadline = DispatchTime.now() + .milliseconds(Int(seconds * 1000))
    if read.wait(timeout: deadline) == .timedOut || read.wait(timeout: deadline) == .timedOut {
        let killed = process.signalTree(SIGKILL)
        let command = ([executable] + arguments).joined(separator: " ").prefix(400)
        Issue.record("\(command) did not end within \(Int(seconds)) s; killed with what it started (\(killed))",
                     sourceLocation: sourceLocation)
        throw ProcessTimeout(command: String(command), seconds: seconds)
    }
    // Its output ended; the program itself may still be on its way out.
    guard process.waitForExit(seconds: 60, sourceLocation: sourceLocation) else {
        throw ProcessTimeout(command: ([executable] + arguments).joined(separator: " "), seconds: seconds)
    }
    return ProcessOutput(status: process.terminationStatus,
                         stdout: String(decoding: outBox.data, as: UTF8.self),
                         stderr: String(decoding: errBox.data, as: UTF8.self))
}

/// `runProcess`'s program did not end within its limit.
public struct ProcessTimeout: Error, CustomStringConvertible {
    public let command: String
    public let seconds: Double
    public var description: String { "\(command) did not end within \(Int(seconds)) s" }
}

private final class OutputBox: @unchecked Sendable {
    var data = Data()
}

/// Runs `body` on a new thread of its own. A test that blocks (a read until a child exits, a semaphore
/// wait, a sleep) must not block a Dispatch global-queue thread: Linux's libdispatch keeps that pool
/// near one thread a core and replaces a blocked thread only slowly, so under the full suite's load a
/// block queued there started seconds late — a `jobctl` run's stderr read waited 10 s and more, long
/// enough for a slow download that a test meant to pause to finish first.
public func startThread(_ body: @escaping @Sendable () -> Void) {
    let thread = Thread(block: body)
    thread.stackSize = 1 << 20
    thread.start()
}

/// Waits, off the cooperative pool, for `body` (which may block) on a thread of its own.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        startThread { continuation.resume(returning: body()) }
    }
}

/// A TCP port on 127.0.0.1 where nothing listens, for as long as this value lives: a socket is bound to it
/// and never listens, so a connection is refused (RST) and no other test's server can take the port
/// meanwhile (the socket does not set SO_REUSEADDR). `freeLoopbackPort()` releases its port at once, so a
/// server started by a concurrent test could answer there instead.
public final class ClosedLoopbackPort: @unchecked Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let bound = fd >= 0 ? bindToLoopback(fd) : nil
        precondition(bound != nil, "could not bind a loopback port: errno \(errno)")
        descriptor = fd
        port = bound ?? 0
    }

    deinit { close(descriptor) }

    /// `127.0.0.1:PORT`.
    public var hostAndPort: String { "127.0.0.1:\(port)" }
}

/// Binds `fd` to 127.0.0.1 on a port the kernel chooses and returns that port; nil when bind fails
/// (`errno` says why). The one place the tests' own sockets pick a loopback port.
public func bindToLoopback(_ fd: Int32) -> Int? {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    guard bound == 0 else { return nil }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// A free TCP port on 127.0.0.1 for a test server (bound then released), below the kernel's ephemeral
/// range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 here): a port the kernel chose was one
/// an outgoing connection of another test (curl, libpq, the worker) could take as its own local port
/// before the server bound it, and the server then failed with "Address already in use" (a metrics
/// server), or an emulator that could not bind never listened. Falls back to a kernel-chosen port when
/// none of the tries is free.
public func freeLoopbackPort() -> Int {
    let (low, _) = ephemeralPortRange()
    let range = 10_000...max(10_001, min(low, 65_536) - 1)
    for _ in 0..<(low > 11_000 ? 64 : 0) {
        let candidate = Int.random(in: range)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { break }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(candidate).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
        if bound == 0 { return candidate }
    }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    return bindToLoopback(fd) ?? 0
}

/// The kernel's range of ports for outgoing connections' local ends (32768–60999 when it cannot be read).
private func ephemeralPortRange() -> (Int, Int) {
    guard let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8) else {
        return (32_768, 60_999)
    }
    let numbers = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { Int($0) }
    return numbers.count == 2 ? (numbers[0], numbers[1]) : (32_768, 60_999)
}

/// Sends `signal` to the child `process` only while it has not ended. Process ids are reused: this
/// kind of machine hands them out up to 32,768 (`/proc/sys/kernel/pid_max`), a test run creates tens of
/// thousands of processes and threads, and Foundation reaps an ended child at once, so the id of a
/// child that has already ended can name another test's server a moment later (an nginx worker killed
/// that way answers its client with nothing). Returns whether the signal was sent.
@discardableResult
public func signalIfRunning(_ process: Process, _ signal: Int32) -> Bool {
    guard process.isRunning else { return false }
    return kill(process.processIdentifier, signal) == 0
}

/// `signalIfRunning` for a child started without Foundation (`posix_spawn`): signalled only while it is
/// this process's child and has not ended (`waitpid` with `WNOHANG` answers 0). An ended child that was
/// reaped, by us or by anyone, answers otherwise, and its id may name another process by now.
@discardableResult
public func signalChildIfRunning(_ pid: pid_t, _ signal: Int32) -> Bool {
    guard waitpid(pid, nil, WNOHANG) == 0 else { return false }
    return kill(pid, signal) == 0
}

/// The shortest prefix of `id` (6 characters at least, as ids resolve) that no other of `ids` starts
/// with: ids one process makes in one millisecond differ only near their end.
public func uniquePrefix(of id: String, among ids: [String]) -> String {
    let common = ids.filter { $0 != id }.map { zip($0, id).prefix { $0 == $1 }.count }.max() ?? 0
    return String(id.prefix(max(6, common + 1)))
}
