import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// A worker SIGKILLed while it writes a `file://` object's metadata sidecar: between creating the
/// temporary (`.NAME.jobctl-meta.json.<job id>.jobctl-meta.tmp`) and renaming it into place. The worker
/// runs under strace, which holds each of its renames for a minute before the kernel sees it, so the kill
/// lands in that window every time; then the temporary must not outlive the job, on either store.
@Suite("a sidecar write killed mid-way", .onTestThreads, .serialized) struct SidecarTemporaryTests {
    /// The jobs that write a sidecar, and the object each finds in place (nil: the job makes it).
    enum Writer: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case uploadFile = "upload-file", uploadData = "upload-data", updateMetadata = "update-metadata", fetchURL = "fetch-url"

        var testDescription: String { rawValue }

        func manifestLine(source: String) -> String {
            switch self {
            case .uploadFile: "- {kind: upload-file, source: \"\(source)\", destination: \"file://media/obj.bin\"}\n"
            case .uploadData: "- {kind: upload-data, data: \"fresh bytes\", destination: \"file://media/obj.bin\"}\n"
            case .updateMetadata: "- {kind: update-metadata, destination: \"file://media/obj.bin\", metadata: {content_type: text/plain}}\n"
            case .fetchURL: "- {kind: fetch-url, source: \"file://media/obj.bin\"}\n"
            }
        }
    }

    private static func entries(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    /// The worker is killed with the job's sidecar temporary on disk; the job is cancelled while no
    /// worker runs it, and the next worker (which finds it final, its lease expired) sweeps the temporary.
    @Test("killed between creating the sidecar temporary and renaming it, then cancelled: the next worker sweeps it",
          arguments: Writer.allCases, WorkerEngine.allCases)
    func cancelledJobsTemporaryIsSwept(writer: Writer, engine: WorkerEngine) throws {
        let scene = try KilledSidecarWrite(writer, engine: engine, label: "sidecar-cancel")
        defer { scene.directory.remove() }
        let temporary = try scene.killMidWrite()

        #expect(try jobctl(["cancel", scene.id], database: scene.database).status == 0)
        let second = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "1"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        #expect(try engine.reader(scene.database).job(scene.id)?.state == .cancelled)
        #expect(!FileManager.default.fileExists(atPath: temporary), "left behind: \(Self.entries(scene.bucket))")
        #expect(Self.entries(scene.bucket).allSatisfy { !$0.hasSuffix(".jobctl-meta.tmp") && !$0.hasSuffix(".jobctl-upload") },
                "left behind: \(Self.entries(scene.bucket))")
        // Removed by the sweep, which says so, naming the job and the kind of file.
        #expect(second.log.contains("\(scene.id) file=sidecar-temporary path=\(temporary)"), "\(second.log)")
    }

    /// The job's next attempt writes the sidecar under the same name: the killed attempt's temporary is
    /// replaced, and renamed into place, not left beside it.
    @Test("killed between creating the sidecar temporary and renaming it, then retried: nothing is left",
          arguments: Writer.allCases)
    func retriedJobReplacesItsTemporary(writer: Writer) throws {
        let scene = try KilledSidecarWrite(writer, engine: .sqlite, label: "sidecar-retry")
        defer { scene.directory.remove() }
        _ = try scene.killMidWrite()

        let second = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "1"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        #expect(try scene.engine.reader(scene.database).job(scene.id)?.state == .succeeded, "\(second.log)")
        #expect(Self.entries(scene.bucket) == [".obj.bin.jobctl-meta.json", "obj.bin"], "left behind: \(Self.entries(scene.bucket))")
    }

}

/// One job that writes a sidecar, run by a worker that is killed while the sidecar's rename is held.
struct KilledSidecarWrite {
    let directory: TemporaryDirectory
    let database: String
    let environment: [String: String]
    let bucket: String
    let id: String
    let engine: WorkerEngine

    init(_ writer: SidecarTemporaryTests.Writer, engine: WorkerEngine, label: String) throws {
        directory = try TemporaryDirectory(label)
        self.engine = engine
        database = try engine.database(in: directory)
        environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        bucket = directory.file("buckets/media")
        try FileManager.default.createDirectory(atPath: bucket, withIntermediateDirectories: true)
        // update-metadata and fetch-url find an object without a sidecar (served from its `stat`).
        if writer == .updateMetadata || writer == .fetchURL {
            try Data("old bytes".utf8).write(to: URL(fileURLWithPath: bucket + "/obj.bin"))
        }
        let source = directory.file("source.bin")
        try writePatternFile(source, size: 100_000)
        id = try #require(try submit(writer.manifestLine(source: source), database: database, directory: directory).first)
    }

    /// Runs the job in a worker whose renames strace holds, SIGKILLs the worker once the job's sidecar
    /// temporary is on disk, and returns the temporary's path.
    func killMidWrite() throws -> String {
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        let worker = try JobctlProcess(database: database, arguments: ["worker", "--lease", "1"], environment: environment,
                                       logDirectory: directory.path,
                                       tracer: [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf",
                                                "-e", "trace=rename,renameat,renameat2",
                                                "-e", "inject=rename,renameat,renameat2:delay_enter=60s"])
        var found: [String] = []
        let written = eventually(seconds: 30) {
            found = (try? FileManager.default.contentsOfDirectory(atPath: bucket))?.filter { $0.hasSuffix(".jobctl-meta.tmp") } ?? []
            return !found.isEmpty
        }
        let killed = worker.killTracee(SIGKILL)
        worker.signal(SIGKILL)
        _ = worker.wait(seconds: 10)
        try #require(written, "the worker never created a sidecar temporary: \(worker.log)")
        try #require(killed, "the worker under strace was not found to kill")
        try #require(try engine.reader(database).job(id)?.state == .running, "the job ended before the worker was killed; nothing to test")
        // The job's id is in the name: nothing else ties a temporary to its job.
        #expect(found == [".obj.bin.jobctl-meta.json.\(id).jobctl-meta.tmp"], "\(found)")
        return bucket + "/" + found[0]
    }
}
