import Checksums
import Foundation
import JobModel
import StorePort
import Testing
import TestSupport

/// Where a download-to-memory result's bytes live: up to 256 in the `succeeded` event itself, more in
/// the content-addressed blobs. The commands show both alike.
@Suite("download-memory results in the event or in the blobs", .onTestThreads)
struct InlineResultTests {
    @Test("256 bytes stay in the event, 257 go to the blobs; result, show and history show both alike",
          arguments: StoreEngine.allCases)
    func inlineAndBlob(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("inline-result", engine: engine)
        defer { workspace.directory.remove() }
        let small = Data((0..<256).map { UInt8($0) })
        let large = Data((0..<257).map { UInt8(($0 * 7) & 0xFF) })
        let ids = try workspace.submit("""
        - {kind: upload-data, data_base64: "\(small.base64EncodedString())", destination: "file://r/small.bin", priority: 3}
        - {kind: upload-data, data_base64: "\(large.base64EncodedString())", destination: "file://r/large.bin", priority: 3}
        - {kind: download-memory, source: "file://r/small.bin", priority: 2}
        - {kind: download-memory, source: "file://r/large.bin", priority: 2}
        """)
        let drained = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"])
        #expect(drained.status == 0, "\(drained.stderr)")
        for (id, bytes) in [(ids[2], small), (ids[3], large)] {
            let sha256 = Digest.sha256Hex(bytes)
            let output = workspace.directory.file("out-\(id).bin")
            let result = try workspace.jobctl(["result", id, "-o", output])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(FileManager.default.contents(atPath: output) == bytes)
            let shown = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
            let shownResult = try #require(shown["result"] as? [String: Any])
            #expect(shownResult["blob"] as? String == sha256, "\(shownResult)")
            #expect(shownResult["data"] == nil)
            #expect(try workspace.jobctl(["show", id]).stdout.contains("sha256:\(sha256)"))
            let history = try #require(try workspace.json(["history", id, "--json"]) as? [[String: Any]])
            let succeeded = try #require(history.last { $0["type"] as? String == "succeeded" })
            let eventResult = try #require((succeeded["data"] as? [String: Any])?["result"] as? [String: Any])
            #expect(eventResult["blob"] as? String == sha256 && eventResult["data"] == nil, "\(eventResult)")
        }
        let store = try ArchiveCommandTests.open(workspace, engine: engine)
        #expect(try store.blob(sha256: Digest.sha256Hex(small)) == nil, "256 bytes stay in their event")
        #expect(try store.blob(sha256: Digest.sha256Hex(large)) == large)
        let smallRecord = try #require(try store.job(ids[2]))
        #expect(smallRecord.result?.data == small && smallRecord.result?.blob == nil)
        let largeRecord = try #require(try store.job(ids[3]))
        #expect(largeRecord.result?.data == nil && largeRecord.result?.blob == Digest.sha256Hex(large))
        let replay = try workspace.jobctl(["replay", "--verify"])
        #expect(replay.status == 0, "\(replay.stdout)\(replay.stderr)")
    }

    /// Uploads `bytes` to a file:// object and downloads it to memory (kept as a blob: over 256 bytes);
    /// the two jobs' ids.
    private static func downloadToBlob(_ bytes: Data, in workspace: CLIWorkspace) throws -> [String] {
        let ids = try workspace.submit("""
        - {kind: upload-data, data_base64: "\(bytes.base64EncodedString())", destination: "file://r/b.bin", priority: 3}
        - {kind: download-memory, source: "file://r/b.bin", priority: 2}
        """)
        #expect(try workspace.jobctl(["worker", "--drain", "--concurrency", "1"]).status == 0)
        return ids
    }

    /// Replaces every stored blob's bytes with the SQL `expression`, past the trigger that refuses it (a
    /// damaged or edited log).
    private static func replaceBlobs(in workspace: CLIWorkspace, with expression: String) throws {
        let damage = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            c.execute("DROP TRIGGER blobs_refuse_update")
            c.execute("UPDATE blobs SET data = \(expression)")
            c.commit()
            """, workspace.database])
        try #require(damage.status == 0, "\(damage.stderr)")
    }

    /// A damaged or edited log: the blob's bytes replaced (other bytes of the same size, or 1 MiB of
    /// zeros). `result` wrote them out as the job's result; it now checks them against the hash and the
    /// size the job recorded, and writes nothing.
    @Test("result refuses a blob whose bytes are not the ones the job recorded", arguments: [false, true])
    func damagedBlobRefused(grown: Bool) throws {
        let workspace = try CLIWorkspace("damaged-blob")
        defer { workspace.directory.remove() }
        let ids = try Self.downloadToBlob(Data((0..<400).map { UInt8(($0 * 13) & 0xFF) }), in: workspace)
        try Self.replaceBlobs(in: workspace, with: grown ? "zeroblob(1048576)" : "randomblob(400)")
        let output = workspace.directory.file("out.bin")
        let result = try workspace.jobctl(["result", ids[1], "-o", output])
        #expect(result.status == 1 && result.stderr.contains("does not match its record"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output), "nothing was written")
    }

    /// A blob of another size than the job recorded (a damaged log: 400 bytes recorded, 96 MiB stored)
    /// was read whole into memory, then hashed, before `result` refused it. Its length is compared
    /// first now: refused before the bytes are read.
    @Test("result refuses a blob larger than recorded without reading it into memory")
    func oversizedBlobRefusedUnread() throws {
        let workspace = try CLIWorkspace("oversized-blob")
        defer { workspace.directory.remove() }
        let ids = try Self.downloadToBlob(Data((0..<400).map { UInt8(($0 * 11) & 0xFF) }), in: workspace)
        let stored: Int64 = 96 << 20
        try Self.replaceBlobs(in: workspace, with: "zeroblob(\(stored))")
        let output = workspace.directory.file("out.bin")
        let result = try workspace.jobctlPeakMemory(["result", ids[1], "-o", output])
        #expect(result.status == 1 && result.stderr.contains("does not match its record")
                && result.stderr.contains("\(stored) bytes"), "\(result.stderr)")
        #expect(result.peakBytes > 0 && result.peakBytes < stored / 2, "peak \(result.peakBytes) bytes for a \(stored)-byte blob")
        #expect(!FileManager.default.fileExists(atPath: output), "nothing was written")
    }

    /// `list` read every succeeded job's payload and decoded its result, bytes and all: with a 100 MB
    /// result kept in the event, ~650 MB of memory to print one row. The table shows no result, and
    /// reads none now; `show` still has it.
    @Test("list reads no result: a 64 MiB result in the event stays out of its memory")
    func listLeavesResultsUnread() throws {
        let workspace = try CLIWorkspace("list-no-result")
        defer { workspace.directory.remove() }
        let size = 64 << 20
        let bucket = workspace.directory.file("buckets/r")
        try FileManager.default.createDirectory(atPath: bucket, withIntermediateDirectories: true)
        try writePatternFile(bucket + "/big.bin", size: Int64(size))
        let ids = try workspace.submit("""
        - {kind: download-memory, source: "file://r/big.bin", max_size: \(size)}
        """)
        let drained = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"])
        try #require(drained.status == 0, "\(drained.stderr)")
        // The result's bytes moved into the succeeded event itself, as the store keeps small ones.
        let inline = try runProcess("/usr/bin/python3", ["-c", """
            import base64, json, sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            seq, text = c.execute("SELECT seq, data FROM events WHERE type = 'succeeded'").fetchone()
            payload = json.loads(text)
            digest = payload["result"].pop("blob")
            (data,) = c.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
            payload["result"]["data"] = base64.b64encode(data).decode()
            c.execute("DROP TRIGGER events_refuse_update")
            c.execute("UPDATE events SET data = ? WHERE seq = ?", (json.dumps(payload, sort_keys=True, separators=(",", ":")), seq))
            c.commit()
            """, workspace.database])
        try #require(inline.status == 0, "\(inline.stderr)")
        let shown = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        try #require((shown["result"] as? [String: Any])?["blob"] as? String != nil, "the result is in the log: \(shown)")

        let listed = try workspace.jobctlPeakMemory(["list"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.peakBytes > 0 && listed.peakBytes < Int64(size) * 3 / 4,
                "peak \(listed.peakBytes) bytes beside a \(size)-byte result")
        let table = try workspace.jobctl(["list"])
        #expect(table.status == 0 && table.stdout.contains(ids[0]) && table.stdout.contains("succeeded")
                && table.stdout.contains("100%"), "\(table.stdout)\(table.stderr)")
    }
}
