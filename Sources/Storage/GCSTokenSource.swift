import Foundation
import JobModel
import Synchronization
import CFileSystem

/// Supplies the bearer token for GCS requests, from the first configured source in this order (see
/// `StorageConfiguration.fromEnvironment`): a fixed `accessToken`; the output of `tokenCommand` (run
/// through `/bin/sh -c` at first use and again after a 401); Google credentials (a service-account key,
/// an authorized-user file, or the metadata server), whose tokens are cached and refreshed
/// `refreshMargin` before they expire and after a 401; or nothing (anonymous).
///
/// Fetched tokens go through one `AccessTokenCache`: one refresh at a time, however many requests wait.
/// A token never leaves this type except as an `Authorization` header line, and only after it passed
/// `BearerToken.validate` (so it cannot add headers). Errors name the command, file or endpoint and what
/// failed, never a token, key, assertion, refresh token or anything a command printed. A command that
/// fails is a retryable error (the job is retried with backoff, like any network fault); one that prints
/// something that is not a token is not (running it again prints the same). Token endpoints follow the
/// HTTP rules: 408, 429, 5xx and network failures are retryable, a refusal (400, 401, 403) is not.
final class GCSTokenSource: Sendable {
    private let fixedToken: String?
    private let cache: AccessTokenCache?

    /// The source `configuration` describes, fetching tokens with its curl options.
    convenience init(configuration: StorageConfiguration, commandTimeLimit: Duration = .seconds(60),
                     now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.init(accessToken: configuration.accessToken, tokenCommand: configuration.tokenCommand,
                  google: configuration.googleCredentials, options: configuration.curlOptions,
                  refreshMargin: configuration.tokenRefreshMargin, commandTimeLimit: commandTimeLimit,
                  fetchTimeLimit: configuration.tokenTimeLimit, commandSetting: configuration.origins.jobName("JOBCTL_TOKEN_COMMAND"),
                  now: now)
    }

    init(accessToken: String?, tokenCommand: String?, google: GoogleCredentials? = nil,
         options: CurlOptions = CurlOptions(connectTimeout: 15, stallTimeout: 60, trust: .systemDefault),
         refreshMargin: Duration = StorageConfiguration.defaultTokenRefreshMargin,
         commandTimeLimit: Duration = .seconds(60), fetchTimeLimit: Int = GoogleTokenFetcher.defaultTimeLimit,
         commandSetting: String = "JOBCTL_TOKEN_COMMAND", now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        fixedToken = accessToken
        if accessToken != nil {
            cache = nil
        } else if let command = tokenCommand {
            cache = AccessTokenCache(margin: refreshMargin, now: now) { () async throws(StorageError) -> FetchedToken in
                FetchedToken(value: try await Self.commandTokenOffPool(command, timeLimit: commandTimeLimit, setting: commandSetting),
                             lifetime: nil)
            }
        } else if let google {
            let fetcher = GoogleTokenFetcher(credentials: google, options: options, timeLimit: fetchTimeLimit)
            cache = AccessTokenCache(margin: refreshMargin, now: now) { () async throws(StorageError) -> FetchedToken in
                try await fetcher.fetch()
            }
        } else {
            cache = nil
        }
    }

    /// Whether a 401 can be answered by fetching a fresh token.
    var canRefresh: Bool { cache != nil }

    /// The `Authorization` header line, or nil when anonymous. A stop of `control` ends a wait for a
    /// token being fetched (see `AccessTokenCache.token(stoppingOn:)`).
    func authorizationHeader(stoppingOn control: TransferControl? = nil) async throws(TransferFailure) -> String? {
        if let cache { return "Authorization: Bearer \(try await cache.token(stoppingOn: control))" }
        if let fixedToken {
            do throws(StorageError) {
                try BearerToken.validate(fixedToken, source: "GOOGLE_OAUTH_ACCESS_TOKEN")
            } catch {
                throw .failed(error)
            }
            return "Authorization: Bearer \(fixedToken)"
        }
        return nil
    }

    /// The tokens requests may have been sent with — the fixed one, or the one cached now — for scrubbing
    /// what a server sent back (`GCSBackend.perform`); never fetches one.
    func sentTokens() async -> [String] {
        if let fixedToken { return [fixedToken] }
        guard let cache else { return [] }
        return await cache.cachedToken.map { [$0] } ?? []
    }

    /// A fresh token after the server refused the one sent in `rejectedHeader` (a 401). When another
    /// request already replaced that token, the replacement is returned without fetching again.
    func refresh(replacing rejectedHeader: String?, stoppingOn control: TransferControl? = nil) async throws(TransferFailure) -> String {
        guard let cache else {
            throw .failed(StorageError(.unauthenticated, "no token command or Google credentials are configured to refresh the access token"))
        }
        let rejected = rejectedHeader.map { String($0.dropFirst("Authorization: Bearer ".count)) } ?? ""
        return try await cache.token(replacing: rejected, stoppingOn: control)
    }

    /// `commandToken` on a thread of its own: waiting for the command (up to its time limit) must not hold
    /// one of the few threads every Swift task of the process runs on, nor one of Dispatch's global
    /// threads, which Linux's libdispatch keeps near one a core and replaces slowly when blocked (the
    /// `file://` backend's I/O runs there).
    private static func commandTokenOffPool(_ command: String, timeLimit: Duration, setting: String) async throws(StorageError) -> String {
        let result: Result<String, StorageError> = await withCheckedContinuation { continuation in
            do throws(ThreadStartFailure) {
                try StartedThread.start(name: "jobctl-token") {
                    do throws(StorageError) {
                        continuation.resume(returning: .success(try commandToken(command, timeLimit: timeLimit, setting: setting)))
                    } catch {
                        continuation.resume(returning: .failure(error))
                    }
                }
            } catch {
                let reason = "\(setting) was not run: \(error)"
                LocalFaults.report(reason)
                continuation.resume(returning: .failure(StorageError(.unauthenticated, reason, retryable: true)))
            }
        }
        return try result.get()
    }

    /// Runs the token command and returns its trimmed, validated output (blocking until it ends or its
    /// time limit stops it). Errors name the command as `setting` (the variable, or the configuration
    /// file's key: they are a job's errors, kept in its log), never its text.
    static func commandToken(_ command: String, timeLimit: Duration, setting: String = "JOBCTL_TOKEN_COMMAND") throws(StorageError) -> String {
        let output = try run(command, timeLimit: timeLimit, setting: setting)
        let token = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty else {
            throw StorageError(.unauthenticated, "\(setting) exited 0 but printed no token",
                               retryable: true)
        }
        try BearerToken.validate(token, source: "the output of \(setting)")
        return token
    }

    /// Runs `command` with `/bin/sh -c` and returns its standard output; its standard error is discarded
    /// (it may echo secrets). Every failure is retryable.
    private static func run(_ command: String, timeLimit: Duration, setting: String) throws(StorageError) -> Data {
        func failure(_ what: String, cause: String? = nil) -> StorageError {
            StorageError(.unauthenticated,
                         "\(setting) \(what); its output is not shown (it may hold secrets) — run the command "
                             + "by hand to see why",
                         retryable: true, cause: cause)
        }
        // posix_spawn, not Foundation's Process: that handed the child a descriptor of its own, so a
        // command counted as finished only once everything it started had exited, and it stopped only
        // the shell. Here the command leads a process group, which is stopped whole.
        var ends: [Int32] = [-1, -1]
        guard jobctl_pipe_cloexec(&ends) == 0 else {
            throw failure("could not be started", cause: String(cString: strerror(errno)))
        }
        var pid: pid_t = 0
        let spawnError = TokenCommandEnvironment.withEntries(of: ProcessInfo.processInfo.environment) { environment in
            command.withCString { jobctl_spawn_shell($0, ends[1], environment, &pid) }
        }
        close(ends[1])
        guard spawnError == 0 else {
            close(ends[0])
            throw failure("could not be started", cause: String(cString: strerror(spawnError)))
        }
        let group = CommandGroup(leader: pid)
        // The shell's end, from a thread of its own (waitpid blocks).
        let exited = DispatchSemaphore(value: 0)
        // Read on a thread of its own, so a command that never exits cannot hold this one past the limit.
        let collected = CollectedOutput()
        let reader = FileHandle(fileDescriptor: ends[0], closeOnDealloc: true)
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: "jobctl-token-wait") {
                group.reap()
                exited.signal()
            }
        } catch {
            // Nothing would wait for the command: it is stopped and its end waited for here.
            group.stopAll()
            group.reap()
            throw failure("was stopped", cause: error.description)
        }
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: "jobctl-token-io") {
                // At most `maximumTokenCommandOutputBytes`: a command that prints without end is stopped, not collected.
                var data = Data()
                while true {
                    let chunk = reader.availableData
                    if chunk.isEmpty { break }
                    guard data.count + chunk.count <= maximumTokenCommandOutputBytes else {
                        collected.overflow()
                        group.stopAll()
                        break
                    }
                    data += chunk
                }
                collected.finish(data)
            }
        } catch {
            group.stopAll()
            _ = exited.wait(timeout: .now() + 2)
            throw failure("was stopped", cause: error.description)
        }
        let (seconds, attoseconds) = timeLimit.components
        let limit = DispatchTime.now() + Double(seconds) + Double(attoseconds) / 1e18
        let tooMuch = failure("printed more than \(maximumTokenCommandOutputBytes / 1024) KiB, far more than a token, and was stopped")
        // A reader that gives up on too much output stops the whole group, so the shell's end comes then too.
        let finished = exited.wait(timeout: limit) == .success
        if !finished {
            group.stopAll()
            _ = exited.wait(timeout: .now() + 2)
            if collected.overflowed { throw tooMuch }
            throw failure("did not finish within \(DurationText.format(max(1, Int(seconds)))) and was stopped")
        }
        // The command exited; its output ends unless something it started in the background keeps it open,
        // which is stopped with the rest of its group.
        let printed = collected.wait(until: .now() + 2)
        if printed == nil { group.stopAll() }
        // The reader stopped it, or it ended on its own having printed too much: either way, too much.
        if collected.overflowed { throw tooMuch }
        let status = group.status
        let signal = status & 0x7F
        if signal != 0 {
            throw failure("was killed by signal \(signal)")
        }
        let code = (status >> 8) & 0xFF
        if code != 0 {
            throw failure("failed with exit status \(code)")
        }
        guard let data = printed else {
            throw failure("exited but left its output open (a background process holds it; it was stopped)")
        }
        return data
    }
}

/// A token command's process group, led by its shell.
private final class CommandGroup: Sendable {
    let leader: pid_t
    /// The shell's wait status once reaped, nil before.
    private let reaped = Mutex<Int32?>(nil)

    init(leader: pid_t) { self.leader = leader }

    /// Waits for the shell to exit and reaps it (blocks).
    func reap() {
        var status: Int32 = 0
        while waitpid(leader, &status, 0) < 0 && errno == EINTR {}
        reaped.withLock { $0 = status }
    }

    /// The shell's wait status (0 before it was reaped).
    var status: Int32 { reaped.withLock { $0 } ?? 0 }

    /// SIGKILL to the command and everything it started, its output being unwanted (SIGTERM could be
    /// ignored). The group lives on while any member does, and its id is not reused before, so this is
    /// safe after the shell is reaped too; `ESRCH` once every member is gone.
    func stopAll() {
        kill(-leader, SIGKILL)
    }
}

/// The most a token command may print: an access token is a few KiB at most.
let maximumTokenCommandOutputBytes = 64 * 1024

/// The command's output, handed from the reading thread.
private final class CollectedOutput: @unchecked Sendable {
    // @unchecked: `data` is written once before `done` is signalled and read only after waiting for it.
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)
    private let tooMuch = Atomic<Bool>(false)

    /// The command printed more than `maximumTokenCommandOutputBytes` (set before it is stopped).
    func overflow() { tooMuch.store(true, ordering: .sequentiallyConsistent) }
    var overflowed: Bool { tooMuch.load(ordering: .sequentiallyConsistent) }

    func finish(_ data: Data) {
        self.data = data
        done.signal()
    }

    /// The output once the reader reached its end, or nil at `deadline`.
    func wait(until deadline: DispatchTime) -> Data? {
        guard done.wait(timeout: deadline) == .success else { return nil }
        done.signal()   // a later wait returns at once
        return data
    }
}

/// The environment a token command runs in: this process's, without the variables jobctl keeps its own
/// secrets in. The command needs what fetches a token (`PATH`, `HOME`, the proxies, gcloud's settings),
/// never the event log's URL with its password (`JOBCTL_DB`) — it inherited it, and a command that logs its
/// environment, or a tool that sends it along with a crash report, carried the password off.
enum TokenCommandEnvironment {
    /// The variables withheld: the log's URL and libpq's password for it, and the token and command jobctl
    /// redacts wherever it shows them.
    static let withheld: Set<String> = ["JOBCTL_DB", "PGPASSWORD", "GOOGLE_OAUTH_ACCESS_TOKEN", "JOBCTL_TOKEN_COMMAND"]

    /// `environment` without the withheld variables, as `NAME=value` lines.
    static func entries(of environment: [String: String]) -> [String] {
        environment.filter { !withheld.contains($0.key) }.map { "\($0.key)=\($0.value)" }
    }

    /// Calls `body` with `entries(of: environment)` as a NULL-terminated C array, valid for the call.
    static func withEntries<T>(of environment: [String: String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> T) -> T {
        let strings = entries(of: environment).map { strdup($0) }
        defer { strings.forEach { free($0) } }
        return (strings + [nil]).withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
