import EventStore
import Foundation
import JobModel
import Synchronization

/// Runs every call on the event store on one dedicated thread, and group-commits appends.
///
/// SQLite calls block (locks, fsync). Run on Swift's cooperative pool — two threads on a two-core
/// machine — one fsync would stall half of all tasks. So the worker's tasks hand their appends to this
/// thread through continuations; each time it wakes it takes *every* append queued meanwhile and writes
/// them in one transaction (group commit: many tasks' events, one fsync).
final class StoreThread: Sendable {
    private typealias AppendContinuation = CheckedContinuation<Result<JobEvent, StoreError>, Never>
    private typealias ClaimContinuation = CheckedContinuation<Result<[ClaimedJob], StoreError>, Never>

    private enum Work {
        case append(PendingEvent, AppendContinuation)
        case claim(ClaimRequest, ClaimContinuation)
        case call(@Sendable (EventStore) -> Void)
    }

    private struct Queue {
        var work: [Work] = []
        var stopped = false
    }

    private let store: EventStore
    private let queue = Mutex(Queue())
    private let condition = NSCondition()
    /// How many events the last group commit held, for diagnostics and benchmarks.
    private let stats = Mutex<(commits: Int, events: Int)>((0, 0))

    init(store: EventStore) {
        self.store = store
        let thread = Thread { [self] in self.loop() }
        thread.name = "jobctl-store"
        thread.start()
    }

    /// Appends one event, sharing a transaction with whatever else is queued. Returns the stored event
    /// or why it was refused (stale lease, invalid transition).
    func append(_ event: PendingEvent) async -> Result<JobEvent, StoreError> {
        await withCheckedContinuation { continuation in
            enqueue(.append(event, continuation))
        }
    }

    /// Claims jobs in the same transaction as the appends queued before it (one sync for both).
    func claim(_ request: ClaimRequest) async throws(StoreError) -> [ClaimedJob] {
        try await withCheckedContinuation { continuation in
            enqueue(.claim(request, continuation))
        }.get()
    }

    /// Runs `body` on the store thread.
    func call<T: Sendable>(_ body: @escaping @Sendable (EventStore) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            enqueue(.call { store in
                do { continuation.resume(returning: try body(store)) } catch { continuation.resume(throwing: error) }
            })
        }
    }

    /// Finishes queued work, then ends the thread.
    func stop() {
        queue.withLock { $0.stopped = true }
        condition.lock()
        condition.signal()
        condition.unlock()
    }

    var groupCommitStats: (commits: Int, events: Int) { stats.withLock { $0 } }

    private func enqueue(_ work: Work) {
        queue.withLock { $0.work.append(work) }
        condition.lock()
        condition.signal()
        condition.unlock()
    }

    private func loop() {
        while true {
            condition.lock()
            var batch: [Work] = []
            var stopped = false
            while true {
                (batch, stopped) = queue.withLock { state in
                    let taken = state.work
                    state.work.removeAll(keepingCapacity: true)
                    return (taken, state.stopped)
                }
                if !batch.isEmpty || stopped { break }
                condition.wait()
            }
            condition.unlock()
            if batch.isEmpty && stopped { return }
            process(batch)
        }
    }

    private func process(_ batch: [Work]) {
        var appends: [(PendingEvent, AppendContinuation)] = []
        for work in batch {
            switch work {
            case .append(let event, let continuation):
                appends.append((event, continuation))
            case .claim(let request, let continuation):
                flush(&appends, thenClaim: (request, continuation))
            case .call(let body):
                flush(&appends)
                body(store)
            }
        }
        flush(&appends)
    }

    /// Writes the queued appends in one transaction — with the claim, when there is one, after them in
    /// the same transaction — and resumes every waiter with its outcome.
    private func flush(_ appends: inout [(PendingEvent, AppendContinuation)],
                       thenClaim claim: (ClaimRequest, ClaimContinuation)? = nil) {
        guard !appends.isEmpty || claim != nil else { return }
        let now = Clock.nowMs()
        do {
            let events = appends.map(\.0)
            let appended: [Result<JobEvent, StoreError>]
            if let (request, continuation) = claim {
                let outcome = try store.append(events, now: now, thenClaim: request)
                appended = outcome.appended
                continuation.resume(returning: outcome.claimed)
            } else {
                appended = try store.append(events, now: now)
            }
            for (index, entry) in appends.enumerated() {
                entry.1.resume(returning: appended[index])
            }
            if !appends.isEmpty {
                stats.withLock { $0.commits += 1; $0.events += appends.count }
            }
        } catch {
            for entry in appends { entry.1.resume(returning: .failure(error)) }
            claim?.1.resume(returning: .failure(error))
        }
        appends.removeAll(keepingCapacity: true)
    }
}
