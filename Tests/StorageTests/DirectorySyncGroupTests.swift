import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// The group sync of a folder after downloads are renamed into it: fewer syncs, never a weaker promise.
@Suite struct DirectorySyncGroupTests {
    // MARK: - The ticket state, step by step

    @Test func aLoneRenameStartsASyncAndIsDoneWhenItSucceeds() {
        var state = DirectorySyncState()
        let ticket = state.renameRecorded()
        #expect(state.next(for: ticket) == .startSync(covering: 1))
        state.syncFinished(succeeded: true)
        #expect(state.next(for: ticket) == .done)
        #expect(state.isIdle)
        let unused = state.holderLeft()
        #expect(unused, "the last holder left: the entry can go")
    }

    /// The entry is kept while any ticket holder has not returned, even when every ticket is covered, so
    /// a waiter that wakes late never meets a fresh entry that never issued its ticket.
    @Test func theEntryStaysUntilItsLastHolderLeaves() {
        var state = DirectorySyncState()
        let first = state.renameRecorded()
        #expect(state.next(for: first) == .startSync(covering: 1))
        let second = state.renameRecorded()
        #expect(state.next(for: second) == .waitForSync)
        state.syncFinished(succeeded: true)
        #expect(state.next(for: second) == .startSync(covering: 2))
        state.syncFinished(succeeded: true)
        #expect(state.next(for: second) == .done)
        let unusedEarly = state.holderLeft()
        #expect(!unusedEarly, "the first holder has not returned yet")
        #expect(state.next(for: first) == .done)
        let unusedLate = state.holderLeft()
        #expect(unusedLate)
    }

    /// A rename recorded while a sync is in flight is not covered by it (that sync may have read the folder
    /// before the rename): it waits, then starts a sync of its own.
    @Test func aRenameMadeDuringASyncIsNotCoveredByIt() {
        var state = DirectorySyncState()
        let first = state.renameRecorded()
        #expect(state.next(for: first) == .startSync(covering: 1))
        let second = state.renameRecorded()
        #expect(state.next(for: second) == .waitForSync)
        state.syncFinished(succeeded: true)
        #expect(state.next(for: first) == .done)
        #expect(state.next(for: second) == .startSync(covering: 2))
        #expect(!state.isIdle)
        state.syncFinished(succeeded: true)
        #expect(state.next(for: second) == .done)
        #expect(state.isIdle)
    }

    /// Renames that pile up during one sync share the next: three renames, two syncs.
    @Test func renamesMadeDuringASyncShareTheNextOne() {
        var state = DirectorySyncState()
        let first = state.renameRecorded()
        #expect(state.next(for: first) == .startSync(covering: 1))
        let second = state.renameRecorded()
        let third = state.renameRecorded()
        #expect(state.next(for: second) == .waitForSync)
        #expect(state.next(for: third) == .waitForSync)
        state.syncFinished(succeeded: true)
        #expect(state.next(for: second) == .startSync(covering: 3))
        #expect(state.next(for: third) == .waitForSync)
        state.syncFinished(succeeded: true)
        #expect(state.next(for: third) == .done)
        #expect(state.next(for: second) == .done)
        #expect(state.isIdle)
    }

    /// A failed sync covers nothing: whoever waited starts another, which covers the failed ticket too.
    @Test func aFailedSyncCoversNothing() {
        var state = DirectorySyncState()
        let first = state.renameRecorded()
        #expect(state.next(for: first) == .startSync(covering: 1))
        let second = state.renameRecorded()
        #expect(state.next(for: second) == .waitForSync)
        state.syncFinished(succeeded: false)
        #expect(!state.isIdle)
        #expect(state.next(for: second) == .startSync(covering: 2))
        state.syncFinished(succeeded: true)
        #expect(state.next(for: second) == .done)
        #expect(state.isIdle)
    }

    // MARK: - The group, under contention

    /// Sixteen threads each "rename" (add a name to the folder) and then ask the group to make it
    /// durable. The sync records the names present when it *starts*; when it returns they count as
    /// durable. Every caller must find its own name durable when `sync` returns — the promise a
    /// download's `succeeded` event relies on — and the syncs are never more than the renames.
    @Test func everyCallerReturnsOnlyAfterASyncThatSawItsRename() throws {
        let group = DirectorySyncGroup()
        let folder = FileIdentity(device: 1, inode: 2)
        let record = Guarded(SyncRecord())
        let callers = 16
        let finished = DispatchGroup()
        for caller in 0..<callers {
            finished.enter()
            Thread.detachNewThread {
                defer { finished.leave() }
                record.update { _ = $0.present.insert(caller) }
                do {
                    try group.sync(folder: folder) { () throws(StorageError) in
                        let seen = record.update { $0.present }
                        Thread.sleep(forTimeInterval: 0.002)   // the sync's own duration, so others pile up
                        record.update { $0.durable.formUnion(seen) }
                    }
                } catch {
                    record.update { $0.missing.append(-caller - 1) }
                }
                record.update { if !$0.durable.contains(caller) { $0.missing.append(caller) } }
            }
        }
        #expect(finished.wait(timeout: .now() + 60) == .success, "the callers did not all return")
        let result = record.update { $0 }
        #expect(result.missing.isEmpty, "callers returned before a sync that saw their rename: \(result.missing)")
        #expect(result.durable.count == callers)
        #expect(group.syncsStarted >= 1 && group.syncsStarted <= callers)
    }

    /// The same promise for the suspending form a download uses: sixteen tasks on the test's small
    /// thread pool, each returning only after a sync that saw its rename.
    @Test func everySuspendedCallerResumesOnlyAfterASyncThatSawItsRename() async throws {
        let group = DirectorySyncGroup()
        let folder = FileIdentity(device: 1, inode: 4)
        let record = Guarded(SyncRecord())
        let callers = 16
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for caller in 0..<callers {
                tasks.addTask {
                    record.update { _ = $0.present.insert(caller) }
                    try await group.syncAfterRename(folder: folder) { () throws(StorageError) in
                        let seen = record.update { $0.present }
                        Thread.sleep(forTimeInterval: 0.002)   // the sync's own duration, so others pile up
                        record.update { $0.durable.formUnion(seen) }
                    }
                    record.update { if !$0.durable.contains(caller) { $0.missing.append(caller) } }
                }
            }
            try await tasks.waitForAll()
        }
        let result = record.update { $0 }
        #expect(result.missing.isEmpty, "callers resumed before a sync that saw their rename: \(result.missing)")
        #expect(result.durable.count == callers)
        #expect(group.syncsStarted >= 1 && group.syncsStarted <= callers)
    }

    /// A sync that fails is thrown to the caller that ran it; a later caller syncs again and succeeds.
    @Test func aFailedSyncIsThrownAndTheNextCallerSyncsAgain() throws {
        let group = DirectorySyncGroup()
        let folder = FileIdentity(device: 1, inode: 3)
        #expect(throws: StorageError.self) {
            try group.sync(folder: folder) { () throws(StorageError) in
                throw StorageError(.internalError, "disk on fire")
            }
        }
        var ran = false
        try group.sync(folder: folder) { () throws(StorageError) in ran = true }
        #expect(ran)
        #expect(group.syncsStarted == 2)
    }

    // MARK: - Real downloads into one folder

    /// The suspending commit a download uses: sixteen tasks committing into one folder, all in place.
    @Test func partialFilesCommittedTogetherFromTasksAreAllInPlace() async throws {
        let directory = try TemporaryDirectory("jobctl-group-sync")
        defer { directory.remove() }
        let group = DirectorySyncGroup()
        let count = 16
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for index in 0..<count {
                tasks.addTask {
                    let partial = try PartialFile(destination: directory.file("f\(index).bin"), jobID: "01JOB\(index)",
                                                  resumeFrom: nil, syncGroup: group)
                    try partial.write(Data("file \(index)".utf8))
                    _ = try await partial.commit()
                }
            }
            try await tasks.waitForAll()
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(names == (0..<count).map { "f\($0).bin" }.sorted(), "temporary files left or files missing: \(names)")
        for index in 0..<count {
            #expect(try String(contentsOfFile: directory.file("f\(index).bin"), encoding: .utf8) == "file \(index)")
        }
        #expect(group.syncsStarted >= 1 && group.syncsStarted <= count)
    }

    /// Sixteen partial files committed at once into one folder through one group: every destination
    /// holds its bytes, no temporary file is left, and the folder was synced at most once per file.
    @Test func partialFilesCommittedTogetherAreAllInPlace() throws {
        let directory = try TemporaryDirectory("jobctl-group-sync")
        defer { directory.remove() }
        let group = DirectorySyncGroup()
        let count = 16
        let failures = Guarded([String]())
        let finished = DispatchGroup()
        for index in 0..<count {
            finished.enter()
            Thread.detachNewThread {
                defer { finished.leave() }
                do {
                    let partial = try PartialFile(destination: directory.file("f\(index).bin"), jobID: "01JOB\(index)",
                                                  resumeFrom: nil, syncGroup: group)
                    try partial.write(Data("file \(index)".utf8))
                    _ = try partial.commit()
                } catch {
                    failures.update { $0.append("\(index): \(error)") }
                }
            }
        }
        #expect(finished.wait(timeout: .now() + 60) == .success, "the commits did not all return")
        #expect(failures.update { $0 }.isEmpty)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(names == (0..<count).map { "f\($0).bin" }.sorted(), "temporary files left or files missing: \(names)")
        for index in 0..<count {
            #expect(try String(contentsOfFile: directory.file("f\(index).bin"), encoding: .utf8) == "file \(index)")
        }
        #expect(group.syncsStarted >= 1 && group.syncsStarted <= count)
    }
}

/// What the contention test's threads record: renamed names, names a finished sync saw, callers that
/// returned too early (or failed, as negative numbers).
private struct SyncRecord {
    var present = Set<Int>()
    var durable = Set<Int>()
    var missing: [Int] = []
}

/// A value shared by the test's threads, changed only under its lock.
private final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func update<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
