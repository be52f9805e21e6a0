import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The files jobctl writes for a user: what a worker makes (downloads, `file://` objects, sidecars, their
/// folders) and what `result -o FILE` writes.
@Suite("Written file modes", .serialized)
struct WrittenFileModeTests {
    /// A workspace whose log holds a succeeded download, upload and fetch-url (its result a token URL),
    /// run by a worker under `umask`.
    private static func drained(umask: String) throws -> (CLIWorkspace, fetchID: String) {
        let workspace = try CLIWorkspace("modes")
        let source = try workspace.write("src.bin", String(repeating: "x", count: 10_000))
        let ids = try workspace.submit("""
            jobs:
              - kind: download-file
                source: file://\(source)
                destination: \(workspace.directory.file("out/deep/dl.bin"))
              - kind: upload-file
                source: \(source)
                destination: file://bkt/a/b/up.bin
                key: up
              - kind: fetch-url
                source: file://bkt/a/b/up.bin
                after: [up]
            """)
        let drain = try runProcess("/bin/sh", ["-c", "umask \(umask) && exec \"$@\"", "sh", PackagePaths.jobctlBinary,
                                               "--db", workspace.database, "worker", "--drain", "-q"],
                                   environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        try #require(drain.status == 0, "\(drain.stderr)")
        return (workspace, try #require(ids.last))
    }

    private static func status(_ path: String) throws -> stat {
        var info = stat()
        try #require(lstat(path, &info) == 0, "\(path): \(String(cString: strerror(errno)))")
        return info
    }

    @Test("under umask 000 nothing a worker makes is writable by other users: downloads, objects, sidecars, folders")
    func noWorldWritableFiles() throws {
        let (workspace, _) = try Self.drained(umask: "000")
        defer { workspace.directory.remove() }
        let made = ["out", "out/deep", "out/deep/dl.bin", "buckets", "buckets/bkt", "buckets/bkt/a", "buckets/bkt/a/b",
                    "buckets/bkt/a/b/up.bin", "buckets/bkt/a/b/.up.bin.jobctl-meta.json"]
        for name in made {
            let mode = try Self.status(workspace.directory.file(name)).st_mode
            #expect(mode & 0o002 == 0, "\(name) is \(String(mode & 0o7777, radix: 8)): other users may write it")
            // The umask still decides the rest: the group keeps what 000 gives it.
            #expect(mode & 0o060 == 0o060, "\(name) is \(String(mode & 0o7777, radix: 8))")
        }
    }
}
