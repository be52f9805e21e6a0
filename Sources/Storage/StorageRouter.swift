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

    /// Every outcome leaves here without the secrets of the job's URLs in what a server sent back (see
    /// `withoutURLSecrets`).
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let result: Result<TransferOutcome, StorageError>
        do throws(StorageError) {
            result = .success(try await routed(spec, resumingFrom: resumePoint, control: control, report: report))
        } catch {
            result = .failure(error)
        }
        return try Self.withoutURLSecrets(result, of: spec).get()
    }

    private func routed(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let reference = try spec.remoteReference(firebaseHosts: firebaseHosts)
        switch reference.scheme {
        case .gs: return try await gcs.perform(spec, resumingFrom: resumePoint, control: control, report: report)
        case .file: return try await local.perform(spec, parsed: reference, resumingFrom: resumePoint, control: control, report: report)
        case .http, .https:
            return try await http.perform(spec, parsed: reference, resumingFrom: resumePoint, control: control, report: report)
        }
    }

    /// `result` with the secrets of the job's URLs (`JobSpec.urlSecrets`) replaced in every value a server
    /// sent back that it stores — a result's metadata, an error's message and cause: a server echoing the
    /// request's query into `ETag`, `Content-Type` or `Cache-Control` had `show` print `generation:
    /// "token=…"`, as no URL is around such a value for the display's redaction to find.
    static func withoutURLSecrets(_ result: Result<TransferOutcome, StorageError>, of spec: JobSpec) -> Result<TransferOutcome, StorageError> {
        let secrets = spec.urlSecrets
        guard !secrets.isEmpty else { return result }
        switch result {
        case .success(.finished(let produced)): return .success(.finished(produced.withoutSecrets(secrets)))
        case .success(let other): return .success(other)
        case .failure(let error): return .failure(error.withoutSecrets(secrets))
        }
    }

    /// Routes as the `async` form does; `file://` jobs hand their outcome over from the local I/O queue.
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void,
                        completion outcome: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        let completion: @Sendable (Result<TransferOutcome, StorageError>) -> Void = { outcome(Self.withoutURLSecrets($0, of: spec)) }
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
