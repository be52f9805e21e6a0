import Foundation
import Glibc
import JobModel
@testable import Storage
import Synchronization
import TestSupport
import Testing

/// A download's checkpoint syncs run on `FileIO`'s threads, not the curl engine's (`BackgroundSyncs`):
/// each checkpoint is reported after its sync returned, in order, the engine never waits for one, and a
/// sync that fails reports nothing more and fails the download.
@Suite("checkpoint syncs off the engine thread", .onTestThreads)
struct BackgroundSyncsTests {
    /// A duplicate of an open file's descriptor (the syncs close what they are given).
    private static func duplicate(_ handle: FileHandle) -> Int32 {
        fcntl(handle.fileDescriptor, F_DUPFD_CLOEXEC, 0)
    }

    /// The device and inode `descriptor` refers to; nil when it is not open.
    private static func identity(_ descriptor: Int32) -> [UInt64]? {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return [UInt64(info.st_dev), UInt64(info.st_ino)]
    }

    /// Whether `descriptor` is still open on the file of `identity` (a closed number another thread
    /// reopened meanwhile names another file).
    private static func stillOpen(_ descriptor: Int32, on identity: [UInt64]?) -> Bool {
        Self.identity(descriptor) == identity
    }

    @Test("syncs report in order, a waiting one may be replaced by a later one, and every descriptor is closed")
    func syncsReportInOrderAndCloseWhatTheyAreGiven() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("partial")
        try Data(repeating: 7, count: 1 << 20).write(to: URL(fileURLWithPath: path))
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        let syncs = BackgroundSyncs(path: path)
        let delivered = Mutex<[Int]>([])
        var given: [Int32] = []
        for index in 1...20 {
            let descriptor = Self.duplicate(handle)
            try #require(descriptor >= 0)
            given.append(descriptor)
            syncs.sync(descriptor) { delivered.withLock { $0.append(index) } }
        }
        await syncs.settle()
        let order = delivered.withLock { $0 }
        #expect(order.first == 1, "the first starts at once: \(order)")
        #expect(order.last == 20, "the last is never dropped: \(order)")
        #expect(order == order.sorted() && Set(order).count == order.count, "\(order)")
        #expect(syncs.failure == nil)
        // All closed, the dropped ones' too: none of the numbers still names the file (the handle's own
        // descriptor, never given, stays open on it).
        let file = Self.identity(handle.fileDescriptor)
        #expect(file != nil)
        #expect(given.filter { Self.stillOpen($0, on: file) }.isEmpty, "\(given)")
    }

    @Test("a sync that fails reports nothing, and nothing after it is reported either")
    func aFailedSyncStopsTheReports() async throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[1]) }
        let readEnd = Self.identity(ends[0])
        let syncs = BackgroundSyncs(path: "/somewhere/partial")
        let delivered = Mutex<[Int]>([])
        // `fdatasync` of a pipe fails (EINVAL): as a sync that failed for a disk's error.
        syncs.sync(ends[0]) { delivered.withLock { $0.append(1) } }
        await syncs.settle()
        let failure = try #require(syncs.failure)
        #expect(!failure.lackOfSpace)
        #expect(failure.error.message.contains("/somewhere/partial"), "\(failure.error)")
        #expect(!Self.stillOpen(ends[0], on: readEnd))

        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("partial")
        try Data("bytes".utf8).write(to: URL(fileURLWithPath: path))
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        syncs.sync(Self.duplicate(handle)) { delivered.withLock { $0.append(2) } }
        await syncs.settle()
        #expect(delivered.withLock { $0 }.isEmpty)
        #expect(syncs.failure?.error == failure.error, "the first failure stays")
    }

    /// A 24 MiB download to disk through nginx: its checkpoints (one each 8 MiB; a slow disk may fold one
    /// into the next) are reported from `FileIO`'s threads (on tmpfs, where a sync returns at once, from
    /// the engine's), after their syncs, in order and before the download's end; the file is whole.
    @Test("a download's checkpoints are synced and reported off the engine thread, before its end")
    func aDownloadsCheckpointsAreSyncedOffTheEngineThread() async throws {
        let fixture = try BigFileFixture("big.bin", size: 24 << 20)
        defer { fixture.stop() }
        let (directory, backend, total) = (fixture.directory, fixture.backend, fixture.size)
        let destination = directory.file("big.bin")
        let threads = Mutex<[String]>([])
        let recorder = EventRecorder { event in
            if case .checkpoint = event { threads.withLock { $0.append(Thread.current.name ?? "?") } }
        }
        let result = try finished(await run(backend, JobSpec(kind: .downloadFile, source: fixture.url,
                                                             destination: destination), recorder: recorder))
        let atReturn = recorder.checkpoints.count
        #expect(result.size == total)
        #expect(try fileMD5(destination) == fileMD5(fixture.servedPath))
        let checkpoints = recorder.checkpoints.map(\.bytesDone)
        #expect((1...3).contains(checkpoints.count), "\(checkpoints)")
        #expect(zip(checkpoints, checkpoints.dropFirst()).allSatisfy { $1 - $0 >= 8 << 20 } && (checkpoints.last ?? 0) <= total,
                "\(checkpoints)")
        let filesystem = try runProcess("/usr/bin/stat", ["-f", "--format=%T", directory.path]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let expected = filesystem == "tmpfs" ? "jobctl-curl" : "jobctl-file-io"
        #expect(threads.withLock { $0 } == Array(repeating: expected, count: checkpoints.count), "\(filesystem): \(threads.withLock { $0 })")
        // Reported before the download returned: nothing of this transfer comes after its end.
        #expect(atReturn == checkpoints.count)
    }
}
