import Foundation
import JobModel
import StorePort
import Synchronization

/// Copies a database's write-ahead log into the database file on a thread of its own, through a
/// connection of its own, instead of in the commit that found the log long (SQLite's automatic
/// checkpoint).
///
/// Why: SQLite's automatic checkpoint runs inside the COMMIT that crosses the threshold, on the thread
/// that committed — for a worker, the store's executor, which every append and claim waits for — and
/// while the process still holds the writer lock that orders jobctl's writing processes (see
/// `WriterLock`). A checkpoint reads the log's newest copy of every page, writes it into the database
/// and syncs both files: ~10–20 ms each for a draining worker, two or three times in 10,000 jobs, all of
/// it on the critical path (with the automatic checkpoint off, the drain's run took ~8 % less time). Here
/// a commit only tells this thread how long the log is, and it checkpoints once `thresholdPages` pages
/// not yet copied have gathered, while the executor goes on (SQLite lets a checkpoint run alongside
/// readers and writers in WAL mode). A commit that finds the log at the automatic checkpoint's length all
/// the same still checkpoints itself (`SQLiteConnection.onCommit(inlineAt:_:)`).
///
/// A PASSIVE checkpoint: it never waits for a lock and copies what it can (frames past an active
/// reader's snapshot stay for the next one). Durability is SQLite's: with `synchronous=NORMAL` the log is
/// synced before its frames are copied and the database after. A checkpoint that fails (full disk,
/// another process checkpointing) leaves the log as it was, and the next request tries again; the last
/// connection's close still checkpoints whatever remains, as before.
///
/// See https://www.sqlite.org/wal.html#checkpointing, https://www.sqlite.org/c3ref/wal_hook.html and
/// https://www.sqlite.org/c3ref/wal_checkpoint_v2.html
final class BackgroundCheckpointer: @unchecked Sendable {
    /// WAL pages not yet copied into the database after which a commit asks for a checkpoint.
    let thresholdPages: Int32
    private let condition = NSCondition()
    // Guarded by `condition`.
    /// The log's frames the last checkpoint left in the database (as far as this process knows: another
    /// process's checkpoint copies some too, and then this one's next finds less to do).
    private var copiedPages: Int32 = 0
    private var requested = false
    private var requestCount = 0
    private var stopping = false
    private var stopped = false
    private var completed = 0

    /// Opens the checkpointer's connection to `path` and starts its thread.
    init(path: String, thresholdPages: Int32) throws(StoreError) {
        self.thresholdPages = thresholdPages
        let connection = try SQLiteConnection(path: path, readOnly: false, create: false)
        try connection.execute("PRAGMA synchronous = NORMAL")
        // Handed to the thread, which alone uses it from here on.
        let handOver = HandOver(connection)
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: "jobctl-ckpt") { [self] in self.loop(handOver) }
        } catch {
            throw StoreError.io(error.description)
        }
    }

    /// A commit left the log at `logPages` (the commit hook, on the committing thread): asks for a
    /// checkpoint when `thresholdPages` or more of them are not yet in the database, and returns at
    /// once. Asking after every commit past the length instead kept the checkpointer copying the same
    /// hot pages (and syncing both files) after every group commit: with four worker processes on one
    /// log, ~16 % fewer jobs a second.
    func committed(logPages: Int32) {
        condition.lock()
        // A log shorter than what was copied was started over (after a checkpoint that caught up).
        if logPages < copiedPages { copiedPages = 0 }
        if !requested && !stopping && logPages - copiedPages >= thresholdPages {
            requested = true
            requestCount += 1
            condition.signal()
        }
        condition.unlock()
    }

    /// Checkpoints completed (tests).
    var checkpoints: Int {
        condition.lock()
        defer { condition.unlock() }
        return completed
    }

    /// The log's frames the last checkpoint left in the database, as far as this process knows (tests).
    var copied: Int32 {
        condition.lock()
        defer { condition.unlock() }
        return copiedPages
    }

    /// Checkpoints asked for (tests).
    var requests: Int {
        condition.lock()
        defer { condition.unlock() }
        return requestCount
    }

    /// Waits for a checkpoint in progress, stops the thread and closes its connection.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        while !stopped { condition.wait() }
        condition.unlock()
    }

    private func loop(_ handOver: HandOver) {
        // The only reference from here on: closed (by `connection = nil`) before `stop` returns, so that
        // the store's own connection, closing after, is the last and removes the WAL.
        var connection = handOver.take()
        while true {
            condition.lock()
            while !requested && !stopping { condition.wait() }
            if stopping {
                connection = nil
                stopped = true
                condition.broadcast()
                condition.unlock()
                return
            }
            requested = false
            condition.unlock()
            if let copied = connection?.checkpointPassive() {
                condition.lock()
                completed += 1
                copiedPages = copied
                condition.unlock()
            }
        }
    }
}

/// A connection handed from the thread that opened it to the one that uses it.
private final class HandOver: @unchecked Sendable {
    private var connection: SQLiteConnection?
    init(_ connection: SQLiteConnection) { self.connection = connection }
    /// The connection, once (the receiving thread's first statement; the opener no longer touches it).
    func take() -> SQLiteConnection? {
        defer { connection = nil }
        return connection
    }
}
