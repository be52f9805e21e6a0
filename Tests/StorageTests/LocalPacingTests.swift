import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// `max_rate:`, `--bwlimit` and `timeout:` on `file://` copies, which ignored all three: a `max_rate: 1M`
/// upload of 2 MiB went at the disk's speed, a `timeout: 1s` copy ran as long as it took.
///
/// As for network transfers (`BandwidthTests`), the rate's ceiling is asserted (+15 %), not a floor: a
/// test that is slowed by the machine still passes, a copy that is not held fails.
@Suite(.onTestThreads) struct LocalPacingTests {
    struct Sandbox {
        let directory: TemporaryDirectory
        var buckets: String { directory.file("buckets") }

        init() throws {
            directory = try TemporaryDirectory("jobctl-local-pacing")
            try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        }

        func backend(bandwidth: SharedBandwidth? = nil) -> LocalBackend {
            var configuration = StorageConfiguration(localBucketsDirectory: buckets)
            configuration.bandwidth = bandwidth
            return LocalBackend(configuration: configuration)
        }

        func file(_ name: String, size: Int) throws -> String {
            let path = directory.file(name)
            try Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    @Test func anUploadHonoursMaxRate() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let size = 2 * 1_048_576, limit: Int64 = 1_048_576
        let source = try sandbox.file("a.bin", size: size)
        let backend = sandbox.backend()
        let (result, elapsed) = await timedOffTestThreads {
            await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/a.bin", maxRate: limit))
        }
        let rate = Double(size) / Self.seconds(elapsed)
        print("[LocalPacingTests] max_rate \(limit) B/s: \(size) bytes uploaded in \(Self.seconds(elapsed)) s = \(Int(rate)) B/s")
        #expect(try finished(result).size == Int64(size))
        #expect(rate <= Double(limit) * 1.15, "measured \(rate) B/s for a limit of \(limit)")
        #expect(FileManager.default.contentsEqual(atPath: source, andPath: sandbox.buckets + "/b/a.bin"))
    }

    /// A download to a file and one to memory at once, under one worker-wide limit: their total is held to it.
    @Test func downloadsShareTheWorkersLimit() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let size = 1_048_576, limit: Int64 = 1_048_576
        let object = try Data(contentsOf: URL(fileURLWithPath: try sandbox.file("buckets/b/o.bin", size: size)))
        let backend = sandbox.backend(bandwidth: SharedBandwidth(rate: limit))
        let destination = sandbox.directory.file("out.bin")
        let (results, elapsed) = await timedOffTestThreads {
            async let toFile = run(backend, JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: destination))
            async let toMemory = run(backend, JobSpec(kind: .downloadMemory, source: "file://b/o.bin", maxSize: Int64(size)))
            return await [toFile, toMemory]
        }
        let rate = Double(2 * size) / Self.seconds(elapsed)
        print("[LocalPacingTests] --bwlimit \(limit) B/s shared by 2 downloads: \(2 * size) bytes in \(Self.seconds(elapsed)) s = \(Int(rate)) B/s")
        #expect(try finished(results[0]).size == Int64(size))
        #expect(try finished(results[1]).data == object)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == object)
        #expect(rate <= Double(limit) * 1.15, "measured \(rate) B/s for a shared limit of \(limit)")
    }

    /// A copy still running at its `timeout:` fails as a network transfer does: retryable, with the
    /// limit named, and nothing written at the object's name.
    @Test func aCopyEndsAtItsTimeout() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let source = try sandbox.file("slow.bin", size: 8 * 1_048_576)
        let backend = sandbox.backend()
        let (result, elapsed) = await timedOffTestThreads {
            await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/slow.bin", timeoutSeconds: 1,
                                       maxRate: 1_048_576))
        }
        let error = try failure(result)
        #expect(error.message.contains("the job's 1s timeout passed before the transfer finished"), "\(error)")
        #expect(error.retryable)
        // The whole copy takes 8 s at its rate: it was cut short (loosely bounded, for a loaded machine).
        #expect(Self.seconds(elapsed) < 6, "the copy ran \(Self.seconds(elapsed)) s past a 1 s timeout")
        #expect(!FileManager.default.fileExists(atPath: sandbox.buckets + "/b/slow.bin"))
    }

    /// A pause asked for while a paced copy waits for its limit is seen within the wait's slice, and
    /// the copy stops at a resume point, not after the whole file.
    @Test func aPausedCopyStopsWhileItWaits() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let source = try sandbox.file("long.bin", size: 8 * 1_048_576)
        let backend = sandbox.backend()
        let control = TransferControl(jobID: "01PACEDPAUSEJOB0000000000", leaseToken: 1)
        Task.detached {
            try? await Task.sleep(for: .milliseconds(500))
            control.stop(.pause)
        }
        let (result, elapsed) = await timedOffTestThreads {
            await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/long.bin", maxRate: 262_144),
                      control: control)
        }
        guard case .success(.stopped(.pause, .upload(_, let confirmed, let total, _)?)) = result else {
            Issue.record("expected a pause at a resume point, got \(result)")
            return
        }
        #expect(total == Int64(8 * 1_048_576))
        #expect(confirmed < Int64(4 * 1_048_576), "the paced copy went on to \(confirmed) bytes")
        // The whole copy takes 32 s at its rate (loosely bounded, for a loaded machine).
        #expect(Self.seconds(elapsed) < 20, "the pause took \(Self.seconds(elapsed)) s to be seen")
    }

    /// A copy a limit holds checkpoints every 8 MiB, as a network download does, instead of every
    /// 64 MiB: what a killed worker loses is bounded in time, not only in bytes.
    @Test func aPacedCopyCheckpointsEvery8MiB() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let size = 9 * 1_048_576
        let source = try sandbox.file("nine.bin", size: size)
        let upload = EventRecorder()
        let control = TransferControl(jobID: "01PACEDCHECKPOINTJOB000000", leaseToken: 1)
        _ = try finished(await run(sandbox.backend(), JobSpec(kind: .uploadFile, source: source, destination: "file://b/nine.bin",
                                                              maxRate: 16 * 1_048_576), control: control, recorder: upload))
        #expect(upload.checkpoints.count == 1, "\(upload.checkpoints)")
        if case .upload(_, let offset, _, _)? = upload.checkpoints.first { #expect(offset >= 8 * 1_048_576 && offset < Int64(size)) }
        let download = EventRecorder()
        _ = try finished(await run(sandbox.backend(bandwidth: SharedBandwidth(rate: 16 * 1_048_576)),
                                   JobSpec(kind: .downloadFile, source: "file://b/nine.bin", destination: sandbox.directory.file("nine.out")),
                                   control: TransferControl(jobID: "01PACEDCHECKPOINTJOB000001", leaseToken: 1), recorder: download))
        #expect(download.checkpoints.count == 1, "\(download.checkpoints)")
        // Without a limit a copy this size takes no checkpoint.
        let unlimited = EventRecorder()
        _ = try finished(await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/nine.bin",
                                                              destination: sandbox.directory.file("nine.again")), recorder: unlimited))
        #expect(unlimited.checkpoints.isEmpty)
    }
    /// A copy under the lowest rate, `max_rate: 1k`, paused after a second and resumed, twice: each
    /// attempt holds about a second's worth. Steps were 16 KiB (curl's buffer floor) and the step after a
    /// pause was taken unpaid: a paused upload of 60,000 bytes stood at 32 KiB after 4 s, and every
    /// resume began with 16 KiB at once. Uploads and downloads to a file, which both keep a resume point.
    @Test(arguments: [JobKind.uploadFile, .downloadFile])
    func pausesAtTheLowestRateLetNoBurstThrough(kind: JobKind) async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let size = 60_000, limit: Int64 = 1024
        let source = try sandbox.file("buckets/b/src.bin", size: size)
        let spec = kind == .uploadFile
            ? JobSpec(kind: .uploadFile, source: source, destination: "file://b/up.bin", maxRate: limit)
            : JobSpec(kind: .downloadFile, source: "file://b/src.bin", destination: sandbox.directory.file("down.bin"), maxRate: limit)
        var resume: ResumePoint? = nil
        var before: Int64 = 0
        for attempt in 1...2 {
            let control = TransferControl(jobID: "01PACEDBURSTJOB00000000000", leaseToken: Int64(attempt))
            Task.detached {
                try? await Task.sleep(for: .seconds(1))
                control.stop(.pause)
            }
            let point = resume
            let (result, elapsed) = await timedOffTestThreads { await run(sandbox.backend(), spec, resume: point, control: control) }
            guard case .success(.stopped(.pause, let point?)) = result else {
                Issue.record("attempt \(attempt): expected a pause at a resume point, got \(result)")
                return
            }
            let held: Int64
            switch point {
            case .upload(_, let confirmed, _, _): held = confirmed
            case .download(let written, _, _, _, _, _, _): held = written
            default:
                Issue.record("attempt \(attempt): a resume point of another kind: \(point)")
                return
            }
            resume = point
            // About 1,024 bytes a second, plus a sixteenth of a second's step; a loaded machine only slows it.
            let moved = held - before
            print("[LocalPacingTests] \(kind) at 1 KiB/s, attempt \(attempt): \(moved) bytes in \(Self.seconds(elapsed)) s before the pause")
            #expect(moved <= Int64(Self.seconds(elapsed) * Double(limit)) + 256,
                    "attempt \(attempt) moved \(moved) bytes in \(Self.seconds(elapsed)) s at 1 KiB/s")
            before = held
        }
    }
}
