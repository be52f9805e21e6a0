import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JobModel
@testable import Storage
import TestSupport
import Testing

/// The hidden files beside a `file://` object whose name is too long for `.NAME.<suffix>` to fit 255
/// bytes (its sidecar, upload session, sidecar temporary): each object's are its own.
///
/// Older jobctls cut such a name to its first bytes, `~` and eight hexadecimal digits of its FNV-1a-32
/// hash: an object named exactly that cut form (`<first 228 bytes>~<hash>`, 237 bytes) had the very same
/// sidecar as the long one, as had two long names with one prefix and one hash (found in seconds), so
/// uploading one wiped the other's checksums and metadata, and deleting one deleted the other's sidecar.
/// What those jobctls wrote is still found.
@Suite("Hidden files of long file:// names", .onTestThreads)
struct LongNameHiddenFileTests {
    /// A 255-byte name: the longest a file may have.
    private static let long = String(repeating: "a", count: 255)

    /// The name an older jobctl gave the hidden file of `name` with `suffix`: cut, `~` and the FNV-1a-32
    /// of the whole name in eight hexadecimal digits (computed here, apart from the backend).
    static func olderHiddenName(_ name: String, suffix: String) -> String {
        let room = 255 - 1 - suffix.utf8.count
        guard name.utf8.count > room else { return "." + name + suffix }
        var hash: UInt32 = 0x811C_9DC5
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        let digits = String(hash, radix: 16)
        let tag = "~" + String(repeating: "0", count: 8 - digits.count) + digits
        var kept = ""
        for scalar in name.unicodeScalars {
            guard kept.utf8.count + String(scalar).utf8.count <= room - tag.utf8.count else { break }
            kept.unicodeScalars.append(scalar)
        }
        return "." + kept + tag + suffix
    }

    /// The object name whose own sidecar an older jobctl gave `name` too: its cut form.
    private static func cutForm(_ name: String) -> String {
        let sidecar = olderHiddenName(name, suffix: ".jobctl-meta.json")
        return String(sidecar.dropFirst().dropLast(".jobctl-meta.json".utf8.count))
    }

    private func metadata(_ backend: LocalBackend, _ reference: String) async throws -> StorageObject {
        try #require(try finished(await run(backend, JobSpec(kind: .getMetadata, source: reference))).object)
    }

    private func upload(_ backend: LocalBackend, _ reference: String, _ text: String, owner: String) async throws {
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Data(text.utf8),
                                                    metadata: UploadMetadata(customMetadata: ["owner": owner]))))
    }

    private func entries(_ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
    }

    private func identity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    @Test("a 255-byte name and its 237-byte cut form keep their own metadata through upload, get-metadata and delete")
    func aNameAndItsCutFormKeepTheirOwnSidecars() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-longnames", making: "b/d")
        defer { directory.remove() }
        let cut = Self.cutForm(Self.long)
        #expect(cut.utf8.count == 237 && cut.hasPrefix(String(repeating: "a", count: 228) + "~"))
        let a = "file://b/d/" + Self.long
        let b = "file://b/d/" + cut

        try await upload(backend, a, "I am A", owner: "alice")
        try await upload(backend, b, "I am B", owner: "bob")
        let folder = buckets + "/b/d"
        #expect(entries(folder).count == 4, "two objects, two sidecars: \(entries(folder).map { "\($0.prefix(12))… \($0.utf8.count) bytes" })")

        let readA = try await metadata(backend, a)
        #expect(readA.customMetadata == ["owner": "alice"] && readA.crc32c == hashes(Data("I am A".utf8)).crc32c, "\(readA)")
        let readB = try await metadata(backend, b)
        #expect(readB.customMetadata == ["owner": "bob"] && readB.crc32c == hashes(Data("I am B".utf8)).crc32c, "\(readB)")
        // A's download is checked against A's own checksum.
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: a)))
        #expect(downloaded.data == Data("I am A".utf8) && downloaded.verified == [.crc32c], "\(downloaded.verified)")

        // Deleting A leaves B and B's metadata.
        _ = try finished(await run(backend, JobSpec(kind: .delete, destination: a)))
        let afterDelete = try await metadata(backend, b)
        #expect(afterDelete.customMetadata == ["owner": "bob"] && afterDelete.generation == readB.generation, "\(afterDelete)")
        #expect(entries(folder) == ["." + cut + ".jobctl-meta.json", cut])
        _ = try finished(await run(backend, JobSpec(kind: .delete, destination: b)))
        #expect(entries(folder).isEmpty, "\(entries(folder))")
    }

    /// Two 255-byte names with one 228-byte prefix whose FNV-1a-32 hashes are equal (as older jobctls cut
    /// them, the same hidden name).
    @Test("two long names sharing a prefix and an FNV-1a-32 hash keep their own metadata")
    func twoLongNamesWithOneOlderHashKeepTheirOwnSidecars() async throws {
        let prefix = String(repeating: "p", count: 228)
        let first = prefix + "000000000000000000000329599"
        let second = prefix + "000000000000000000000532382"
        #expect(first.utf8.count == 255 && second.utf8.count == 255)
        #expect(Self.olderHiddenName(first, suffix: ".jobctl-meta.json") == Self.olderHiddenName(second, suffix: ".jobctl-meta.json"),
                "the pair collides in the older form")
        let (directory, buckets, backend) = try localBuckets("jobctl-longnames", making: "b")
        defer { directory.remove() }

        try await upload(backend, "file://b/" + first, "first", owner: "one")
        try await upload(backend, "file://b/" + second, "second", owner: "two")
        #expect(entries(buckets + "/b").count == 4)
        #expect(try await metadata(backend, "file://b/" + first).customMetadata == ["owner": "one"])
        #expect(try await metadata(backend, "file://b/" + second).customMetadata == ["owner": "two"])
        _ = try finished(await run(backend, JobSpec(kind: .delete, destination: "file://b/" + first)))
        #expect(try await metadata(backend, "file://b/" + second).customMetadata == ["owner": "two"])
        #expect(entries(buckets + "/b").count == 2)
    }

    /// A bucket written by an older jobctl keeps its long names' sidecars under the cut name: read as
    /// before, and moved to the current name by the next write of the metadata.
    @Test("a sidecar an older jobctl wrote under the cut name is still read, and moved to the current name by the next write")
    func anOlderSidecarIsReadAndMovedOnTheNextWrite() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-longnames", making: "b")
        defer { directory.remove() }
        let reference = "file://b/" + Self.long
        let folder = buckets + "/b"
        try await upload(backend, reference, "old bucket", owner: "then")
        // As an older jobctl left it: the sidecar at the cut name.
        let older = Self.olderHiddenName(Self.long, suffix: ".jobctl-meta.json")
        let written = try #require(entries(folder).first { $0.hasSuffix(".jobctl-meta.json") })
        if written != older { try FileManager.default.moveItem(atPath: folder + "/" + written, toPath: folder + "/" + older) }
        #expect(entries(folder) == [older, Self.long])

        let read = try await metadata(backend, reference)
        #expect(read.customMetadata == ["owner": "then"] && read.crc32c == hashes(Data("old bucket".utf8)).crc32c, "\(read)")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: reference)))
        #expect(downloaded.verified == [.crc32c])

        let updated = try finished(await run(backend, JobSpec(kind: .updateMetadata, destination: reference,
                                                              metadata: UploadMetadata(customMetadata: ["more": "now"]))))
        #expect(updated.object?.customMetadata == ["owner": "then", "more": "now"])
        #expect(updated.object?.metageneration == "2")
        let after = entries(folder)
        #expect(after.count == 2 && !after.contains(older), "moved, not copied: \(after.map { $0.suffix(40) })")
        #expect(try await metadata(backend, reference).customMetadata == ["owner": "then", "more": "now"])

        // Deleting the object takes an older sidecar with it too.
        let current = try #require(after.first { $0.hasSuffix(".jobctl-meta.json") })
        if current != older { try FileManager.default.moveItem(atPath: folder + "/" + current, toPath: folder + "/" + older) }
        _ = try finished(await run(backend, JobSpec(kind: .delete, destination: reference)))
        #expect(entries(folder).isEmpty, "\(entries(folder))")
    }

    /// The cut name an older jobctl gave a long name's sidecar is also the cut-form object's own sidecar
    /// name: a sidecar found there that names the other object (one from before sidecars named their
    /// file, which the file's identity cannot tell apart) is not the long name's, and is left alone.
    @Test("a sidecar at the older cut name that names another object is neither believed nor removed")
    func anOlderNamedSidecarOfAnotherObjectIsNotBelieved() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-longnames", making: "b")
        defer { directory.remove() }
        let folder = buckets + "/b"
        let cut = Self.cutForm(Self.long)
        try await upload(backend, "file://b/" + cut, "I am B", owner: "bob")
        let sidecar = folder + "/." + cut + ".jobctl-meta.json"
        // B's sidecar as a jobctl before sidecars named their file wrote it.
        var json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: sidecar))) as? [String: Any])
        #expect(json["name"] as? String == cut)
        json["objectFile"] = nil
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: sidecar))
        try Data("I am A".utf8).write(to: URL(fileURLWithPath: folder + "/" + Self.long))

        let readA = try await metadata(backend, "file://b/" + Self.long)
        #expect(readA.customMetadata == nil && readA.crc32c == nil, "B's sidecar read as A's: \(readA)")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/" + Self.long)))
        #expect(downloaded.data == Data("I am A".utf8) && downloaded.verified == [])
        #expect(try await metadata(backend, "file://b/" + cut).customMetadata == ["owner": "bob"])

        _ = try finished(await run(backend, JobSpec(kind: .delete, destination: "file://b/" + Self.long)))
        #expect(try await metadata(backend, "file://b/" + cut).customMetadata == ["owner": "bob"])
        #expect(entries(folder) == ["." + cut + ".jobctl-meta.json", cut])
    }

    /// An upload session and a sidecar temporary an older jobctl named with the cut form are the job's
    /// leftovers still, and the session is resumed.
    @Test("an upload session an older jobctl named with the cut form is resumed, and found by the sweep")
    func anOlderSessionIsResumedAndSwept() async throws {
        let (directory, buckets, _) = try localBuckets("jobctl-longnames", making: "b")
        defer { directory.remove() }
        let folder = buckets + "/b"
        let reference = "file://b/" + Self.long
        let job = JobID.generate()
        let bytes = Data((0..<(3 * 1024 * 1024 + 5)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let spec = JobSpec(kind: .uploadData, destination: reference, data: bytes)
        let paused = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets), checkpointInterval: 1024 * 1024)
        let control = TransferControl(jobID: job, leaseToken: 3)
        let stopping = EventRecorder { event in if case .checkpoint = event { control.stop(.pause) } }
        guard case .success(.stopped(.pause, let point?)) = await run(paused, spec, control: control, recorder: stopping),
              case .upload(let uri, let offset, let total, let stamp) = point, let session = LocalUploadSession(uri: uri) else {
            Issue.record("the upload did not pause at its checkpoint")
            return
        }
        // As an older jobctl named it, and its resume point with it.
        let olderName = Self.olderHiddenName(Self.long, suffix: ".\(job).3.jobctl-upload")
        if LocalFiles.lastComponent(session.path) != olderName {
            try FileManager.default.moveItem(atPath: session.path, toPath: folder + "/" + olderName)
        }
        let olderPoint = ResumePoint.upload(sessionURI: LocalUploadSession(path: folder + "/" + olderName, identity: session.identity).uri,
                                            confirmedOffset: offset, total: total, source: stamp)

        // The sweep of the job, were it final now, finds it by its name.
        let files = JobLocalFiles(jobID: job, kind: .uploadData, destination: reference, resumePoint: nil,
                                  finishedAtMs: Clock.nowMs() + 1_000, leaseTokens: [3])
        #expect(LeftoverFiles(localBucketsDirectory: buckets).find(files).map(\.path) == [folder + "/" + olderName])
        // A sidecar temporary an older jobctl named so too.
        let temporary = Self.olderHiddenName(Self.long, suffix: ".jobctl-meta.json.\(job).3.jobctl-meta.tmp")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: folder + "/" + temporary))
        #expect(Set(LeftoverFiles(localBucketsDirectory: buckets).find(files).map(\.path))
                    == [folder + "/" + olderName, folder + "/" + temporary])
        try FileManager.default.removeItem(atPath: folder + "/" + temporary)

        let resumed = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets), checkpointInterval: 1024 * 1024)
        let result = try finished(await run(resumed, spec, resume: olderPoint, control: TransferControl(jobID: job, leaseToken: 4)))
        #expect(resumed.statistics.sourceBytesRead == Int64(bytes.count) - offset, "the session was continued, not restarted")
        #expect(result.crc32c == hashes(bytes).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + Self.long)) == bytes)
        #expect(entries(folder).count == 2, "\(entries(folder).map { $0.suffix(40) })")
    }
}
