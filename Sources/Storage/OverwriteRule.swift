import Foundation
import JobModel

/// The job's `if_exists:` as the transfers apply it. `fail` is checked twice: up front (so no bytes
/// move for nothing) and again in the write itself (`linkat` on disk, `ifGenerationMatch=0` on GCS,
/// `If-None-Match: *` over HTTP), which is what makes the rule hold against a concurrent writer.
struct OverwriteRule {
    let mode: IfExists

    init(_ spec: JobSpec) {
        mode = spec.ifExists ?? .overwrite
    }

    /// Whether the final write may replace what is at the destination.
    var replaces: Bool { mode != .fail }

    /// download-file: the outcome when the local destination already exists and the rule settles the
    /// job without a transfer (`skip`), nil when the download goes ahead; throws for `fail`.
    func beforeDownload(to destination: String) throws(StorageError) -> TransferOutcome? {
        guard mode == .skip || mode == .fail, PartialFile.destinationExists(destination) else { return nil }
        if mode == .fail { throw StorageError.destinationExists(destination) }
        return .finished(JobResult(path: LocalFiles.absolute(destination), skipped: true))
    }

    /// download-file with `skip-identical`: the outcome when the local destination already holds the
    /// object's bytes — the same size and the CRC32C `crc32c` (base64, as GCS reports it) — nil when the
    /// download goes ahead (another rule, no destination, no CRC32C to compare, or a difference).
    func skipsDownload(of object: StorageObject, crc32c: String?, to destination: String) throws(StorageError) -> TransferOutcome? {
        guard mode == .skipIdentical, let crc32c, PartialFile.destinationExists(destination) else { return nil }
        let path = LocalFiles.absolute(destination)
        // An unreadable or odd destination (a folder, a dangling link) is left to the download to report.
        guard let local = try? UploadSource(path: path), local.size == object.size else { return nil }
        let ours = try OverwriteRule.sizeAndCRC32C(of: local)
        guard ours.crc32c == crc32c else { return nil }
        return .finished(JobResult(object: object, path: path, size: ours.size, crc32c: ours.crc32c, verified: [.crc32c], skipped: true))
    }

    /// Uploads: whether an existing object (`nil` when there is none) makes the upload unnecessary.
    /// `source` gives the local source's size and CRC32C (base64, as GCS reports it), computed only
    /// when `skip-identical` needs them. Throws for `fail` when the object exists.
    func skipsUpload(existing: StorageObject?, destination: String,
                     source: () throws(StorageError) -> (size: Int64, crc32c: String)) throws(StorageError) -> Bool {
        guard let existing else { return false }
        switch mode {
        case .overwrite: return false
        case .skip: return true
        case .fail: throw StorageError.destinationExists(destination)
        case .skipIdentical:
            guard let crc32c = existing.crc32c else { return false }
            let local = try source()
            return local.size == existing.size && local.crc32c == crc32c
        }
    }

    /// `skipsDownload` on `FileIO`'s threads under `skip-identical`, the one rule that reads the local file
    /// (a large file read on the cooperative pool held back every task of the worker, heartbeats included).
    func skipsDownloadOffPool(of object: StorageObject, crc32c: String?, to destination: String) async throws(StorageError) -> TransferOutcome? {
        guard mode == .skipIdentical else { return try skipsDownload(of: object, crc32c: crc32c, to: destination) }
        let rule = self
        return try await FileIO.run(.compare) { () throws(StorageError) -> TransferOutcome? in
            try rule.skipsDownload(of: object, crc32c: crc32c, to: destination)
        }
    }

    /// `skipsUpload` with `source` as the local source, on `FileIO`'s threads under `skip-identical`, the
    /// one rule that reads it.
    func skipsUpload(existing: StorageObject?, destination: String, offPool source: UploadSource) async throws(StorageError) -> Bool {
        guard mode == .skipIdentical else {
            return try skipsUpload(existing: existing, destination: destination) { () throws(StorageError) in
                try OverwriteRule.sizeAndCRC32C(of: source)
            }
        }
        let rule = self
        return try await FileIO.run(.compare, on: source) { source throws(StorageError) -> Bool in
            try rule.skipsUpload(existing: existing, destination: destination) { () throws(StorageError) in
                try OverwriteRule.sizeAndCRC32C(of: source)
            }
        }
    }

    /// The size and base64 CRC32C of an upload's source (for `skip-identical`).
    static func sizeAndCRC32C(of source: UploadSource) throws(StorageError) -> (size: Int64, crc32c: String) {
        (source.size, try source.hashes(streamed: StreamChecksums(md5: false)).crc32c)
    }

    /// The size and base64 CRC32C of `spec`'s source: its file, or its inline data.
    static func sizeAndCRC32C(of spec: JobSpec) throws(StorageError) -> (size: Int64, crc32c: String) {
        if let data = spec.data { return try sizeAndCRC32C(of: UploadSource(data: data)) }
        guard let path = spec.source else { throw StorageError(.invalidArgument, "\(spec.kind.rawValue) needs a source") }
        return try sizeAndCRC32C(of: UploadSource(path: path))
    }

    /// The result of an upload that was skipped: the object as it is.
    static func skippedUpload(_ existing: StorageObject) -> TransferOutcome {
        .finished(JobResult(object: existing, size: existing.size, crc32c: existing.crc32c, skipped: true))
    }
}
