import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// Writes a worker's log lines to a descriptor from a thread of its own, so that a reader that stops
/// reading cannot stop the worker.
///
/// A write to a pipe or socket whose reader has stopped (a `| less` left paused, a stalled log shipper,
/// a full journal stream) blocks once the pipe's 64 KiB are full. Written by the task that logs, that
/// held every thread of the cooperative pool within a few hundred jobs: the worker's loop sent no more
/// heartbeats, its leases expired and other workers took its jobs over (measured: 41 running jobs, all
/// their leases expired, 8 s after a 5 s-lease worker's standard error stopped being read).
///
/// Here `write` appends to a buffer (at most `limit` bytes) and returns at once; the thread writes what
/// has gathered, several lines in one `write(2)`. While the reader is stuck, lines beyond the limit are
/// dropped and counted; once writing works again the log says how many. Lines keep their order.
/// A write that fails (standard error a file on a full disk: ENOSPC, EIO) loses its lines; they are
/// counted the same way, and the notice says why.
/// `flush(waitingAtMost:)` waits for the buffer to drain — a worker calls it before it exits.
public final class LogLineWriter: @unchecked Sendable {
    // @unchecked: every stored var is used only with `condition` locked.
    private let condition = NSCondition()
    private var pending: [UInt8] = []
    private var writing = false
    /// Whether the thread waits for a first line (woken by the next one), or lingers for more lines to
    /// write with it (woken only once `batchBytes` wait).
    private var idle = false
    private var lingering = false
    private var dropped = 0
    private var droppedInAll = 0
    /// Where in `pending` the lines were dropped: the count of them is written there, in order.
    private var dropMark = 0
    /// Why they were lost, when a write failed (else the reader was not reading).
    private var writeFailure: String?
    private let descriptor: Int32
    /// The most bytes held waiting.
    public let limit: Int
    private var started = false
    /// The line that says how many lines were dropped.
    private var droppedNotice: @Sendable (Int, String) -> String = { count, reason in
        "jobctl worker: \(count) log line\(count == 1 ? "" : "s") dropped: \(reason)\n"
    }

    /// Why lines are dropped while the buffer is full.
    public static let notReadReason = "standard error was not being read"

    /// Sets the line that says how many lines were dropped and why (the worker's log makes it one of its
    /// own, text or JSON).
    public func setDroppedNotice(_ notice: @escaping @Sendable (_ count: Int, _ reason: String) -> String) {
        condition.lock()
        defer { condition.unlock() }
        droppedNotice = notice
    }

    /// A writer to `descriptor` holding at most `limit` bytes; the thread starts at the first line.
    public init(descriptor: Int32, limit: Int = 1 << 20) {
        self.descriptor = descriptor
        self.limit = max(4_096, limit)
    }

    /// The process's standard error.
    public static let standardError = LogLineWriter(descriptor: STDERR_FILENO)

    /// Queues `line` (with its line feed) for writing; drops it when `limit` bytes already wait.
    public func write(_ line: String) {
        condition.lock()
        defer { condition.unlock() }
        if pending.count + line.utf8.count > limit {
            if dropped == 0 { dropMark = pending.count }
            dropped += 1
            droppedInAll += 1
            return
        }
        pending.append(contentsOf: line.utf8)
        if !started {
            do throws(ThreadStartFailure) {
                try StartedThread.start(name: "jobctl-log", stackSize: 256 << 10) { [self] in run() }
                started = true
            } catch {
                // No thread to be had (a process limit): the lines go out from here, as before the
                // thread existed, rather than wait for one that never runs. The next line tries again.
                let batch = pending
                pending.removeAll(keepingCapacity: true)
                _ = batch.withUnsafeBytes { StandardStreams.write($0, to: descriptor) }
                return
            }
        }
        // A wake-up only when the thread waits for a first line, or lingers and a batch's worth is here:
        // one per line cost a 10,000-job drain a sixth more CPU.
        if idle || (lingering && pending.count >= Self.batchBytes) { condition.broadcast() }
    }

    /// Bytes worth a write at once; fewer wait up to `lingerTime` for more.
    static let batchBytes = 16_384
    /// How long a few lines wait for more before they are written.
    static let lingerTime: TimeInterval = 0.002

    /// Lines dropped so far because the reader was not reading (tests).
    public var droppedLines: Int {
        condition.lock()
        defer { condition.unlock() }
        return droppedInAll
    }

    /// Waits until every queued line is written, or `seconds` pass (a reader that never reads must not
    /// keep the process from exiting). Returns whether everything was written.
    @discardableResult
    public func flush(waitingAtMost seconds: Double = 2) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while !pending.isEmpty || writing {
            if !condition.wait(until: deadline) { return pending.isEmpty && !writing }
        }
        return true
    }

    private func run() {
        while true {
            condition.lock()
            while pending.isEmpty {
                idle = true
                condition.wait()
                idle = false
            }
            if pending.count < Self.batchBytes {
                lingering = true
                _ = condition.wait(until: Date().addingTimeInterval(Self.lingerTime))
                lingering = false
            }
            var batch = pending
            pending.removeAll(keepingCapacity: true)
            let noticed = dropped
            if dropped > 0 {
                let notice = droppedNotice(dropped, writeFailure ?? Self.notReadReason)
                batch.insert(contentsOf: notice.utf8, at: min(dropMark, batch.count))
                dropped = 0
                writeFailure = nil
            }
            writing = true
            condition.unlock()
            // A failed write loses the batch, as a direct write would; its lines (and those its notice
            // counted) are counted as dropped, to be noticed where they were once a write works again.
            let written = batch.withUnsafeBytes { StandardStreams.write($0, to: descriptor) }
            let failure = written ? nil : String(cString: strerror(errno))
            // The batch's own lines (not its notice's), counted only when lost: a byte-by-byte count of every
            // batch cost a drain ~5,000 instructions a job.
            let lines = failure == nil ? 0 : batch.reduce(0) { $0 + ($1 == 10 ? 1 : 0) } - (noticed > 0 ? 1 : 0)
            condition.lock()
            if let failure {
                dropped += noticed + lines
                droppedInAll += lines
                dropMark = 0  // the lost lines came before every line waiting now
                writeFailure = "writing standard error failed: \(failure)"
            }
            writing = false
            condition.broadcast()
            condition.unlock()
        }
    }
}
