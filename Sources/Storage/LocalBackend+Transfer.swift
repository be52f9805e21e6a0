import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// One local job, run synchronously on the backend's I/O queue. Not `Sendable`: it owns open files.
final class LocalTransfer {
    private let backend: LocalBackend
    private let spec: JobSpec
    private let resumePoint: ResumePoint?
    private let control: TransferControl
    private let report: @Sendable (TransferEvent) -> Void
    private let buffer: UnsafeMutableRawBufferPointer

    static let sessionPrefix = "file-session:"

    init(backend: LocalBackend, spec: JobSpec, resumePoint: ResumePoint?, control: TransferControl,
         report: @escaping @Sendable (TransferEvent) -> Void) {
        self.backend = backend
        self.spec = spec
        self.resumePoint = resumePoint
        self.control = control
        self.report = report
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalFiles.bufferSize, alignment: 16)
    }

    deinit { buffer.deallocate() }

    func run() throws(StorageError) -> TransferOutcome {
        switch spec.kind {
        case .uploadFile, .uploadData: try upload()
        case .downloadFile: try downloadFile()
        case .downloadMemory: try downloadMemory()
        case .fetchURL: try fetchURL()
        }
    }

    private func reference(_ text: String?, _ field: String) throws(StorageError) -> StorageReference {
        guard let text else { throw StorageError(.invalidArgument, "\(spec.kind.rawValue) needs a \(field) reference") }
        return try StorageReference(parsing: text)
    }

    // MARK: - Upload

    /// Where upload bytes come from: a file read through the buffer, or inline data.
    private enum Source {
        case file(LocalFile)
        case data(Data)
    }

    private func upload() throws(StorageError) -> TransferOutcome {
        let reference = try reference(spec.destination, "destination")
        let source: Source
        let total: Int64
        var sourceName: String?
        if spec.kind == .uploadFile {
            guard let path = spec.source else { throw StorageError(.invalidArgument, "upload-file needs a source path") }
            sourceName = LocalFiles.lastComponent(path)
            try backend.policy.check(reference: reference, sourceName: sourceName)
            let file = try LocalFile(path: path, flags: O_RDONLY, context: .source)
            let status = try file.status()
            guard !status.isDirectory else {
                throw StorageError(.invalidArgument, "source '\(path)' is a directory: upload-file takes one regular file")
            }
            source = .file(file)
            total = status.size
        } else {
            guard let data = spec.data else { throw StorageError(.invalidArgument, "upload-data needs data") }
            try backend.policy.check(reference: reference, sourceName: nil)
            source = .data(data)
            total = Int64(data.count)
        }

        var location = try backend.locate(reference, creatingBucket: true)
        try LocalFiles.makeDirectories(location.directory)
        // Re-resolve now that the directories exist, so a link created meanwhile is still caught.
        location = try backend.locate(reference, creatingBucket: false)

        let hashes = StreamingHashes()
        let (temp, offset) = try openUploadSession(for: location, total: total, hashes: hashes)
        let session = LocalTransfer.sessionPrefix + temp.path
        if case .file(let file) = source { try file.seek(to: offset) }

        var done = offset
        var lastCheckpoint = offset
        report(.progress(bytesDone: done, bytesTotal: total))
        while done < total {
            if let reason = control.stopReason {
                if reason == .cancel {
                    temp.close()
                    LocalFiles.remove(temp.path)
                    return .stopped(.cancel, nil)
                }
                try temp.sync()
                return .stopped(reason, .upload(sessionURI: session, confirmedOffset: done, total: total))
            }
            let want = Int(min(Int64(buffer.count), total - done))
            let chunk: UnsafeRawBufferPointer
            switch source {
            case .file(let file):
                let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
                guard count > 0 else {
                    throw StorageError(.invalidArgument, "source '\(spec.source ?? "")' shrank during the upload "
                                       + "(expected \(total) bytes, found \(done)): upload it again once it stops changing")
                }
                chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            case .data(let data):
                let start = Int(done)
                // Copy through the buffer so the code path matches the file case.
                data.withUnsafeBytes { bytes in
                    UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[start..<(start + want)]))
                }
                chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<want])
            }
            backend.statistics.addSourceBytes(chunk.count)
            do {
                try temp.write(chunk)
            } catch {
                discardOnDiskFull(error, temp)
                throw error
            }
            hashes.update(chunk)
            done += Int64(chunk.count)
            report(.progress(bytesDone: done, bytesTotal: total))
            if done - lastCheckpoint >= backend.checkpointInterval && done < total {
                try temp.sync()
                lastCheckpoint = done
                report(.checkpoint(.upload(sessionURI: session, confirmedOffset: done, total: total), bytesTotal: total))
            }
        }

        let (md5, crc32c) = hashes.finish()
        let now = Date()
        let time = LocalFiles.timestamp(now)
        let metadata = spec.metadata
        let contentType = ContentTypes.forUpload(spec, destination: reference)
        let object = StorageObject(
            bucket: reference.bucket, name: reference.fullPath, size: total, contentType: contentType,
            cacheControl: metadata?.cacheControl, contentDisposition: metadata?.contentDisposition,
            contentEncoding: metadata?.contentEncoding, contentLanguage: metadata?.contentLanguage,
            customMetadata: metadata?.customMetadata, md5Hash: md5, crc32c: crc32c,
            generation: String(Int64((now.timeIntervalSince1970 * 1_000_000).rounded())), metageneration: "1",
            timeCreated: time, updated: time)

        let sidecar = backend.prepareMetadata(object, for: location)
        do {
            try temp.sync()
            temp.close()
            try backend.writeFile(sidecar.data, to: sidecar.path)
        } catch {
            discardOnDiskFull(error, temp)
            throw error
        }
        do {
            try LocalFiles.rename(temp.path, to: location.path)
        } catch {
            LocalFiles.remove(temp.path)
            LocalFiles.remove(sidecar.path)
            throw error
        }
        do {
            try LocalFiles.rename(sidecar.path, to: location.sidecarPath)
        } catch {
            LocalFiles.remove(sidecar.path)
            throw error
        }
        try LocalFiles.syncDirectory(location.directory)
        return .finished(JobResult(object: object, size: total, md5: md5, crc32c: crc32c))
    }

    /// A full disk ends the job, so its temporary file goes to give the space back.
    private func discardOnDiskFull(_ error: StorageError, _ temp: LocalFile) {
        guard LocalFiles.isDiskFull(error) else { return }
        temp.close()
        LocalFiles.remove(temp.path)
    }

    /// Reopens the session named by an upload resume point (truncated to its confirmed offset, prefix
    /// re-hashed from the temp file) when it belongs to this object and source size; else starts a new one.
    private func openUploadSession(for location: LocalLocation, total: Int64,
                                   hashes: StreamingHashes) throws(StorageError) -> (LocalFile, Int64) {
        let sessionName = { (path: String) -> Bool in
            LocalFiles.directory(of: path) == location.directory
                && LocalFiles.lastComponent(path).hasPrefix("." + location.name + ".")
                && path.hasSuffix(".jobctl-upload")
        }
        if case .upload(let uri, let offset, let recordedTotal)? = resumePoint, uri.hasPrefix(LocalTransfer.sessionPrefix) {
            let path = String(uri.dropFirst(LocalTransfer.sessionPrefix.count))
            if sessionName(path) {
                if recordedTotal == nil || recordedTotal == total, offset <= total,
                   let file = try? LocalFile(path: path, flags: O_RDWR, context: .destination),
                   let size = try? file.status().size, size >= offset {
                    try file.truncate(to: offset)
                    try rehash(file, upTo: offset, into: hashes)
                    try file.seek(to: offset)
                    return (file, offset)
                }
                // The source changed size or the session is gone: its bytes are useless now.
                LocalFiles.remove(path)
            }
        }
        let random = UUID().uuidString.prefix(12).lowercased()
        let path = location.directory + "/." + location.name + "." + random + ".jobctl-upload"
        let file = try LocalFile(path: path, flags: O_WRONLY | O_CREAT | O_EXCL, context: .destination)
        return (file, 0)
    }

    private func rehash(_ file: LocalFile, upTo length: Int64, into hashes: StreamingHashes) throws(StorageError) {
        try file.seek(to: 0)
        var remaining = length
        while remaining > 0 {
            let want = Int(min(Int64(buffer.count), remaining))
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else {
                throw StorageError(.internalError, "upload session '\(file.path)' is shorter than its confirmed offset")
            }
            hashes.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            remaining -= Int64(count)
        }
    }

    // MARK: - Downloads

    /// The object, open for reading, with its metadata.
    private func openObject() throws(StorageError) -> (LocalFile, StorageObject, LocalLocation) {
        let reference = try reference(spec.source, "source")
        let location = try backend.locate(reference, creatingBucket: false)
        let file = try LocalFile(path: location.path, flags: O_RDONLY, context: .object)
        let status = try file.status()
        guard status.isRegular else {
            throw StorageError(.objectNotFound, "object '\(reference)' does not exist ('\(location.path)' is not a regular file)")
        }
        let object = try backend.readMetadata(location, size: status.size, modifiedMicros: status.modifiedMicros)
        var current = object
        current.size = status.size
        return (file, current, location)
    }

    private func verify(_ object: StorageObject, md5: String, crc32c: String) throws(StorageError) {
        if let expected = object.md5Hash, expected != md5 {
            throw StorageError(.nonMatchingChecksum,
                               "MD5 of the downloaded bytes (\(md5)) differs from the object's (\(expected)): "
                                   + "the object or its metadata is corrupt; the copy was removed")
        }
        if let expected = object.crc32c, expected != crc32c {
            throw StorageError(.nonMatchingChecksum,
                               "CRC32C of the downloaded bytes (\(crc32c)) differs from the object's (\(expected)): "
                                   + "the object or its metadata is corrupt; the copy was removed")
        }
    }

    private func downloadFile() throws(StorageError) -> TransferOutcome {
        guard let destination = spec.destination else {
            throw StorageError(.invalidArgument, "download-file needs a destination path")
        }
        let (file, object, _) = try openObject()
        let total = object.size
        var resume = resumePoint
        if case .download(_, let generation, _, _)? = resume, generation != object.generation {
            resume = nil  // The object changed since the pause: its prefix would be stale.
        }
        var partial = try PartialFile(destination: destination, resumeFrom: resume)
        if partial.bytesWritten > total {
            partial.discard()
            partial = try PartialFile(destination: destination, resumeFrom: nil)
        }
        let hashes = StreamingHashes()
        try partial.readBack { hashes.update($0) }
        try file.seek(to: partial.bytesWritten)

        let checkpoint = { (partial: PartialFile) -> ResumePoint in
            .download(bytesWritten: partial.bytesWritten, generation: object.generation, etag: nil, tempPath: partial.tempPath)
        }
        var lastCheckpoint = partial.bytesWritten
        report(.progress(bytesDone: partial.bytesWritten, bytesTotal: total))
        while partial.bytesWritten < total {
            if let reason = control.stopReason {
                if reason == .cancel {
                    partial.discard()
                    return .stopped(.cancel, nil)
                }
                try partial.sync()
                return .stopped(reason, checkpoint(partial))
            }
            let want = Int(min(Int64(buffer.count), total - partial.bytesWritten))
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else {
                partial.discard()
                throw StorageError(.objectNotFound, "object '\(spec.source ?? "")' shrank while it was read: download it again",
                                   retryable: true)
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            try partial.write(chunk)
            hashes.update(chunk)
            report(.progress(bytesDone: partial.bytesWritten, bytesTotal: total))
            if partial.bytesWritten - lastCheckpoint >= backend.checkpointInterval && partial.bytesWritten < total {
                try partial.sync()
                lastCheckpoint = partial.bytesWritten
                report(.checkpoint(checkpoint(partial), bytesTotal: total))
            }
        }
        let (md5, crc32c) = hashes.finish()
        do {
            try verify(object, md5: md5, crc32c: crc32c)
        } catch {
            partial.discard()
            throw error
        }
        let path = try partial.commit()
        return .finished(JobResult(object: object, path: path, size: total, md5: md5, crc32c: crc32c))
    }

    private func downloadMemory() throws(StorageError) -> TransferOutcome {
        let maximum = spec.maxSize ?? JobSpec.defaultMaxSize
        let (file, object, location) = try openObject()
        let total = object.size
        guard total <= maximum else {
            throw StorageError(.downloadSizeExceeded,
                               "object '\(location.reference)' is \(total) bytes, more than max_size \(maximum): "
                                   + "raise max_size or use download-file",
                               total: total, maximum: maximum)
        }
        var data = Data()
        data.reserveCapacity(Int(total))
        let hashes = StreamingHashes()
        report(.progress(bytesDone: 0, bytesTotal: total))
        while Int64(data.count) < total {
            // Bytes in memory do not survive the process, so a stopped in-memory download has no resume
            // point: it stops at once and the next attempt starts over.
            if let reason = control.stopReason { return .stopped(reason, nil) }
            let want = Int(min(Int64(buffer.count), total - Int64(data.count)))
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else {
                throw StorageError(.objectNotFound, "object '\(location.reference)' shrank while it was read: download it again",
                                   retryable: true)
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            data.append(contentsOf: chunk)
            hashes.update(chunk)
            report(.progress(bytesDone: Int64(data.count), bytesTotal: total))
        }
        let (md5, crc32c) = hashes.finish()
        try verify(object, md5: md5, crc32c: crc32c)
        return .finished(JobResult(object: object, size: total, md5: md5, crc32c: crc32c, data: data))
    }

    // MARK: - Download URL

    private func fetchURL() throws(StorageError) -> TransferOutcome {
        let (file, initial, location) = try openObject()
        // The object's lock serialises token creation across worker processes: exactly one token is made.
        try file.lockExclusive()
        var object = initial
        if let status = try? file.status() {
            object = try backend.readMetadata(location, size: status.size, modifiedMicros: status.modifiedMicros)
        }
        var token = object.downloadTokens?.split(separator: ",").first.map {
            String($0).trimmingCharacters(in: .whitespaces)
        }
        if token?.isEmpty ?? true {
            let created = UUID().uuidString.lowercased()
            token = created
            object.downloadTokens = created
            object.metageneration = String((Int(object.metageneration ?? "1") ?? 1) + 1)
            object.updated = LocalFiles.timestamp()
            try backend.writeMetadata(object, to: location)
            try LocalFiles.syncDirectory(location.directory)
        }
        let url = "file://" + StorageReference.percentEncode(location.path, keepSlash: true) + "?token=" + (token ?? "")
        return .finished(JobResult(object: object, url: url))
    }
}
