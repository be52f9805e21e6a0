import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// A source file written to while its upload reads it: the bytes read before and after the write are
/// two versions, and the checksums the upload computes describe exactly that mixture, so no check
/// downstream can tell. Each upload checks the file again before the object is written (its size,
/// modification and change times), and a resumed GCS session goes on only while the file is the one its
/// bytes came from.
@Suite("a source that changes during its upload", .onTestThreads)
struct SourceChangeTests {
    /// Writes `payload` to `path`, dated a day back: a write during the test moves the modification time
    /// whatever the clock's granularity.
    private static func writeDatedBack(_ payload: Data, to path: String) throws {
        try payload.write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -86_400)], ofItemAtPath: path)
    }

    /// Overwrites the first bytes of `path` in place (same size): what an editor or a program writing the
    /// file does. With `restoringTime`, its modification time is then put back to the nanosecond, as
    /// `touch -r` or `rsync --inplace -t` does: size and mtime alike, only the change time tells.
    private static func overwriteStart(of path: String, with bytes: Data, restoringTime: Bool = false) {
        var before = stat()
        guard stat(path, &before) == 0, let handle = FileHandle(forWritingAtPath: path) else { return }
        try? handle.seek(toOffset: 0)
        try? handle.write(contentsOf: bytes)
        try? handle.close()
        if restoringTime {
            var times = [before.st_atim, before.st_mtim]
            _ = utimensat(AT_FDCWD, path, &times, 0)
        }
    }

    private static func expectSourceChanged(_ result: Result<TransferOutcome, StorageError>,
                                            sourceLocation: SourceLocation = #_sourceLocation) throws {
        let error = try failure(result, sourceLocation: sourceLocation)
        #expect(error.code == .pathError && error.retryable, "\(error)", sourceLocation: sourceLocation)
        #expect(error.message.contains("changed while it was being uploaded"), "\(error)", sourceLocation: sourceLocation)
    }

    @Test("GCS: refused before the last chunk; the retry starts a new session and stores the file as it is now",
          arguments: [false, true])
    func gcs(restoringTime: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.file("report.bin")
        let original = patternData(1_300_000, seed: 21)
        try Self.writeDatedBack(original, to: source)
        let edit = patternData(1_000, seed: 22)
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "gs://\(server.bucket)/report.bin")
        let backend = GCSBackend(configuration: emulatorConfiguration(server))

        // The file's first bytes are rewritten once the server has confirmed them (the first chunk).
        let first = EventRecorder { event in
            if case .checkpoint(let point, _) = event, point.bytesDone >= 262_144 {
                Self.overwriteStart(of: source, with: edit, restoringTime: restoringTime)
            }
        }
        try Self.expectSourceChanged(await run(backend, spec, recorder: first))
        let point = try #require(first.checkpoints.last)
        #expect(point.bytesDone >= 262_144, "\(first.checkpoints)")
        let missing = await run(backend, JobSpec(kind: .getMetadata, source: "gs://\(server.bucket)/report.bin"))
        #expect((try failure(missing)).code == .objectNotFound, "no object of two versions was written")

        // The next attempt, from the persisted point: the session holds the old first chunk, so a new one.
        let persisted = try JSONDecoder().decode(ResumePoint.self, from: JSONEncoder().encode(point))
        let second = EventRecorder()
        let result = try finished(await run(backend, spec, resume: persisted, recorder: second))
        var current = original
        current.replaceSubrange(0..<edit.count, with: edit)
        #expect(result.object?.crc32c == hashes(current).crc32c)
        #expect(second.checkpoints.first?.bytesDone == 0, "\(second.checkpoints)")
        let stored = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/report.bin",
                                                             maxSize: 1 << 22)))
        #expect(stored.data == current)
    }

    @Test("HTTP PUT: the body is cut before its last bytes, so the server stores nothing", arguments: [false, true])
    func http(restoringTime: Bool) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.file("log.bin")
        try Self.writeDatedBack(patternData(3 << 20, seed: 23), to: source)
        let edit = patternData(1_000, seed: 24)
        // Paced, so the file is written to while most of it is still to be read.
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "\(server.baseURL)/log.bin", maxRate: 4 << 20)
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done > 0 { Self.overwriteStart(of: source, with: edit, restoringTime: restoringTime) }
        }
        try Self.expectSourceChanged(await run(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)),
                                               spec, recorder: recorder))
        #expect(!FileManager.default.fileExists(atPath: server.root + "/log.bin"))
    }

    @Test("file://: refused before the object is written; no session file is left", arguments: [false, true])
    func local(restoringTime: Bool) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        try FileManager.default.createDirectory(atPath: buckets, withIntermediateDirectories: true)
        let source = directory.file("disk.img")
        // Larger than one step of the copy, so the copy reports progress before its end.
        try Self.writeDatedBack(patternData(20 << 20, seed: 25), to: source)
        let edit = patternData(1_000, seed: 26)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets))
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done > 0 { Self.overwriteStart(of: source, with: edit, restoringTime: restoringTime) }
        }
        try Self.expectSourceChanged(await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/disk.img"),
                                               recorder: recorder))
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: buckets + "/b")) ?? []).isEmpty)

        // Unchanged since, the file uploads whole.
        let result = try finished(await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/disk.img")))
        #expect(result.crc32c == hashes(try Data(contentsOf: URL(fileURLWithPath: source))).crc32c)
    }

    /// A source cut short while it is read (a log rotated by truncation) is changed as much as one
    /// written to: the `file://` copy failed it for good (`invalidArgument`) where growth or an edit is
    /// retried, and the HTTP body's read said so without making it retryable.
    @Test("a source cut short during the upload is a retryable change, on file:// and HTTP alike")
    func shrunk() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        try FileManager.default.createDirectory(atPath: buckets, withIntermediateDirectories: true)
        let local = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets))
        let http = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        for (backend, destination) in [(local as any StorageBackend, "file://b/cut.bin"), (http, "\(server.baseURL)/cut.bin")] {
            let source = directory.file("cut.bin")
            try Self.writeDatedBack(patternData(3 << 20, seed: 27), to: source)
            // Paced, so the file is cut while most of it is still to be read.
            let recorder = EventRecorder { event in
                if case .progress(let done, _) = event, done > 0 { truncate(source, 1 << 20) }
            }
            let error = try failure(await run(backend, JobSpec(kind: .uploadFile, source: source, destination: destination, maxRate: 4 << 20),
                                              recorder: recorder))
            #expect(error.code == .pathError && error.retryable, "\(destination): \(error)")
            #expect(error.message.contains("shrank while it was being uploaded"), "\(destination): \(error)")
        }
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: buckets + "/b")) ?? []).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: server.root + "/cut.bin"))
    }
}
