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

    @Test("result -o writes into a device or a pipe and never replaces it; a fetched URL's file is 0600")
    func resultOutputTargets() throws {
        let (workspace, fetchID) = try Self.drained(umask: "022")
        defer { workspace.directory.remove() }
        let url = try workspace.jobctl(["result", fetchID]).stdout

        // A secret in a new file: the token URL, private whatever the umask.
        let file = workspace.directory.file("url.txt")
        let written = try workspace.jobctl(["result", fetchID, "-o", file])
        #expect(written.status == 0, "\(written.stderr)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == url)
        #expect(try Self.status(file).st_mode & 0o777 == 0o600)

        // A device (a null device of our own as root; /dev/null itself otherwise, where a user cannot
        // create the temporary file the rename needed): written into, still a device afterwards.
        var device = "/dev/null"
        if geteuid() == 0 {
            device = workspace.directory.file("null")
            try #require(mknod(device, S_IFCHR | 0o666, dev_t(0x0103)) == 0)
        }
        let toDevice = try workspace.jobctl(["result", fetchID, "-o", device])
        #expect(toDevice.status == 0, "\(toDevice.stderr)")
        #expect(try Self.status(device).st_mode & S_IFMT == S_IFCHR, "\(device) was replaced")

        // Standard output by name (what /dev/stdout and a shell's /dev/fd/N lead to): the bytes arrive there.
        let toStdout = try workspace.jobctl(["result", fetchID, "-o", "/proc/self/fd/1"])
        #expect(toStdout.status == 0, "\(toStdout.stderr)")
        #expect(toStdout.stdout == url)

        // A FIFO nothing reads: refused at once, and left a FIFO.
        let fifo = workspace.directory.file("fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        let toFIFO = try workspace.jobctl(["result", fetchID, "-o", fifo])
        #expect(toFIFO.status == 1)
        #expect(toFIFO.stderr.contains("is a FIFO that nothing reads"), "\(toFIFO.stderr)")
        #expect(try Self.status(fifo).st_mode & S_IFMT == S_IFIFO, "the FIFO was replaced")

        // A hard link at the name: replaced, the other name's bytes unchanged.
        let other = try workspace.write("other.txt", "mine\n")
        let linked = workspace.directory.file("linked.txt")
        try #require(link(other, linked) == 0)
        #expect(try workspace.jobctl(["result", fetchID, "-o", linked]).status == 0)
        #expect(try String(contentsOfFile: other, encoding: .utf8) == "mine\n")
        #expect(try String(contentsOfFile: linked, encoding: .utf8) == url)
        // No temporary file is left beside them.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).filter { $0.hasSuffix(".jobctl-output") }
        #expect(leftovers.isEmpty, "\(leftovers)")
    }
}
