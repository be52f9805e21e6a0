import EventStore
import Foundation
import Testing
import TestSupport

/// A download's commit syncs its file and its folder, so both outlive a machine's crash. On a filesystem
/// kept in memory (tmpfs) nothing outlives one and `fsync` does nothing: the commit makes neither call
/// there. Seen from outside: the worker runs under strace (`-y` names each descriptor's path), and the
/// syncs naming the destination's folder are counted.
@Suite("a download's syncs on a filesystem kept in memory", .onTestThreads, .serialized)
struct MemoryFilesystemSyncTests {
    /// `stat -f -c %T`: the type of the filesystem holding `path` (tmpfs, ext2/ext3, …).
    private static func filesystemType(_ path: String) throws -> String {
        try runProcess("/usr/bin/stat", ["-f", "-c", "%T", path]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Downloads nginx's `file.bin` into `folder` under strace; returns the sync calls naming `folder`.
    private static func syncsOfDownload(into folder: String, from nginx: NginxServer, workspace: TemporaryDirectory) throws -> [String] {
        let database = workspace.file("jobctl-\(UUID().uuidString.prefix(6)).db")
        let destination = folder + "/out.bin"
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/file.bin\", destination: \"\(destination)\"}\n",
                                         database: database, directory: workspace).first)
        let trace = workspace.file("trace-\(UUID().uuidString.prefix(6)).txt")
        let worker = try JobctlProcess(database: database, arguments: ["worker", "--drain"], logDirectory: workspace.path,
                                       tracer: ["/usr/bin/strace", "-f", "-qq", "-y", "-o", trace, "-e", "trace=fsync,fdatasync,syncfs"])
        #expect(worker.wait(seconds: 60) == 0, "\(worker.log)")
        #expect(try EventStore(path: database, mode: .readOnly).job(id)?.state == .succeeded, "\(worker.log)")
        #expect(FileManager.default.contents(atPath: destination) == Data(repeating: 0x61, count: 5_000))
        let lines = ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        return lines.filter { $0.contains("<\(folder)") }
    }

    @Test("on tmpfs the commit syncs neither the file nor its folder; on a disk it syncs both")
    func syncsFollowTheFilesystem() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"),
                     "strace is not installed (Debian package strace; make test-deps installs it)")
        let workspace = try TemporaryDirectory("jobctl-memsync")
        defer { workspace.remove() }
        let nginx = try NginxServer.start()
        try Data(repeating: 0x61, count: 5_000).write(to: URL(fileURLWithPath: nginx.root + "/file.bin"))

        let memory = "/dev/shm/jobctl-memsync-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: memory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: memory) }
        let memoryType = try Self.filesystemType(memory)
        try #require(memoryType == "tmpfs", "/dev/shm is not tmpfs here: \(memoryType)")
        // A folder on a disk: the workspace, or one under the package's build folder when the system's
        // temporary folder is itself tmpfs.
        var disk = workspace.file("out")
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        if try Self.filesystemType(disk) == "tmpfs" {
            disk = "\(PackagePaths.root)/.build/jobctl-memsync-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        }
        defer { if disk.hasPrefix(PackagePaths.root) { try? FileManager.default.removeItem(atPath: disk) } }
        try #require(try Self.filesystemType(disk) != "tmpfs")

        let onDisk = try Self.syncsOfDownload(into: disk, from: nginx, workspace: workspace)
        #expect(onDisk.contains { $0.contains("fsync(") && $0.contains(".jobctl-partial>") }, "the file's sync: \(onDisk)")
        #expect(onDisk.contains { $0.contains("fsync(") && $0.contains("<\(disk)>") }, "the folder's sync: \(onDisk)")

        let inMemory = try Self.syncsOfDownload(into: memory, from: nginx, workspace: workspace)
        #expect(inMemory.isEmpty, "\(inMemory)")
    }
}
