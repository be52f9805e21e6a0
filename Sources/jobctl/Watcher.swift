import Foundation
import JobLifecycle
import JobModel
import StorePort

/// Follows events from the log by polling `PRAGMA data_version` (cheap; changes only when another
/// connection commits), so a watcher costs nothing while nothing happens.
final class Watcher {
    /// Opened again when a PostgreSQL session is lost (`rideOut`).
    private(set) var store: any JobStore
    let context: Context
    let statuses: Set<ObserverStatus>?
    let json: Bool
    let pollInterval: useconds_t = 50_000
    /// `watch` never reveals secrets: it has no `--show-secrets`.
    let display = Display.redacting
    /// When the log stopped answering (its PostgreSQL session lost), while the watcher rides that out.
    private var lostSince: ContinuousClock.Instant?

    init(store: any JobStore, context: Context, statuses: Set<ObserverStatus>?, json: Bool) {
        self.store = store
        self.context = context
        self.statuses = statuses
        self.json = json
    }

    /// How long `watch` and `submit --wait` ride out a log that stopped answering before they give up.
    static let reconnectLimit: Duration = .seconds(60)

    /// Polls with `iteration` until it gives an exit code, `pollInterval` apart; `iteration` is told when
    /// the poll before it was lost (`poll`), so it reads again what it had read (its last version forgotten).
    private func pollUntilEnd(_ iteration: (_ lost: Bool) throws -> Int32?) throws -> Int32 {
        var lost = false
        while true {
            switch try poll({ try iteration(lost) }) {
            case .some(.some(let code)): return code
            case .some(.none): lost = false
            case .none:
                lost = true
                continue
            }
            usleep(pollInterval)
        }
    }

    /// Runs one poll of a watcher's loop: a lost PostgreSQL session (a server restarted, a connection
    /// ended by an administrator or a middlebox) is ridden out as a worker rides it out — the store opened
    /// again every second, a note on standard error — for up to `reconnectLimit`, instead of ending
    /// `watch` or `submit --wait` with exit 1, which reads as a failed job. Nil when the poll was lost
    /// (the caller polls again from the top, its last version forgotten); the poll's own value otherwise.
    private func poll<T>(_ body: () throws -> T) throws -> T? {
        do {
            let value = try body()
            if let since = lostSince {
                lostSince = nil
                emitError("jobctl: the event log answers again (after \(Int(since.duration(to: .now).components.seconds)) s)")
            }
            return value
        } catch let error as StoreError {
            guard case .unreachable = error else { throw error }
            let now = ContinuousClock.now
            if lostSince == nil {
                lostSince = now
                emitError("jobctl: \(TerminalText.printable("\(error)")); trying again for up to \(Self.reconnectLimit.components.seconds) s")
            } else if let since = lostSince, since.duration(to: now) > Self.reconnectLimit {
                throw error
            }
            usleep(1_000_000)
            if let reopened = try? context.openStore(readOnly: true) { store = reopened }
            return nil
        }
    }

    /// A read before a watcher's loop (the job named, where its events start), its session's loss ridden
    /// out as the loop's polls ride it out: a session ended right after the store opened ended `watch`
    /// with exit 1 at its first read, outside the loop (a CI run's administrator's `pg_terminate_backend`).
    func read<T>(_ body: (any JobStore) throws -> T) throws -> T {
        while true {
            if let value = try poll({ try body(store) }) { return value }
        }
    }

    /// Follows one job until it reaches a final state. Exit 0 if it succeeded, 1 otherwise.
    func follow(jobID: String) throws -> Int32 {
        var lastSeq: Int64 = 0
        var lastVersion: Int64 = -1
        let upload = try read { try $0.job(jobID) }?.spec.kind.isUpload ?? false
        var bar = ProgressBar(enabled: !json, countsConfirmedBytes: upload, plain: context.terminalIsDumb)
        return try pollUntilEnd { lost in
            if lost { lastVersion = -1 }
            let version = try store.dataVersion()
            if version != lastVersion {
                lastVersion = version
                // The state first, then the events: when the state is final, its event is already in the
                // log, so it is printed before the watcher exits (events are append-only).
                let job = try store.job(jobID)
                for event in try store.events(jobID: jobID) where (event.seq ?? 0) > lastSeq {
                    lastSeq = event.seq ?? lastSeq
                    try show(event, bar: &bar)
                }
                guard let job else { throw archivedAway("job \(jobID) is") }
                if job.state.isFinal {
                    bar.finish()
                    if !json {
                        emitLine("\(TerminalText.printable(job.id)) \(display.stateLine(job.state, job.error, paint: context.paint(state:)))")
                    }
                    return job.state == .succeeded ? ExitCode.ok : ExitCode.failure
                }
            }
            return nil
        }
    }

    /// Follows every job of a batch, from their submission, until all of them are final. Exit 0 if all
    /// succeeded, 1 otherwise (also when no job has that batch id).
    func follow(batch: String) throws -> Int32 {
        let filter = JobFilter(batch: batch)
        let first = try read { try $0.jobs(filter: filter) }
        guard let start = first.map(\.seq).min() else {
            throw CommandFailure("no job has the batch id \(batch); `jobctl list` shows batch ids")
        }
        let ids = Set(first.map(\.id))
        var lastSeq = start - 1
        var lastVersion: Int64 = -1
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: false)
        var whole: ProgressBar? = json ? nil : ProgressBar(enabled: true, countsConfirmedBytes: false, plain: context.terminalIsDumb)
        var progress = BatchProgress()
        return try pollUntilEnd { lost in
            if lost { lastVersion = -1 }
            let version = try store.dataVersion()
            if version != lastVersion {
                lastVersion = version
                // States first, then events: every final state's event is printed before the exit. Counted
                // by state in one query: reading every record at each change cost a batch of 20,000 jobs
                // ~6 s of CPU over its drain.
                let tally = try store.tally(filter: filter)
                let present = tally.values.reduce(0) { $0 + $1.count }
                if present < ids.count {
                    let gone = ids.subtracting(try store.jobs(filter: filter).map(\.id))
                    throw archivedAway(gone.count == 1 ? "job \(gone.first ?? "") of batch \(batch) is"
                                                       : "\(gone.count) jobs of batch \(batch) are")
                }
                while true {
                    let events = try store.events(afterSeq: lastSeq, limit: 500)
                    for event in events {
                        lastSeq = event.seq ?? lastSeq
                        if ids.contains(event.jobID) { try show(event, bar: &bar, above: &whole) }
                    }
                    if events.count < 500 { break }
                }
                whole?.draw(progress.line(tally, atMs: Clock.nowMs(), width: context.width))
                if tally.keys.allSatisfy(\.isFinal) {
                    whole?.finish()
                    if !json {
                        emitLine("batch \(TerminalText.printable(batch)): \(BatchProgress.outcomes(tally))")
                    }
                    return tally.keys.allSatisfy { $0 == .succeeded } ? ExitCode.ok : ExitCode.failure
                }
            }
            return nil
        }
    }

    /// Waits until every job of `ids` has ended (`submit --wait`): exit 0 when all succeeded, 1 otherwise.
    /// Nothing goes to standard output (it holds the submitted ids); standard error gets a bar of the
    /// jobs ended when it is a terminal, then a count by outcome. Only the jobs not yet ended are read
    /// again, at most every `waitReadIntervalMs` and only when the log changed: a job that ended is done
    /// with, even if a retry opens it later.
    func waitForEnd(of ids: [String]) throws -> Int32 {
        var remaining = ids
        // Each ended job's state as last read.
        var ended: [String: JobState] = [:]
        var lastVersion: Int64 = -1
        var lastReadMs: Int64?
        var bar = ProgressBar(enabled: context.stderrIsTerminal, countsConfirmedBytes: false, plain: context.terminalIsDumb,
                              toStandardError: true)
        var progress = BatchProgress()
        // Jobs said to hold a newer jobctl's event: no worker as old as this runs them (said once each).
        var newerNoted: Set<String> = []
        return try pollUntilEnd { lost in
            if lost { lastVersion = -1 }
            let now = Clock.monotonicMs()
            let version = try store.dataVersion()
            if version != lastVersion, lastReadMs.map({ now - $0 >= Self.waitReadIntervalMs }) ?? true {
                lastVersion = version
                lastReadMs = now
                var open: [String] = []
                var found: Set<String> = []
                func read(_ ids: [String], mustFind: Bool = true) throws {
                    for start in stride(from: 0, to: ids.count, by: 500) {
                        let page = Array(ids[start..<min(ids.count, start + 500)])
                        for job in try store.controlStates(ids: page) {
                            found.insert(job.id)
                            if job.state.isFinal { ended[job.id] = job.state } else { ended[job.id] = nil; open.append(job.id) }
                            if !job.state.isFinal, let type = job.newerEventType, newerNoted.insert(job.id).inserted {
                                bar.clear()
                                emitError("note: job \(job.id) has an event of type '\(TerminalText.storedName(type))', which this jobctl does "
                                          + "not know: a newer jobctl wrote it, and only its workers run the job; this wait goes on until "
                                          + "the job ends")
                            }
                        }
                    }
                    if mustFind, let gone = ids.first(where: { !found.contains($0) }) {
                        bar.finish()
                        throw archivedAway("job \(gone) is", before: "submit --wait")
                    }
                }
                try read(remaining)
                // Once every job has ended, those that ended failed or cancelled are read again: a `retry`
                // may have opened one since (counted by its first end, a wait whose jobs all succeeded in
                // the end exited 1). Their states then are the ones counted (one archived away meanwhile, as
                // it ended).
                if open.isEmpty { try read(ended.filter { $0.value != .succeeded }.keys.sorted(), mustFind: false) }
                remaining = open
                // The jobs as `watch --batch` counts a batch: those not ended as queued (their bytes are not read).
                var tally = Dictionary(grouping: ended.values, by: { $0 }).mapValues { JobTally(count: $0.count, bytesDone: 0) }
                if !remaining.isEmpty { tally[.queued] = JobTally(count: remaining.count, bytesDone: 0) }
                bar.draw(progress.line(tally, atMs: Clock.nowMs(), width: context.stderrWidth))
                if remaining.isEmpty {
                    bar.finish()
                    emitError(BatchProgress.outcomes(tally))
                    return tally.keys.allSatisfy { $0 == .succeeded } ? ExitCode.ok : ExitCode.failure
                }
            }
            return nil
        }
    }

    /// How often `waitForEnd` reads the jobs it waits for again, at most.
    static let waitReadIntervalMs: Int64 = 200

    /// Follows every job's events from now on.
    func followAll(exitWhenIdle: Bool) throws -> Int32 {
        var lastSeq = try read { try $0.lastSeq() }
        var lastVersion: Int64 = -1
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: false)
        return try pollUntilEnd { lost in
            if lost { lastVersion = -1 }
            // Idle is decided before the events are read, so every event up to that moment is printed
            // before the watcher exits.
            var idle = false
            if exitWhenIdle {
                let counts = try store.counts()
                idle = (counts[.queued] ?? 0) == 0 && (counts[.running] ?? 0) == 0
            }
            let version = try store.dataVersion()
            if version != lastVersion || idle {
                lastVersion = version
                while true {
                    let events = try store.tailEvents(afterSeq: lastSeq, limit: 500)
                    for event in events {
                        lastSeq = event.seq ?? lastSeq
                        try show(event, bar: &bar)
                    }
                    if events.count < 500 { break }
                }
            }
            if idle { return ExitCode.ok }
            return nil
        }
    }

    /// A followed job that is no longer in the log was archived (the only way a job leaves it) after
    /// it ended, before this watcher saw the end: it can no longer say how the job ended, only where
    /// to look. Polling on for it never ended.
    private func archivedAway(_ what: String, before command: String = "watch") -> CommandFailure {
        let file = (try? store.events(jobID: ArchiveRecord.logJobID))?.reversed().lazy.compactMap { event -> String? in
            if case .archived(let record) = event.payload { return record.file }
            return nil
        }.first
        let whereTo = file.map { TerminalText.printable($0) }.map { " (moved to \($0): `jobctl audit --from \($0)` shows how it ended)" } ?? ""
        return CommandFailure("\(what) no longer in the log: archived after it ended, before \(command) saw the end\(whereTo)")
    }

    private func show(_ event: JobEvent, bar: inout ProgressBar) throws {
        var none: ProgressBar?
        try show(event, bar: &bar, above: &none)
    }

    /// Shows `event`; a line it prints goes in the place of `above`'s bar (drawn again by the caller).
    private func show(_ event: JobEvent, bar: inout ProgressBar, above: inout ProgressBar?) throws {
        // The bar sees every event (so a pause or a new attempt restarts its rate even when filtered out).
        let progressLine = bar.observe(event, width: context.width)
        let label: String
        if let status = ObserverStatus(event.type) {
            if let statuses, !statuses.contains(status) { return }
            if status == .progress {
                if json {
                    emit(try jsonLine(EventView(event, display: display)))
                } else if let progressLine {
                    bar.draw(progressLine)
                }
                return
            }
            label = status.rawValue
        } else if Self.endsAnAttempt(event.type), statuses == nil {
            // An attempt that failed with a retry to come, or whose worker died: no observer status (the
            // task machine's statuses are one attempt's), but a job that went `resume`, `resume`, `resume`,
            // `success` never said why, and one waiting out an hour's Retry-After showed nothing at all.
            // Named by its event (what follows is not always a retry: a pause, a cancel).
            label = event.type.rawValue
        } else {
            return
        }
        if json {
            emit(try jsonLine(EventView(event, display: display)))
            return
        }
        bar.interrupt()
        above?.clear()
        emitLine("\(RFC3339.string(event.atMs))  \(TerminalText.printable(event.jobID))  \(TerminalText.printable(label))  "
                 + TerminalText.printable(Describe.event(event, display: display)))
    }

    /// Events that end an attempt without ending the job: `watch` shows them as lines of their own
    /// (unless `--on` chose statuses).
    static func endsAnAttempt(_ type: EventType) -> Bool {
        type == .attemptFailed || type == .leaseExpired
    }

    /// A line fitted to the terminal: wrapped at spaces, continuation lines indented.
    private func emitLine(_ line: String) {
        guard let width = context.width, visibleWidth(line) > width, width >= 20 else {
            emit(line)
            return
        }
        emit(wrap(line, width: width, indent: "    ").map { $0.trimmingTrailingSpaces() }.joined(separator: "\n"))
    }
}

/// A one-line terminal progress bar with bytes, a moving rate and the time left, redrawn in place and
/// never wider than the terminal.
struct ProgressBar {
    let enabled: Bool
    /// Uploads: the bytes the server confirmed (the resume point) are drawn apart from those only sent.
    let countsConfirmedBytes: Bool
    /// The rate is measured over this much of the recent past.
    static let rateWindowMs: Int64 = 5_000
    private var samples: [(atMs: Int64, bytes: Int64)] = []
    private var confirmed: Int64 = 0
    /// Redrawn without escape sequences (`TERM=dumb`): a carriage return, the line, and spaces over what
    /// is left of a longer line before it.
    let plain: Bool
    private var drawn = false
    /// The characters of the line drawn last.
    private var drawnWidth = 0

    /// Drawn on standard error (`submit --wait`, whose standard output holds the ids), not standard output.
    let toStandardError: Bool

    init(enabled: Bool, countsConfirmedBytes: Bool, plain: Bool = false, toStandardError: Bool = false) {
        self.enabled = enabled
        self.countsConfirmedBytes = countsConfirmedBytes
        self.plain = plain
        self.toStandardError = toStandardError
    }

    private func write(_ text: String) {
        if toStandardError {
            StandardStreams.write(text, to: STDERR_FILENO)
        } else {
            StandardOutput.write(text)
        }
    }

    /// Forgets the rate's history (after a pause, a release or at a new attempt).
    mutating func resetRate() { samples.removeAll() }

    /// Bytes per second over the last `rateWindowMs`, from the samples seen since the last reset.
    var rate: Double? {
        guard let first = samples.first, let last = samples.last, last.atMs > first.atMs, last.bytes >= first.bytes else { return nil }
        // In doubles: the samples are the log's values, whatever they are (an Int64 difference may not fit).
        return (Double(last.bytes) - Double(first.bytes)) / ((Double(last.atMs) - Double(first.atMs)) / 1000)
    }

    mutating func record(done: Int64, atMs: Int64) {
        if let last = samples.last, done < last.bytes || atMs < last.atMs { samples.removeAll() }
        samples.append((atMs, done))
        while let first = samples.first, samples.count > 2, TimeText.between(first.atMs, atMs) > Self.rateWindowMs { samples.removeFirst() }
    }

    /// The line for `done` bytes moved (of which `confirmed` by the server, for uploads) of `total`, fitted
    /// to `width`. The bar, the percentage and the bytes follow what was moved, as gcloud's and rclone's
    /// do (an upload's confirmed offset moves only at a chunk or checkpoint: a bar of it sat at 0 % through
    /// a whole small upload); an upload's bar is solid (`#`) to the confirmed offset, where a failure would
    /// resume, and `=` beyond it, and the line names that offset.
    mutating func line(done: Int64, confirmed newConfirmed: Int64?, total: Int64?, atMs: Int64, width: Int?) -> String {
        record(done: done, atMs: atMs)
        if let newConfirmed { confirmed = newConfirmed }
        let kept = countsConfirmedBytes ? min(confirmed, done) : done
        var head = ""
        var tail: [String] = []
        var bar: (kept: Double, moved: Double)?
        if let total, total > 0 {
            let fraction = min(1, Double(done) / Double(total))
            bar = (min(fraction, Double(kept) / Double(total)), fraction)
            head = String(format: "%3d%% ", Int(fraction * 100)) + "\(ByteSize.format(done))/\(ByteSize.format(total))"
        } else {
            head = ByteSize.format(done)
        }
        if countsConfirmedBytes, done > kept { head += " (\(ByteSize.format(kept)) confirmed)" }
        if let rate, rate > 0 {
            tail.append("\(ByteSize.format(rate.clampedInt64))/s")
            if let total, total > done {
                tail.append("ETA \(TimeText.duration(seconds: ((Double(total) - Double(done)) / rate).rounded(.up).clampedInt64))")
            }
        }
        return Self.fit(bar: bar, head: head, tail: tail, width: width)
    }

    /// `[###==...] HEAD  TAIL…` fitted to `width`: the bar gives way first (30 → 10 columns, then none),
    /// then the tail's parts from the last (the ETA, then the rate), then the head is cut at its end.
    static func fit(bar: (kept: Double, moved: Double)?, head: String, tail: [String], width: Int?) -> String {
        let limit = width.map { max(1, $0 - 1) } ?? Int.max
        func compose(barWidth: Int, tailCount: Int) -> String {
            var text = ""
            if let bar, barWidth > 0 {
                let moved = Int(bar.moved * Double(barWidth))
                let kept = min(moved, Int(bar.kept * Double(barWidth)))
                text = "[" + String(repeating: "#", count: kept) + String(repeating: "=", count: moved - kept)
                    + String(repeating: ".", count: barWidth - moved) + "] "
            }
            text += head
            for part in tail.prefix(tailCount) { text += "  " + part }
            return text
        }
        for tailCount in stride(from: tail.count, through: 0, by: -1) {
            let plain = compose(barWidth: 0, tailCount: tailCount)
            let room = limit - plain.count - 3
            if bar != nil, room >= 10 { return compose(barWidth: min(30, room), tailCount: tailCount) }
            if plain.count <= limit { return plain }
        }
        return Elide.end(compose(barWidth: 0, tailCount: 0), to: limit)
    }

    /// Follows one event: `started` (a new attempt or a resume), `paused` and `released` restart the
    /// rate; a `progress` event gives the line to draw.
    ///
    /// `started` is also the rate's first sample (its bytes: 0, or the resume offset; its time): a small
    /// job's first progress event is skipped, so waiting for two progress events would leave it without
    /// a rate or time left for most of its run.
    mutating func observe(_ event: JobEvent, width: Int?) -> String? {
        switch event.type {
        case .started:
            resetRate()
            // Workers always write the bytes; an event without them (an older log) gives no sample
            // rather than a guessed 0 that would inflate a resumed transfer's rate.
            if let bytes = event.data.bytesDone { record(done: bytes, atMs: event.atMs) }
            return nil
        case .paused, .released, .retried:
            resetRate()
            return nil
        case .progress:
            var confirmed: Int64?
            if case .upload(_, let offset, _, _)? = event.data.resumePoint { confirmed = offset }
            return line(done: event.data.bytesDone ?? 0, confirmed: confirmed, total: event.data.bytesTotal,
                        atMs: event.atMs, width: width)
        default:
            return nil
        }
    }

    /// Redraws the bar in place.
    mutating func draw(_ line: String) {
        guard enabled else { return }
        if plain {
            write("\r" + line + String(repeating: " ", count: max(0, drawnWidth - line.count)))
        } else {
            write("\r\u{1B}[2K\(line)")
        }
        drawn = true
        drawnWidth = line.count
    }

    mutating func interrupt() {
        guard drawn else { return }
        write("\n")
        drawn = false
        drawnWidth = 0
    }

    mutating func finish() { interrupt() }

    /// Takes the line drawn last off the terminal (the cursor stays at its start), for a line printed
    /// in its place; `draw` puts it back below.
    mutating func clear() {
        guard drawn else { return }
        write(plain ? "\r" + String(repeating: " ", count: drawnWidth) + "\r" : "\r\u{1B}[2K")
        drawn = false
        drawnWidth = 0
    }
}

/// `watch --batch`'s line on a terminal: the batch's jobs as one bar, kept below the event lines —
/// jobs ended of all (and how many of them failed), the bytes moved, the rate over the last few
/// seconds and the time left at the pace jobs have been ending. A batch is a folder or a prefix of
/// thousands of small files, where one job's bar says nothing of the whole.
struct BatchProgress {
    private var samples: [(atMs: Int64, ended: Int, bytes: Int64)] = []

    /// `12 jobs: 1 failed, 11 succeeded`: the jobs counted by state, states in name order.
    static func outcomes(_ tally: [JobState: JobTally]) -> String {
        "\(plural(tally.values.reduce(0) { $0 + $1.count }, "job")): "
            + tally.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value.count) \($0.key.rawValue)" }.joined(separator: ", ")
    }

    mutating func line(_ tally: [JobState: JobTally], atMs: Int64, width: Int?) -> String {
        let total = tally.values.reduce(0) { $0 + $1.count }
        let ended = tally.filter { $0.key.isFinal }.values.reduce(0) { $0 + $1.count }
        let failed = (tally[.failed]?.count ?? 0) + (tally[.cancelled]?.count ?? 0)
        let bytes = tally.values.reduce(Int64(0)) { $0.saturatingAdding($1.bytesDone) }
        if let last = samples.last, ended < last.ended || bytes < last.bytes || atMs < last.atMs { samples.removeAll() }
        samples.append((atMs, ended, bytes))
        while let first = samples.first, samples.count > 2, TimeText.between(first.atMs, atMs) > ProgressBar.rateWindowMs { samples.removeFirst() }
        let fraction = total == 0 ? 1 : Double(ended) / Double(total)
        var head = String(format: "%3d%% ", Int(fraction * 100)) + "\(ended)/\(total) jobs"
        if failed > 0 { head += " (\(failed) failed)" }
        if bytes > 0 { head += ", \(ByteSize.format(bytes))" }
        var tail: [String] = []
        if let first = samples.first, let last = samples.last, last.atMs > first.atMs {
            let seconds = (Double(last.atMs) - Double(first.atMs)) / 1000
            if last.bytes > first.bytes { tail.append("\(ByteSize.format(((Double(last.bytes) - Double(first.bytes)) / seconds).clampedInt64))/s") }
            if last.ended > first.ended, ended < total {
                let perSecond = Double(last.ended - first.ended) / seconds
                tail.append("ETA \(TimeText.duration(seconds: (Double(total - ended) / perSecond).rounded(.up).clampedInt64))")
            }
        }
        return ProgressBar.fit(bar: (fraction, fraction), head: head, tail: tail, width: width)
    }
}
