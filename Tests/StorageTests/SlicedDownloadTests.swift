import Checksums
import Foundation
import JobModel
@testable import Storage
import Synchronization
import Testing
import TestSupport

/// Sliced downloads against the GCS emulator, through the fault proxy for its request log: Range
/// requests of one generation, CRC32C per slice combined, a corrupted slice refused, a stopped download
/// resumed slice by slice.
@Suite(.onTestThreads) struct SlicedDownloadTests {
    /// Deterministic bytes that differ from one MiB to the next.
    private static func payload(_ size: Int) -> Data {
        Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 20) })
    }

    private static func backend(_ proxy: FaultProxy, slicedThreshold: Int64? = 1 << 20, slices: Int = 4) -> GCSBackend {
        var configuration = StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true, firebaseEndpoint: proxy.baseURL,
                                                 stallTimeout: 30, connectTimeout: 5)
        configuration.slicedThreshold = slicedThreshold
        configuration.sliceCount = slices
        return GCSBackend(configuration: configuration)
    }

    /// The media GETs the proxy saw, as (target, Range header).
    private static func mediaGets(_ proxy: FaultProxy) -> [(target: String, range: String?)] {
        proxy.exchanges.filter { $0.request.method == "GET" && $0.request.target.contains("alt=media") }
            .map { ($0.request.target, $0.request.header("Range")) }
    }

    @Test func sixMiBInFourRangeRequestsOfOneGeneration() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced")
        defer { directory.remove() }
        let bytes = Self.payload(6 << 20)
        let reference = "gs://\(server.bucket)/big/six.bin"
        let stored = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let generation = try #require(stored.object?.generation)

        let destination = directory.file("six.bin")
        let result = try finished(await run(backend, JobSpec(kind: .downloadFile, source: reference, destination: destination)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        #expect(result.verified == [.crc32c] && result.crc32c == hashes(bytes).crc32c && result.md5 == nil)

        let gets = Self.mediaGets(proxy)
        let quarter = (6 << 20) / 4
        let expected = (0..<4).map { "bytes=\($0 * quarter)-\(($0 + 1) * quarter - 1)" }
        #expect(gets.count == 4, "\(gets)")
        #expect(Set(gets.compactMap(\.range)) == Set(expected), "\(gets)")
        #expect(gets.allSatisfy { $0.target.contains("generation=\(generation)") }, "\(gets)")
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: destination)))
    }

    /// A disk that filled while four slices wrote: the first slice to meet it removed the partial file,
    /// and the next slice's bytes hit "PartialFile used after commit or discard" — a trap that ended the
    /// worker (exit 132) with every job it held left to lease expiry. The download fails as a single
    /// stream does on a full disk, and nothing is left on it.
    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func aDiskFilledBySlicesFailsTheJobNotTheWorker() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-full")
        defer { directory.remove() }
        let filesystem = try SmallFilesystem(at: directory.file("small"), size: "2m")
        defer { filesystem.unmount() }
        let bytes = Self.payload(6 << 20)
        let reference = "gs://\(server.bucket)/big/full.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))

        let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: reference, destination: filesystem.path + "/full.bin")))
        #expect(error.code == .internalError && error.message.hasPrefix("disk full"), "\(error)")
        #expect(Self.mediaGets(proxy).count >= 2, "not sliced: \(Self.mediaGets(proxy))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: filesystem.path).isEmpty, "a file was left on the full disk")
    }

    /// An object replaced between the metadata read that pinned its generation and the media request:
    /// GCS answers the gone generation with 404, and the job failed for good as `objectNotFound`, "does
    /// not exist; check the path", though the object was there. It is retryable now, the next attempt
    /// planning on the new generation. The proxy replaces the object right after answering the metadata
    /// read and answers the media requests 404, as GCS does (the emulator serves any generation).
    @Test(arguments: [false, true]) func anObjectReplacedBeforeItsMediaRequestIsRetried(sliced: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy, slicedThreshold: sliced ? 1 << 20 : nil)
        let directory = try TemporaryDirectory("jobctl-replaced")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/big/swap.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Self.payload(3 << 20))))
        let replacement = directory.file("v2.bin")
        try Data(Self.payload(3 << 20).reversed()).write(to: URL(fileURLWithPath: replacement))
        let upload = "http://127.0.0.1:\(server.port)/upload/storage/v1/b/\(server.bucket)/o?uploadType=media&name=big%2Fswap.bin"
        proxy.add(FaultRule(RequestMatch(method: "GET", predicate: { !$0.startLine.contains("alt=media") && $0.startLine.contains("/o/big") }),
                            .rewriteResponse({ _, _ in
                                _ = try? runProcess("/usr/bin/curl", ["-sf", "-X", "POST", "--data-binary", "@\(replacement)", upload])
                            })))
        let gone = ProxyMessage.response(404, reason: "Not Found", headers: [ProxyHeader("Content-Type", "application/json")],
                                         body: Data(#"{"error":{"code":404,"message":"No such object"}}"#.utf8))
        proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .respond(gone), times: 8))

        let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: reference, destination: directory.file("swap.bin"))))
        #expect(error.retryable && error.code != .objectNotFound && error.message.contains("was replaced while it was being downloaded"),
                "\(error)")
    }

    /// Each slice's exchange had a bucket of the job's `max_rate` of its own: four slices moved at four
    /// times the rate. The attempt's exchanges now share one. Asserted as a floor on the time taken,
    /// which a loaded machine only lengthens: 4 MiB at 1 MiB/s, less the bucket's first half-second.
    @Test func aSlicedDownloadKeepsTheJobsRate() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-rate")
        defer { directory.remove() }
        let bytes = Self.payload(4 << 20)
        let reference = "gs://\(server.bucket)/big/paced.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let destination = directory.file("paced.bin")
        let started = ContinuousClock.now
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: reference, destination: destination, maxRate: 1 << 20)))
        let elapsed = started.duration(to: .now)
        #expect(Self.mediaGets(proxy).count == 4, "sliced")
        #expect(elapsed >= .milliseconds(3_000), "4 MiB at 1 MiB/s took \(elapsed)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
    }

    @Test func belowTheThresholdOrAskingForMD5DownloadsInOneStream() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-sliced-one")
        defer { directory.remove() }
        let bytes = Self.payload(2 << 20)
        let reference = "gs://\(server.bucket)/two.bin"
        _ = try finished(await run(Self.backend(proxy), JobSpec(kind: .uploadData, destination: reference, data: bytes)))

        // 2 MiB under a 4 MiB threshold: one plain GET.
        let above = Self.backend(proxy, slicedThreshold: 4 << 20)
        _ = try finished(await run(above, JobSpec(kind: .downloadFile, source: reference, destination: directory.file("a"))))
        #expect(Self.mediaGets(proxy).map(\.range) == [nil])
        // Over the threshold but the job asks for MD5, which cannot be combined: one stream, MD5 checked.
        var md5Job = JobSpec(kind: .downloadFile, source: reference, destination: directory.file("b"))
        md5Job.checksums = [.md5]
        let checked = try finished(await run(Self.backend(proxy), md5Job))
        #expect(checked.md5 == hashes(bytes).md5 && checked.verified?.contains(.md5) == true)
        #expect(Self.mediaGets(proxy).map(\.range) == [nil, nil])
        // Slicing off: one stream too.
        _ = try finished(await run(Self.backend(proxy, slicedThreshold: nil), JobSpec(kind: .downloadFile, source: reference,
                                                                                        destination: directory.file("c"))))
        #expect(Self.mediaGets(proxy).count == 3)
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("c"))) == bytes)
    }

    @Test func aCorruptedSliceFailsTheChecksumAndLeavesNoFile() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        // The third slice's answer has one byte flipped on the way.
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", headerContains: ProxyHeader("Range", "bytes=\(2 * (6 << 20) / 4)-")),
                      .rewriteResponse { _, response in
                          if !response.body.isEmpty { response.body[response.body.startIndex + 1000] ^= 0xFF }
                      }),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-bad")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/bad.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Self.payload(6 << 20))))

        let destination = directory.file("bad.bin")
        let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: reference, destination: destination)))
        #expect(error.code == .nonMatchingChecksum && !error.retryable, "\(error)")
        #expect(error.message.contains("CRC32C"), "\(error.message)")
        #expect(proxy.exchanges.contains { $0.faults.contains("rewrite response") })
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: destination)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// A slice answered from another version of the object (a cache or a proxy serving what it holds:
    /// its own `x-goog-generation` or whole-object CRC32C in `x-goog-hash`) was written, and the combined
    /// CRC32C failed the job for good. Refused before its first byte now, the attempt retryable; the next
    /// one asks again and the file is right.
    @Test(arguments: [true, false])
    func aSliceOfAnotherVersionIsRefusedBeforeItIsWritten(byGeneration: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let other = Self.payload(6 << 20).map { $0 ^ 0x5A }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", headerContains: ProxyHeader("Range", "bytes=\(2 * (6 << 20) / 4)-")),
                      .rewriteResponse { _, response in
                          response.body = Data(other.prefix(response.body.count))
                          if byGeneration {
                              response.setHeader("x-goog-generation", "999999")
                          } else {
                              response.setHeader("x-goog-hash", "crc32c=AAAAAA==")
                          }
                      }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-version")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/version.bin"
        let bytes = Self.payload(6 << 20)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let destination = directory.file("version.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let control = TransferControl(jobID: "01SLICEVERSION")
        let error = try failure(await run(backend, spec, control: control))
        #expect(error.retryable && error.message.contains(byGeneration ? "generation 999999" : "CRC32C is AAAAAA=="), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        _ = try finished(await run(backend, spec, control: TransferControl(jobID: "01SLICEVERSION")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
    }

    /// The same for one stream: the rest of a paused download answered from another version was appended
    /// to the prefix, and the file's CRC32C failed the job for good. Refused at its first byte, retryable,
    /// the prefix kept: the next attempt resumes and the file is right.
    @Test func aResumedRangeOfAnotherVersionIsRefusedBeforeItIsWritten() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                response.setHeader("x-goog-generation", "999999")
                response.body = Data(response.body.map { $0 ^ 0x5A })
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy, slicedThreshold: nil)
        let directory = try TemporaryDirectory("jobctl-resumed-version")
        defer { directory.remove() }
        let bytes = Self.payload(12 << 20)
        let reference = "gs://\(server.bucket)/resumed.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let destination = directory.file("resumed.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        guard let point = try await Self.pausedPastOneMegabyte(backend, spec, jobID: "01RESUMEDVERSION") else { return }
        let refused = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RESUMEDVERSION")))
        #expect(refused.retryable && refused.message.contains("generation 999999"), "\(refused)")
        #expect(proxy.firedCounts == [1])
        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RESUMEDVERSION")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        #expect(result.verified == [.crc32c])
    }

    /// `spec` run on `backend` until it has moved a megabyte, then paused: its resume point (nil, with an
    /// issue recorded, when it did not pause with one).
    static func pausedPastOneMegabyte(_ backend: any StorageBackend, _ spec: JobSpec, jobID: String) async throws -> ResumePoint? {
        let control = TransferControl(jobID: jobID)
        let pausing = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_000_000 { control.stop(.pause) }
        }
        let paused = try await run(backend, spec, control: control, recorder: pausing).get()
        guard case .stopped(.pause, let point?) = paused, point.bytesDone > 0 else {
            Issue.record("expected a paused download, got \(paused)")
            return nil
        }
        return point
    }

    /// A paused download resumed after the object was replaced starts the new generation at byte 0. Its
    /// first report is a checkpoint of no bytes: an attempt failing before its first checkpoint left the
    /// old generation's point in the log, and the next was logged as resuming from bytes it fetched again.
    @Test func aDownloadStartingOverOnANewGenerationClearsTheLoggedPoint() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let armed = Mutex(false)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media", predicate: { _ in armed.withLock { $0 } }),
                      .resetInResponse(afterBytes: 200_000), times: 1),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy, slicedThreshold: nil)
        let directory = try TemporaryDirectory("jobctl-new-generation")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/replaced.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Self.payload(3 << 20))))
        let destination = directory.file("replaced.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        guard let point = try await Self.pausedPastOneMegabyte(backend, spec, jobID: "01NEWGENERATION") else { return }
        let replacement = Data(Self.payload(3 << 20).reversed())
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: replacement)))
        armed.withLock { $0 = true }
        let cutting = EventRecorder()
        let cut = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01NEWGENERATION"), recorder: cutting))
        #expect(cut.retryable && proxy.firedCounts == [1], "\(cut)")
        let dropped = try #require(cutting.checkpoints.first, "a checkpoint replaces the old generation's point")
        #expect(dropped.holdsNoDownloadedBytes, "\(dropped)")
        // The cut attempt then hands over what it kept of the new generation, for the retry to go on from.
        let logged = try #require(cutting.checkpoints.last)
        guard case .download(_, let oldGeneration, _, _, _, _, _) = point, case .download(_, let newGeneration, _, _, _, _, _) = logged else {
            Issue.record("\(point) → \(logged)")
            return
        }
        #expect(logged.holdsNoDownloadedBytes || newGeneration != oldGeneration, "\(logged)")
        _ = try finished(await run(backend, spec, resume: logged, control: TransferControl(jobID: "01NEWGENERATION")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == replacement)
    }

    /// How a resumed sliced download loses the slices the log's point holds.
    enum SliceDrop: String, CaseIterable, Sendable {
        /// The object replaced since the pause: the new generation starts at byte 0.
        case newGeneration
        /// A logged plan that is not one of the object (a damaged or edited log: its second slice starting
        /// a byte early), resumed by a worker that slices: not continued, whatever its bytes.
        case planNotOfTheObject
        /// The same, resumed by a worker with slicing off: one stream does not continue a sliced point.
        case planNotOfTheObjectInOneStream
        /// The temporary file replaced at its name: the commit refuses and removes ours (retryable).
        case refusedCommit
        /// A byte flipped in a resumed slice: the combined CRC32C fails and the file goes.
        case checksum
        /// The media requests refused for good (403): the file goes.
        case finalFailure
        /// The job cancelled: the file goes.
        case cancel
    }

    /// A paused sliced download whose partial file was edited in one slice's kept bytes (same size, same
    /// inode): the rest of every slice was fetched, the combined CRC32C failed, and the whole object came
    /// again. Each checkpoint now records every slice's CRC32C; the resuming attempt fetches that slice
    /// again from its first byte, keeps the others', and the file is the object.
    @Test func aSliceEditedDuringThePauseIsFetchedAgainAlone() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-edit")
        defer { directory.remove() }
        let bytes = Self.payload(6 << 20)
        let reference = "gs://\(server.bucket)/big/edit.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .trickleResponse(bytes: 64 << 10, interval: 0.03),
                            times: 4))
        let destination = directory.file("edit.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        guard let point = try await Self.pausedPastOneMegabyte(backend, spec, jobID: "01SLICEEDIT") else { return }
        guard case .slicedDownload(let slices, _, let tempPath, _) = point,
              let edited = slices.firstIndex(where: { $0.confirmed > 0 }) else {
            Issue.record("expected a sliced resume point with bytes, got \(point)")
            return
        }
        #expect(slices.allSatisfy { ($0.confirmed > 0) == ($0.crc32c != nil) }, "\(slices)")
        try invertBytes(at: UInt64(slices[edited].start), count: 3, inFileAt: tempPath)
        let resumed = EventRecorder()
        _ = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01SLICEEDIT"), recorder: resumed))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        // The first report drops the edited slice's bytes and keeps the others'.
        guard case .slicedDownload(let after, _, _, _)? = resumed.checkpoints.first else {
            Issue.record("no checkpoint said the edited slice's bytes went: \(resumed.checkpoints)")
            return
        }
        #expect(after[edited].confirmed == 0, "\(after)")
        for index in after.indices where index != edited { #expect(after[index].confirmed == slices[index].confirmed, "\(after)") }
    }

    /// A sliced download paused with bytes in its slices, resumed where those bytes go: every such path
    /// dropped them without a word, and the log's point went on claiming them (`show`, `history`; the next
    /// attempt logged as resuming from them, its `moved_bytes` and rate short by them), as one-stream
    /// downloads did before. A checkpoint of no bytes now replaces the point — first, when the resumed
    /// attempt cannot continue it; last, when the file is removed at the end.
    @Test(arguments: SliceDrop.allCases) func aSlicedDownloadThatDropsItsSlicesSaysSo(drop: SliceDrop) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-drop")
        defer { directory.remove() }
        let size = 6 << 20
        let bytes = Self.payload(size)
        let reference = "gs://\(server.bucket)/big/drop.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        // Slow answers, so the pause lands with every slice part-way.
        proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .trickleResponse(bytes: 64 << 10, interval: 0.03),
                            times: 4))
        let destination = directory.file("drop.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let jobID = "01SLICEDROP"
        guard let point = try await Self.pausedPastOneMegabyte(backend, spec, jobID: jobID) else { return }
        guard case .slicedDownload(_, _, let tempPath, _) = point else {
            Issue.record("expected a sliced resume point, got \(point)")
            return
        }

        let control = TransferControl(jobID: jobID)
        var resumedOn: any StorageBackend = backend
        var resume = point
        var onEvent: (@Sendable (TransferEvent) -> Void)?
        switch drop {
        case .newGeneration:
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Data(bytes.reversed()))))
        case .planNotOfTheObject, .planNotOfTheObjectInOneStream:
            guard case .slicedDownload(var slices, let generation, let tempPath, let file) = point else { return }
            slices[1].start -= 1
            slices[1].length += 1
            resume = .slicedDownload(slices: slices, generation: generation, tempPath: tempPath, file: file)
            if drop == .planNotOfTheObjectInOneStream { resumedOn = Self.backend(proxy, slicedThreshold: nil) }
        case .refusedCommit:
            // Another file renamed onto the temporary name while the slices are fetched.
            let other = tempPath + ".other"
            let swapped = Mutex(false)
            onEvent = { event in
                guard case .progress = event, swapped.withLock({ done in defer { done = true }; return !done }) else { return }
                _ = FileManager.default.createFile(atPath: other, contents: Data("someone else's".utf8))
                _ = rename(other, tempPath)
            }
        case .checksum:
            proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .rewriteResponse { _, response in
                if !response.body.isEmpty { response.body[response.body.startIndex] ^= 0xFF }
            }))
        case .finalFailure:
            let refused = ProxyMessage.response(403, reason: "Forbidden", headers: [ProxyHeader("Content-Type", "application/json")],
                                                body: Data(#"{"error":{"code":403,"message":"Forbidden"}}"#.utf8))
            proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .respond(refused), times: 8))
        case .cancel:
            onEvent = { event in if case .progress = event { control.stop(.cancel) } }
        }
        let recorder = EventRecorder(onEvent: onEvent)
        let outcome = await run(resumedOn, spec, resume: resume, control: control, recorder: recorder)
        switch drop {
        case .newGeneration, .planNotOfTheObject, .planNotOfTheObjectInOneStream:
            // Started over, and said so before anything else.
            _ = try finished(outcome)
            let first = try #require(recorder.checkpoints.first, "no checkpoint replaced the point the log holds")
            #expect(first.holdsNoDownloadedBytes, "\(first)")
        case .refusedCommit, .checksum, .finalFailure:
            let error = try failure(outcome)
            // A checksum that fails over slices kept from the paused attempt may be theirs (changed on the
            // disk since): retryable, the next attempt fetching every byte (`afterKeptPrefix`).
            #expect(error.retryable == (drop == .refusedCommit || drop == .checksum), "\(error)")
            let last = try #require(recorder.checkpoints.last, "no checkpoint replaced the point the log holds: \(error)")
            #expect(last.holdsNoDownloadedBytes, "\(last) after \(error)")
        case .cancel:
            guard case .success(.stopped(.cancel, nil)) = outcome else {
                Issue.record("expected a cancel, got \(outcome)")
                return
            }
            let last = try #require(recorder.checkpoints.last, "no checkpoint replaced the point the log holds")
            #expect(last.holdsNoDownloadedBytes, "\(last)")
        }
        #expect(!FileManager.default.fileExists(atPath: tempPath) || drop == .refusedCommit, "the partial file was kept")
    }

    /// A download to memory answered from another version of the object (its own `x-goog-generation`,
    /// or a whole-object CRC32C in `x-goog-hash` other than the metadata's): the bytes were kept and only
    /// the final CRC32C caught them, failing the job for good — or, with the right bytes under another
    /// version's hash, not at all. Refused at the answer's first byte now, as a download to a file is,
    /// retryable; the next attempt asks again and gets the object.
    @Test(arguments: [true, false])
    func aMemoryDownloadOfAnotherVersionIsRefusedAtItsFirstByte(byGeneration: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .rewriteResponse { _, response in
                if byGeneration {
                    response.setHeader("x-goog-generation", "999999")
                    response.body = Data(response.body.map { $0 ^ 0x5A })
                } else {
                    response.setHeader("x-goog-hash", "crc32c=AAAAAA==")
                }
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy, slicedThreshold: nil)
        let bytes = Self.payload(300_000)
        let reference = "gs://\(server.bucket)/memory-version.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let spec = JobSpec(kind: .downloadMemory, source: reference, maxSize: 1 << 20)
        let refused = try failure(await run(backend, spec))
        #expect(refused.retryable && refused.message.contains(byGeneration ? "generation 999999" : "CRC32C is AAAAAA=="), "\(refused)")
        #expect(proxy.firedCounts == [1])
        let result = try finished(await run(backend, spec))
        #expect(result.data == bytes && result.verified == [.crc32c])
    }

    /// `x-goog-generation` sent twice with the generation asked for (a proxy or cache that adds the
    /// upstream's headers to its own) is that generation: the answers were refused as "generation G,G, not
    /// the G asked for" at every attempt, so the download could never finish, though `x-goog-hash` sent
    /// twice was already read value by value. Two values of which one is another generation stay refused.
    @Test(arguments: [(false, false), (true, false), (false, true), (true, true)])
    func aGenerationHeaderSentTwiceIsReadValueByValue(sliced: Bool, oneDiffers: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .rewriteResponse { request, response in
                guard let asked = URLComponents(string: "http://host" + request.target)?.queryItems?
                    .first(where: { $0.name == "generation" })?.value else { return }
                response.setHeader("x-goog-generation", nil)
                response.headers.append(ProxyHeader("x-goog-generation", asked))
                response.headers.append(ProxyHeader("X-Goog-Generation", oneDiffers ? "999999" : asked))
            }, times: .max),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy, slicedThreshold: sliced ? 100_000 : nil)
        let directory = try TemporaryDirectory("jobctl-generation-twice")
        defer { directory.remove() }
        let bytes = Self.payload(400_000)
        let reference = "gs://\(server.bucket)/twice.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let destination = directory.file("twice.bin")
        let outcome = await run(backend, JobSpec(kind: .downloadFile, source: reference, destination: destination))
        let memory = await run(backend, JobSpec(kind: .downloadMemory, source: reference, maxSize: 1 << 20))
        if oneDiffers {
            let error = try failure(outcome)
            #expect(error.retryable && error.message.contains("999999"), "\(error)")
            #expect(!FileManager.default.fileExists(atPath: destination))
            #expect(try failure(memory).retryable)
        } else {
            #expect(try finished(outcome).verified == [.crc32c])
            #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
            #expect(try finished(memory).data == bytes)
        }
        #expect(proxy.firedCounts.first ?? 0 >= (sliced ? 5 : 2))
    }

    /// More bytes than the object holds: the error said "a retry resumes from there", and kept a partial
    /// file longer than the object. It is dropped now, and the message says the retry starts again.
    @Test func moreBytesThanTheObjectHoldsDropThePartialFile() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .rewriteResponse { _, response in
                response.body += Data(repeating: 0x21, count: 1_000)
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy, slicedThreshold: nil)
        let directory = try TemporaryDirectory("jobctl-too-many-bytes")
        defer { directory.remove() }
        let bytes = Self.payload(1 << 20)
        let reference = "gs://\(server.bucket)/long.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        let destination = directory.file("long.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let error = try failure(await run(backend, spec, control: TransferControl(jobID: "01TOOMANYBYTES")))
        #expect(error.retryable && error.message.contains("downloads it again") && !error.message.contains("resumes"), "\(error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "no partial file kept")
        _ = try finished(await run(backend, spec, control: TransferControl(jobID: "01TOOMANYBYTES")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
    }

    @Test func aShortSliceAnswerIsRetryableAndNeverCommitted() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        // The last slice's answer loses its final 1,000 bytes (and says so in Content-Length).
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", headerContains: ProxyHeader("Range", "bytes=\(3 * (6 << 20) / 4)-")),
                      .rewriteResponse { _, response in
                          response.body = response.body.dropLast(1000)
                          response.setHeader("Content-Length", String(response.body.count))
                      }),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-short")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/short.bin"
        let bytes = Self.payload(6 << 20)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))

        let destination = directory.file("short.bin")
        let job = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let error = try failure(await run(backend, job))
        #expect(error.retryable && error.message.contains("ended after \((6 << 20) - 1000) of \(6 << 20) bytes"), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        // The retry (the rule is spent) completes the object.
        #expect(try finished(await run(backend, job)).verified == [.crc32c])
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
    }

    /// A slice answered with another part of the object (a 206 whose Content-Range starts elsewhere, the
    /// same length) is refused before a byte of it is written, retryably: the retry completes the object.
    /// (Written, it would have failed the combined CRC32C, and the job for good.) So is a 200, the whole
    /// object for one slice's Range.
    @Test(arguments: [false, true]) func aSliceAnsweredWithAnotherRangeIsRefusedUnwritten(wholeObject: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let size = 6 << 20
        let bytes = Self.payload(size)
        let third = 2 * size / 4
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", headerContains: ProxyHeader("Range", "bytes=\(third)-")),
                      .rewriteResponse { _, response in
                          if wholeObject {
                              response.startLine = "HTTP/1.1 200 OK"
                              response.setHeader("Content-Range", nil)
                              response.body = bytes
                          } else {
                              response.setHeader("Content-Range", "bytes 0-\(response.body.count - 1)/\(size)")
                              response.body = bytes.prefix(response.body.count)
                          }
                          response.setHeader("Content-Length", String(response.body.count))
                      }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-range")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/range.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))

        let destination = directory.file("range.bin")
        let job = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let error = try failure(await run(backend, job))
        #expect(error.retryable && error.message.contains("range"), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(try finished(await run(backend, job)).verified == [.crc32c])
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
    }

    @Test func aStoppedDownloadResumesOnlyWhatEachSliceLacks() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        // Slow answers (64 KiB every 10 ms) so the first checkpoint (8 MiB over all slices) comes long
        // before the end.
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = Self.backend(proxy)
        let directory = try TemporaryDirectory("jobctl-sliced-resume")
        defer { directory.remove() }
        let size = 16 << 20
        let bytes = Self.payload(size)
        let reference = "gs://\(server.bucket)/sixteen.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        // 64 KiB every 30 ms a slice: the 4 MiB slices take ~2 s, the first checkpoint (8 MiB over all four)
        // comes half-way, so its sync, its report and the pause have ~1 s to land before the last byte.
        // At 10 ms (a 320 ms window) a loaded test run (load 7–8, the large transfers beside it) once saw
        // the download finish first.
        proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .trickleResponse(bytes: 64 << 10, interval: 0.03),
                            times: 4))

        let destination = directory.file("sixteen.bin")
        let job = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let control = TransferControl()
        // Pause at the first checkpoint, as a worker does on SIGTERM; note where each was reported from.
        let threads = Mutex<[String]>([])
        let recorder = EventRecorder { event in
            if case .checkpoint = event {
                threads.withLock { $0.append(Thread.current.name ?? "?") }
                control.stop(.pause)
            }
        }
        let outcome = await run(backend, job, control: control, recorder: recorder)
        guard case .success(.stopped(.pause, let point?)) = outcome,
              case .slicedDownload(let slices, _, let tempPath, _) = point else {
            Issue.record("expected a pause with a sliced resume point, got \(outcome)")
            return
        }
        #expect(slices.count == 4 && point.bytesDone >= 8 << 20 && point.bytesDone < Int64(size), "\(slices)")
        #expect(tempPath == PartialFile.tempPath(for: destination))
        // The first checkpoint's sync ran off the curl thread (on tmpfs, where a sync returns at once, on
        // it); the pause's own checkpoint comes from the download's task.
        let filesystem = try runProcess("/usr/bin/stat", ["-f", "--format=%T", directory.path]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(threads.withLock { $0 }.first == (filesystem == "tmpfs" ? "jobctl-curl" : "jobctl-file-io"),
                "\(filesystem): \(threads.withLock { $0 })")
        let firstRound = Self.mediaGets(proxy).count
        #expect(firstRound == 4)

        // The resumed attempt asks for the rest of each unfinished slice, nothing of a finished one.
        let resumed = try finished(await run(backend, job, resume: point))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        #expect(resumed.verified == [.crc32c])
        let second = Self.mediaGets(proxy).dropFirst(firstRound).compactMap(\.range)
        let expected = slices.filter { !$0.isComplete }.map { "bytes=\($0.start + $0.confirmed)-\($0.start + $0.length - 1)" }
        #expect(Set(second) == Set(expected) && second.count == expected.count, "\(second) vs \(expected)")
    }

    /// How the worker that resumes a sliced download is set up, against the four slices it was paused in.
    enum ResumingWorker: String, CaseIterable, Sendable {
        /// `--slices 2`.
        case twoSlices
        /// `--slices 16`.
        case sixteenSlices
        /// `--sliced-threshold off`.
        case slicingOff
        /// A threshold above the object's size.
        case thresholdAbove
    }

    /// A sliced download paused in four slices and taken over by a worker set up otherwise — another
    /// `--slices`, slicing off, a threshold the object is below — fetched the whole object again from
    /// byte 0 (its first report a checkpoint of no bytes). It goes on in the slices it logged now, as
    /// gcloud storage's sliced-download tracker does: only the rest of each unfinished slice is asked
    /// for, no byte kept is dropped, and the combined CRC32C checks the whole.
    @Test(arguments: ResumingWorker.allCases)
    func aPausedDownloadGoesOnInItsLoggedSlicesWhateverTheWorker(resumedBy worker: ResumingWorker) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-sliced-other-worker")
        defer { directory.remove() }
        let size = 6 << 20
        let bytes = Self.payload(size)
        let reference = "gs://\(server.bucket)/big/other-worker.bin"
        _ = try finished(await run(Self.backend(proxy), JobSpec(kind: .uploadData, destination: reference, data: bytes)))
        // Slow answers, so the pause lands with every slice part-way.
        proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .trickleResponse(bytes: 64 << 10, interval: 0.03),
                            times: 4))
        let destination = directory.file("other-worker.bin")
        let spec = JobSpec(kind: .downloadFile, source: reference, destination: destination)
        let jobID = "01SLICEDOTHERWORKER"
        guard let point = try await Self.pausedPastOneMegabyte(Self.backend(proxy, slices: 4), spec, jobID: jobID) else { return }
        guard case .slicedDownload(let slices, _, _, _) = point else {
            Issue.record("expected a sliced resume point, got \(point)")
            return
        }
        #expect(slices.count == 4 && slices.contains { !$0.isComplete }, "\(slices)")
        let firstRound = Self.mediaGets(proxy).count

        let resumedOn = switch worker {
        case .twoSlices: Self.backend(proxy, slices: 2)
        case .sixteenSlices: Self.backend(proxy, slices: 16)
        case .slicingOff: Self.backend(proxy, slicedThreshold: nil)
        case .thresholdAbove: Self.backend(proxy, slicedThreshold: Int64(size) + 1)
        }
        let recorder = EventRecorder()
        let resumed = try finished(await run(resumedOn, spec, resume: point, control: TransferControl(jobID: jobID), recorder: recorder))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        #expect(resumed.verified == [.crc32c])
        let asked = Self.mediaGets(proxy).dropFirst(firstRound).map { $0.range ?? "the whole object" }
        let expected = slices.filter { !$0.isComplete }.map { "bytes=\($0.start + $0.confirmed)-\($0.start + $0.length - 1)" }
        #expect(Set(asked) == Set(expected) && asked.count == expected.count, "\(worker): \(asked) vs \(expected)")
        #expect(!recorder.checkpoints.contains { $0.bytesDone < point.bytesDone }, "the kept bytes were dropped: \(recorder.checkpoints)")
        #expect(recorder.progress.first.map { $0 >= point.bytesDone } ?? true, "\(recorder.progress.prefix(3))")
    }

    /// A logged plan is continued whatever the resuming worker's `--slices`, so one that is not a plan of
    /// the object — read from a damaged or hand-edited log — must be refused before a byte is written at
    /// its offsets: bytes confirmed at a slice's place would be written elsewhere, and the combined
    /// CRC32C would fail the job for good.
    @Test func aLoggedPlanIsContinuedOnlyWhenItIsOneOfTheObject() {
        let size: Int64 = 10 << 20
        let counts = StorageConfiguration.sliceCountRange
        var plan = DownloadSlice.plan(size: size, count: 4)
        plan[0].confirmed = 1 << 20
        plan[3].confirmed = plan[3].length
        #expect(DownloadSlice.planFault(plan, size: size, counts: counts) == nil)
        #expect(DownloadSlice.planFault(DownloadSlice.plan(size: size, count: 16), size: size, counts: counts) == nil)
        #expect(DownloadSlice.planFault(DownloadSlice.plan(size: size, count: 2), size: size, counts: counts) == nil)
        var faults: [(String, [DownloadSlice], Int64)] = [
            ("one slice", [DownloadSlice(start: 0, length: size, confirmed: 1 << 20)], size),
            ("seventeen slices", DownloadSlice.plan(size: size, count: 17), size),
            ("none", [], size),
            ("of another size", plan, size + 1),
            ("of a smaller object", plan, size - 1),
        ]
        func altered(_ name: String, _ change: (inout [DownloadSlice]) -> Void) {
            var slices = plan
            change(&slices)
            faults.append((name, slices, size))
        }
        altered("a gap") { $0[2].start += 1; $0[2].length -= 1 }
        altered("an overlap") { $0[1].start -= 1; $0[1].length += 1 }
        altered("out of order") { $0.swapAt(1, 2) }
        altered("not from byte 0") { $0[0].start = 1; $0[0].length -= 1 }
        altered("an empty slice") { $0.insert(DownloadSlice(start: $0[1].start, length: 0), at: 1) }
        altered("a negative length") { $0[1].length = -$0[1].length }
        altered("more confirmed than held") { $0[1].confirmed = $0[1].length + 1 }
        altered("a negative confirmed") { $0[1].confirmed = -1 }
        altered("past Int64") { $0[3].length = .max }
        for (name, slices, objectSize) in faults {
            #expect(DownloadSlice.planFault(slices, size: objectSize, counts: counts) != nil, "\(name): \(slices)")
        }
    }

    @Test func slicePlansCoverTheObjectOnce() {
        #expect(DownloadSlice.plan(size: 10, count: 4).map(\.length) == [3, 3, 2, 2])
        #expect(DownloadSlice.plan(size: 10, count: 4).map(\.start) == [0, 3, 6, 8])
        #expect(DownloadSlice.plan(size: 2, count: 4).map(\.length) == [1, 1])
        #expect(DownloadSlice.plan(size: 6 << 20, count: 4).allSatisfy { $0.length == (6 << 20) / 4 })
    }

    @Test func existingResumePointsKeepTheirJSON() throws {
        let download = ResumePoint.download(bytesWritten: 5, generation: "7", etag: nil, tempPath: "/t/.x.jobctl-partial")
        #expect(String(decoding: try JSONEncoder().encode(download), as: UTF8.self).hasPrefix("{\"download\":{"))
        let sliced = ResumePoint.slicedDownload(slices: [DownloadSlice(start: 0, length: 4, confirmed: 2)], generation: "7",
                                                tempPath: "/t/.x.jobctl-partial", file: FileIdentity(device: 1, inode: 2))
        let decoded = try JSONDecoder().decode(ResumePoint.self, from: JSONEncoder().encode(sliced))
        #expect(decoded == sliced && decoded.bytesDone == 2)
    }
}
