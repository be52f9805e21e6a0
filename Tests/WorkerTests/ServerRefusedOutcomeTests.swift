import Foundation
import JobModel
import PostgresStore
import Testing
import TestSupport

/// A PostgreSQL server that refuses one job's event (a trigger of the operator's raising an error on
/// its row) refuses that event alone: the worker's other jobs, whose outcomes share its group commits,
/// are recorded as if nothing had happened.
@Suite("an event the PostgreSQL server refuses", .onTestThreads) struct ServerRefusedOutcomeTests {
    /// Twelve jobs for one worker running them all at once; a trigger refuses the `succeeded` of one of
    /// them. The other eleven succeed, each written at its first try (no write retried, no store error
    /// for them); the refused job's write is not retried either (the same row is refused again): its run
    /// is given up, and once its lease expires the rescue fails it (its one attempt used). The worker
    /// logs the server's SQLSTATE and message.
    @Test func theOtherJobsOfAWorkerSucceedWhenTheServerRefusesOneJobsOutcome() throws {
        let server = try PostgresServer.shared()
        let roles = try server.makeRoles("pgrefused")
        let migrated = try jobctl(["migrate", "--grant", roles.worker], database: roles.ownerURL)
        try #require(migrated.status == 0, "\(migrated.stderr)")
        let database = roles.workerURL
        let directory = try TemporaryDirectory("pg-refused")
        defer { directory.remove() }
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let count = 12
        let ids = try submit((0..<count).map { "- {kind: upload-data, data: \"job \($0)\", destination: \"file://out/\($0).txt\", max_attempts: 1}" }
                                 .joined(separator: "\n") + "\n", database: database, directory: directory)
        try #require(ids.count == count)
        let refused = ids[count / 2]
        // The operator's own rule on the log, which jobctl's lifecycle knows nothing of.
        let trigger = try server.psql(database: "postgres", user: roles.owner, schema: roles.schema, """
            CREATE FUNCTION refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $f$
            BEGIN
              IF NEW.job_id = '\(refused)' AND NEW.type = 'succeeded' THEN
                RAISE EXCEPTION 'outcome refused by the operator''s rule' USING ERRCODE = 'P0001';
              END IF;
              RETURN NEW;
            END $f$;
            CREATE TRIGGER refuse_outcome BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_outcome()
            """)
        try #require(trigger.status == 0, "\(trigger.stderr)")

        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "\(count)", "--lease", "2", "--log-format", "json"],
                                              environment: environment, logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let store = try PostgresStore(url: database, mode: .readOnly)
        let others = ids.filter { $0 != refused }
        let othersDone = try eventually(seconds: 30) {
            try others.allSatisfy { try store.job($0)?.state == .succeeded }
        }
        let refusedFailed = try eventually(seconds: 30) { try store.job(refused)?.state == .failed }
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 30) == 0, "\(worker.log)")
        let states = try ids.map { try store.job($0)?.state }
        print("states: \(states.map { $0?.rawValue ?? "-" }); write retries logged: "
              + "\(worker.log.components(separatedBy: "retrying the write while the lease holds").count - 1)")
        #expect(othersDone, "\(states) \(worker.log)")
        #expect(refusedFailed, "\(states) \(worker.log)")

        // The others were written at their first try: no write of theirs failed.
        let lines = worker.log.split(separator: "\n")
        for id in others {
            #expect(!lines.contains { $0.contains(id) && $0.contains("\"store_error\"") }, "job \(id): \(worker.log)")
        }
        // The refused job's write was not retried, and the worker said why, with the server's own words.
        #expect(!lines.contains { $0.contains(refused) && $0.contains("retrying the write while the lease holds") }, "\(worker.log)")
        #expect(worker.log.contains("P0001") && worker.log.contains("outcome refused by the operator"), "\(worker.log)")
        for id in others {
            let types = try store.events(jobID: id).map(\.type)
            #expect(types == [.submitted, .claimed, .started, .succeeded], "job \(id): \(types)")
        }
        #expect(!(try store.events(jobID: refused).map(\.type)).contains(.succeeded))
        #expect(try store.replay(verify: true).isConsistent)
    }
}
