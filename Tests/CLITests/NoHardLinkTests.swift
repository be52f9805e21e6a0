import Foundation
import TestSupport
import Testing

/// `if_exists: fail` and `skip` put a finished file into place by a hard link (`linkat`), which refuses
/// to replace what is there. A filesystem without hard links (FAT, exFAT, many FUSE mounts) answers it
/// with EPERM or EOPNOTSUPP, and every such transfer moved all its bytes and then failed at the last
/// step — `skip`'s too, since it came to commit as `fail` does. It now takes the name by a rename that
/// refuses to replace instead. No such filesystem is at hand here, so the worker runs with a small
/// library of our own, loaded before libc, whose `linkat` fails as theirs does.
@Suite(.serialized) struct NoHardLinkTests {
    /// A shared library whose `linkat` fails with `code` (`EPERM`, `EOPNOTSUPP`), built with the C
    /// compiler that builds the package's C targets.
    static func noLinkLibrary(in directory: TemporaryDirectory, failingWith code: String) throws -> String {
        let source = directory.file("nolink.c")
        try """
        #include <errno.h>
        int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags) {
            (void)olddirfd; (void)oldpath; (void)newdirfd; (void)newpath; (void)flags;
            errno = \(code);
            return -1;
        }
        """.write(toFile: source, atomically: true, encoding: .utf8)
        let library = directory.file("nolink-\(code).so")
        let compilers = ["cc", "clang", "gcc"]
        for compiler in compilers {
            let built = try runProcess("/usr/bin/env", [compiler, "-shared", "-fPIC", "-o", library, source])
            if built.status == 0 { return library }
        }
        throw CLITestError("no C compiler among \(compilers) built the test library")
    }

    @Test(arguments: ["EPERM", "EOPNOTSUPP"])
    func failAndSkipCommitWhereTheFilesystemHasNoHardLinks(_ code: String) throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let library = try Self.noLinkLibrary(in: workspace.directory, failingWith: code)
        try workspace.write("buckets/b/object.bin", String(repeating: "x", count: 70_000))
        try workspace.write("out/taken.bin", "the user's own")
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: download-file, source: "file://b/object.bin", destination: out/fail.bin, if_exists: fail}
        - {kind: download-file, source: "file://b/object.bin", destination: out/skip.bin, if_exists: skip}
        - {kind: download-file, source: "file://b/object.bin", destination: out/taken.bin, if_exists: fail}
        - {kind: upload-data, data: "new object", destination: "file://b/new.txt", if_exists: fail}
        - {kind: upload-data, data: "another", destination: "file://b/skipped.txt", if_exists: skip}
        """)
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        #expect(try workspace.jobctl(["submit", manifest], environment: environment).status == 0)
        // Taken after submit: the worker's own look finds it.
        try workspace.write("buckets/b/skipped.txt", "someone else's")
        let drained = try workspace.jobctl(["worker", "--drain", "--json"], environment: environment.merging(["LD_PRELOAD": library]) { a, _ in a })
        // One job fails (the destination taken under `fail`), as it should; the rest succeed.
        #expect(drained.status == 2, "\(drained.stderr)")
        #expect(!drained.stderr.contains("linking into place"), "\(drained.stderr)")
        let object = String(repeating: "x", count: 70_000)
        #expect(try String(contentsOfFile: workspace.directory.file("out/fail.bin"), encoding: .utf8) == object)
        #expect(try String(contentsOfFile: workspace.directory.file("out/skip.bin"), encoding: .utf8) == object)
        #expect(try String(contentsOfFile: workspace.directory.file("out/taken.bin"), encoding: .utf8) == "the user's own")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets/b/new.txt"), encoding: .utf8) == "new object")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets/b/skipped.txt"), encoding: .utf8) == "someone else's")
        // Nothing left beside the files: no partial download, no upload session, no second name.
        let out = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.file("out")).sorted()
        #expect(out == ["fail.bin", "skip.bin", "taken.bin"], "\(out)")
        let bucket = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.file("buckets/b")).sorted()
        #expect(bucket == [".new.txt.jobctl-meta.json", "new.txt", "object.bin", "skipped.txt"], "\(bucket)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.map { $0["state"] as? String ?? "" }.sorted() == ["failed", "succeeded", "succeeded", "succeeded", "succeeded"], "\(jobs)")
    }
}
