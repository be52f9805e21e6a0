import Foundation
import JobLifecycle
import JobModel
import StorePort

/// Follows events from the log by polling `PRAGMA data_version` (cheap; changes only when another
/// connection commits), so a watcher costs nothing while nothing happens.
struct Watcher {
    let store: any JobStore
    let context: Context
    let statuses: Set<ObserverStatus>?
    let json: Bool
    let pollInterval: useconds_t = 50_000

    /// Follows one job until it reaches a final state. Exit 0 if it succeeded, 1 otherwise.
    func follow(jobID: String) throws -> Int32 {
        var lastSeq: Int64 = 0
        var lastVersion: Int64 = -1
        var bar = ProgressBar(enabled: !json)
        while true {
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
                if let job, job.state.isFinal {
                    bar.finish()
                    if !json {
                        let detail = job.error.map { ": \($0.code.name): \($0.message)" } ?? ""
                        emit("\(job.id) \(context.paint(state: job.state))\(detail)")
                    }
                    return job.state == .succeeded ? ExitCode.ok : ExitCode.failure
                }
            }
            usleep(pollInterval)
        }
    }

    /// Follows every job's events from now on.
    func followAll(exitWhenIdle: Bool) throws -> Int32 {
        var lastSeq = try store.lastSeq()
        var lastVersion: Int64 = -1
        var bar = ProgressBar(enabled: false)
        while true {
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
                    let events = try store.events(afterSeq: lastSeq, limit: 500)
                    for event in events {
                        lastSeq = event.seq ?? lastSeq
                        try show(event, bar: &bar)
                    }
                    if events.count < 500 { break }
                }
            }
            if idle { return ExitCode.ok }
            usleep(pollInterval)
        }
    }

    private func show(_ event: JobEvent, bar: inout ProgressBar) throws {
        guard let status = ObserverStatus(event.type) else { return }
        if let statuses, !statuses.contains(status) { return }
        if json {
            emit(try jsonLine(EventView(event)))
            return
        }
        switch status {
        case .progress:
            bar.update(done: event.data.bytesDone ?? 0, total: event.data.bytesTotal, atMs: event.atMs)
        default:
            bar.interrupt()
            emit("\(TimeText.rfc3339(event.atMs))  \(event.jobID)  \(status.rawValue)  \(Commands.details(event))")
        }
    }
}

/// A one-line terminal progress bar with bytes, rate and ETA, redrawn in place.
struct ProgressBar {
    let enabled: Bool
    private var firstSample: (bytes: Int64, atMs: Int64)?
    private var drawn = false

    init(enabled: Bool) { self.enabled = enabled }

    mutating func update(done: Int64, total: Int64?, atMs: Int64) {
        guard enabled else { return }
        if firstSample == nil { firstSample = (done, atMs) }
        var line = ""
        if let total, total > 0 {
            let fraction = min(1, Double(done) / Double(total))
            let width = 30
            let filled = Int(fraction * Double(width))
            line = "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "] "
            line += String(format: "%3d%% ", Int(fraction * 100))
            line += "\(ByteSize.format(done))/\(ByteSize.format(total))"
        } else {
            line = ByteSize.format(done)
        }
        if let first = firstSample, atMs > first.atMs, done > first.bytes {
            let rate = Double(done - first.bytes) / (Double(atMs - first.atMs) / 1000)
            line += "  \(ByteSize.format(Int64(rate)))/s"
            if let total, total > done, rate > 0 {
                line += "  ETA \(Int((Double(total - done) / rate).rounded()))s"
            }
        }
        FileHandle.standardOutput.write(Data("\r\u{1B}[2K\(line)".utf8))
        drawn = true
    }

    mutating func interrupt() {
        guard drawn else { return }
        FileHandle.standardOutput.write(Data("\n".utf8))
        drawn = false
    }

    mutating func finish() { interrupt() }
}
