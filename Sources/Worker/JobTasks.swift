import Synchronization

/// Counts the worker's job tasks that have not ended, so that the pool can wait for the last one to be
/// over — not only to have reported its outcome — before it returns (see `WorkerPool.launch`).
final class JobTasks: Sendable {
    private struct State {
        var count = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// A task is starting.
    func enter() {
        state.withLock { $0.count += 1 }
    }

    /// A task is ending: its last statement.
    func leave() {
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { state in
            state.count -= 1
            guard state.count == 0 else { return [] }
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once no task is left (at once when none is).
    func untilNone() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let none = state.withLock { state -> Bool in
                guard state.count > 0 else { return true }
                state.waiters.append(continuation)
                return false
            }
            if none { continuation.resume() }
        }
    }
}
