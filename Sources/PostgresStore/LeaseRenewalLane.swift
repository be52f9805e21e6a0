import Foundation
import JobModel
import StorePort
import Synchronization

/// The connection and the thread a worker's lease renewals run on, apart from the store's own
/// (`PostgresStore.renewLeases`).
///
/// Why apart: every other use of the store's connection runs on its executor, one after the other, and
/// a group commit there can take longer than a lease (a large result, a big batch, a server slow to
/// answer the COMMIT, a lock another session holds). Renewals queued behind it let every other lease
/// of the worker run out, and other workers rescued and ran those jobs again. Here a renewal waits for
/// nothing of the worker's but an earlier renewal — as River, Oban and graphile-worker keep their
/// heartbeats apart from their job writes.
///
/// The connection is opened at the first renewal (a command that renews nothing opens none): one
/// connection, and one thread, more per worker process.
///
/// `@unchecked Sendable` is sound because `connection` is touched only on the executor's thread, and
/// `executor` only under its lock.
final class LeaseRenewalLane: @unchecked Sendable {
    private let url: String
    private let answerTimeoutMs: Int64?
    private let executor = Mutex<StoreExecutor?>(nil)
    /// Opened on the executor's thread, used there only.
    private var connection: PostgresConnection?

    /// The thread's name (at most 15 bytes, Linux's limit).
    static let threadName = "jobctl-pg-lease"

    init(url: String, answerTimeoutMs: Int64?) {
        self.url = url
        self.answerTimeoutMs = answerTimeoutMs
    }

    deinit {
        executor.withLock { $0?.stop() }
    }

    /// Runs `body` with the lane's connection on the lane's thread (both made on first use); a
    /// connection the server dropped is opened again first.
    func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws(StoreError) -> T) async throws -> T {
        let executor = try startedExecutor()
        return try await executor.run { [self] in try body(try self.openConnection()) }
    }

    private func startedExecutor() throws(StoreError) -> StoreExecutor {
        try executor.withLock { (executor) throws(StoreError) -> StoreExecutor in
            if let executor { return executor }
            // Nothing is ever appended through this executor: only `run` is used.
            let started = try StoreExecutor(name: Self.threadName) { (_, _) throws(StoreError) -> AppendAndClaimOutcome in
                throw StoreError.invalidControl("the lease renewals' thread writes no appends; this is a bug in jobctl: please report it")
            }
            executor = started
            return started
        }
    }

    /// The connection, opened (or opened again) as the store's own is, with the same answer timeout.
    private func openConnection() throws(StoreError) -> PostgresConnection {
        if let connection {
            if !connection.isConnected {
                do throws(PostgresError) { try connection.reconnect() } catch { throw StoreError(error) }
            }
            return connection
        }
        let opened: PostgresConnection
        do throws(PostgresError) { opened = try PostgresConnection(url) } catch { throw StoreError(error) }
        do throws(ThreadStartFailure) { try opened.setAnswerTimeout(milliseconds: answerTimeoutMs) } catch {
            throw StoreError.io(error.description)
        }
        connection = opened
        return opened
    }
}
