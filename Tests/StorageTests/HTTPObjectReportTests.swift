import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// What a transfer over plain HTTP reports about the object, against nginx: the sizes its progress
/// events carry and the times its metadata holds, in the terms every other backend reports them.
@Suite("what an HTTP transfer reports about the object", .onTestThreads) struct HTTPObjectReportTests {
    /// A download to memory reported its progress without a total (`bytesTotal: nil`), so `watch`, `list`
    /// and `show` gave no percentage for it while a download to a file of the same URL did.
    @Test("a download to memory's progress carries the size the answer names")
    func memoryDownloadProgressHasATotal() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let size = 1_000_000
        try Data(repeating: 7, count: size).write(to: URL(fileURLWithPath: server.root + "/m.bin"))
        let recorder = EventRecorder()
        let result = try finished(await run(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)),
                                            JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/m.bin"), recorder: recorder))
        #expect(result.size == Int64(size))
        let totals = recorder.all.compactMap { if case .progress(_, let total) = $0 { Optional(total) } else { nil } }
        #expect(!totals.isEmpty && totals.allSatisfy { $0 == Int64(size) }, "\(totals)")
    }

    /// get-metadata kept the `Last-Modified` header as the object's `updated` (`Mon, 01 Jan 2024 00:00:00
    /// GMT`), where every other time jobctl stores or shows is RFC 3339 in UTC.
    @Test("get-metadata's updated time is RFC 3339, the file's modification time")
    func metadataTimeIsRFC3339() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let path = server.root + "/t.txt"
        try Data("hello".utf8).write(to: URL(fileURLWithPath: path))
        let modified = Date(timeIntervalSince1970: 1_704_067_200)  // 2024-01-01T00:00:00Z
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path)
        let result = try finished(await run(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)),
                                            JobSpec(kind: .getMetadata, source: "\(server.baseURL)/t.txt")))
        #expect(result.object?.updated == "2024-01-01T00:00:00.000Z", "\(String(describing: result.object))")
    }

    @Test("a Last-Modified past RFC 3339's years, or no date at all, is no updated time",
          arguments: ["Sat, 01 Jan 12345 00:00:00 GMT", "yesterday", "Mon, 30 Feb 2026 00:00:00 GMT"])
    func unreadableLastModified(_ value: String) async throws {
        let server = try NginxServer.start(extraServerConfig: "location /odd { add_header Last-Modified \"\(value)\" always; return 200 \"x\"; }")
        defer { server.stop() }
        let result = try finished(await run(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)),
                                            JobSpec(kind: .getMetadata, source: "\(server.baseURL)/odd")))
        #expect(result.object?.updated == nil, "\(String(describing: result.object))")
    }
}
