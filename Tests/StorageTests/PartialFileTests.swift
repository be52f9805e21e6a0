import Foundation
import JobModel
import Storage
import Testing
import TestSupport

@Suite(.onTestThreads) struct PartialFileTests {
    private func write(_ partial: PartialFile, _ text: String) throws {
        try partial.write(Data(text.utf8))
    }

    /// A temporary name that no longer holds this file at commit (a worker that lost the job's lease
    /// renamed or replaced it) renames nothing into place and is a retryable error: the next attempt
    /// starts over on a file of its own.
    @Test func aTemporaryFileReplacedBeforeCommitIsARetryableErrorAndNothingIsRenamed() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        let partial = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: nil)
        try write(partial, "ours")
        try FileManager.default.removeItem(atPath: partial.tempPath)
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: partial.tempPath))
        do {
            _ = try partial.commit()
            Issue.record("commit renamed a file that is not ours")
        } catch {
            #expect(error.code == .pathError && error.retryable, "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(try String(contentsOfFile: partial.tempPath, encoding: .utf8) == "theirs", "their file is left alone")
    }

    @Test func commitRenamesTheTemporaryFileOverTheDestination() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("a/b/out.txt")
        try FileManager.default.createDirectory(atPath: directory.file("a/b"), withIntermediateDirectories: true)
        try Data("old".utf8).write(to: URL(fileURLWithPath: destination))

        let partial = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
        #expect(partial.tempPath == directory.file("a/b/.out.txt.jobctl-partial"))
        try write(partial, "new ")
        try write(partial, "bytes")
        #expect(partial.bytesWritten == 9)
        // Until commit the destination keeps its previous content.
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "old")
        #expect(try partial.commit() == destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "new bytes")
        #expect(!FileManager.default.fileExists(atPath: partial.tempPath))
    }

    @Test func resumeTruncatesToTheRecordedLengthAndReadsThePrefixBack() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("missing/parent/f.bin")
        let first = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
        try write(first, "0123456789")
        try first.sync()
        let tempPath = first.tempPath

        // Bytes beyond the recorded point (written after the last checkpoint) are dropped.
        let point = ResumePoint.download(bytesWritten: 6, generation: "1", etag: nil, tempPath: tempPath)
        let second = try PartialFile(destination: destination, jobID: nil, resumeFrom: point)
        #expect(second.bytesWritten == 6 && second.resumed)
        var prefix = Data()
        try second.readBack { prefix.append(contentsOf: $0) }
        #expect(String(decoding: prefix, as: UTF8.self) == "012345")
        try write(second, "AB")
        _ = try second.commit()
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "012345AB")
    }

    @Test(arguments: [
        ResumePoint.download(bytesWritten: 100, generation: nil, etag: nil, tempPath: nil),
        ResumePoint.download(bytesWritten: 3, generation: nil, etag: nil, tempPath: "/elsewhere/.f.jobctl-partial"),
        ResumePoint.upload(sessionURI: "x", confirmedOffset: 3, total: nil),
    ])
    func unusableResumePointsStartAtZero(point: ResumePoint) throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("f")
        let first = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
        try write(first, "hello")
        try first.sync()
        let second = try PartialFile(destination: destination, jobID: nil, resumeFrom: point)
        #expect(second.bytesWritten == 0 && !second.resumed)
        #expect(try FileManager.default.attributesOfItem(atPath: second.tempPath)[.size] as? Int == 0)
    }

    @Test func discardRemovesTheTemporaryFile() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let partial = try PartialFile(destination: directory.file("g"), jobID: nil, resumeFrom: nil)
        try write(partial, "x")
        partial.discard()
        partial.discard()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }
}
