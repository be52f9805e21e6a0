import Foundation
import JobLifecycle
import JobModel
import Storage
import StorePort
import Worker

extension Commands {
    static let orphans = CommandSpec(
        name: "orphans",
        abstract: "List hidden files that finished jobs left behind (partial downloads, upload sessions, sidecar temporaries).",
        options: [Options.removeOrphans, Options.json.help("Print the files as JSON.")],
        discussion: """
        A job that ends failed or cancelled leaves nothing behind; what a crashed worker or a job cancelled
        while no worker ran it leaves (.NAME.<job id>.jobctl-partial beside a download's destination, or
        .NAME.<job id>.<lease token>.jobctl-partial for an attempt that found it held by a frozen one,
        .NAME.<job id>.<lease token>.jobctl-upload and
        .NAME.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp beside a file:// object) is removed by the next worker's sweep (at start, of the jobs finished
        since the last complete sweep; every 5 minutes; before a draining worker exits).
        This command looks at every final job and lists what a sweep would remove:
        only files the event log ties to a final job, by the job id in their name (with the token of one
        of its claims, for an attempt's own partial download, an upload session or a sidecar temporary) or the identity (device and inode) it recorded; a file
        merely named like ours is never listed. The log is only read. Named local
        buckets are found as the worker finds them (JOBCTL_BUCKETS, else buckets/ beside the database).
        """
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        let storage: StorageConfiguration
        do throws(StorageError) {
            storage = try context.storageConfiguration()
        } catch { throw CommandFailure(error.message) }
        let backend = StorageRouter(configuration: storage)
        let found = try Orphans.find(in: store, backend: backend)
        let remove = arguments[Options.removeOrphans]
        var views: [OrphanView] = []
        var failed = 0
        for orphan in found {
            var removed: Bool?
            if remove {
                removed = backend.remove(orphan.file)
                if removed == false { failed += 1 }
            }
            views.append(OrphanView(orphan, removed: removed))
        }
        if arguments[Options.json] {
            emit(try jsonText(views))
        } else if views.isEmpty {
            emitError("no leftover files of finished jobs")
        } else {
            let rows = views.map { view in
                [view.jobID, view.state, view.kind, ByteSize.format(view.size), view.path]
                    + (remove ? [view.removed == true ? "removed" : "not removed (changed meanwhile)"] : [])
            }
            let columns = [TableColumn("JOB"), TableColumn("STATE"), TableColumn("KIND", dropRank: 1), TableColumn("SIZE"),
                           TableColumn("PATH", fit: .elide(minimum: 24))] + (remove ? [TableColumn("RESULT")] : [])
            emit(renderTable(columns, rows, width: context.width).text)
        }
        return failed == 0 ? ExitCode.ok : ExitCode.failure
    }
}

/// A leftover file as `orphans --json` prints it.
struct OrphanView: Encodable {
    let jobID: String
    let state: String
    let kind: String
    let path: String
    let size: Int64
    /// With `--remove`: whether the file was removed (false: it changed or vanished since it was listed).
    let removed: Bool?

    init(_ orphan: Orphan, removed: Bool?) {
        jobID = orphan.file.jobID
        state = orphan.jobState.rawValue
        kind = orphan.file.kind.rawValue
        path = orphan.file.path
        size = orphan.file.size
        self.removed = removed
    }

    enum CodingKeys: String, CodingKey {
        case state, kind, path, size, removed
        case jobID = "job_id"
    }
}
