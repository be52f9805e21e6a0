import Foundation
import JobModel

/// Shares one directory `fsync(2)` among downloads that finish into the same folder at the same time:
/// a group commit for renames.
///
/// A download is durable once its file's bytes are synced, the file is renamed into place and the folder
/// is synced (so the rename survives a crash). Sixteen downloads finishing into one folder used to sync it
/// sixteen times; on a disk each is a journal commit. Here a caller records its rename (taking a ticket)
/// and then either starts a sync — which covers every rename recorded before it starts, its own and
/// those of callers waiting meanwhile — or waits for the sync in flight and, if that one started before
/// its rename, for the next. `sync(after:)` returns only once a sync that *started after the caller's
/// rename* has succeeded, so no caller reports a download finished before its rename is durable.
///
/// Folders are told apart by device and inode, never by path: two paths to one folder share, and a
/// folder replaced at a path never takes the place of the one a rename went into.
public final class DirectorySyncGroup: @unchecked Sendable {
    // @unchecked: `states` is only touched with `condition` locked.
    /// The group every `PartialFile` uses unless given another.
    public static let shared = DirectorySyncGroup()

    private let condition = NSCondition()
    private var states: [FileIdentity: DirectorySyncState] = [:]
    private var syncs = 0
    /// Suspended `syncAfterRename` callers, resumed (to ask again) whenever a sync finishes.
    private var suspended: [CheckedContinuation<Void, Never>] = []

    public init() {}

    /// How many directory syncs this group has started (successful or not).
    public var syncsStarted: Int {
        condition.lock()
        defer { condition.unlock() }
        return syncs
    }

    /// Returns once a sync of `folder` that started after this call began has succeeded. `perform` syncs
    /// the folder through the caller's own descriptor; a failed sync is thrown to the caller that ran it,
    /// and a waiter then runs the next one itself.
    public func sync(folder: FileIdentity, perform: () throws(StorageError) -> Void) throws(StorageError) {
        condition.lock()
        let ticket = states[folder, default: DirectorySyncState()].renameRecorded()
        // The entry exists from here until its last ticket holder leaves (see `holderLeft`).
        defer {
            if states[folder]?.holderLeft() == true { states[folder] = nil }
            condition.unlock()
        }
        while true {
            switch states[folder, default: DirectorySyncState()].next(for: ticket) {
            case .done:
                return
            case .waitForSync:
                condition.wait()
            case .startSync:
                syncs += 1
                condition.unlock()
                var failure: StorageError?
                do { try perform() } catch { failure = error }
                condition.lock()
                finishSync(of: folder, succeeded: failure == nil)
                if let failure { throw failure }
            }
        }
    }

    /// As `sync(folder:perform:)`, but a caller that has to wait for another's sync is suspended instead
    /// of blocking its thread, so the thread can finish other downloads meanwhile — which then join the
    /// next sync. This is what lets a worker with few threads group many downloads' renames.
    public func syncAfterRename(folder: FileIdentity, perform: () throws(StorageError) -> Void) async throws(StorageError) {
        let ticket = locked { states[folder, default: DirectorySyncState()].renameRecorded() }
        defer { locked { if states[folder]?.holderLeft() == true { states[folder] = nil } } }
        while true {
            switch nextStep(folder: folder, ticket: ticket) {
            case .done:
                return
            case .waitForSync:
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    suspendWhileSyncing(folder: folder, continuation)
                }
            case .startSync:
                var failure: StorageError?
                do { try perform() } catch { failure = error }
                locked { finishSync(of: folder, succeeded: failure == nil) }
                if let failure { throw failure }
            }
        }
    }

    // MARK: - Under the lock (synchronous, so async callers never hold it across a suspension)

    private func locked<Result>(_ body: () -> Result) -> Result {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    /// `next(for:)` under the lock, counting a sync that starts.
    private func nextStep(folder: FileIdentity, ticket: UInt64) -> DirectorySyncState.NextStep {
        locked {
            let step = states[folder, default: DirectorySyncState()].next(for: ticket)
            if case .startSync = step { syncs += 1 }
            return step
        }
    }

    /// Parks `continuation` until the sync in flight finishes; resumes it at once when that sync has
    /// already finished (between `nextStep` and now), so it asks again.
    private func suspendWhileSyncing(folder: FileIdentity, _ continuation: CheckedContinuation<Void, Never>) {
        let parked: Bool = locked {
            guard states[folder]?.inFlight != nil else { return false }
            suspended.append(continuation)
            return true
        }
        if !parked { continuation.resume() }
    }

    /// Records the end of `folder`'s sync and wakes every waiter, blocked or suspended, to ask again.
    /// Called with `condition` locked.
    private func finishSync(of folder: FileIdentity, succeeded: Bool) {
        states[folder, default: DirectorySyncState()].syncFinished(succeeded: succeeded)
        condition.broadcast()
        let waking = suspended
        suspended.removeAll()
        for continuation in waking { continuation.resume() }
    }
}

/// The tickets of one folder's group sync: a pure value, no I/O (`DirectorySyncGroup` performs).
///
/// Tickets count renames in the order they were recorded. A sync covers every ticket handed out before it
/// started; `covered` is the highest ticket a *successful* sync covered. A caller is done when its ticket
/// is covered; otherwise it starts a sync when none is in flight, or waits for the one in flight (which
/// may not cover it: then it comes back and starts the next).
struct DirectorySyncState: Equatable {
    /// What the caller holding a ticket does next.
    enum NextStep: Equatable {
        /// A successful sync that started after the rename has finished.
        case done
        /// Sync the folder now; this sync covers tickets up to `covering`.
        case startSync(covering: UInt64)
        /// Another caller's sync is in flight: wait for it to finish, then ask again.
        case waitForSync
    }

    private(set) var issued: UInt64 = 0
    private(set) var covered: UInt64 = 0
    /// The highest ticket the sync in flight covers; nil when none is in flight.
    private(set) var inFlight: UInt64?
    /// Tickets whose holders have not returned yet.
    private(set) var holders = 0

    /// A rename was made: its ticket.
    mutating func renameRecorded() -> UInt64 {
        issued += 1
        holders += 1
        return issued
    }

    /// What the holder of `ticket` does next; starting a sync is recorded here, before it is performed.
    mutating func next(for ticket: UInt64) -> NextStep {
        precondition(ticket >= 1 && ticket <= issued, "DirectorySyncState: ticket \(ticket) was never issued")
        if covered >= ticket { return .done }
        if inFlight != nil { return .waitForSync }
        inFlight = issued
        return .startSync(covering: issued)
    }

    /// The sync in flight finished; only a successful one covers its tickets.
    mutating func syncFinished(succeeded: Bool) {
        guard let covering = inFlight else { preconditionFailure("DirectorySyncState: a sync finished that never started") }
        if succeeded { covered = max(covered, covering) }
        inFlight = nil
    }

    /// No sync in flight and every ticket covered.
    var isIdle: Bool { inFlight == nil && covered == issued }

    /// A ticket's holder returned (done, or its sync failed); true when no holder is left, so the entry
    /// can be dropped — memory stays bounded by the folders being written to right now, and no holder
    /// ever finds its ticket missing from a fresh entry.
    mutating func holderLeft() -> Bool {
        precondition(holders > 0, "DirectorySyncState: more holders left than tickets were issued")
        holders -= 1
        return holders == 0 && inFlight == nil
    }
}
