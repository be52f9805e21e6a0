import CCurl
import Foundation
import JobModel
import Synchronization

// The one file that calls libcurl. Every other file sees `HTTPRequest`, `HTTPResponse`,
// `RequestBodySource` and `ResponseBodySink` only.

// MARK: - Engine

/// Runs HTTP exchanges on one libcurl multi handle driven by one dedicated thread.
///
/// Why this shape:
/// - A thread per transfer does not scale to a worker running hundreds of jobs, and blocking
///   `curl_easy_perform` inside Swift concurrency would starve the cooperative pool (2 cores in CI).
///   One multi handle multiplexes every transfer of the process on one thread that sleeps in
///   `curl_multi_poll` and is woken by `curl_multi_wakeup` when work is submitted.
/// - The multi handle owns the connection cache, so consecutive requests to one host (chunks of a
///   resumable upload, metadata then media, a worker's thousands of small files) reuse connections.
/// - Easy handles are not: each exchange gets a new one, freed when it ends. The libcurl of Debian 12
///   (7.88) keeps a pointer to the last header a handle stored past `curl_easy_reset` and the next
///   request's clean-up of its headers, and an answer whose first header line begins with a space or a
///   tab (an obsolete line folding with nothing to fold onto) is then appended to that freed header: a
///   double free that aborted the worker, every job in flight with it, on any server's word. A new
///   handle has no such pointer, and libcurl refuses that answer (curl error 43).
/// - Callers `await` an exchange; the engine resumes their `CheckedContinuation` when
///   `curl_multi_info_read` reports the exchange done. Bodies stream through callbacks in both
///   directions, so memory stays flat whatever the object size.
/// - Pause and cancel never touch curl from another thread: a stop wakes the engine thread
///   (`curl_multi_wakeup`), whose next `curl_multi_perform` runs every transfer's progress callback
///   (which libcurl also calls at least once a second, even on a stalled connection); the callback
///   reads `TransferControl.stopReason` and aborts the exchange from inside curl.
/// - The same callback enforces the stall limit and the minimum rate (`MovementWindow`: nothing, or less
///   than `CurlOptions.minRate` on average, moved over the last `CurlOptions.stallTimeout` of running
///   time) and the job's deadline, so each failure says which limit was hit; `CURLOPT_TIMEOUT_MS` backs the deadline up
///   in phases where libcurl calls no progress callback.
/// - Every header line is checked before it reaches curl: a control character in a value (CR LF from a
///   token or a manifest) would start a header of its own, so such a request is refused, never sent.
///
/// See https://curl.se/libcurl/c/libcurl-multi.html and https://curl.se/libcurl/c/curl_multi_poll.html
final class CurlEngine: @unchecked Sendable {
    // @unchecked: `multi` is used only by the engine thread, except `curl_multi_wakeup`, which
    // libcurl documents as callable from any thread; `pending` is guarded by a mutex.

    /// The process-wide engine, started (libcurl loaded, its thread running) at its first use, so a
    /// command or a worker that moves no HTTP byte never loads libcurl. Throws when libcurl cannot be
    /// loaded on this host: each exchange then fails with the reason, and nothing else is affected.
    static var shared: CurlEngine {
        get throws(TransferFailure) {
            switch sharedEngine {
            case .success(let engine):
                // Made at the first exchange; one whose thread the system refused is tried again at the next.
                return try engine.withLock { (engine) throws(TransferFailure) -> CurlEngine in
                    if let engine { return engine }
                    do throws(ThreadStartFailure) {
                        let started = try CurlEngine()
                        engine = started
                        return started
                    } catch {
                        let reason = "no HTTP exchange can run: \(error)"
                        LocalFaults.report(reason)
                        throw .failed(StorageError(.unknown, reason, retryable: true))
                    }
                }
            case .failure(let failure):
                if case .failed(let error) = failure { LocalFaults.report(error.message) }
                throw failure
            }
        }
    }

    private static let sharedEngine: Result<Mutex<CurlEngine?>, TransferFailure> = {
        if let failure = CurlGlobal.failure { return .failure(.failed(StorageError(.internalError, failure))) }
        return .success(Mutex(nil))
    }()

    /// Idle connections kept open for reuse. Generous: an idle socket costs one descriptor, while a
    /// full cache closes the oldest idle connection, and a worker talking to many hosts (or a test run
    /// with many servers at once) would lose the connection its next request meant to reuse.
    static let connectionCacheSize = 256

    private let multi: UnsafeMutableRawPointer
    private let pending = Mutex<[CurlExchange]>([])
    /// Easy handles created so far (tests count them: one an exchange).
    let handlesCreated = Atomic<Int>(0)

    /// libcurl's receive buffer: larger means fewer write callbacks per byte (each hashes and may write to disk).
    static let receiveBufferSize = 256 * 1024
    /// Redirects an exchange that follows them follows at most (`CURLOPT_MAXREDIRS`): more is a loop, or
    /// a chain no file server makes.
    static let maxRedirects = 5

    /// Whether `url` is an https URL (the scheme compared as libcurl does, case-insensitively).
    static func isHTTPS(_ url: String) -> Bool {
        url.utf8.count >= 8 && url.prefix(8).lowercased() == "https://"
    }

    /// Times an exchange was paused because its body's hashing fell behind, in this process (tests).
    static let hashingPauses = Atomic<Int>(0)

    /// libcurl's upload buffer: 1 MiB (fewer read callbacks, each a `pread` and a hash), or just the
    /// body when it is smaller (never under libcurl's 16 KiB minimum). libcurl allocates it afresh for
    /// every upload, so a small file's upload no longer allocates and frees a whole MiB.
    static func uploadBufferSize(for bodyLength: Int64?) -> Int {
        let largest = 1024 * 1024
        guard let bodyLength, bodyLength >= 0 else { return largest }
        return Int(min(Int64(largest), max(16 * 1024, bodyLength)))
    }

    /// An engine and its thread, named `threadName` (the process-wide one is `jobctl-curl`; tests that need
    /// an engine of their own name theirs otherwise, so thread counts of the shared one stay true). The
    /// thread runs for the life of the process.
    init(threadName: String = "jobctl-curl") throws(ThreadStartFailure) {
        CurlGlobal.initialise()
        // curl_multi_init only fails when malloc fails; there is no way to run transfers then.
        guard let multi = jobctl_curl_multi_init() else { fatalError("curl_multi_init failed: out of memory") }
        self.multi = multi
        // Keep idle connections for reuse even when many hosts are in play: libcurl's default cache
        // is four per *currently added* handle, so sequential requests interleaved with other
        // transfers would lose their connection (https://curl.se/libcurl/c/CURLMOPT_MAXCONNECTS.html).
        jobctl_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, Self.connectionCacheSize)
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: threadName) { [self] in self.run() }
        } catch {
            jobctl_curl_multi_cleanup(multi)
            throw error
        }
    }

    /// Performs one exchange. The body source and sink are driven on the engine thread until the
    /// exchange completes; the caller must not touch them meanwhile.
    ///
    /// `requestSent` is called (on the engine thread, before the caller resumes) when a copy of the
    /// request may have reached the server without this exchange seeing its answer: the exchange failed
    /// or stopped after the request was written to a connection, or it succeeded but only after libcurl
    /// sent the request again on a fresh connection because the reused one died (the first copy may
    /// have been carried out: a DELETE's answer is then a 404). It is not called when no copy got that
    /// far (a refused connection, a failed name lookup or TLS handshake, a stop before the request).
    /// It may be called more than once for one exchange.
    func perform(_ request: HTTPRequest, source: (any RequestBodySource)? = nil, sink: (any ResponseBodySink)? = nil,
                 control: TransferControl?, options: CurlOptions,
                 requestSent: (@Sendable () -> Void)? = nil) async throws(TransferFailure) -> HTTPResponse {
        let exchange = CurlExchange(request: request, source: source, sink: sink, control: control, options: options,
                                    requestSent: requestSent)
        // A stop wakes the engine thread, so the progress callback sees it now rather than after up to a
        // second asleep in `curl_multi_poll` (a rate-limited or stalled server sends nothing meanwhile).
        let waker = control?.addWaker { [self] in jobctl_curl_multi_wakeup(multi) }
        defer { if let waker { control?.removeWaker(waker) } }
        let result: Result<HTTPResponse, TransferFailure> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                exchange.continuation = continuation
                // Only the exchange that finds the queue empty wakes the engine thread: any other one
                // joins a queue whose wake-up is already sent (sent after the first one's append, and the
                // thread takes the whole queue at once), so a burst of submissions costs one wake-up.
                let first = pending.withLock { queue -> Bool in
                    queue.append(exchange)
                    return queue.count == 1
                }
                if first { jobctl_curl_multi_wakeup(multi) }
            }
        } onCancel: {
            exchange.taskCancelled.store(true, ordering: .relaxed)
            jobctl_curl_multi_wakeup(multi)
        }
        return try result.get()
    }

    // MARK: The engine thread

    private func run() {
        var active: [UnsafeMutableRawPointer: CurlExchange] = [:]
        while true {
            let submitted = pending.withLock { queue -> [CurlExchange] in
                defer { queue.removeAll() }
                return queue
            }
            for exchange in submitted {
                do {
                    let easy = try exchange.start { newHandle() }
                    let code = jobctl_curl_multi_add_handle(multi, easy)
                    guard code == CURLM_OK else {
                        exchange.finish(code: CURLE_FAILED_INIT, cause: String(cString: jobctl_curl_multi_strerror(code)))
                        release(exchange)
                        continue
                    }
                    active[easy] = exchange
                } catch {
                    exchange.complete(.failure(error))
                    release(exchange)
                }
            }
            var running: Int32 = 0
            checkMulti(jobctl_curl_multi_perform(multi, &running), "curl_multi_perform")
            var remaining: Int32 = 0
            while let message = jobctl_curl_multi_info_read(multi, &remaining) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                let code = message.pointee.data.result
                // Before the handle leaves: libcurl names the connection it kept only while the handle is in.
                active[easy]?.noteKeptConnection()
                jobctl_curl_multi_remove_handle(multi, easy)
                guard let exchange = active.removeValue(forKey: easy) else { continue }
                if exchange.mayResendOnNewConnection(code: code) {
                    // The kept connection it was about to use was out of step (see `IdleHTTP1Connections`):
                    // nothing of this request was sent, so it goes again, on a new connection.
                    release(exchange)
                    do {
                        let easy = try exchange.restart { newHandle() }
                        if jobctl_curl_multi_add_handle(multi, easy) == CURLM_OK {
                            active[easy] = exchange
                            continue
                        }
                        exchange.finish(code: CURLE_FAILED_INIT, cause: "curl_multi_add_handle failed")
                    } catch {
                        exchange.complete(.failure(error))
                    }
                    release(exchange)
                    continue
                }
                exchange.finish(code: code, cause: nil)
                release(exchange)
            }
            // Rate-limited exchanges paused in a callback continue once their buckets allow.
            var timeout: Int32 = 1000
            let now = ContinuousClock.now
            var failed: [(UnsafeMutableRawPointer, CURLcode)] = []
            func resume(_ easy: UnsafeMutableRawPointer, _ exchange: CurlExchange) {
                switch exchange.resumeIfAllowed(at: now) {
                case .moving: break
                case .paused(let wait): timeout = min(timeout, Int32(clamping: wait))
                case .failed(let code): failed.append((easy, code))
                }
            }
            // The exchange that waited longest for a shared rate limit goes first: resumed in the
            // dictionary's fixed order, the first took every byte the limit freed and the last ones none,
            // until the stall limit failed them. Sorted only while one waits: the loop turns at every step
            // of every transfer, and a sorted copy each time is work for nothing when no limit holds one back.
            if active.values.contains(where: { $0.waitedSince != nil }) {
                let longestWaitingFirst = active.sorted { first, second in
                    switch (first.value.waitedSince, second.value.waitedSince) {
                    case (let a?, let b?): a < b
                    case (_?, nil): true
                    default: false
                    }
                }
                for (easy, exchange) in longestWaitingFirst { resume(easy, exchange) }
            } else {
                for (easy, exchange) in active { resume(easy, exchange) }
            }
            // An unpause whose callbacks failed (the sink refused the bytes held back: a full disk) ends
            // the exchange here: libcurl does not, and would go on delivering the rest of the body.
            for (easy, code) in failed {
                jobctl_curl_multi_remove_handle(multi, easy)
                guard let exchange = active.removeValue(forKey: easy) else { continue }
                exchange.finish(code: code, cause: nil)
                release(exchange)
            }
            // Sleeps until a socket is ready, curl's own timer fires, a submission wakes us, a paused
            // exchange may continue, or 1 s.
            checkMulti(jobctl_curl_multi_poll(multi, nil, 0, timeout, nil), "curl_multi_poll")
        }
    }

    /// A new easy handle (engine thread), or nil when libcurl cannot allocate one.
    private func newHandle() -> UnsafeMutableRawPointer? {
        guard let easy = jobctl_curl_easy_init() else { return nil }
        handlesCreated.add(1, ordering: .relaxed)
        return easy
    }

    /// Frees a finished exchange's handle (engine thread, after the handle left the multi handle; the
    /// multi handle keeps the connection for the next exchange). Never reused: see the type's notes.
    private func release(_ exchange: CurlExchange) {
        guard let easy = exchange.releaseHandle() else { return }
        jobctl_curl_easy_cleanup(easy)
    }

    /// The one place multi-interface codes are checked. They only fail on misuse or out of memory;
    /// the loop keeps going (each exchange still completes or times out), but never spins hot.
    private func checkMulti(_ code: CURLMcode, _ call: String) {
        guard code != CURLM_OK, code != CURLM_CALL_MULTI_PERFORM else { return }
        StandardStreams.write("jobctl: \(call) failed: \(String(cString: jobctl_curl_multi_strerror(code)))\n", to: STDERR_FILENO)
        usleep(10_000)
    }
}

/// libcurl loaded (`jobctl_curl_load`, the shim's dlopen) and `curl_global_init` called, exactly once per
/// process (https://curl.se/libcurl/c/curl_global_init.html).
private enum CurlGlobal {
    /// Nil when libcurl is ready, else why it cannot be used.
    static let failure: String? = {
        if let reason = jobctl_curl_load() {
            return "libcurl could not be loaded, so no HTTP or gs:// transfer can run (install libcurl4; if it is installed, the "
                + "process may be short of memory or address space: `ulimit -v`, systemd's MemoryMax=): \(String(cString: reason))"
        }
        return jobctl_curl_global_init(Int(CURL_GLOBAL_ALL)) == CURLE_OK ? nil : "curl_global_init failed"
    }()

    static func initialise() {
        // An engine of a test's own, made where libcurl is installed: nothing can run without it.
        if let failure { fatalError(failure) }
    }
}

/// Settings applied to every exchange (from `StorageConfiguration.curlOptions`).
struct CurlOptions: Sendable {
    /// Seconds to resolve, connect and finish the TLS handshake.
    var connectTimeout: Int
    /// Seconds without a byte moved (either way) before the exchange fails as stalled: the window
    /// `minRate` is measured over too.
    var stallTimeout: Int
    /// The CAs HTTPS servers are checked against.
    var trust: CertificateTrust
    /// The bucket shared by every exchange of the worker (`--bwlimit`), if any.
    var bandwidth: SharedBandwidth?
    /// Whether the exchange goes straight to its host whatever `http_proxy`, `HTTPS_PROXY`, `ALL_PROXY`
    /// say: the metadata server's, as Google's auth libraries do (it is link-local to the machine, and
    /// a proxy would be handed the machine's tokens).
    var bypassesProxies = false
    /// The least average rate, in bytes per second, over the last `stallTimeout` seconds of running time
    /// before the exchange fails as too slow (`--min-rate`, `JOBCTL_MIN_RATE`); 0: off. Lowered for an
    /// exchange its rate limits hold (see `MovementWindow.minimum(_:limitedTo:)`).
    var minRate: Int64 = StorageConfiguration.defaultMinRate
    /// How a job's error names what set `stallTimeout` and `minRate` (see `StorageConfiguration.curlOptions`).
    var stallTimeoutSetting = "worker --stall-timeout or JOBCTL_STALL_TIMEOUT"
    var minRateSetting = "worker --min-rate or JOBCTL_MIN_RATE"
}

/// Why an exchange did not produce a response.
enum TransferFailure: Error {
    /// The `TransferControl` asked to stop (or the Swift task was cancelled: `.cancel`).
    case stopped(StopReason)
    case failed(StorageError)
}

// MARK: - One exchange

/// One request/response on one easy handle. Not `Sendable` in spirit: it is created by the caller,
/// handed to the engine thread exactly once, and read by the caller again only after the
/// continuation resumed (which orders all engine-thread writes before the caller's reads).
private final class CurlExchange: @unchecked Sendable {
    let request: HTTPRequest
    let source: (any RequestBodySource)?
    let sink: (any ResponseBodySink)?
    let control: TransferControl?
    let options: CurlOptions
    let taskCancelled = Atomic<Bool>(false)
    /// See `CurlEngine.perform`.
    private let requestSent: (@Sendable () -> Void)?
    /// Times libcurl was about to send the request (`CURLOPT_PREREQFUNCTION`, set only with
    /// `requestSent`); nil when the library does not offer the callback (before 7.80).
    private var requestsStarted: Int?
    /// Requests libcurl was about to send since the latest status line arrived, counted when the
    /// prerequest callback is set (`countsRequests`). After a redirect's status, one or more means the
    /// redirect was followed (the target was reached and asked); none, that it was not.
    private var requestsSinceAnswer = 0
    private var countsRequests = false
    var continuation: CheckedContinuation<Result<HTTPResponse, TransferFailure>, Never>?

    private var easy: UnsafeMutableRawPointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var errorBufferPointer: UnsafeMutablePointer<CChar>
    private var status = 0
    private var headers: [String: String] = [:]
    /// Whether the blank line ending the final response's headers arrived.
    private var headersEnded = false
    /// Whether a byte of the response's body arrived: header lines after it are the trailer fields of a
    /// chunked body, which libcurl hands to the header callback too.
    private var bodyStarted = false
    /// A success answer nothing reads (`discardsSuccessBody`) whose body was not read: its status and
    /// headers are the answer, and the exchange was ended where they ended (see `receiveHeader`).
    private var answeredAtHeaders = false
    /// Whether the final response's status line is HTTP/1.x (see `HTTPResponse.isHTTP1`).
    private var overHTTP1 = true
    private var body = Data()
    /// An error raised by the source or sink (it explains a READ/WRITE/ABORTED curl code).
    private var bodyError: StorageError?
    /// Why the response's headers were refused (a Content-Length that frames nothing, or two): the header
    /// callback ended the exchange there.
    private var refusedAnswer: StorageError?
    private var stopReason: StopReason?
    /// Which of the exchange's own limits cut it off, if one did.
    private var limitHit: TransferLimit?
    /// What moved over the last stall window, jobctl's own pauses left out (set again at `start`).
    private var movement: MovementWindow
    /// Bytes of response headers received: they move too (libcurl's progress counts only bodies, so a
    /// server trickling its headers was "no data" while it sent them).
    private var headerBytes: Int64 = 0

    private enum TransferLimit: Equatable {
        /// Too little moved over the last stall window (nothing, or below the minimum rate).
        case movedTooLittle(MovementWindow.Shortfall)
        case deadline
    }

    /// The job's own limit (`max_rate:`) and the process's (`--bwlimit`); bytes move only while neither is in debt.
    private let ownRate: SharedBandwidth?
    private let bandwidth: SharedBandwidth?
    /// Whether a callback paused the exchange for its rate limits.
    private var pausedForRate = false
    /// When the exchange last waited for its rate limits: of the exchanges sharing a limit, the one that
    /// waited longest is let go first (`waitedSince`), so none is held back for good by the others.
    private(set) var waitedSince: ContinuousClock.Instant?
    /// The exchange was let go in its turn (`resumeIfAllowed`): its next body callback moves its chunk
    /// even if the limit is in debt by then. A download's held bytes move inside the unpause, but an
    /// upload's body is asked for later, when the socket can take it; by then the downloads let go
    /// after it had put the bucket in debt again, and the upload, paused once more at the back of the
    /// line, moved nothing while three downloads shared the limit. The piece is still debited: the
    /// average rate holds.
    private var hasTurn = false
    /// The bytes a callback could not move because the body's hashing fell behind (a stream with MD5),
    /// and whether they were the request's: the exchange is paused until they can move without waiting.
    private var pausedForHashing: (count: Int, sending: Bool)?

    init(request: HTTPRequest, source: (any RequestBodySource)?, sink: (any ResponseBodySink)?,
         control: TransferControl?, options: CurlOptions, requestSent: (@Sendable () -> Void)?) {
        self.requestSent = requestSent
        bandwidth = options.bandwidth
        ownRate = control?.rateLimit
        movement = MovementWindow(window: .seconds(options.stallTimeout),
                                  minimum: MovementWindow.minimum(options.minRate, limitedTo: [control?.rateLimit?.rate, options.bandwidth?.rate]
                                      .compactMap { $0 }.min()),
                                  startedAt: .now)
        self.request = request
        self.source = source
        self.sink = sink
        self.control = control
        self.options = options
        errorBufferPointer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBufferPointer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    deinit {
        if let easy { jobctl_curl_easy_cleanup(easy) }
        if let headerList { jobctl_curl_slist_free_all(headerList) }
        errorBufferPointer.deallocate()
    }

    /// Configures a new easy handle from `handle` (engine thread), taken only once the request passed
    /// its checks.
    func start(handle: () -> UnsafeMutableRawPointer?) throws(TransferFailure) -> UnsafeMutableRawPointer {
        // Refused before a handle exists: nothing of this request may reach the network.
        for line in request.headers where !HeaderValues.isSafeLine(line) {
            let name = HeaderValues.printableName(of: line).map { "its \($0) header" } ?? "a header line"
            throw .failed(StorageError(.invalidArgument,
                                       "refusing to send the request: \(name) holds a line break or another control character "
                                           + "(or is not `Name: value`), which would add headers of its own; the value is not shown",
                                       url: redactedURL(request.url)))
        }
        if let deadline = control?.deadline, deadline.hasPassed() {
            throw .failed(deadline.error(url: request.url))
        }
        guard let easy = handle() else {
            throw .failed(StorageError(.internalError, "libcurl could not create a handle (out of memory)"))
        }
        self.easy = easy
        movement = MovementWindow(window: movement.window, minimum: movement.minimum, startedAt: .now)
        let context = Unmanaged.passUnretained(self).toOpaque()
        try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_URL, request.url))
        // The path is sent exactly as given: no `/./` or `/../` folding (references refuse dot segments,
        // and a presigned URL's signature covers the path as written).
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_PATH_AS_IS, 1))
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBufferPointer))
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, options.connectTimeout))
        if let deadline = control?.deadline {
            // The progress callback ends the exchange at the deadline; this covers the phases (name lookup,
            // connect) in which libcurl may not call it.
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, max(1, Int(deadline.remainingMilliseconds))))
        }
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1))
        if options.bypassesProxies {
            // "*": no proxy for any host (https://curl.se/libcurl/c/CURLOPT_NOPROXY.html); it wins over the
            // proxy variables libcurl reads from the environment. A reset handle has no such list again.
            try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_NOPROXY, "*"))
        }
        // Which CAs to trust (https://curl.se/libcurl/c/CURLOPT_CAINFO.html, CURLOPT_CAPATH.html). A nil
        // path with `exclusive` switches libcurl's default off; verification itself always stays on.
        let trust = options.trust
        if trust.exclusive || trust.caFile != nil {
            try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_CAINFO, trust.caFile))
        }
        if trust.exclusive || trust.caDirectory != nil {
            try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_CAPATH, trust.caDirectory))
        }
        // TLS 1.2 at the least (RFC 8996 deprecates 1.0 and 1.1), whatever OpenSSL's configuration allows:
        // libcurl's default floor is OpenSSL's, which `OPENSSL_CONF` or a legacy system policy lowers to TLS 1.0
        // (https://curl.se/libcurl/c/CURLOPT_SSLVERSION.html).
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_SSLVERSION, Int(CURL_SSLVERSION_TLSv1_2)))
        // libcurl keeps the CA store it loaded for 24 hours by default, by the file's name only: a bundle
        // replaced while the worker runs (a private CA rotated, a CA withdrawn) went unread for a day, and
        // one removed still served. Each new connection reads the CAs as they are now.
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_CA_CACHE_TIMEOUT, 0))
        // Larger buffers mean fewer callbacks per byte (each one hashes and may write to disk); they
        // are per exchange and fixed, so memory stays flat.
        // Rate limits (`max_rate:`, `--bwlimit`) are kept by pausing in the body callbacks
        // (https://curl.se/libcurl/c/curl_easy_pause.html) rather than CURLOPT_MAX_RECV_SPEED_LARGE: the
        // libcurl of Debian 12 reads whole socket buffers between its checks and overshoots a 2M limit by
        // half on loopback. Small buffers keep each chunk, and so the error, small.
        if let rate = [ownRate?.rate, bandwidth?.rate].compactMap({ $0 }).min() {
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, TokenBucket.chunkSize(for: rate)))
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, TokenBucket.chunkSize(for: rate)))
        } else {
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, CurlEngine.receiveBufferSize))
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, CurlEngine.uploadBufferSize(for: request.bodyLength)))
        }
        // Only loopback and the configured endpoints are ever targets; plain HTTP and HTTPS only.
        try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        if request.followRedirects {
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 1))
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_MAXREDIRS, CurlEngine.maxRedirects))
            // An https URL is followed to https only: a redirect to plain http would drop TLS, and the bytes
            // would come from wherever anyone on the path says.
            try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR,
                                                     CurlEngine.isHTTPS(request.url) ? "https" : "http,https"))
        }

        // Headers. An empty `Expect:` stops curl waiting for a 100-continue the emulator never sends.
        var lines = request.headers
        lines.append("Expect:")
        for line in lines { headerList = jobctl_curl_slist_append(headerList, line) }
        try check(jobctl_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList))

        // Method and request body.
        switch request.method {
        case "GET":
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1))
        case "HEAD":
            try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_NOBODY, 1))
        default:
            if request.bodyLength != nil || source != nil {
                // CURLOPT_UPLOAD streams the body through the read callback; CUSTOMREQUEST renames the
                // method (POST, PATCH) without changing how the body is sent.
                try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_UPLOAD, 1))
                try check(jobctl_curl_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(request.bodyLength ?? 0)))
                try check(jobctl_curl_easy_setopt_data_callback(easy, CURLOPT_READFUNCTION, curlRead))
                try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_READDATA, context))
                // When a reused keep-alive connection turns out dead, libcurl sends the request again on
                // a fresh one, and must rewind the body first; with a read callback but no seek callback
                // it cannot, and fails with CURLE_SEND_FAIL_REWIND instead
                // (https://curl.se/libcurl/c/CURLOPT_SEEKFUNCTION.html).
                try check(jobctl_curl_easy_setopt_seek_callback(easy, curlSeek))
                try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_SEEKDATA, context))
            }
            if request.method != "PUT" || (request.bodyLength == nil && source == nil) {
                try check(jobctl_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method))
            }
        }

        try check(jobctl_curl_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, curlWrite))
        try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context))
        try check(jobctl_curl_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, curlHeader))
        try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context))
        try check(jobctl_curl_easy_setopt_long(easy, CURLOPT_NOPROGRESS, 0))
        try check(jobctl_curl_easy_setopt_xferinfo_callback(easy, curlProgress))
        try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_XFERINFODATA, context))
        // Every socket libcurl opens is closed through `curlCloseSocket`, which forgets it as a kept connection.
        try check(jobctl_curl_easy_setopt_closesocket_callback(easy, curlCloseSocket))
        // Set for every exchange: it is where a kept connection is checked before a request goes out on it.
        if jobctl_curl_easy_setopt_prereq_callback(easy, curlPrerequest) == CURLE_OK {
            try check(jobctl_curl_easy_setopt_pointer(easy, CURLOPT_PREREQDATA, context))
            requestsStarted = 0
            countsRequests = true
        }
        return easy
    }

    /// The one place a `CURLcode` from setup is checked.
    private func check(_ code: CURLcode) throws(TransferFailure) {
        guard code != CURLE_OK else { return }
        throw .failed(StorageError(.internalError, "libcurl refused an option: \(String(cString: jobctl_curl_easy_strerror(code)))",
                                   url: redactedURL(request.url), cause: String(cString: jobctl_curl_easy_strerror(code))))
    }

    // MARK: Callbacks (engine thread)

    /// Request body bytes: https://curl.se/libcurl/c/CURLOPT_READFUNCTION.html
    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        if bodyError != nil || checkStop() { return Int(CURL_READFUNC_ABORT) }
        guard let source else {
            // Fixed in-memory body.
            let body = request.body
            let offset = bodyOffset
            let count = min(buffer.count, body.count - offset)
            guard count > 0 else { return 0 }
            body.withUnsafeBytes { bytes in
                // count > 0 implies a non-empty body, whose base address is never nil.
                buffer.baseAddress?.copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
            }
            bodyOffset += count
            return count
        }
        do {
            return try source.read(into: buffer)
        } catch {
            bodyError = error
            return Int(CURL_READFUNC_ABORT)
        }
    }

    private var bodyOffset = 0

    /// Kept connections found out of step as this exchange was about to use them (see `requestStarting`).
    private var outOfStepConnections = 0

    /// Engine thread, at the end of the transfer and before its handle leaves the multi handle: the
    /// connection libcurl kept for reuse (`CURLINFO_ACTIVESOCKET`; none when it closed it) is noted as an
    /// idle HTTP/1.x one, to be checked before its next request, or forgotten when it carries HTTP/2.
    func noteKeptConnection() {
        guard let easy else { return }
        var socket: curl_socket_t = -1
        guard jobctl_curl_easy_getinfo_socket(easy, CURLINFO_ACTIVESOCKET, &socket) == CURLE_OK, socket >= 0 else { return }
        guard overHTTP1, status >= 200 else {
            IdleHTTP1Connections.forget(socket)
            return
        }
        var localPort = 0
        var primaryPort = 0
        var localIP: UnsafeMutableRawPointer?
        var primaryIP: UnsafeMutableRawPointer?
        guard jobctl_curl_easy_getinfo_long(easy, CURLINFO_LOCAL_PORT, &localPort) == CURLE_OK,
              jobctl_curl_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &primaryPort) == CURLE_OK,
              jobctl_curl_easy_getinfo_pointer(easy, CURLINFO_LOCAL_IP, &localIP) == CURLE_OK,
              jobctl_curl_easy_getinfo_pointer(easy, CURLINFO_PRIMARY_IP, &primaryIP) == CURLE_OK,
              let localIP, let primaryIP else {
            IdleHTTP1Connections.forget(socket)
            return
        }
        IdleHTTP1Connections.kept(socket, key: IdleHTTP1Connections.key(
            localIP: String(cString: localIP.assumingMemoryBound(to: CChar.self)), localPort: localPort,
            primaryIP: String(cString: primaryIP.assumingMemoryBound(to: CChar.self)), primaryPort: primaryPort))
    }

    /// Whether the exchange ended only because the kept connection it was about to send its request on
    /// was out of step, before any copy of the request was sent anywhere (not after a redirect's first
    /// request), and for the first time: it may then be sent again, whole, on a new connection.
    func mayResendOnNewConnection(code: CURLcode) -> Bool {
        code == CURLE_ABORTED_BY_CALLBACK && outOfStepConnections == 1 && (requestsStarted ?? 0) == 0
            && stopReason == nil && bodyError == nil && rewindBody(to: 0)
    }

    /// A new handle for the same request after `mayResendOnNewConnection`: the exchange as it was before
    /// its first start (what it received, and the request's header list, are dropped).
    func restart(handle: () -> UnsafeMutableRawPointer?) throws(TransferFailure) -> UnsafeMutableRawPointer {
        if let headerList { jobctl_curl_slist_free_all(headerList) }
        headerList = nil
        errorBufferPointer.update(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        status = 0
        headers = [:]
        headersEnded = false
        bodyStarted = false
        overHTTP1 = true
        body = Data()
        headerBytes = 0
        requestsSinceAnswer = 0
        requestsStarted = nil
        countsRequests = false
        return try start(handle: handle)
    }

    /// https://curl.se/libcurl/c/CURLOPT_PREREQFUNCTION.html — the request is about to go out on a
    /// connection (again, when libcurl resends it after a reused connection died), named by its two ends.
    /// A kept HTTP/1.x connection with bytes waiting that no request asked for is closed, and the request
    /// is not sent on it (the exchange ends, and the engine sends it again on a new connection): on it,
    /// this request would have read the waiting bytes, another request's answer, as its own.
    func requestStarting(localIP: String, localPort: Int, primaryIP: String, primaryPort: Int) -> Int32 {
        let key = IdleHTTP1Connections.key(localIP: localIP, localPort: localPort, primaryIP: primaryIP, primaryPort: primaryPort)
        if IdleHTTP1Connections.closeIfOutOfStep(key: key) {
            outOfStepConnections += 1
            return CURL_PREREQFUNC_ABORT
        }
        requestsStarted = (requestsStarted ?? 0) + 1
        requestsSinceAnswer += 1
        return CURL_PREREQFUNC_OK
    }

    /// Rewinds the request body: https://curl.se/libcurl/c/CURLOPT_SEEKFUNCTION.html (libcurl asks
    /// for `SEEK_SET` to 0 before sending the request again on a fresh connection).
    func seekBody(to offset: Int64, origin: Int32) -> Int32 {
        guard origin == SEEK_SET else { return CURL_SEEKFUNC_CANTSEEK }
        return rewindBody(to: offset) ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL
    }

    private func rewindBody(to offset: Int64) -> Bool {
        if let source { return source.rewind(to: offset) }
        guard offset >= 0, offset <= Int64(request.body.count) else { return false }
        bodyOffset = Int(offset)
        return true
    }

    /// Response body bytes: https://curl.se/libcurl/c/CURLOPT_WRITEFUNCTION.html
    func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        // After the sink failed nothing more reaches it (its file may be gone), whatever libcurl does.
        if bodyError != nil || checkStop() { return false }
        if !bodyStarted, !bytes.isEmpty { bodyStarted = true }
        if (200..<300).contains(status), let sink {
            do {
                try sink.write(bytes, status: status, headers: headers)
            } catch {
                bodyError = error
                return false
            }
        } else if (200..<300).contains(status) {
            // An answer nothing reads, known short (`isShortBody`): dropped as it arrives.
            if request.discardsSuccessBody { return true }
            // An answer read into memory: whole, or refused as larger than such an answer can be (before
            // its first byte is kept when its Content-Length says so), never cut (see `answerLimit`).
            let announced = body.isEmpty ? headers["content-length"].flatMap { Int64($0) } : nil
            guard (announced ?? 0) <= Int64(request.answerLimit), body.count + bytes.count <= request.answerLimit else {
                bodyError = answerTooLarge(announced: announced)
                return false
            }
            body.append(contentsOf: bytes)
        } else if body.count < HTTPResponse.errorBodyLimit {
            body.append(contentsOf: bytes.prefix(HTTPResponse.errorBodyLimit - body.count))
        }
        return true
    }

    /// The failure of a success answer larger than the request's `answerLimit`: the server's fault (no
    /// answer of the API is that large; an endless one is not read to its end), retryable as an answer
    /// garbled on the way is.
    private func answerTooLarge(announced: Int64?) -> StorageError {
        let size = announced.map { " (\($0) bytes, its Content-Length said)" } ?? ""
        return StorageError(.unknown, "the server's answer was larger than \(ByteSize.format(Int64(request.answerLimit)))\(size), more "
                                + "than any answer to this request can be; it was not read further",
                            url: redactedURL(request.url), retryable: true)
    }

    // MARK: Rate limits

    /// Whether body bytes may move now; false marks the exchange paused (the callback returns PAUSE).
    func mayMoveBody() -> Bool {
        guard ownRate != nil || bandwidth != nil else { return true }
        if hasTurn {
            hasTurn = false
            return true
        }
        let now = ContinuousClock.now
        let ready = (ownRate?.isReady(at: now) ?? true) && (bandwidth?.isReady(at: now) ?? true)
        if !ready {
            pausedForRate = true
            movement.paused(at: now)
            if waitedSince == nil { waitedSince = now }
        }
        return ready
    }

    /// Whether a rate limit (`max_rate:`, `--bwlimit`) holds this exchange.
    var isRateLimited: Bool { ownRate != nil || bandwidth != nil }

    /// The most a rate-limited request body gives libcurl at a time: what libcurl hands a response's
    /// write callback at most (CURL_MAX_WRITE_SIZE), so exchanges taking turns at a shared limit move
    /// equal pieces. An upload filling its whole 64 KiB buffer each turn took four times a download's
    /// share.
    static let rateLimitedPiece = 16 * 1024

    /// Debits `count` body bytes from the rate limits.
    func movedBody(_ count: Int) {
        guard count > 0, ownRate != nil || bandwidth != nil else { return }
        let now = ContinuousClock.now
        ownRate?.take(count, at: now)
        bandwidth?.take(count, at: now)
    }

    /// Whether `count` body bytes can move now without the body's hashing waiting (see
    /// `PipelinedChecksums.reserve(forNext:)`); false marks the exchange paused (the callback returns
    /// PAUSE). Waiting there instead held the engine thread, and every other transfer with it, for as
    /// long as one stream's MD5 took to catch up.
    func hashingAllows(_ count: Int, sending: Bool) -> Bool {
        let allowed = sending ? (source?.mayGive(count) ?? true)
            : !(200..<300).contains(status) || (sink?.mayTake(count) ?? true)
        if !allowed {
            if pausedForHashing == nil { CurlEngine.hashingPauses.add(1, ordering: .relaxed) }
            pausedForHashing = (count, sending)
            movement.paused(at: .now)
        }
        return allowed
    }

    /// What `resumeIfAllowed` did: the exchange moves, stays paused (for at most that many
    /// milliseconds before the next look), or failed inside the unpause.
    enum Resumption: Equatable {
        case moving
        case paused(Int)
        case failed(CURLcode)
    }

    /// Engine thread, outside callbacks: unpauses an exchange paused for its rate limits or its hashing
    /// once they allow it again. The callbacks run inside the unpause, with the bytes libcurl held back;
    /// when one of them fails (the sink could not write them) the unpause returns the error and the
    /// engine must end the exchange itself (`failed`).
    func resumeIfAllowed(at now: ContinuousClock.Instant) -> Resumption {
        guard pausedForRate || pausedForHashing != nil, let easy else { return .moving }
        if pausedForRate {
            let wait = max(ownRate?.millisecondsUntilReady(at: now) ?? 0, bandwidth?.millisecondsUntilReady(at: now) ?? 0)
            guard wait == 0 else { return .paused(wait) }
            waitedSince = nil
            hasTurn = true
        }
        if let (count, sending) = pausedForHashing {
            // The hashing queue frees a block every ~1–2 ms while it catches up.
            guard hashingAllows(count, sending: sending) else { return .paused(1) }
        }
        pausedForRate = false
        pausedForHashing = nil
        // Held back by our own limits until now, not by the server: that time is no stall, nor slowness.
        movement.resumed(at: now)
        let code = jobctl_curl_easy_pause(easy, CURLPAUSE_CONT)
        if code != CURLE_OK || bodyError != nil || stopReason != nil {
            return .failed(code != CURLE_OK ? code : CURLE_WRITE_ERROR)
        }
        return pausedForRate || pausedForHashing != nil ? .paused(1) : .moving
    }

    /// One header line: https://curl.se/libcurl/c/CURLOPT_HEADERFUNCTION.html — false ends the exchange
    /// (the callback then returns 0, which libcurl takes as an error, and closes the connection).
    func receiveHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        headerBytes += Int64(bytes.count)
        // A chunked body's trailer fields (RFC 9112 §7.1.2) come through here after the body, and were
        // taken as the answer's headers: a trailer `Content-Range` made a whole answer a cut one, a line
        // `HTTP/1.1 404 Not Found` a new answer (curl error 43), and an `x-goog-hash` was checked over
        // HTTP/1.1 but not over HTTP/2, whose trailers never come here. RFC 9110 §6.5.1: fields of the
        // trailer are not to be merged into the header; none is read.
        if bodyStarted || isTrailerOfEmptyChunkedBody { return true }
        // Parsed as bytes: Foundation's trimming goes through NSString, and was 6 % of the samples of a
        // drain of small downloads (a dozen header lines per job).
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, Self.isSpace(bytes[start]) || Self.isLineEnd(bytes[start]) { start += 1 }
        while end > start, Self.isSpace(bytes[end - 1]) || Self.isLineEnd(bytes[end - 1]) { end -= 1 }
        let line = bytes[start..<end]
        if line.starts(with: "HTTP/".utf8) {
            // A new response (after a redirect or a 1xx): forget the previous one's headers.
            status = HTTPStatusLine.code(line)
            requestsSinceAnswer = 0
            overHTTP1 = line.starts(with: "HTTP/1.".utf8)
            headers = [:]
            headersEnded = false
            bodyStarted = false
            return true
        }
        if line.isEmpty {
            guard status != 0 else { return true }
            headersEnded = true
            guard framingAccepted() else { return false }
            // A success answer nothing reads is the status and headers: its body is read (and dropped) only
            // when its length says it is short, which keeps the connection for the next request; else the
            // exchange ends here, as answered. Read to its end, an endless or trickling body held the job
            // for ever — a bad upload's clean-up DELETE under no job's limits past a cancel and a shutdown,
            // an upload that had landed failing on its timeout.
            if request.discardsSuccessBody, (200..<300).contains(status), !Self.isShortBody(status: status, headers) {
                answeredAtHeaders = true
                return false
            }
            return true
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return true }
        // Lowercased straight into the string's storage (a lazily mapped sequence took the slow path that
        // copies and checks byte by byte: ~1,000 instructions a header).
        let nameBytes = line[..<colon]
        let name = String(unsafeUninitializedCapacity: nameBytes.count) { buffer in
            for (offset, byte) in nameBytes.enumerated() { buffer[offset] = Self.lowercased(byte) }
            return nameBytes.count
        }
        var valueStart = colon + 1
        while valueStart < end, Self.isSpace(bytes[valueStart]) { valueStart += 1 }
        let value = String(decoding: bytes[valueStart..<end], as: UTF8.self)
        if let existing = headers[name] {
            headers[name] = existing + "," + value   // x-goog-hash comes once per algorithm
        } else {
            headers[name] = value
        }
        return true
    }

    /// Whether an answer's body is known short before it is read: none (204), or a `Content-Length` of
    /// at most `errorBodyLimit` (a chunked or connection-framed body has no length to go by).
    static func isShortBody(status: Int, _ headers: [String: String]) -> Bool {
        if status == 204 { return true }
        guard let length = headers["content-length"].flatMap({ Int64($0) }) else { return false }
        return length <= Int64(HTTPResponse.errorBodyLimit)
    }

    /// Whether a header line now is a trailer of a chunked answer with no body byte: the final answer's
    /// headers ended (not a 1xx's or a redirect's, which another answer follows; not a proxy's CONNECT
    /// answer, which has no chunked body) and it was chunked.
    private var isTrailerOfEmptyChunkedBody: Bool {
        headersEnded && overHTTP1 && status >= 200 && !(300..<400).contains(status)
            && headers["transfer-encoding"]?.lowercased().contains("chunked") == true
    }

    /// Whether the response's `Content-Length` (every one it sent, joined) frames a body, checked where its
    /// headers end, before libcurl reads a byte of the body: else `refusedAnswer` says why.
    ///
    /// RFC 9112 §6.3: a length that is not digits, or several that differ, is an unrecoverable error. libcurl
    /// 7.88 frames such an answer as it can, and each way was a lie taken for an answer or a wait: a length
    /// past 2^63 it takes for none and reads until the server closes — a server keeping the connection
    /// open ended as "no data for N s"; of two headers it frames by the last (a longer one waited the
    /// same way); `5x`, `+5` and `0x5` it reads as 5, 5 and 0 (the rest of the body left on the connection).
    /// (One that is negative, empty or starts with no digit, `abc`, libcurl refuses itself before this
    /// callback sees it, and its error does not quote it: see `curlFailure`.)
    /// Each fails the attempt at once as a fault of this answer, retryable, as conflicting lengths always
    /// did; ending here closes the connection, so nothing of the body is left for the next request sent on
    /// it. The same length written more than once (`5, 5`, `5, 005`) is the one length (RFC 9112 allows
    /// it) and is passed on written once, so callers read a size from it.
    private func framingAccepted() -> Bool {
        // Every answer comes here: one length, as nearly every server sends, is read without Foundation
        // (its trimming goes through NSString) and without an array.
        guard let value = headers["content-length"], !Self.isLength(value) else { return true }
        let lengths = value.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        let shown = TerminalText.clipped(TerminalText.printable(value), limit: 80)
        guard lengths.contains(where: { !Self.isLength($0) }) else {
            guard Set(lengths.map { $0.drop { $0 == "0" } }).count == 1 else {
                refusedAnswer = StorageError(
                    .unknown, "the server sent conflicting Content-Length headers (\(shown)); its answer was not taken and a retry asks again",
                    url: redactedURL(request.url), retryable: true)
                return false
            }
            headers["content-length"] = lengths[0]
            return true
        }
        refusedAnswer = StorageError(.unknown, Self.notALengthMessage(shown), url: redactedURL(request.url), retryable: true)
        return false
    }

    /// What an answer whose Content-Length is not a length is told; `shown` names the value (already made
    /// printable and cut), nil when it is not known (libcurl refused it: nothing is guessed about it).
    static func notALengthMessage(_ shown: String?) -> String {
        "the server sent a Content-Length that is not a length\(shown.map { " (\($0))" } ?? ""): a length is digits only, "
            + "at most \(Int64.max); its answer was not taken and a retry asks again"
    }

    /// Whether `text` is a Content-Length: ASCII digits only, at most `Int64.max` (curl_off_t).
    private static func isLength(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } && Int64(text) != nil
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
    private static func isLineEnd(_ byte: UInt8) -> Bool { byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n") }
    private static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
    }

    /// https://curl.se/libcurl/c/CURLOPT_XFERINFOFUNCTION.html — nonzero aborts the exchange. Called at
    /// least once a second while the exchange runs, so it also enforces the stall limit, the minimum rate
    /// and the deadline.
    func progressTick(downloaded: Int64, uploaded: Int64) -> Int32 {
        if checkStop() { return 1 }
        let now = ContinuousClock.now
        if let deadline = control?.deadline, deadline.hasPassed(at: now) {
            limitHit = .deadline
        } else if let shortfall = movement.ticked(bytes: headerBytes + downloaded + uploaded, at: now) {
            limitHit = .movedTooLittle(shortfall)
        }
        return limitHit == nil ? 0 : 1
    }

    /// What an exchange that moved too little over the last stall window is told: which limit, by how
    /// much, and how to change it. Retryable: another attempt may find a faster path or server.
    private func movedTooLittleError(_ shortfall: MovementWindow.Shortfall) -> StorageError {
        let message: String
        switch shortfall {
        case .stalled:
            message = "no data for \(options.stallTimeout) s (the limit is set by \(options.stallTimeoutSetting))"
        case .tooSlow(let rate):
            let lowered = movement.minimum < options.minRate ? ", lowered to a quarter of this transfer's rate limit (max_rate, --bwlimit)" : ""
            message = "the transfer moved only \(ByteSize.format(rate))/s over the last \(options.stallTimeout) s, below the minimum "
                + "of \(ByteSize.format(movement.minimum))/s\(lowered) (set by \(options.minRateSetting), 0 turns it off; "
                + "the window by \(options.stallTimeoutSetting))"
        }
        return StorageError(.unknown, message, url: redactedURL(request.url), retryable: true)
    }

    private func checkStop() -> Bool {
        if stopReason != nil { return true }
        if let reason = control?.stopReason {
            stopReason = reason
        } else if taskCancelled.load(ordering: .relaxed) {
            stopReason = .cancel
        }
        return stopReason != nil
    }

    // MARK: Completion

    /// Turns the finished easy handle into a result and resumes the caller (engine thread).
    func finish(code: CURLcode, cause: String?) {
        // Ended where a success answer's headers ended, on purpose: the answer is in (see `receiveHeader`).
        let code = answeredAtHeaders ? CURLE_OK : code
        // Bytes of request written to a connection (its headers at least); 0 when none took it.
        var requestBytes = 0
        if code != CURLE_OK, let easy {
            jobctl_curl_easy_getinfo_long(easy, CURLINFO_REQUEST_SIZE, &requestBytes)
        }
        if let requestSent {
            if requestBytes > 0 || (code == CURLE_OK && (requestsStarted ?? 0) > 1) { requestSent() }
        }
        if let stopReason, code != CURLE_OK {
            complete(.failure(.stopped(stopReason)))
            return
        }
        if code == CURLE_ABORTED_BY_CALLBACK, outOfStepConnections > 0, limitHit == nil, bodyError == nil {
            complete(.failure(.failed(StorageError(
                .unknown, "the server sent more than its answer on a kept connection (bytes no request asked for): the connection "
                    + "was closed, and the request was not sent on it; a retry asks again on a new connection",
                url: redactedURL(request.url), retryable: true))))
            return
        }
        if let refusedAnswer {
            complete(.failure(.failed(refusedAnswer)))
            return
        }
        if let bodyError {
            // Even should libcurl have reported success: bytes were refused, the body is not whole.
            complete(.failure(.failed(bodyError)))
            return
        }
        // A deadline ends the exchange from the progress callback, or as curl's own timeout just at it.
        if code != CURLE_OK, let deadline = control?.deadline,
           limitHit == .deadline || (code == CURLE_OPERATION_TIMEDOUT && deadline.remainingMilliseconds < 100) {
            complete(.failure(.failed(deadline.error(url: request.url))))
            return
        }
        if case .movedTooLittle(let shortfall) = limitHit, code != CURLE_OK {
            complete(.failure(.failed(movedTooLittleError(shortfall))))
            return
        }
        guard code == CURLE_OK else {
            let detail = String(cString: errorBufferPointer)
            let text = cause ?? (detail.isEmpty ? String(cString: jobctl_curl_easy_strerror(code)) : detail)
            var verifyResult = 0
            if code == CURLE_PEER_FAILED_VERIFICATION, let easy {
                jobctl_curl_easy_getinfo_long(easy, CURLINFO_SSL_VERIFYRESULT, &verifyResult)
            }
            // The status a proxy (from https_proxy, HTTPS_PROXY, ALL_PROXY, as libcurl reads them) answered
            // the CONNECT with; 0 when no proxy was asked.
            var proxyStatus = 0
            if let easy { jobctl_curl_easy_getinfo_long(easy, CURLINFO_HTTP_CONNECTCODE, &proxyStatus) }
            // A redirect libcurl did not follow ends the exchange with the redirect's status seen last, and
            // no request after it. One it followed to a server whose answer is not HTTP (no status line:
            // libcurl's "HTTP/0.9", the code of a scheme it refuses) was that server's fault, not the redirect's.
            let followedLast = countsRequests && requestsSinceAnswer > 0
            let redirect = headersEnded && (300..<400).contains(status) && !followedLast ? status : nil
            // Where the exchange failed, when a redirect took it elsewhere: what failed there is named as that
            // server's, not the job's URL's.
            let redirectedTo = followedRedirectURL()
            complete(.failure(.failed(curlFailure(code: Int(code.rawValue), text: text, url: request.url,
                                                  verifyResult: verifyResult, trust: options.trust, requestSent: requestBytes > 0,
                                                  redirect: redirect, redirectedTo: redirectedTo, proxyStatus: proxyStatus))))
            return
        }
        var responseCode = 0
        if let easy {
            jobctl_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &responseCode)
        }
        if responseCode == 0 { responseCode = status }
        guard headersEnded else {
            // libcurl reports success when the connection closes inside the header block (it keeps the
            // status line it saw): that is a truncated response, not an answer — a transport fault,
            // so no HTTP status is claimed for it. The request did arrive: the server began to answer.
            requestSent?()
            complete(.failure(.failed(StorageError(
                .unknown, "the connection closed in the middle of the server's response headers",
                url: redactedURL(request.url), retryable: true,
                cause: "response headers incomplete after the status line \(responseCode)"))))
            return
        }
        complete(.success(HTTPResponse(status: responseCode, headers: headers, body: body, url: request.url,
                                       requestHeaders: request.headers, isHTTP1: overHTTP1, redirectedTo: followedRedirectURL())))
    }

    /// The URL libcurl ended at (its effective URL) when it followed a redirect; nil when it followed none.
    private func followedRedirectURL() -> String? {
        var redirects = 0
        guard let easy, jobctl_curl_easy_getinfo_long(easy, CURLINFO_REDIRECT_COUNT, &redirects) == CURLE_OK, redirects > 0 else {
            return nil
        }
        var effective: UnsafeMutableRawPointer?
        guard jobctl_curl_easy_getinfo_pointer(easy, CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK, let effective else { return nil }
        return String(cString: effective.assumingMemoryBound(to: CChar.self))
    }

    /// Resumes the caller. The handle stays with the exchange until the engine takes it back
    /// (`releaseHandle`), which it does before touching any other transfer.
    func complete(_ result: Result<HTTPResponse, TransferFailure>) {
        continuation?.resume(returning: result)
        continuation = nil
    }

    /// Hands the easy handle back to the engine (engine thread, the exchange complete); nil when the
    /// exchange never got one. The caller never reads `easy`, so the engine may do this after the
    /// caller resumed.
    func releaseHandle() -> UnsafeMutableRawPointer? {
        guard let easy else { return nil }
        self.easy = nil
        return easy
    }
}

// MARK: - C callbacks: capture-free, recover the exchange from the context pointer

private let curlRead: jobctl_curl_data_callback = { buffer, size, count, context in
    guard let buffer, let context else { return Int(CURL_READFUNC_ABORT) }
    let exchange = Unmanaged<CurlExchange>.fromOpaque(context).takeUnretainedValue()
    // Under a rate limit a request's body moves in the pieces a response's does (see `rateLimitedPiece`).
    let room = exchange.isRateLimited ? min(size * count, CurlExchange.rateLimitedPiece) : size * count
    guard exchange.mayMoveBody(), exchange.hashingAllows(room, sending: true) else { return Int(CURL_READFUNC_PAUSE) }
    let result = exchange.readBody(into: UnsafeMutableRawBufferPointer(start: buffer, count: room))
    if result <= room { exchange.movedBody(result) }
    return result
}

private let curlWrite: jobctl_curl_data_callback = { buffer, size, count, context in
    guard let context else { return 0 }
    let exchange = Unmanaged<CurlExchange>.fromOpaque(context).takeUnretainedValue()
    let total = size * count
    guard exchange.mayMoveBody(), exchange.hashingAllows(total, sending: false) else { return Int(CURL_WRITEFUNC_PAUSE) }
    let accepted = exchange.receiveBody(UnsafeRawBufferPointer(start: buffer, count: total))
    if accepted { exchange.movedBody(total) }
    return accepted ? total : 0
}

private let curlHeader: jobctl_curl_data_callback = { buffer, size, count, context in
    guard let context else { return 0 }
    let exchange = Unmanaged<CurlExchange>.fromOpaque(context).takeUnretainedValue()
    return exchange.receiveHeader(UnsafeRawBufferPointer(start: buffer, count: size * count)) ? size * count : 0
}

private let curlSeek: jobctl_curl_seek_callback = { context, offset, origin in
    guard let context else { return CURL_SEEKFUNC_FAIL }
    return Unmanaged<CurlExchange>.fromOpaque(context).takeUnretainedValue().seekBody(to: Int64(offset), origin: origin)
}

private let curlPrerequest: jobctl_curl_prereq_callback = { context, primaryIP, localIP, primaryPort, localPort in
    guard let context else { return CURL_PREREQFUNC_OK }
    return Unmanaged<CurlExchange>.fromOpaque(context).takeUnretainedValue().requestStarting(
        localIP: localIP.map { String(cString: $0) } ?? "", localPort: Int(localPort),
        primaryIP: primaryIP.map { String(cString: $0) } ?? "", primaryPort: Int(primaryPort))
}

/// https://curl.se/libcurl/c/CURLOPT_CLOSESOCKETFUNCTION.html — libcurl closes a socket (of a
/// connection, whichever exchange's handle opened it): it is no kept connection any more.
private let curlCloseSocket: jobctl_curl_closesocket_callback = { _, socket in
    IdleHTTP1Connections.forget(socket)
    return close(socket)
}

private let curlProgress: jobctl_curl_xferinfo_callback = { context, _, downloaded, _, uploaded in
    guard let context else { return 0 }
    return Unmanaged<CurlExchange>.fromOpaque(context).takeUnretainedValue()
        .progressTick(downloaded: Int64(downloaded), uploaded: Int64(uploaded))
}

// MARK: - Curl error codes

/// Maps a failed `CURLcode` to a storage error.
///
/// Transport faults — the network or the peer broke this exchange, and another try may well succeed
/// — are retryable: refused or reset connections, a reset noticed on send or receive (plain or TLS:
/// OpenSSL read and write failures surface as RECV/SEND errors), a reply cut short (nothing at all,
/// fewer body bytes than announced, a garbled status line), HTTP/2 and HTTP/3 stream or connection
/// errors, timeouts and stalls, name resolution, a TLS handshake cut off, and a body libcurl could not
/// rewind to resend on a fresh connection. Everything else (a malformed URL, a refused certificate, a
/// local failure) would fail the same way again and is not retryable.
///
/// `verifyResult` is `CURLINFO_SSL_VERIFYRESULT` for a certificate failure (OpenSSL's X509 error, or 0
/// when the chain was trusted and only the host name check failed); `trust` names the CAs used.
/// `redirect` is the status of a redirect the exchange ended at, when it ended at one (not followed);
/// `redirectedTo` the URL libcurl had last gone to (its effective URL) when it followed one. `proxyStatus` is
/// what a proxy answered the tunnel's CONNECT (`CURLINFO_HTTP_CONNECTCODE`), 0 when none was asked.
/// Whether the job is retried is the retry policy's decision, so no message here promises it.
///
/// `environment` is where libcurl found its proxy variables (the process's), for naming a proxy that
/// could not be reached. libcurl's text is quoted as the cause without the proxies' passwords and the
/// URL's secrets (it quotes a proxy it cannot read whole, scheme or not), and with its URLs redacted.
func curlFailure(code: Int, text: String, url: String, verifyResult: Int = 0,
                 trust: CertificateTrust = .systemDefault, requestSent: Bool = false, redirect: Int? = nil,
                 redirectedTo: String? = nil, proxyStatus: Int = 0,
                 environment: [String: String] = ProcessInfo.processInfo.environment) -> StorageError {
    let curlCode = CURLcode(rawValue: UInt32(code))
    let name = String(cString: jobctl_curl_easy_strerror(curlCode))
    let quoted = SecretRedaction.scrub(ProxyEnvironment.scrubbed(text, environment: environment),
                                       secrets: SecretRedaction.secretValues(in: url)
                                           + (redirectedTo.map { SecretRedaction.secretValues(in: $0) } ?? []))
    let cause = "curl error \(code) (\(name)): \(SecretRedaction.redactURLs(in: quoted))"
    if let redirect, curlCode == CURLE_UNSUPPORTED_PROTOCOL || curlCode == CURLE_URL_MALFORMAT {
        // The server answered, with a Location that is not an http(s) URL (file://, ftp://, garbage): not
        // an answer that is not HTTP, nor a URL of the job's. Asking again gets the same redirect. The
        // Location is not shown (it may carry a token); libcurl's text names only its scheme or fault.
        let followed = CurlEngine.isHTTPS(url) ? "redirects of an https URL are followed to valid https URLs only (not to plain http, "
            + "which would drop TLS)" : "redirects are followed to valid http and https URLs only"
        return StorageError(.unknown, "the server redirected (HTTP \(redirect)) to a URL that is not followed: \(followed)",
                            httpStatus: redirect, url: redactedURL(url), cause: cause)
    }
    if let redirect, curlCode == CURLE_TOO_MANY_REDIRECTS {
        // A loop (a URL redirected to itself, or two to each other) or a chain longer than is followed: the
        // same at every attempt. The Locations are not shown (they may carry a token).
        return StorageError(.unknown, "the server redirected more than \(CurlEngine.maxRedirects) times (HTTP \(redirect) last): a redirect loop, or a chain "
                                + "longer than is followed; download from the URL the chain ends at",
                            httpStatus: redirect, url: redactedURL(url), cause: cause)
    }
    // A redirect followed to another server: what failed there (its certificate, its port, its name) is
    // that server's, and named so; the job's URL only led there. Its scheme, host and port are shown, never
    // its path or query (a signed URL's signature).
    let elsewhere = redirectedTo.flatMap { redirectTarget($0, from: url) }
    var failure = transportFailure(curlCode: curlCode, name: name, text: text, url: url, cause: cause, verifyResult: verifyResult,
                                   trust: trust, requestSent: requestSent, proxyStatus: proxyStatus, environment: environment,
                                   certificateHost: elsewhere?.host)
    if let elsewhere { failure.message += "; the server had redirected the request to \(elsewhere.origin)" }
    return failure
}

/// Where a followed redirect took the exchange, when that is another server than the job's URL names:
/// its origin (`scheme://host:port`) and its host as a certificate names it (`host:port`); nil when the
/// effective URL is on the job's own origin or has no host.
func redirectTarget(_ effectiveURL: String, from url: String) -> (origin: String, host: String)? {
    guard let components = URLComponents(string: effectiveURL), let scheme = components.scheme?.lowercased(),
          let host = components.host?.lowercased(), !host.isEmpty,
          let origin = GCSBackend.origin(of: effectiveURL), origin != GCSBackend.origin(of: url) else { return nil }
    let shownHost = host.contains(":") ? "[\(host)]" : host
    let port = components.port ?? (scheme == "https" ? 443 : 80)
    return ("\(scheme)://\(shownHost):\(port)", "\(shownHost):\(port)")
}

/// `curlFailure` past the redirects libcurl did not follow: the failure of the transport itself.
/// `certificateHost` names the server whose certificate was refused when it is not the job's URL's.
private func transportFailure(curlCode: CURLcode, name: String, text: String, url: String, cause: String, verifyResult: Int,
                              trust: CertificateTrust, requestSent: Bool, proxyStatus: Int, environment: [String: String],
                              certificateHost: String?) -> StorageError {
    if proxyStatus >= 300 {
        // The proxy the environment names answered, and refused the tunnel: the server was never asked.
        // Its refusal (403 by policy, 407 for credentials) is the same at every attempt; a proxy that is
        // busy or whose upstream is down (408, 429, 5xx) may not be.
        return StorageError(.unknown, "the proxy refused to connect to the server (HTTP \(proxyStatus) to CONNECT); check "
                                + "https_proxy / HTTPS_PROXY / ALL_PROXY and NO_PROXY", url: redactedURL(url),
                            retryable: proxyStatus == 408 || proxyStatus == 429 || proxyStatus >= 500, cause: cause)
    }
    if curlCode == CURLE_SSL_CONNECT_ERROR, text.contains("wrong version number") || text.contains("packet length too long") {
        // OpenSSL's words for a first answer that is not TLS at all: an https URL aimed at a plain-http port
        // (or a proxy or portal answering in its place). Asking again gets the same answer. Through a proxy,
        // the answer may as well be the proxy's: an `https://` proxy URL for a plain-http proxy, or a proxy
        // that does not pass TLS through its tunnel. It named the server alone.
        if let proxy = ProxyEnvironment.describedProxy(for: url, environment: environment) {
            return StorageError(.unknown, "no TLS answer came through \(proxy.text): a proxy URL written https:// for a "
                                    + "plain-http proxy (write http://), a proxy that does not pass TLS through, or an https "
                                    + "URL naming the server's plain-http port", url: redactedURL(url), cause: cause)
        }
        return StorageError(.unknown, "the server did not answer in TLS: the https URL may name a plain-http port; "
                                + "use http:// for it, or the port the server speaks https on",
                            url: redactedURL(url), cause: cause)
    }
    if curlCode == CURLE_SSL_CONNECT_ERROR, text.contains("alert protocol version") || text.contains("unsupported protocol") {
        // The server offers only TLS older than 1.2 (or the handshake ended on its "protocol version" alert):
        // the same at every attempt, and not a connection failing.
        return StorageError(.unknown, "the server speaks no TLS version this machine uses (TLS 1.2 or later; TLS 1.0 and 1.1 "
                                + "are refused): upgrade the server's TLS", url: redactedURL(url), cause: cause)
    }
    if curlCode == CURLE_RECV_ERROR, text.hasPrefix("Too large response headers") {
        // libcurl's limit on an answer's headers in all (300 KiB; each line has its own, below): the server
        // was reached and sent them, so it is no connection failing. A fault of the server's, as one long line is.
        return StorageError(.unknown, "the server's answer could not be taken in: its headers together are larger than libcurl "
                                + "accepts (300 KiB)", url: redactedURL(url), retryable: true, cause: cause)
    }
    if curlCode == CURLE_WEIRD_SERVER_REPLY, text.hasPrefix("Invalid Content-Length") {
        // libcurl 7.88 refuses a length that is negative, empty or starts with no digit (`abc`) itself, before
        // the header callback sees the line, and its text ("Invalid Content-Length: value") does not quote it:
        // the value is not named (it read "(negative or empty)" for `abc`). Any other length that is not one
        // is refused by `framingAccepted`, quoted. A fault of this answer, retryable, as there.
        return StorageError(.unknown, CurlExchange.notALengthMessage(nil), url: redactedURL(url),
                            retryable: true, cause: cause)
    }
    switch curlCode {
    case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_PROXY:
        // The connection that failed may be the proxy's (`http_proxy`, `https_proxy`, `ALL_PROXY`): then
        // it is the proxy that is named, not the server, which was never reached.
        if let proxy = ProxyEnvironment.describedProxy(for: url, environment: environment) {
            let what: String? = if curlCode == CURLE_COULDNT_RESOLVE_PROXY {
                "the host name of \(proxy.text) could not be resolved"
            } else if text.contains(proxy.endpoint) {
                // (A proxy that answered and refused the tunnel is named above, by its CONNECT status.)
                "could not connect to \(proxy.text); it may be down"
            } else {
                nil
            }
            if let what {
                return StorageError(.unknown, "\(what): check the proxy, or leave this host out of it with no_proxy",
                                    url: redactedURL(url), retryable: true, cause: cause)
            }
        }
        if curlCode == CURLE_COULDNT_RESOLVE_PROXY {
            return StorageError(.unknown, "the proxy's host name could not be resolved; check the proxy variables (http_proxy, "
                                    + "https_proxy, ALL_PROXY) or DNS", url: redactedURL(url), retryable: true, cause: cause)
        }
        return StorageError(.unknown, "could not connect to the server; it may be down",
                            url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_OPERATION_TIMEDOUT:
        return StorageError(.unknown, "the transfer timed out or stalled",
                            url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_COULDNT_RESOLVE_HOST:
        return StorageError(.unknown, "the host name could not be resolved; check the endpoint or DNS",
                            url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_WEIRD_SERVER_REPLY,
         CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_HTTP3, CURLE_QUIC_CONNECT_ERROR, CURLE_SSL_CONNECT_ERROR,
         CURLE_SEND_FAIL_REWIND, CURLE_PROXY:
        return StorageError(.unknown, "the connection failed mid-transfer",
                            url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_UNSUPPORTED_PROTOCOL where requestSent:
        // The URL's scheme was fine (the request went out): the answer had no HTTP status line.
        return StorageError(.unknown, "the server's answer is not HTTP (no status line)",
                            url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_OUT_OF_MEMORY where requestSent:
        // libcurl's word for a response header line past its limit (100 KiB) as well as for memory running out.
        return StorageError(.unknown, "the server's answer could not be taken in: a header is larger than libcurl accepts "
                                + "(100 KiB), or memory ran out", url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_BAD_FUNCTION_ARGUMENT where requestSent:
        // libcurl's word for a header line it cannot store: one that begins with a space or a tab (an
        // obsolete folding, RFC 9112 §5.2) with no header before it to continue, first in the answer or
        // in a chunked body's trailer.
        return StorageError(.unknown, "the server's answer is not valid HTTP: a header line begins with a space or a tab "
                                + "and continues no header", url: redactedURL(url), retryable: true, cause: cause)
    case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
        return StorageError(.invalidArgument, "the URL cannot be fetched: \(name)", url: redactedURL(url), cause: cause)
    case CURLE_PEER_FAILED_VERIFICATION:
        return certificateFailure(verifyResult: verifyResult, url: url, host: certificateHost, trust: trust, cause: cause)
    case CURLE_SSL_CACERT_BADFILE:
        return StorageError(.unknown, "the CA certificates could not be loaded from \(trust) (set by "
                                + "\(trust.source ?? "libcurl's defaults")); point "
                                + "\(trust.settingToChange ?? "JOBCTL_CA_BUNDLE (or SSL_CERT_FILE / SSL_CERT_DIR)") at a readable PEM file of CA certificates or a directory prepared with `openssl rehash`",
                            url: redactedURL(url), cause: cause)
    default:
        return StorageError(.unknown, "the transfer failed: \(name)", url: redactedURL(url), cause: cause)
    }
}

/// Why the server's certificate was refused, from OpenSSL's verify result (`man openssl-verify`):
/// a certificate that is expired or not yet valid, a chain no trusted CA issued, or — chain trusted,
/// result 0 (or libcurl's "not verified yet" 1) — a certificate for another host name. None is retryable.
private func certificateFailure(verifyResult: Int, url: String, host: String?, trust: CertificateTrust, cause: String) -> StorageError {
    let host = host ?? redactedURL(url).split(separator: "/", omittingEmptySubsequences: true).dropFirst().first.map(String.init) ?? url
    switch verifyResult {
    case 0, 1:
        return StorageError(.unknown, "the server's TLS certificate is not valid for \(host): it names other hosts. "
                                + "Check the URL's host name (trusting another CA does not help)",
                            url: redactedURL(url), cause: cause)
    case 9, 10:
        return StorageError(.unknown, "the server's TLS certificate is expired or not yet valid (X509 error \(verifyResult)); "
                                + "check the server's certificate and this machine's clock",
                            url: redactedURL(url), cause: cause)
    default:
        return StorageError(.unknown, "TLS certificate not trusted: the certificate of \(host) was not issued by a trusted CA "
                                + "(X509 error \(verifyResult); trusted: \(trust)). "
                                + (trust.settingToChange.map { "Set \($0) to the CA certificate file or hashed directory that issued it" }
                                    ?? "Set JOBCTL_CA_BUNDLE to the CA certificate file or hashed directory that issued it (or SSL_CERT_FILE / SSL_CERT_DIR)"),
                            url: redactedURL(url), cause: cause)
    }
}

/// The status code of a status line as libcurl hands it to the header callback (`HTTP/1.1 200 OK`,
/// `HTTP/2 404`): the digits after the first run of spaces, up to the next space or the end; 0 when there
/// are none, or anything else there. Read from the bytes (splitting the line into arrays and making a
/// `String` of the code cost ~2,000 instructions a response).
enum HTTPStatusLine {
    static func code(_ line: Slice<UnsafeRawBufferPointer>) -> Int {
        guard var index = line.firstIndex(of: UInt8(ascii: " ")) else { return 0 }
        while index < line.endIndex, line[index] == UInt8(ascii: " ") { index += 1 }
        var code = 0
        var digits = 0
        while index < line.endIndex, line[index] != UInt8(ascii: " ") {
            let byte = line[index]
            // Nine digits at most: no overflow (no status code has more than three).
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 9 else { return 0 }
            code = code * 10 + Int(byte - UInt8(ascii: "0"))
            digits += 1
            index += 1
        }
        return digits == 0 ? 0 : code
    }
}
