import Foundation
import Testing
import TestSupport

/// `submit` on manifests within the file size limit that are built to take memory while they are read:
/// refused (or read) in memory bounded by a small multiple of the file, measured as the process's peak.
@Suite("submit reads hostile manifests in bounded memory", .onTestThreads)
struct ManifestMemoryTests {
    /// Writes `size` bytes of `byte` after `head` into the workspace, without building the text in memory.
    private static func manifest(_ workspace: CLIWorkspace, _ name: String, head: String, filler byte: UInt8, size: Int,
                                 tail: Data = Data("\n".utf8)) throws -> String {
        let path = workspace.directory.file(name)
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.write(contentsOf: Data(head.utf8))
        let chunk = Data(repeating: byte, count: 1 << 20)
        for _ in 0..<(size >> 20) { try handle.write(contentsOf: chunk) }
        try handle.write(contentsOf: tail)
        return path
    }

    @Test("a 50 MB data: scalar is refused while libyaml reads it, at the value's start, in less than 300 MB")
    func hugeScalarRefusedWhileRead() throws {
        let workspace = try CLIWorkspace("huge-scalar")
        defer { workspace.directory.remove() }
        let head = "jobs:\n  - kind: upload-data\n    destination: gs://bkt/x\n    data: \""
        let path = try Self.manifest(workspace, "scalar.yaml", head: head, filler: UInt8(ascii: "a"), size: 50 << 20, tail: Data("\"\n".utf8))
        let result = try workspace.jobctlPeakMemory(["submit", "--dry-run", path])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains("scalar.yaml:4:9: error: more than ") && result.stderr.contains("the limit of 16777216 bytes"),
                "\(result.stderr.prefix(600))")
        #expect(result.peakBytes > 0 && result.peakBytes < 300 << 20, "peak \(result.peakBytes >> 20) MiB for a 50 MiB scalar")
    }

    @Test("60 MB of line breaks are refused while read, in less than 300 MB; 10 MB and a bad byte, in less than 150 MB")
    func lineBreaksTakeNoIndexPerLine() throws {
        let workspace = try CLIWorkspace("line-breaks")
        defer { workspace.directory.remove() }
        let blank = try Self.manifest(workspace, "blank.yaml", head: "jobs:\n", filler: UInt8(ascii: "\n"), size: 60 << 20)
        let refused = try workspace.jobctlPeakMemory(["submit", "--dry-run", blank])
        #expect(refused.status == 65 && refused.stderr.contains("blank.yaml:1:5: error: more than "), "\(refused.stderr)")
        #expect(refused.peakBytes > 0 && refused.peakBytes < 300 << 20, "peak \(refused.peakBytes >> 20) MiB for 60 MiB of line breaks")
        let invalid = try Self.manifest(workspace, "invalid.yaml", head: "jobs:\n", filler: UInt8(ascii: "\n"), size: 10 << 20,
                                        tail: Data([0xFF, 0x0A]))
        let bad = try workspace.jobctlPeakMemory(["submit", "--dry-run", invalid])
        #expect(bad.status == 65 && bad.stderr.contains("invalid.yaml:10485762:1: error: the manifest is not valid UTF-8"), "\(bad.stderr)")
        #expect(bad.peakBytes > 0 && bad.peakBytes < 150 << 20, "peak \(bad.peakBytes >> 20) MiB for 10 MiB of line breaks")
    }

    @Test("3,000 prefix downloads on one line (flow style) share the manifest's text: less than 200 MB, not 1.5 GB")
    func prefixJobsShareTheirLines() throws {
        let workspace = try CLIWorkspace("prefix-lines")
        defer { workspace.directory.remove() }
        try workspace.write("bucket/photos/a.jpg", "a")
        let prefix = "file://" + workspace.directory.file("bucket/photos/")
        let jobs = (0..<3_000).map { "{kind: download-file, source: \"\(prefix)\", destination: \"out\($0)/\"}" }
        let path = try workspace.write("prefixes.yaml", "jobs: [" + jobs.joined(separator: ", ") + "]\n")
        let result = try workspace.jobctlPeakMemory(["submit", "--dry-run", path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.peakBytes > 0 && result.peakBytes < 200 << 20, "peak \(result.peakBytes >> 20) MiB for a \(jobs.count)-job line")
    }
}
