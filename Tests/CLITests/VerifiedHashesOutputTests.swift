import Foundation
import Testing
import TestSupport

/// A hash jobctl computed but did not compare with one the server reported is shown as such, by `show`
/// and by `audit` (table, CSV, JSON): printed alike, a `file://` upload's CRC32C (never read back) read
/// as verified as a download's, checked against the object's.
@Suite("unverified hashes in show and audit", .onTestThreads) struct VerifiedHashesOutputTests {
    @Test func unverifiedHashesAreMarked() throws {
        let workspace = try CLIWorkspace("verified-hashes")
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let upload = try #require(try workspace.submit("- {kind: upload-data, data: hello, destination: \"file://v/a.txt\"}\n").first)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        let download = try #require(try workspace.submit("""
            - {kind: download-file, source: "file://v/a.txt", destination: "\(workspace.directory.file("a.txt"))"}
            """ + "\n").first)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)

        func line(_ label: String, of id: String) throws -> String {
            let shown = try workspace.jobctl(["show", id])
            return shown.stdout.split(separator: "\n").first { $0.hasPrefix(label + ":") }.map(String.init) ?? ""
        }
        #expect(try line("crc32c", of: upload).hasSuffix("(unverified: computed by jobctl, not compared with the server's)"))
        let verifiedLine = try line("crc32c", of: download)
        #expect(!verifiedLine.isEmpty && !verifiedLine.contains("unverified"), "\(verifiedLine)")

        let table = try workspace.jobctl(["audit"]).stdout.split(separator: "\n")
        #expect(table.first { $0.hasPrefix(upload) }?.contains(" (unverified)") == true, "\(table)")
        #expect(table.first { $0.hasPrefix(download) }.map { !$0.contains("unverified") } == true, "\(table)")

        let csv = try workspace.jobctl(["audit", "--csv"]).stdout.split(separator: "\n")
        #expect(csv.first?.hasSuffix(",verified,skipped") == true)
        #expect(csv.first { $0.hasPrefix(upload) }?.hasSuffix(",none,") == true, "\(csv)")
        #expect(csv.first { $0.hasPrefix(download) }?.hasSuffix("crc32c,") == true, "\(csv)")

        let rows = try #require(try workspace.json(["audit", "--json"]) as? [[String: Any]])
        let verified = Dictionary(uniqueKeysWithValues: rows.compactMap { row in
            (row["id"] as? String).map { ($0, row["verified"] as? [String]) }
        })
        #expect(verified[upload] == .some([]), "\(rows)")
        #expect(verified[download]??.contains("crc32c") == true, "\(rows)")
    }
}
