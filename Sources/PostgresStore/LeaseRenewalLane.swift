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
    /// The schema of the log the store's session keeps to, which the lane's sessions keep to as well.
    private let schema: String?
    /// The store's stop deadline: the lane's connections are opened, and waited on, no longer than it.
    private let stopDeadline: StopDeadline
    /// Ends the lane's answer waits at `stopDeadline`.
    private let answerWaitCap: AnswerWaitCap
    private let executor = Mutex<StoreExecutor?>(nil)
    /// Opened on the executor's thread, used there only.
    private var connection: PostgresConnection?
    /// The answer timeout set on `connection` (on the executor's thread only).
    private var connectionTimeoutMs: Int64?
    /// The answer timeout of the last renewal asked for (0: none yet), for `isWaitingWithinBounds`.
    private let askedTimeoutMs = Atomic<Int64>(0)

    /// The thread's name (at most 15 bytes, Linux's limit).
    static let threadName = "jobctl-pg-lease"

    init(url: String, schema: String?, stopDeadline: StopDeadline) {
        self.url = url
        self.schema = schema
        self.stopDeadline = stopDeadline
        self.answerWaitCap = AnswerWaitCap(deadline: stopDeadline)
    }

    deinit {
        executor.withLock { $0?.stop() }
    }

    /// Runs `body` with the lane's connection on the lane's thread (both made on first use); a
    /// connection the server dropped is opened again first. Each of its calls waits at most
    /// `answerTimeoutMs` for the server's whole answer, then the connection is given up (see `AnswerWatchdog`).
    ///
    /// The whole answer, not the silence in it (`timingAnswersWhole`): the limit is what makes a renewal
    /// that goes unanswered run again on a new connection before the leases it renews run out, and an
    /// answer trickling in past it — a path that still delivers a byte now and then — comes too late
    /// for that as surely as no answer at all.
    func run<T: Sendable>(answerTimeoutMs: Int64,
                          _ body: @escaping @Sendable (PostgresConnection) throws(StoreError) -> T) async throws -> T {
        let executor = try startedExecutor()
        askedTimeoutMs.store(answerTimeoutMs, ordering: .relaxed)
        return try await executor.run { [self] in
            let connection: PostgresConnection
            do throws(StoreError) { connection = try self.openConnection(answerTimeoutMs: answerTimeoutMs) } catch { throw Unopened(cause: error) }
            return try connection.timingAnswersWhole { () throws(StoreError) -> T in try body(connection) }
        }
    }

    /// Whether a renewal has been under way on the lane for at least `minimumMs` and for less than it
    /// waits by its limits: a connection opened (its connect timeout is the answer limit, at least 2 s),
    /// the statement keeping the session to the log's schema, a transaction's first answer not coming
    /// (each up to the answer limit), and a few seconds for the work itself. See `JobStore.isWaitingWithinBounds`.
    func isWaitingWithinBounds(forAtLeastMs minimumMs: Int64) -> Bool {
        let answerMs = askedTimeoutMs.load(ordering: .relaxed)
        guard answerMs > 0, let executor = executor.withLock({ $0 }) else { return false }
        let connectMs = max(2_000, (answerMs + 999) / 1_000 * 1_000)
        return executor.isOnWork(forAtLeastMs: minimumMs, lessThanNs: UInt64(connectMs + 2 * answerMs + 5_000) * 1_000_000)
    }

    /// The lane's connection could not be opened (or opened again): nothing was sent on it.
    struct Unopened: Error {
        let cause: StoreError
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

    /// The connection, opened (or opened again) as the store's own is, waiting at most `answerTimeoutMs`.
    private func openConnection(answerTimeoutMs: Int64) throws(StoreError) -> PostgresConnection {
        let current: PostgresConnection
        if let connection {
            if !connection.isConnected {
                do throws(PostgresError) { try connection.reconnect() } catch { throw StoreError(error) }
            }
            current = connection
        } else {
            // Waits for the server no longer than for an answer (libpq takes 2 s at least): a connection
            // opened into a silent network must fail while the leases it is to renew still hold. Nor past
            // a stopping worker's deadline, in whole seconds (libpq's; `reconnect` polls to the deadline).
            var waitMs = answerTimeoutMs
            if let leftNs = stopDeadline.remainingNs() {
                guard leftNs > 0 else {
                    throw StoreError(PostgresError.connectionFailed(target: redactedDatabaseURL(url), message: StopDeadline.passedMessage))
                }
                waitMs = min(waitMs, Int64(leftNs / 1_000_000))
            }
            let connectSeconds = Int(max(2, (waitMs + 999) / 1_000))
            let opened: PostgresConnection
            do throws(PostgresError) { opened = try PostgresConnection(url, connectTimeoutSeconds: connectSeconds) } catch { throw StoreError(error) }
            // The answer limit and the stop deadline hold from the session's first statement: set after it,
            // a path gone silent between the connection's start-up and the statement that keeps it to the
            // log's schema left that statement waiting for ever, and with it every later renewal (the
            // leases ran out under a running worker) and a stopping worker's exit.
            opened.stopDeadline = stopDeadline
            try setAnswerTimeout(answerTimeoutMs, on: opened)
            if let schema {
                do throws(PostgresError) {
                    try opened.timingAnswersWhole { () throws(PostgresError) in try opened.keepToSchema(schema) }
                } catch {
                    throw StoreError(error)
                }
            }
            current = opened
            connection = current
        }
        if connectionTimeoutMs != answerTimeoutMs { try setAnswerTimeout(answerTimeoutMs, on: current) }
        return current
    }

    /// Sets `connection`'s answer limit (see `PostgresConnection.setAnswerTimeout`), ended at the stop deadline.
    private func setAnswerTimeout(_ milliseconds: Int64, on connection: PostgresConnection) throws(StoreError) {
        do throws(ThreadStartFailure) { try connection.setAnswerTimeout(milliseconds: milliseconds, cap: answerWaitCap) } catch {
            throw StoreError.io(error.description)
        }
        connectionTimeoutMs = milliseconds
    }
}
