/// What a store's group commits held since the store was opened: how many commits wrote events, how
/// many events they wrote, and how many events each commit held, by power-of-two size class.
///
/// The executor records one commit in O(1) under the lock it already takes for the totals, so keeping
/// the distribution costs the commit path nothing it can notice; the worker turns a snapshot into the
/// `jobctl_store_events_per_commit` histogram.
public struct GroupCommitStats: Sendable, Equatable, CustomStringConvertible {
    /// Commits that wrote at least one event (a claim alone is not counted).
    public private(set) var commits = 0
    /// Events those commits wrote.
    public private(set) var events = 0
    /// Commits by size class: index 0 counts commits of one event, index `i` (i ≥ 1) those of
    /// 2^(i-1)+1 through 2^i events.
    public private(set) var commitsBySizeClass = [Int](repeating: 0, count: Int.bitWidth + 1)

    /// Times a group commit found the write lock held by another process and tried again (executors
    /// that retry, see `StoreExecutor.init(name:busyRetryMs:flush:)`).
    public private(set) var busyRetries = 0
    /// Appends queued meanwhile that those retries added to their commit.
    public private(set) var eventsGatheredWhileBusy = 0

    /// Group commits that, after waiting for the writer lock between processes, added the appends
    /// queued meanwhile (see `StoreExecutor.init(name:busyRetryMs:writerLock:flush:)`), and how many.
    public private(set) var lockWaitsGathering = 0
    public private(set) var eventsGatheredWhileLocking = 0
    /// Claims queued meanwhile that joined such a commit.
    public private(set) var claimsGatheredWhileLocking = 0

    /// Group commits that waited for more appends because the previous one was made moments before
    /// (see `StoreExecutor.init`'s `appendCommitSpacingUs`), and the appends queued while they waited.
    public private(set) var spacedCommits = 0
    public private(set) var eventsGatheredWhileSpacing = 0

    /// Syncs that made group commits durable after their commit (`StoreExecutor`'s durability barrier,
    /// one for every commit made while the previous sync ran); nil when the commit itself syncs.
    public internal(set) var deferredSyncs: Int?

    public init() {}

    /// Counts one group commit that took `count` more appends (and maybe a claim) after waiting for
    /// the writer lock.
    public mutating func recordGatheredWhileLocking(_ count: Int, claim: Bool = false) {
        lockWaitsGathering += 1
        eventsGatheredWhileLocking += count
        if claim { claimsGatheredWhileLocking += 1 }
    }

    /// Counts one group commit that waited for more appends and took `count` more.
    public mutating func recordSpaced(gathering count: Int) {
        spacedCommits += 1
        eventsGatheredWhileSpacing += count
    }

    /// Counts one retry of a group commit that found the write lock busy and took `count` more appends.
    public mutating func recordBusyRetry(gathering count: Int) {
        busyRetries += 1
        eventsGatheredWhileBusy += count
    }

    /// Counts one commit of `eventCount` events (nothing when it wrote none).
    public mutating func recordCommit(of eventCount: Int) {
        guard eventCount > 0 else { return }
        commits += 1
        events += eventCount
        commitsBySizeClass[Self.sizeClass(eventCount)] += 1
    }

    /// Commits that held at most `bound` events; exact when `bound` is a power of two (the histogram's
    /// bucket bounds), otherwise rounded up to the next power of two.
    public func commits(holdingAtMost bound: Int) -> Int {
        guard bound >= 1 else { return 0 }
        return commitsBySizeClass[0...Self.sizeClass(bound)].reduce(0, +)
    }

    /// The smallest `i` with `count <= 2^i` (`count` ≥ 1).
    static func sizeClass(_ count: Int) -> Int {
        count <= 1 ? 0 : Int.bitWidth - (count - 1).leadingZeroBitCount
    }

    public var description: String { "\(commits) commits, \(events) events" }
}
