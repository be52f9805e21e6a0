import Foundation
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// `--metrics`' probes: `/healthz` (alive: the worker's loop turns) and `/readyz` (takes work: alive,
/// not stopping, its store answering), as a supervisor's probe reads them.
@Suite("health probes") struct HealthProbeTests {
    @Test func aliveWhileTheLoopTurnsReadyWhileTheStoreAnswersAndItIsNotStopping() {
        let health = WorkerHealth(nowMs: 0)
        // Starting: alive (not yet for a stall's length), not ready.
        #expect(health.live(nowMs: 1_000) == (true, "ok: starting\n"))
        #expect(health.ready(storeUp: true, nowMs: 1_000) == (false, "not ready: starting\n"))
        #expect(health.live(nowMs: WorkerHealth.stalledAfterMs + 1).ok == false)
        health.loopTurned(nowMs: 2_000)
        #expect(health.live(nowMs: 3_000) == (true, "ok\n"))
        #expect(health.ready(storeUp: true, nowMs: 3_000) == (true, "ready\n"))
        #expect(health.ready(storeUp: false, nowMs: 3_000) == (false, "not ready: the store did not answer in time\n"))
        // A loop that stopped turning: neither alive nor ready, saying for how long.
        let stalled = health.live(nowMs: 2_000 + WorkerHealth.stalledAfterMs + 1_000)
        #expect(!stalled.ok && stalled.text == "stalled: the worker has not turned its loop for 61 s\n", "\(stalled)")
        #expect(!health.ready(storeUp: true, nowMs: 2_000 + WorkerHealth.stalledAfterMs + 1_000).ok)
        // A store call that may wait longer (a PostgreSQL answer timeout of an hour's lease) lengthens the limit.
        let patient = WorkerHealth(storeWaitMs: 3_600_000, nowMs: 0)
        patient.loopTurned(nowMs: 0)
        #expect(patient.stalledAfterMs == 3_630_000 && patient.live(nowMs: 3_600_000).ok && !patient.live(nowMs: 3_700_000).ok)
        // A turn held past the limit by its store, within the store's own limits (several calls, each
        // queued behind the jobs' own): alive, saying so, and not ready; asked only once past the limit.
        let late = 2_000 + WorkerHealth.stalledAfterMs + 1_000
        #expect(health.live(nowMs: late, waitingOnStore: { true })
                    == (true, "ok: its loop waits on the database (61 s), within the limits jobctl sets\n"))
        #expect(health.ready(storeUp: true, nowMs: late, waitingOnStore: { true }) == (false, "not ready: its loop waits on the database (61 s)\n"))
        #expect(health.live(nowMs: 3_000, waitingOnStore: { Issue.record("asked while the loop turns"); return false }) == (true, "ok\n"))
        health.loopTurned(nowMs: 70_000)
        health.stopping()
        #expect(health.live(nowMs: 70_100).ok)
        #expect(health.ready(storeUp: true, nowMs: 70_100) == (false, "not ready: stopping (finishing or pausing its transfers)\n"))
    }

    /// The server answers the probes with 200 or 503 and the probe's line, to GET and HEAD; other methods 405.
    @Test func theServerAnswersTheProbes() throws {
        let port = freeLoopbackPort()
        let ready = Mutex(true)
        let server = try MetricsServer(address: try MetricsAddress(parsing: "127.0.0.1:\(port)"), body: { "up 1\n" }, probe: { probe in
            switch probe {
            case .live: (true, "ok\n")
            case .ready: ready.withLock { $0 } ? (true, "ready\n") : (false, "not ready: stopping\n")
            }
        })
        try server.start()
        defer { server.stop() }
        func curl(_ arguments: [String]) throws -> String {
            let output = try runProcess("/usr/bin/curl", ["-s", "--max-time", "10", "-w", "|%{http_code}"] + arguments)
            return output.stdout
        }
        let base = "http://127.0.0.1:\(port)"
        #expect(try curl(["\(base)/healthz"]) == "ok\n|200")
        #expect(try curl(["\(base)/readyz"]) == "ready\n|200")
        ready.withLock { $0 = false }
        #expect(try curl(["\(base)/readyz"]) == "not ready: stopping\n|503")
        #expect(try curl(["-I", "\(base)/readyz"]).hasPrefix("HTTP/1.1 503 Service Unavailable"))
        #expect(try curl(["-X", "POST", "\(base)/healthz"]) == "only GET and HEAD\n|405")
        #expect(try curl(["\(base)/healthz?verbose=1"]) == "ok\n|200")
        #expect(try curl(["\(base)/metrics"]) == "up 1\n|200")
        #expect(try curl(["\(base)/other"]).hasSuffix("|404"))
    }
}

/// Whether the store takes the worker's writes, from the failures and successes of those writes.
@Suite("store writes for readiness") struct StoreWritesTests {
    @Test func aStreakOfFailuresSpanningThreeSecondsRefusesUntilAWriteSucceeds() {
        let writes = StoreWrites()
        let full = StoreError.io("database or disk is full (SQLite code 13)")
        // One failure, however long ago, is a blip; so are failures that end within the span.
        writes.failed(full, nowMs: 0)
        #expect(writes.refusal() == nil)
        writes.failed(full, nowMs: 2_999)
        #expect(writes.refusal() == nil)
        writes.failed(full, nowMs: 3_000)
        let refusal = writes.refusal()
        #expect(refusal == StoreWrites.Refusal(reason: .diskFull, sqlstate: nil, sinceMs: 0, failures: 3))
        let health = WorkerHealth(nowMs: 0)
        health.loopTurned(nowMs: 4_000)
        #expect(health.ready(storeUp: true, writesRefused: refusal, nowMs: 5_500)
            == (false, "not ready: store refuses writes: disk_full (the database's disk is full); 3 failed in a row, none succeeded for 5 s\n"))
        // A refusal of one event (the store took the write and said no) neither starts nor ends a streak.
        writes.failed(StoreError.staleLease(jobID: "j", token: 1), nowMs: 3_100)
        #expect(writes.refusal()?.failures == 3)
        // An empty claim writes nothing: with jobs held it says nothing; with none it is the worker's write.
        writes.claimFoundNothing(held: 2)
        #expect(writes.refusal() != nil)
        writes.claimFoundNothing(held: 0)
        #expect(writes.refusal() == nil)
        writes.failed(StoreError.server(sqlstate: "25006", message: "x"), nowMs: 10_000)
        writes.failed(StoreError.readOnly("cannot execute UPDATE in a read-only transaction"), nowMs: 14_000)
        #expect(writes.refusal()?.reason == .readOnly)
        writes.succeeded()
        #expect(writes.refusal() == nil)
        #expect(writes.failureCounts == [.diskFull: 3, .readOnly: 2])
    }

    @Test(arguments: [
        (StoreError.io("database or disk is full (SQLite code 13)"), StoreWriteFailure.diskFull),
        (.io("disk I/O error: No space left on device (SQLite code 4874)"), .diskFull),
        (.io("disk I/O error: File too large; 'x' reached this process's file size limit (SQLite code 778)"), .fileSizeLimit),
        (.io("disk I/O error (SQLite code 10)"), .io),
        (.server(sqlstate: "53100", message: "could not extend file"), .diskFull),
        (.server(sqlstate: "42501", message: "permission denied for table events"), .permission),
        (.server(sqlstate: "57014", message: "canceling statement due to statement timeout"), .server),
        (.unreachable("the connection to PostgreSQL was lost"), .unreachable),
        (.commitUnconfirmed("the connection was lost during COMMIT"), .unreachable),
        (.busy(sql: nil), .busy),
        (.syncFailed("fdatasync: EIO"), .damaged),
    ])
    func failuresAreNamedByKind(_ error: StoreError, _ kind: StoreWriteFailure) {
        #expect(StoreWriteFailure(error) == kind)
    }

    @Test func refusalsOfOneWriteAreNoFailureOfTheStore() {
        for error in [StoreError.staleLease(jobID: "j", token: 1), .versionConflict(expected: 1, actual: 2),
                      .serverRefused(sqlstate: "23514", message: "check"), .tooLarge("1 GB")] {
            #expect(StoreWriteFailure(error) == nil, "\(error)")
        }
    }
}
