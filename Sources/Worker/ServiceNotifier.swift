import CFileSystem
import Foundation
import JobModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Tells the service manager how the worker is doing, by the systemd notification protocol: a unit
/// with `Type=notify` counts the worker started only once it says `READY=1` (its database open, its
/// metrics endpoint bound, `worker_started` logged), so `systemctl start` waits for that and fails when
/// the worker stops first; `STOPPING=1` at the first SIGTERM; `STATUS=` what it has done, which
/// `systemctl status` shows; and, with `WatchdogSec=`, `WATCHDOG=1` from the worker's loop at half the
/// interval, so a worker whose loop hangs is killed and restarted instead of holding its place silent.
///
/// A turn of the loop may wait on the store for longer than any interval a unit sets, by design: a
/// PostgreSQL answer is waited for up to the lease (`--lease 5m` waits 5 minutes for a silent server), an
/// SQLite lock up to the busy timeout (30 s), and a call queued behind others on the store's one thread
/// waits for theirs too. Killed there (`WatchdogSec=3min` and a partition; `WatchdogSec=20s` and another
/// process writing), a worker that was about to recover lost its transfers' progress in flight. So while
/// the loop is in a turn and the store's thread has been held at least a moment in a call still within
/// the limits the store sets itself (`feedWhileWaiting`, `JobStore.isWaitingWithinBounds`), a thread of
/// this notifier pings for it. Capping the store's waits below the interval instead would not bound the
/// turn: one turn makes several calls, each queued behind the jobs' own, and cut waits fail the jobs'
/// writes as well. A loop hung anywhere else, or on a call past its store's limits (a wait nothing
/// bounds), still stops the pings; one hung while the store really is held (a partition) is killed once
/// the store's calls come back within a moment.
///
/// The protocol is one datagram of `KEY=value` lines to the Unix socket `NOTIFY_SOCKET` names (a path,
/// or `@name` in the abstract namespace); `WATCHDOG_USEC` is the watchdog's interval, for this process
/// only when `WATCHDOG_PID` is unset or names it. No library is needed. A datagram that cannot be sent
/// (the manager restarted, its socket full) is dropped: the next one says as much.
///
/// See sd_notify(3) and systemd.service(5) (`Type=notify`, `WatchdogSec=`).
public final class ServiceNotifier: Sendable {
    /// The variables the protocol reads: `main` takes them out of the environment before any thread
    /// starts (`takeEnvironment`), so that no command this process runs (a token command) can speak for it.
    public static let variables = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"]

    private let socket: Int32
    private let address: sockaddr_un
    private let addressLength: socklen_t
    /// Half the watchdog's interval, in milliseconds (nil: no watchdog).
    public let watchdogEveryMs: Int64?
    private struct Sent {
        var watchdogAtMs: Int64?
        var status: String?
        var statusAtMs: Int64?
        /// Set by `stopping`: the stop's status stands until the process exits.
        var stopping = false
    }
    private let sent = Mutex(Sent())

    /// How often a changed `STATUS=` is sent at most.
    static let statusEveryMs: Int64 = 1_000

    /// The notifier `environment` asks for (nil: `NOTIFY_SOCKET` is unset or empty, as outside a
    /// `Type=notify` unit); `pid` is this process's, for `WATCHDOG_PID`. Throws a message saying what is
    /// wrong with a variable that is set but unusable: a `Type=notify` unit whose worker cannot say it is
    /// ready would be killed at the start timeout with nothing said.
    public static func fromEnvironment(_ environment: [String: String], pid: Int32 = getpid()) throws(WorkerError) -> ServiceNotifier? {
        guard let target = environment["NOTIFY_SOCKET"], !target.isEmpty else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        var bytes = Array(target.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        guard abstract || bytes.first == UInt8(ascii: "/") else {
            throw Self.unusable("NOTIFY_SOCKET", target, "is neither an absolute path nor an abstract socket name (@name)")
        }
        guard !bytes.contains(0), bytes.count > 1 else { throw Self.unusable("NOTIFY_SOCKET", target, "is not a socket name") }
        // A path needs its terminating NUL; an abstract name's leading NUL takes the `@`'s place.
        guard bytes.count + (abstract ? 0 : 1) <= capacity else {
            throw Self.unusable("NOTIFY_SOCKET", target, "is longer than a Unix socket address holds (\(capacity - 1) bytes)")
        }
        if abstract { bytes[0] = 0 }
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path.copyBytes(from: bytes)
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + (abstract ? 0 : 1))

        var watchdogEveryMs: Int64?
        let forThisProcess: Bool
        if let owner = environment["WATCHDOG_PID"], !owner.isEmpty {
            guard case .value(let named) = DecimalText.read(owner), named > 0 else {
                throw Self.unusable("WATCHDOG_PID", owner, "is not a process id")
            }
            forThisProcess = named == Int64(pid)
        } else {
            forThisProcess = true
        }
        if forThisProcess, let interval = environment["WATCHDOG_USEC"], !interval.isEmpty {
            guard case .value(let microseconds) = DecimalText.read(interval) else {
                throw Self.unusable("WATCHDOG_USEC", interval, "is not a number of microseconds")
            }
            // 0 turns the watchdog off (sd_watchdog_enabled(3)); below 2 ms a ping every half interval
            // would be all this process does.
            if microseconds > 0 {
                guard microseconds >= 2_000 else {
                    throw Self.unusable("WATCHDOG_USEC", interval, "is below 2 ms; give WatchdogSec= a value of seconds")
                }
                watchdogEveryMs = microseconds / 2_000
            }
        }
        let socket = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else {
            let code = errno
            throw WorkerError(.serviceNotifyFailed, "cannot open a socket to tell the service manager (NOTIFY_SOCKET) that the "
                                  + "worker is ready: \(String(cString: strerror(code)))", errno: code)
        }
        // Nothing listening there (no such socket, or one no one reads): every datagram was dropped unsaid,
        // and a Type=notify unit waited its TimeoutStartSec (15 min) for a READY=1 that never came. Asked
        // once, with a socket of its own (the one kept sends to the address each time).
        let probe = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if probe >= 0 {
            defer { close(probe) }
            var probeAddress = address
            let reached = withUnsafePointer(to: &probeAddress) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(probe, $0, length) }
            }
            if reached != 0 {
                let code = errno
                close(socket)
                throw Self.unusable("NOTIFY_SOCKET", target,
                                    "names no socket the service manager listens on (\(String(cString: strerror(code))))")
            }
        }
        return ServiceNotifier(socket: socket, address: address, addressLength: length, watchdogEveryMs: watchdogEveryMs)
    }

    private init(socket: Int32, address: sockaddr_un, addressLength: socklen_t, watchdogEveryMs: Int64?) {
        self.socket = socket
        self.address = address
        self.addressLength = addressLength
        self.watchdogEveryMs = watchdogEveryMs
    }

    deinit { close(socket) }

    private static func unusable(_ variable: String, _ value: String, _ problem: String) -> WorkerError {
        WorkerError(.serviceNotifyFailed, "\(variable)='\(TerminalText.printable(String(value.prefix(200))))' \(problem); the service manager sets it "
                        + "for a Type=notify unit: check the unit, or unset it")
    }

    /// Reads the protocol's variables and removes them from this process's environment, so that no
    /// process it starts inherits them. Call it before any other thread exists (`unsetenv` is not
    /// safe beside threads reading the environment).
    public static func takeEnvironment() -> [String: String] {
        var taken: [String: String] = [:]
        for name in variables {
            if let value = getenv(name) {
                taken[name] = String(cString: value)
                unsetenv(name)
            }
        }
        return taken
    }

    /// The worker is ready: it has opened its database and logged `worker_started`.
    public func ready(status: String) {
        send("READY=1\nSTATUS=\(Self.oneLine(status))\nMAINPID=\(getpid())")
        sent.withLock { $0.status = status; $0.statusAtMs = Clock.monotonicMs() }
    }

    /// The worker is stopping (its first shutdown signal): it finishes or pauses its transfers.
    public func stopping(status: String) {
        send("STOPPING=1\nSTATUS=\(Self.oneLine(status))")
        sent.withLock { $0.status = status; $0.statusAtMs = Clock.monotonicMs(); $0.stopping = true }
    }

    /// One turn of the worker's loop: the watchdog's ping when half its interval has passed since the
    /// last, and `status` when it changed (at most once a second) — not once the worker is stopping: a
    /// second after `STOPPING=1`, `systemctl status` read "0 of 4 transfers running" again while the
    /// worker still held a job whose release it was writing.
    /// The loop turns at every freed slot (thousands of times a second in a drain of small jobs): the
    /// status is only made when one may be sent.
    public func turned(status: () -> String, nowMs: Int64 = Clock.monotonicMs()) {
        var lines: [String] = []
        let (ping, statusDue) = sent.withLock { sent in
            (watchdogEveryMs.map { Self.due(since: sent.watchdogAtMs, every: $0, now: nowMs) } ?? false,
             !sent.stopping && Self.due(since: sent.statusAtMs, every: Self.statusEveryMs, now: nowMs))
        }
        if ping { lines.append("WATCHDOG=1") }
        let text = statusDue ? status() : nil
        sent.withLock { sent in
            if ping { sent.watchdogAtMs = nowMs }
            if let text, text != sent.status {
                lines.append("STATUS=\(Self.oneLine(text))")
                sent.status = text
                sent.statusAtMs = nowMs
            }
        }
        if !lines.isEmpty { send(lines.joined(separator: "\n")) }
    }

    /// Feeds the watchdog from a thread of its own, while `waiting` says the worker's loop is held in a
    /// wait its store bounds (see the type's comment). The thread looks every quarter of the pings'
    /// period (at least every 250 ms); once a ping is due it asks `waiting(ms)`, with how long the store's
    /// call must have lasted to count — half the pings' period, at most a second, so that the short calls
    /// of a busy, healthy store never stand in for a loop that does not turn. A ping then comes at most
    /// three quarters of the interval after the last. Nil without a watchdog; `stop()` the feeder when
    /// the loop has ended.
    public func feedWhileWaiting(_ waiting: @escaping @Sendable (_ forAtLeastMs: Int64) -> Bool) throws(ThreadStartFailure) -> WatchdogFeeder? {
        guard let every = watchdogEveryMs else { return nil }
        let feeder = WatchdogFeeder()
        let tickUs = UInt32(min(250, max(1, every / 4)) * 1_000)
        let minimumMs = min(1_000, max(1, every / 2))
        try StartedThread.start(name: "jobctl-watchdog") { [self] in
            while !feeder.stopped {
                usleep(tickUs)
                if feeder.stopped { return }
                pingIfDue(while: { waiting(minimumMs) })
            }
        }
        return feeder
    }

    /// The watchdog's ping when it is due and `holds()`, from the feeder's thread. The loop may ping
    /// between the two looks: then this one does not.
    func pingIfDue(nowMs: Int64 = Clock.monotonicMs(), while holds: () -> Bool) {
        guard let every = watchdogEveryMs,
              sent.withLock({ Self.due(since: $0.watchdogAtMs, every: every, now: nowMs) }), holds() else { return }
        let ping = sent.withLock { sent -> Bool in
            guard Self.due(since: sent.watchdogAtMs, every: every, now: nowMs) else { return false }
            sent.watchdogAtMs = nowMs
            return true
        }
        if ping { send("WATCHDOG=1") }
    }

    /// Whether `every` milliseconds have passed since `last` (nil: never sent).
    private static func due(since last: Int64?, every: Int64, now: Int64) -> Bool {
        guard let last else { return true }
        return now - last >= every || now < last
    }

    /// A status is one line (a queue name cannot hold a line feed, but nothing here relies on that).
    private static func oneLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }

    private func send(_ message: String) {
        var address = self.address
        let length = addressLength
        let bytes = Array(message.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { target in
                bytes.withUnsafeBytes { body in
                    sendto(socket, body.baseAddress, body.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), target, length)
                }
            }
        }
    }
}

/// The thread `ServiceNotifier.feedWhileWaiting` started: `stop()` ends it within a tick.
public final class WatchdogFeeder: Sendable {
    private let ended = Atomic<Bool>(false)

    var stopped: Bool { ended.load(ordering: .relaxed) }

    public func stop() { ended.store(true, ordering: .relaxed) }
}
