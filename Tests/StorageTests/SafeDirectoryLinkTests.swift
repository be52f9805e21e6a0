import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JobModel
@testable import Storage
import Testing
import TestSupport

/// `SafeDirectory.link(_:identity:knownAs:to:)`, which names the file an upload attempt wrote before it
/// goes onto the object: the name is that file or nothing, whatever sits at the session's name now —
/// through `/proc/self/fd`, and by name (checked) where that is missing.
@Suite("linking an open file under an attempt's own name", .onTestThreads)
struct SafeDirectoryLinkTests {
    /// Where the open files are named: the real folder, and one that does not exist (no `/proc`).
    static let descriptorFolders = ["/proc/self/fd", "/nonexistent-proc/self/fd"]

    private func identity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    @Test("the attempt's own file is linked; a file that lost its name to another gets none, and the other is never linked",
          arguments: descriptorFolders)
    func linksOnlyItsOwnFile(descriptors: String) throws {
        let directory = try TemporaryDirectory("safe-link")
        defer { directory.remove() }
        let folder = try SafeDirectory.open(trusted: directory.path, create: false)
        // Still at its name: linked, the same inode.
        let ours = try folder.createExclusive(".o.J.jobctl-upload")
        try ours.write(Data("ours".utf8))
        let ourIdentity = try #require(identity(directory.file(".o.J.jobctl-upload")))
        #expect(try folder.link(ours, identity: ourIdentity, knownAs: ".o.J.jobctl-upload", to: ".o.J.1.jobctl-commit",
                                descriptors: descriptors))
        #expect(identity(directory.file(".o.J.1.jobctl-commit")) == ourIdentity)
        ours.close()

        // Replaced at its name by another attempt's session: no name given, the other file has one link.
        let stale = try folder.createExclusive(".p.J.jobctl-upload")
        let staleIdentity = try #require(identity(directory.file(".p.J.jobctl-upload")))
        folder.remove(".p.J.jobctl-upload")
        let retry = try folder.createExclusive(".p.J.jobctl-upload")
        try retry.write(Data("retry bytes".utf8))
        let retryIdentity = try #require(identity(directory.file(".p.J.jobctl-upload")))
        #expect(try !folder.link(stale, identity: staleIdentity, knownAs: ".p.J.jobctl-upload", to: ".p.J.1.jobctl-commit",
                                 descriptors: descriptors))
        #expect(!FileManager.default.fileExists(atPath: directory.file(".p.J.1.jobctl-commit")))
        #expect(folder.entry(".p.J.jobctl-upload")?.identity == retryIdentity)
        #expect(folder.entry(".p.J.jobctl-upload")?.links == 1)
        stale.close()
        retry.close()

        // Removed and nothing in its place: no name given.
        let gone = try folder.createExclusive(".q.J.jobctl-upload")
        let goneIdentity = try #require(identity(directory.file(".q.J.jobctl-upload")))
        folder.remove(".q.J.jobctl-upload")
        #expect(try !folder.link(gone, identity: goneIdentity, knownAs: ".q.J.jobctl-upload", to: ".q.J.1.jobctl-commit",
                                 descriptors: descriptors))
        #expect(!FileManager.default.fileExists(atPath: directory.file(".q.J.1.jobctl-commit")))
        gone.close()
    }
}
