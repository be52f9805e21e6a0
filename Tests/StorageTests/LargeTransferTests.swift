import Foundation
import JobModel
import Storage
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// One GiB up and down through the engine with flat memory: bodies stream through curl's callbacks and
/// never collect in memory.
@Suite("Large transfers", .onTestThreads)
struct LargeTransferTests {
    static let size: Int64 = 1 << 30
    static let allowedGrowth: Int64 = 64 << 20

    static let childVariable = "JOBCTL_LARGE_TRANSFER_CHILD"

    /// Runs in a child copy of the test runner so that other tests running in parallel cannot move this
    /// process's peak RSS: the child runs only this test, with nothing else resident.
    @Test("1 GiB upload and download to nginx keep peak RSS within 64 MiB of the baseline")
    func oneGiBFlatMemory() async throws {
        if ProcessInfo.processInfo.environment[Self.childVariable] == "1" {
            try await transferOneGiB()
            return
        }
        let runner = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        guard runner.hasSuffix(".xctest") else {
            // Not started by `swift test` (e.g. an IDE host): measure in this process.
            try await transferOneGiB()
            return
        }
        let output = try runProcess(runner, ["--testing-library", "swift-testing", "--filter", "oneGiBFlatMemory"],
                                    environment: [Self.childVariable: "1", "NO_COLOR": "1"])
        let transcript = output.stdout + output.stderr
        // Only the measurements: echoing the child's own "Test run with 1 test" line would put a second
        // closing summary into the suite's output, after the real one.
        let summary = transcript.split(separator: "\n").filter { $0.contains("1 GiB:") }
        if !summary.isEmpty {
            FileHandle.standardError.write(Data((summary.joined(separator: "\n") + "\n").utf8))
        }
        #expect(output.status == 0, "the 1 GiB child failed:\n\(transcript.suffix(4000))")
        #expect(transcript.contains("Test run with 1 test"), "the child did not run exactly this test: \(transcript.suffix(2000))")
    }

    private func transferOneGiB() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory("jobctl-large")
        defer { directory.remove() }
        let source = directory.file("one-gib.bin")
        try writeSparsePattern(source, size: Self.size)
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))

        // Reset VmHWM to the current RSS (Linux: clear_refs 5), so only this transfer's peak counts.
        try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        let baseline = residentBytes()

        let clock = ContinuousClock()
        let uploadStart = clock.now
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadFile, source: source,
                                                               destination: "\(server.baseURL)/one-gib.bin")))
        let uploadTime = clock.now - uploadStart
        #expect(uploaded.size == Self.size)

        let destination = directory.file("down/one-gib.bin")
        let downloadStart = clock.now
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/one-gib.bin",
                                                                 destination: destination)))
        let downloadTime = clock.now - downloadStart
        let peak = peakResidentBytes()

        #expect(downloaded.size == Self.size)
        #expect(downloaded.md5 == uploaded.md5, "the bytes that came back hash like the bytes that went up")
        #expect(downloaded.crc32c == uploaded.crc32c)
        let info = try FileManager.default.attributesOfItem(atPath: destination)
        #expect((info[.size] as? NSNumber)?.int64Value == Self.size)
        let growth = peak - baseline
        print("1 GiB: upload \(uploadTime), download \(downloadTime), peak RSS growth \(growth >> 20) MiB (baseline \(baseline >> 20) MiB)")
        #expect(growth < Self.allowedGrowth, "peak RSS grew by \(growth >> 20) MiB")
    }

    /// A sparse file of `size` bytes with a stamped 1 MiB pattern block every 64 MiB, so it is created
    /// instantly, read at memory speed, and still not all zeros.
    private func writeSparsePattern(_ path: String, size: Int64) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard descriptor >= 0 else { throw TestServerError("cannot create \(path)") }
        defer { close(descriptor) }
        guard ftruncate(descriptor, off_t(size)) == 0 else { throw TestServerError("ftruncate failed") }
        let block = patternData(1 << 20, seed: 11)
        var offset: Int64 = 0
        while offset < size {
            let written = block.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
            guard written == block.count else { throw TestServerError("pwrite failed") }
            offset += 64 << 20
        }
    }
}
