import Foundation
import JobModel
import Synchronization

/// A token fetched from a credential source, and how long it is valid (nil: until the server refuses it,
/// as for a token command's output).
struct FetchedToken: Sendable, Equatable {
    let value: String
    let lifetime: Duration?
}

/// When the cached access token is used, refreshed or waited for — a pure value: no clock (time is an
/// argument), no I/O.
///
/// Decisions:
/// - A token is used until `margin` before it expires (at most half its lifetime, so a short-lived
///   token is not refreshed at once), then refreshed.
/// - One refresh at a time: callers arriving while one runs wait for it (`awaitRefresh`).
/// - A server refusing a token (401) drops it only if it is still the cached one; when another caller
///   already replaced it, the newer token is used without a second refresh.
/// - A failed refresh leaves nothing cached; the next request tries again.
struct AccessTokenState {
    private enum State: Equatable {
        case empty
        case cached(token: String, refreshAt: ContinuousClock.Instant?)
        case refreshing
    }

    /// What a caller does next.
    enum Action: Equatable {
        case use(String)
        case startRefresh
        case awaitRefresh
    }

    private var state = State.empty
    /// How long before expiry a token is refreshed.
    let margin: Duration

    init(margin: Duration) {
        self.margin = margin
    }

    /// The token cached now, if any (for scrubbing what a server sent back: `GCSTokenSource.sentTokens`).
    var cachedToken: String? {
        if case .cached(let token, _) = state { return token }
        return nil
    }

    /// A request needs a token at `now`.
    mutating func tokenRequested(at now: ContinuousClock.Instant) -> Action {
        switch state {
        case .cached(let token, let refreshAt):
            if let refreshAt, now >= refreshAt { break }
            return .use(token)
        case .refreshing:
            return .awaitRefresh
        case .empty:
            break
        }
        state = .refreshing
        return .startRefresh
    }

    /// The server refused `token` (401).
    mutating func tokenRejected(_ token: String) -> Action {
        switch state {
        case .cached(let current, _) where current != token:
            return .use(current)
        case .refreshing:
            return .awaitRefresh
        case .cached, .empty:
            state = .refreshing
            return .startRefresh
        }
    }

    /// The refresh started by `startRefresh` produced `token` at `now`.
    mutating func refreshFinished(_ token: FetchedToken, at now: ContinuousClock.Instant) {
        precondition(state == .refreshing, "a refresh finished that was never started")
        let refreshAt = token.lifetime.map { lifetime in now + lifetime - min(margin, lifetime / 2) }
        state = .cached(token: token.value, refreshAt: refreshAt)
    }

    /// The refresh started by `startRefresh` failed.
    mutating func refreshFailed() {
        precondition(state == .refreshing, "a refresh failed that was never started")
        state = .empty
    }
}

/// Owns an `AccessTokenState` and runs its refreshes: the state changes before any `await`, and every
/// caller waiting for a refresh gets that refresh's result.
actor AccessTokenCache {
    private var state: AccessTokenState
    private var refresh: Task<Result<String, StorageError>, Never>?
    private let fetch: @Sendable () async throws(StorageError) -> FetchedToken
    /// The time now (a test moves it by hand).
    private let now: @Sendable () -> ContinuousClock.Instant

    init(margin: Duration, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now },
         fetch: @escaping @Sendable () async throws(StorageError) -> FetchedToken) {
        state = AccessTokenState(margin: margin)
        self.now = now
        self.fetch = fetch
    }

    /// A token valid now, fetched when none is cached or the cached one is about to expire. A stop of
    /// `control` requested while it waits for a refresh (a pause, a cancel, the worker's SIGTERM) ends the
    /// wait at once (`TransferFailure.stopped`) — the refresh goes on for the others — so a job held by a
    /// slow token endpoint can still be paused and released.
    func token(stoppingOn control: TransferControl?) async throws(TransferFailure) -> String {
        try await perform(state.tokenRequested(at: now()), stoppingOn: control)
    }

    /// The token cached now, if any; never fetches one.
    var cachedToken: String? { state.cachedToken }

    /// A token to retry with after the server refused `rejected` (a stop as in `token(stoppingOn:)`).
    func token(replacing rejected: String, stoppingOn control: TransferControl?) async throws(TransferFailure) -> String {
        try await perform(state.tokenRejected(rejected), stoppingOn: control)
    }

    private func perform(_ action: AccessTokenState.Action, stoppingOn control: TransferControl?) async throws(TransferFailure) -> String {
        switch action {
        case .use(let token):
            return token
        case .startRefresh:
            let fetch = self.fetch
            refresh = Task {
                let result: Result<FetchedToken, StorageError>
                do throws(StorageError) {
                    result = .success(try await fetch())
                } catch {
                    result = .failure(error)
                }
                return self.finished(result)
            }
        case .awaitRefresh:
            break
        }
        // Invariant: `startRefresh` or `awaitRefresh` means a refresh task exists (set above, or by the
        // caller that started it before its first await).
        guard let refresh else { preconditionFailure("no refresh task while refreshing") }
        let result: Result<String, StorageError>
        if let control {
            switch await Self.wait(for: refresh, orStopOf: control) {
            case .stopped(let reason): throw .stopped(reason)
            case .value(let value): result = value
            }
        } else {
            result = await refresh.value
        }
        switch result {
        case .success(let token): return token
        case .failure(let error): throw .failed(error)
        }
    }

    /// How a stoppable wait for a refresh ended.
    private enum Waited: Sendable {
        case value(Result<String, StorageError>)
        case stopped(StopReason)
    }

    /// The refresh's result, or the stop `control` is asked for first, whichever comes first.
    private static func wait(for refresh: Task<Result<String, StorageError>, Never>,
                             orStopOf control: TransferControl) async -> Waited {
        let once = ResumeOnce<Waited>()
        return await withCheckedContinuation { continuation in
            once.set(continuation)
            let key = control.addWaker {
                if let reason = control.stopReason { once.resume(.stopped(reason)) }
            }
            Task {
                let result = await refresh.value
                control.removeWaker(key)
                once.resume(.value(result))
            }
        }
    }

    private func finished(_ result: Result<FetchedToken, StorageError>) -> Result<String, StorageError> {
        switch result {
        case .success(let token):
            state.refreshFinished(token, at: now())
            return .success(token.value)
        case .failure(let error):
            state.refreshFailed()
            return .failure(error)
        }
    }
}

/// A continuation resumed by the first of several callers; the others find it taken.
private final class ResumeOnce<Value: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<Value, Never>?>(nil)

    func set(_ newValue: CheckedContinuation<Value, Never>) {
        continuation.withLock { $0 = newValue }
    }

    func resume(_ value: Value) {
        let taken = continuation.withLock { current -> CheckedContinuation<Value, Never>? in
            defer { current = nil }
            return current
        }
        taken?.resume(returning: value)
    }
}
