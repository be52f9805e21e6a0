import Foundation
import JobModel
@testable import Storage
import Synchronization
import Testing
import TestSupport

/// The folder a transfer writes into is moved away mid-transfer (`mv dl dl.old`) and another made at its
/// name. The transfer holds the folder by its descriptor, so its file was renamed into the moved folder
/// while the job reported it at the path it was given: `result` named a file that was not there (or an
/// older one), and the new bytes sat unnamed in `dl.old`. Now nothing is renamed into a folder the path no
/// longer leads to; the attempt fails retryably and the next one writes where the path leads.
@Suite(.onTestThreads) struct MovedFolderTests {
    /// Whether the folder was moved yet.
    final class Once: Sendable {
        private let done = Mutex(false)
        /// True the first time only.
        func first() -> Bool { done.withLock { done in defer { done = true }; return !done } }
        var happened: Bool { done.withLock { $0 } }
    }

    /// Moves `folder` to `folder + ".moved"` and makes a new, empty `folder` (once, at the first checkpoint).
    private static func recorder(moving folder: String, moved: Once) -> EventRecorder {
        EventRecorder { event in
            guard case .checkpoint = event, moved.first() else { return }
            _ = rename(folder, folder + ".moved")
            _ = mkdir(folder, 0o755)
        }
    }

    private static func entries(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    @Test("a download whose destination folder is moved away and made again mid-transfer renames nothing into the moved folder")
    func downloadIntoAMovedFolder() async throws {
        let directory = try TemporaryDirectory("jobctl-moved-folder")
        defer { directory.remove() }
        let payload = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: directory.file("buckets/b/o.bin")))
        let folder = directory.file("dl")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")),
                                   checkpointInterval: 1 << 20)
        let moved = Once()
        let outcome = await run(backend, JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: folder + "/o.bin"),
                                control: TransferControl(jobID: "01MOVEDDL", leaseToken: 1),
                                recorder: Self.recorder(moving: folder, moved: moved))
        try #require(moved.happened, "no checkpoint came: the folder was never moved")
        switch outcome {
        case .success(let result):
            Issue.record("reported \(result) while the file went to \(Self.entries(folder + ".moved"))")
        case .failure(let error):
            #expect(error.code == StorageErrorCode.pathError && error.retryable, "\(error)")
        }
        #expect(Self.entries(folder + ".moved").isEmpty, "in the moved folder: \(Self.entries(folder + ".moved"))")
        #expect(Self.entries(folder).isEmpty, "\(Self.entries(folder))")

        // The next attempt writes where the path leads now.
        let again = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: folder + "/o.bin"),
                                           control: TransferControl(jobID: "01MOVEDDL", leaseToken: 2)))
        #expect(again.path == folder + "/o.bin")
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder + "/o.bin")) == payload)
    }

    @Test("a file:// upload whose object folder is moved away and made again mid-transfer renames nothing into the moved folder")
    func uploadIntoAMovedFolder() async throws {
        let directory = try TemporaryDirectory("jobctl-moved-folder")
        defer { directory.remove() }
        let payload = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 17) })
        try payload.write(to: URL(fileURLWithPath: directory.file("source.bin")))
        let folder = directory.file("buckets/b/media")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")),
                                   checkpointInterval: 1 << 20)
        let moved = Once()
        let spec = JobSpec(kind: .uploadFile, source: directory.file("source.bin"), destination: "file://b/media/o.bin")
        let outcome = await run(backend, spec, control: TransferControl(jobID: "01MOVEDUP", leaseToken: 1),
                                recorder: Self.recorder(moving: folder, moved: moved))
        try #require(moved.happened, "no checkpoint came: the folder was never moved")
        switch outcome {
        case .success(let result):
            Issue.record("reported \(result) while the object went to \(Self.entries(folder + ".moved"))")
        case .failure(let error):
            #expect(error.code == StorageErrorCode.pathError && error.retryable, "\(error)")
        }
        #expect(Self.entries(folder + ".moved").isEmpty, "in the moved folder: \(Self.entries(folder + ".moved"))")
        #expect(Self.entries(folder).isEmpty, "\(Self.entries(folder))")

        let again = await run(backend, spec, control: TransferControl(jobID: "01MOVEDUP", leaseToken: 2))
        _ = try finished(again)
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder + "/o.bin")) == payload)
    }

    /// The check compares the folder, not the spelling of its path: a folder moved and linked back at its
    /// name is still where the path leads, and the file is renamed there.
    @Test("a destination folder replaced by a link to itself still takes the download")
    func folderLinkedBackIsStillTheDestination() async throws {
        let directory = try TemporaryDirectory("jobctl-moved-folder")
        defer { directory.remove() }
        let payload = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: directory.file("buckets/b/o.bin")))
        let folder = directory.file("dl")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")),
                                   checkpointInterval: 1 << 20)
        let moved = Once()
        let recorder = EventRecorder { event in
            guard case .checkpoint = event, moved.first() else { return }
            _ = rename(folder, folder + ".real")
            _ = symlink(folder + ".real", folder)
        }
        let result = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: folder + "/o.bin"),
                                            recorder: recorder))
        try #require(moved.happened)
        #expect(result.path == folder + "/o.bin")
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder + "/o.bin")) == payload)
    }
}
