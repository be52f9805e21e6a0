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

    /// What happens under a running download at its first checkpoint, and what its error must say.
    enum Upheaval: String, CaseIterable, Sendable {
        case folderRemoved, folderMovedAway, folderReplaced, temporaryReplaced, temporaryRemoved

        func happen(folder: String, temporary: String) {
            switch self {
            case .folderRemoved: try? FileManager.default.removeItem(atPath: folder)
            case .folderMovedAway: _ = rename(folder, folder + ".moved")
            case .folderReplaced:
                _ = rename(folder, folder + ".moved")
                _ = mkdir(folder, 0o755)
            case .temporaryReplaced:
                _ = FileManager.default.createFile(atPath: temporary + ".other", contents: Data("someone else's".utf8))
                _ = rename(temporary + ".other", temporary)
            case .temporaryRemoved: _ = unlink(temporary)
            }
        }

        /// What the error says happened.
        func said(folder: String, temporary: String) -> String {
            switch self {
            case .folderRemoved: "the folder '\(folder)' was removed while the download ran"
            case .folderMovedAway: "the folder '\(folder)' was moved away while the download ran"
            case .folderReplaced: "the folder '\(folder)' was moved away or replaced (another is at its path now) while the download ran"
            case .temporaryReplaced: "the temporary file '\(temporary)' was replaced by another file while the download ran"
            case .temporaryRemoved: "the temporary file '\(temporary)' was removed or renamed while the download ran"
            }
        }
    }

    /// A destination folder removed under a running download (`rm -rf`) was reported as its temporary
    /// file "replaced by another file while the download ran (a worker that lost this job's lease, or
    /// another program writing in that folder)", sending people after a writer that never was: the
    /// folder held open had lost the file with itself. The error names what happened — to the folder or
    /// to the temporary file — and stays a retryable `pathError`.
    @Test(arguments: Upheaval.allCases) func aDownloadSaysWhatHappenedToItsFolderOrItsTemporaryFile(upheaval: Upheaval) async throws {
        let directory = try TemporaryDirectory("jobctl-folder-upheaval")
        defer { directory.remove() }
        let payload = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: directory.file("buckets/b/o.bin")))
        let folder = directory.file("dl")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")),
                                   checkpointInterval: 1 << 20)
        let temporary = PartialFile.tempPath(for: folder + "/o.bin", jobID: "01UPHEAVAL")
        let happened = Once()
        let recorder = EventRecorder { event in
            guard case .checkpoint = event, happened.first() else { return }
            upheaval.happen(folder: folder, temporary: temporary)
        }
        let spec = JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: folder + "/o.bin")
        let error = try failure(await run(backend, spec, control: TransferControl(jobID: "01UPHEAVAL", leaseToken: 1), recorder: recorder))
        try #require(happened.happened, "no checkpoint came")
        #expect(error.code == StorageErrorCode.pathError && error.retryable, "\(error)")
        #expect(error.message.hasPrefix(upheaval.said(folder: folder, temporary: temporary)), "\(error.message)")
        // The next attempt writes where the path leads now (the folder made again where it is gone).
        _ = try finished(await run(backend, spec, control: TransferControl(jobID: "01UPHEAVAL", leaseToken: 2)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder + "/o.bin")) == payload)
    }

    /// The same for a `file://` upload's object folder: removed mid-upload, it was reported by whatever
    /// failed first in the folder held open (the sidecar's create, the session file's name check).
    @Test(arguments: [Upheaval.folderRemoved, .folderMovedAway])
    func anUploadSaysWhatHappenedToItsFolder(upheaval: Upheaval) async throws {
        let directory = try TemporaryDirectory("jobctl-folder-upheaval")
        defer { directory.remove() }
        let payload = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 19) })
        try payload.write(to: URL(fileURLWithPath: directory.file("source.bin")))
        let folder = directory.file("buckets/b/media")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")),
                                   checkpointInterval: 1 << 20)
        let happened = Once()
        let recorder = EventRecorder { event in
            guard case .checkpoint = event, happened.first() else { return }
            upheaval.happen(folder: folder, temporary: "")
        }
        let spec = JobSpec(kind: .uploadFile, source: directory.file("source.bin"), destination: "file://b/media/o.bin")
        let error = try failure(await run(backend, spec, control: TransferControl(jobID: "01UPHEAVALUP", leaseToken: 1), recorder: recorder))
        try #require(happened.happened, "no checkpoint came")
        #expect(error.code == StorageErrorCode.pathError && error.retryable, "\(error)")
        let what = upheaval == .folderRemoved ? "was removed" : "was moved away"
        #expect(error.message.hasPrefix("the folder '\(folder)' \(what) while 'file://b/media/o.bin' was being written"), "\(error.message)")
        _ = try finished(await run(backend, spec, control: TransferControl(jobID: "01UPHEAVALUP", leaseToken: 2)))
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
