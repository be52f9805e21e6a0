import Checksums
import Foundation
import JobModel
import Storage
import Synchronization
import TestSupport
import Testing

/// Everything a backend reported, for assertions.
final class EventRecorder: Sendable {
    private let events = Mutex<[TransferEvent]>([])
    /// Called with each event after it is recorded (to stop a transfer at a chosen point).
    private let onEvent: (@Sendable (TransferEvent) -> Void)?

    init(onEvent: (@Sendable (TransferEvent) -> Void)? = nil) {
        self.onEvent = onEvent
    }

    var report: @Sendable (TransferEvent) -> Void {
        { event in
            self.events.withLock { $0.append(event) }
            self.onEvent?(event)
        }
    }

    var all: [TransferEvent] { events.withLock { $0 } }

    var checkpoints: [ResumePoint] {
        all.compactMap { if case .checkpoint(let point, _) = $0 { point } else { nil } }
    }

    var progress: [Int64] {
        all.compactMap { if case .progress(let done, _) = $0 { done } else { nil } }
    }
}

/// A configuration for a test emulator: small chunks so multi-chunk paths run on small files. With
/// `proxy`, every request goes through that fault proxy in front of the emulator.
func emulatorConfiguration(_ server: EmulatorServer, chunkSize: Int = 256 * 1024, through proxy: FaultProxy? = nil) -> StorageConfiguration {
    let endpoint = proxy?.baseURL ?? server.baseURL
    return StorageConfiguration(gcsEndpoint: endpoint, usesEmulator: true, firebaseEndpoint: endpoint,
                                chunkSize: chunkSize, stallTimeout: 30, connectTimeout: 5)
}

/// Runs a job and returns its outcome, or the typed error.
func run(_ backend: any StorageBackend, _ spec: JobSpec, resume: ResumePoint? = nil, control: TransferControl = TransferControl(),
         recorder: EventRecorder = EventRecorder()) async -> Result<TransferOutcome, StorageError> {
    do {
        return .success(try await backend.perform(spec, resumingFrom: resume, control: control, report: recorder.report))
    } catch {
        return .failure(error)
    }
}

/// `body`'s value and how long it took, measured in a detached task: the product's time, not the time the
/// test then waited for a thread of its own. Under `.onTestThreads` an awaited result resumes the test on
/// `TestThreads`, whose 64 threads a run of the whole StorageTests group keeps busy with tests that block:
/// a FIFO source refused 0.5 ms after the upload began was timed at 1.6–13 s from the test, and failed
/// its "at once" bound in about three runs of four.
func timedOffTestThreads<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> (value: T, elapsed: Duration) {
    await Task.detached {
        let start = ContinuousClock.now
        let value = await body()
        return (value, start.duration(to: .now))
    }.value
}

/// The finished result, or a recorded test failure.
func finished(_ result: Result<TransferOutcome, StorageError>, sourceLocation: SourceLocation = #_sourceLocation) throws -> JobResult {
    switch result {
    case .success(.finished(let value)): return value
    case .success(.stopped(let reason, _)):
        Issue.record("expected success, the transfer stopped: \(reason)", sourceLocation: sourceLocation)
    case .failure(let error):
        Issue.record("expected success, got \(error) (cause: \(error.cause ?? "none given"))", sourceLocation: sourceLocation)
    }
    throw TestServerError("transfer did not finish")
}

/// The error, or a recorded test failure.
func failure(_ result: Result<TransferOutcome, StorageError>, sourceLocation: SourceLocation = #_sourceLocation) throws -> StorageError {
    if case .failure(let error) = result { return error }
    Issue.record("expected an error, got \(result)", sourceLocation: sourceLocation)
    throw TestServerError("transfer did not fail")
}

/// Base64 MD5 and CRC32C of bytes, as GCS encodes them.
func hashes(_ data: Data) -> (md5: String, crc32c: String) {
    var crc = CRC32C()
    crc.update(data)
    return (Data(Digest.md5(data)).base64EncodedString(), crc.base64)
}

/// Base64 MD5 of a file.
func fileMD5(_ path: String) throws -> String {
    Data(Digest.md5(try Data(contentsOf: URL(fileURLWithPath: path)))).base64EncodedString()
}

/// nginx on 127.0.0.1 serving a pattern file of `size` bytes at `/NAME`, a temporary directory for the
/// copies, and an HTTP backend: the setup of the tests that move one big file. `stop()` ends them.
struct BigFileFixture {
    let server: NginxServer
    let directory: TemporaryDirectory
    let backend: HTTPBackend
    let size: Int64
    /// The file's URL and its path in nginx's root.
    let url: String
    let servedPath: String

    init(_ name: String, size: Int64) throws {
        server = try NginxServer.start()
        do {
            directory = try TemporaryDirectory()
        } catch {
            server.stop()
            throw error
        }
        self.size = size
        url = "\(server.baseURL)/\(name)"
        servedPath = server.root + "/" + name
        backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        do {
            try writePatternFile(servedPath, size: size)
        } catch {
            stop()
            throw error
        }
    }

    func stop() {
        server.stop()
        directory.remove()
    }
}

/// A temporary folder of local buckets with folder `folder` made inside it (`b` or `b/docs`, say), and a
/// `LocalBackend` on it. The caller removes `directory`.
func localBuckets(_ name: String, making folder: String = "b") throws -> (directory: TemporaryDirectory, buckets: String, backend: LocalBackend) {
    let directory = try TemporaryDirectory(name)
    let buckets = directory.file("buckets")
    try FileManager.default.createDirectory(atPath: buckets + "/" + folder, withIntermediateDirectories: true)
    return (directory, buckets, LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets)))
}

extension ResumePoint {
    /// The same point without the CRC32C of its prefix: what a periodic checkpoint records (the last one
    /// a worker that died wrote), as against the point of an attempt that stopped.
    var withoutPrefixCRC32C: ResumePoint {
        guard case .download(let written, let generation, let etag, let temp, let file, let total, _) = self else { return self }
        return .download(bytesWritten: written, generation: generation, etag: etag, tempPath: temp, file: file, total: total)
    }

    /// The CRC32C of the prefix the point records, if any.
    var prefixCRC32C: String? {
        guard case .download(_, _, _, _, _, _, let crc32c) = self else { return nil }
        return crc32c
    }
}

/// Overwrites `count` bytes at `offset` of the file at `path` in place (same size, same inode), each
/// byte inverted: an edit a person or a program makes to a paused download's partial file.
func invertBytes(at offset: UInt64, count: Int, inFileAt path: String) throws {
    let handle = try #require(FileHandle(forUpdatingAtPath: path))
    defer { try? handle.close() }
    try handle.seek(toOffset: offset)
    let original = try #require(try handle.read(upToCount: count))
    try handle.seek(toOffset: offset)
    try handle.write(contentsOf: Data(original.map { $0 ^ 0xFF }))
    try handle.synchronize()
}
