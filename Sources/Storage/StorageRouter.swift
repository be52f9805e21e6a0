import Foundation
import JobModel

/// The storage backend the worker uses: sends each job to the backend for its remote reference's scheme
/// (`gs` → GCS JSON API, `file` → local directories, `http(s)` → plain HTTP).
public struct StorageRouter: StorageBackend {
    private let gcs: GCSBackend
    private let local: LocalBackend
    private let http: HTTPBackend

    private let leftoverFiles: LeftoverFiles
    /// The settings' hosts whose Firebase-form URLs are `gs://` objects: a job's reference is routed as
    /// the backend it goes to reads it.
    private let firebaseHosts: FirebaseHosts

    public init(configuration: StorageConfiguration) {
        firebaseHosts = configuration.firebaseHosts
        gcs = GCSBackend(configuration: configuration)
        local = LocalBackend(configuration: configuration)
        http = HTTPBackend(configuration: configuration)
        leftoverFiles = LeftoverFiles(configuration: configuration)
    }

    /// Partial downloads (whatever the source's scheme), `file://` upload sessions and sidecar temporaries,
    /// named buckets included.
    public func leftovers(of job: JobLocalFiles, sparing inUse: Set<String>) -> [LeftoverFile] {
        leftoverFiles.find(job, sparing: inUse)
    }

    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let reference = try spec.remoteReference(firebaseHosts: firebaseHosts)
        switch reference.scheme {
        case .gs: return try await gcs.perform(spec, resumingFrom: resumePoint, control: control, report: report)
        case .file: return try await local.perform(spec, parsed: reference, resumingFrom: resumePoint, control: control, report: report)
        case .http, .https:
            return try await http.perform(spec, parsed: reference, resumingFrom: resumePoint, control: control, report: report)
        }
    }

    /// Routes as the `async` form does; `file://` jobs hand their outcome over from the local I/O queue.
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void,
                        completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        let reference: StorageReference
        do throws(StorageError) {
            reference = try spec.remoteReference(firebaseHosts: firebaseHosts)
        } catch {
            completion(.failure(error))
            return
        }
        switch reference.scheme {
        case .gs: gcs.perform(spec, resumingFrom: resumePoint, control: control, report: report, completion: completion)
        case .file: local.perform(spec, parsed: reference, resumingFrom: resumePoint, control: control, report: report, completion: completion)
        case .http, .https:
            // As the `async` form: the reference parsed here reaches the transfer plan (parsed once).
            let http = http
            completing(completion) { () async throws(StorageError) in
                try await http.perform(spec, parsed: reference, resumingFrom: resumePoint, control: control, report: report)
            }
        }
    }
}
