import JobModel
import Storage
import Synchronization

/// The one way into a running `TaskRunner` from other threads: the transfer's reports and outcome, and
/// stop requests, in the order they happened.
///
/// Posting never blocks on the database or waits for the actor: it appends under a lock and rings a
/// doorbell that remembers one ring, so a burst of callbacks costs the actor one wake-up. The doorbell
/// ignores task cancellation on purpose: a cancelled `run()` must still see the transfer's outcome. Consecutive
/// progress reports that the actor has not taken yet collapse into the newest one (it carries the latest
/// counts); checkpoints, stops and the outcome are never dropped or reordered. A report that completes
/// the bytes does not ring: the end that follows it does (see `post(_:)`).
final class TaskMailbox: Sendable {
    indirect enum Item: Sendable {
        case transfer(TransferEvent)
        case stop(StopReason)
        case transferEnded(Result<TransferOutcome, StorageError>)
        /// Write an event held back for the attempt's next one now (see `TaskRunner.writeHeldEvents()`).
        case writeHeld
    }

    private struct Doorbell {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let items = Mutex<[Item]>([])
    private let doorbell = Mutex(Doorbell())

    init() {}

    private func ring() {
        let waiter = doorbell.withLock { bell -> CheckedContinuation<Void, Never>? in
            guard let waiter = bell.waiter else {
                bell.rung = true
                return nil
            }
            bell.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns after the next ring (at once if one came since the last wait). One waiter at a time.
    func waitForRing() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ringing = doorbell.withLock { bell -> Bool in
                if bell.rung {
                    bell.rung = false
                    return true
                }
                bell.waiter = continuation
                return false
            }
            if ringing { continuation.resume() }
        }
    }

    /// Queues `item` and rings, except for a progress report that completes the transfer's bytes: the
    /// transfer's end follows it (after the server's answer, or the file's sync), and the runner takes
    /// the report then, in order, before the end. A small transfer's one report would otherwise wake the
    /// runner for a figure it has no time to write. A transfer that stalls after its last byte still
    /// ends (libcurl's stall limit, the job's deadline), and a stop rings meanwhile.
    func post(_ item: Item) {
        items.withLock { items in
            if case .transfer(.progress) = item, case .transfer(.progress)? = items.last {
                items[items.count - 1] = item
            } else {
                items.append(item)
            }
        }
        if case .transfer(let event) = item, Self.completesTheBytes(event) { return }
        ring()
    }

    /// Whether `event` reports every byte of a transfer of known size moved.
    static func completesTheBytes(_ event: TransferEvent) -> Bool {
        guard case .progress(let done, let total?) = event else { return false }
        return done == total
    }

    /// Whether a ring is waiting for the next `waitForRing()` (tests).
    var isRung: Bool { doorbell.withLock { $0.rung } }

    /// Queues the stop and tells the transfer in one critical section, so the stop is always queued
    /// before the outcome it causes.
    func postStop(_ reason: StopReason, control: TransferControl) {
        items.withLock { items in
            items.append(.stop(reason))
            control.stop(reason)
        }
        ring()
    }

    func take() -> [Item] {
        items.withLock { items in
            let taken = items
            items.removeAll(keepingCapacity: true)
            return taken
        }
    }
}
