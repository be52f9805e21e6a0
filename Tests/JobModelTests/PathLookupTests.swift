import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JobModel
import Testing

@Suite("telling a missing file from one that cannot be looked for")
struct PathLookupTests {
    @Test("only ENOENT and ENOTDIR are absent; a loop on the way is an error naming why; a dangling link is there unless followed")
    func absentOnlyWhenNothingIsThere() throws {
        let folder = FileManager.default.temporaryDirectory.path + "/pathlookup-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(try PathLookup.entry(at: folder + "/missing") == nil)
        FileManager.default.createFile(atPath: folder + "/file", contents: Data())
        #expect(try PathLookup.entry(at: folder + "/file/below") == nil, "a file on the way: ENOTDIR")
        #expect(try PathLookup.entry(at: folder + "/file") != nil)
        try FileManager.default.createSymbolicLink(atPath: folder + "/dangling", withDestinationPath: folder + "/missing")
        #expect(try PathLookup.entry(at: folder + "/dangling") != nil)
        #expect(try PathLookup.entry(at: folder + "/dangling", followingLinks: true) == nil)
        try FileManager.default.createSymbolicLink(atPath: folder + "/loop", withDestinationPath: "loop")
        #expect(throws: PathLookup.Failure(path: folder + "/loop/config.yaml", code: ELOOP)) {
            try PathLookup.entry(at: folder + "/loop/config.yaml")
        }
    }
}
