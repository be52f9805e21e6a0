import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// The real storage backend, whose removal of a finished job's files waits, once, until the test lets
/// it go: the moment between an attempt's outcome being written and its files being removed, held open.
private final class HeldRemovalBackend: StorageBackend {
    let inner: StorageRouter
    private let state = Mutex((holdNext: false, held: false, released: false))
    var held: Bool { state.withLock { $0.held } }

    init(_ inner: StorageRouter) { self.inner = inner }

    func holdNextRemoval() { state.withLock { $0.holdNext = true } }
    func releaseRemoval() { state.withLock { $0.released = true } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        try await inner.perform(spec, resumingFrom: resumePoint, control: control, report: report)
    }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void,
                 completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        inner.perform(spec, resumingFrom: resumePoint, control: control, report: report, completion: completion)
    }

    func leftovers(of job: JobLocalFiles, sparing inUse: Set<String>) -> [LeftoverFile] {
        let hold = state.withLock { state -> Bool in
            guard state.holdNext else { return false }
            state.holdNext = false
            state.held = true
            return true
        }
        if hold {
            let deadline = Date().addingTimeInterval(600)
            while !state.withLock({ $0.released }) && Date() < deadline { usleep(2_000) }
        }
        return inner.leftovers(of: job, sparing: inUse)
    }

    func remove(_ leftover: LeftoverFile) -> Bool { inner.remove(leftover) }
}

/// What an attempt that ended removes: its own files, never the next attempt's.
@Suite("an ended attempt's files", .onTestThreads) struct EndedAttemptFilesTests {
    /// A download is cancelled, retried and claimed again while the cancelled attempt's files are still
    /// to be removed; the new attempt creates its partial file (the same name) and writes slowly. The old
    /// attempt's removal must leave that file alone: it is younger than the attempt's end. Were the
    /// removal to take everything older than the moment it runs, it would unlink the new attempt's file,
    /// which would go on writing into a file no name reaches — a pause would then resume from byte 0, and
    /// a success find no file to rename.
    @Test(arguments: WorkerEngine.allCases)
    func theRemovalAfterACancelSparesTheNextAttemptsFile(engine: WorkerEngine) async throws {
        let trickle = try TrickleServer(.trickle(interval: 0.3))
        defer { trickle.stop() }
        let directory = try TemporaryDirectory("ended-files")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let out = directory.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let id = try #require(try submit("- {kind: download-file, source: \"\(trickle.baseURL)/slow.bin\", destination: \"\(out)/slow.bin\"}\n",
                                         database: database, directory: directory).first)
        let partial = "\(out)/.slow.bin.\(id).jobctl-partial"
        let store = try SmallJobTests.store(engine, database)
        let control = try SmallJobTests.store(engine, database)
        let backend = HeldRemovalBackend(SmallJobTests.localRouter(directory))
        let pool = WorkerPool(store: store, backend: backend, configuration: WorkerConfiguration(concurrency: 2, leaseMs: 60_000))
        let run = Task { try await pool.run() }
        defer { backend.releaseRemoval() }
        let size = { ((try? FileManager.default.attributesOfItem(atPath: partial))?[.size] as? Int) ?? 0 }
        let inode = { ((try? FileManager.default.attributesOfItem(atPath: partial))?[.systemFileNumber] as? Int) ?? 0 }

        try #require(try await eventually(seconds: 60) { size() > 0 }, "the first attempt never wrote \(partial)")
        backend.holdNextRemoval()
        _ = try control.requestCancel(id: id, actor: "cli:test", now: Clock.nowMs())
        let ending = try await eventually(seconds: 60) { backend.held }
        try #require(ending, "the cancelled attempt did not reach the removal of its files")
        _ = try control.retry(id: id, actor: "cli:test", now: Clock.nowMs())
        // The new attempt's transfer has begun once its `started` is in the log; its file then has a byte
        // (the inode number may be the old file's again: a freed inode is often reused at once).
        let begun = try await eventually(seconds: 60) {
            try store.events(jobID: id).map(\.type).split(separator: .retried).last?.contains(.started) == true
        }
        let writing = try await eventually(seconds: 60) { size() > 0 }
        try #require(begun && writing, "the retried attempt did not start its own partial file")
        let second = inode()
        // The new file's last write is then older than the removal (one byte every 0.3 s).
        try await Task.sleep(for: .milliseconds(150))
        backend.releaseRemoval()
        try await Task.sleep(for: .milliseconds(500))

        #expect(FileManager.default.fileExists(atPath: partial) && inode() == second,
                "the new attempt's partial file was removed by the cancelled attempt's end")
        _ = try control.requestPause(id: id, actor: "cli:test", now: Clock.nowMs())
        let paused = try await eventually(seconds: 30) { try store.job(id)?.state == .paused }
        pool.beginShutdown()
        _ = try await run.value
        #expect(paused)
        let job = try #require(try store.job(id))
        guard case .download(let written, _, _, let tempPath, _, _, _)? = job.resumePoint else {
            Issue.record("the paused job has no download resume point: \(String(describing: job.resumePoint))")
            return
        }
        // The paused job resumes from its bytes: the file its resume point names holds them.
        #expect(tempPath == partial)
        #expect(size() >= Int(written) && written > 0, "resume point \(written) bytes, file \(size()) bytes")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
