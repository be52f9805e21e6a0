import JobModel
import Storage
import Synchronization

/// The one way into a running `TaskRunner` from other threads: the transfer's reports and outcome, and
/// stop requests, in the order they happened.
///
/// Posting never blocks on the database or waits for the actor: it appends under a lock and rings a
/// doorbell whose buffer holds one ring, so a burst of callbacks costs the actor one wake-up. Consecutive
/// progress reports that the actor has not taken yet collapse into the newest one (it carries the latest
/// counts); checkpoints, stops and the outcome are never dropped or reordered.
final class TaskMailbox: Sendable {
    enum Item: Sendable {
        case transfer(TransferEvent)
        case stop(StopReason)
        case transferEnded(Result<TransferOutcome, StorageError>)
    }

    private let items = Mutex<[Item]>([])
    let doorbell: AsyncStream<Void>
    private let ring: AsyncStream<Void>.Continuation

    init() {
        (doorbell, ring) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func post(_ item: Item) {
        items.withLock { items in
            if case .transfer(.progress) = item, case .transfer(.progress)? = items.last {
                items[items.count - 1] = item
            } else {
                items.append(item)
            }
        }
        ring.yield()
    }

    /// Queues the stop and tells the transfer in one critical section, so the stop is always queued
    /// before the outcome it causes.
    func postStop(_ reason: StopReason, control: TransferControl) {
        items.withLock { items in
            items.append(.stop(reason))
            control.stop(reason)
        }
        ring.yield()
    }

    func take() -> [Item] {
        items.withLock { items in
            let taken = items
            items.removeAll(keepingCapacity: true)
            return taken
        }
    }

    func close() {
        ring.finish()
    }
}
