import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// `after:` on both engines: a job is not claimed before its dependencies succeeded; when one ends
/// failed or cancelled, its waiting dependants (and theirs) end cancelled in the same transaction; the
/// `job_dependencies` rows are rebuilt by replay.
@Suite(.onTestThreads) struct DependencyTests {
    private func spec(key: String, after: [String]? = nil, priority: Int = 0) -> JobSpec {
        var spec = uploadSpec(key: key, priority: priority)
        spec.after = after
        return spec
    }

    /// Claims what is runnable at `now` and returns the ids.
    private func claim(_ fixture: StoreFixture, now: Int64) throws -> [ClaimedJob] {
        try fixture.store.claim(owner: workerName, queues: nil, limit: 10, leaseMs: 30_000, now: now)
    }

    private func finish(_ fixture: StoreFixture, _ claim: ClaimedJob, succeeded: Bool, now: Int64) throws {
        let data = succeeded ? EventData(result: JobResult(size: 1))
            : EventData(error: StorageError(.objectNotFound, "gone", httpStatus: 404))
        try fixture.append(PendingEvent(jobID: claim.record.id, type: succeeded ? .succeeded : .failed, actor: workerName,
                                        leaseToken: claim.token, data: data), now: now)
    }

    @Test(arguments: Engine.allCases)
    func aJobIsClaimedOnlyAfterItsDependencySucceeded(engine: Engine) throws {
        let fixture = try StoreFixture("deps-claim", engine: engine)
        defer { fixture.remove() }
        // The dependant comes first in the batch and has the higher priority: only `after:` holds it back.
        let outcomes = try fixture.store.submit([spec(key: "b", after: ["a"], priority: 9), spec(key: "a")],
                                                actor: "cli:test", now: 1_000)
        let (b, a) = (outcomes[0].id, outcomes[1].id)
        #expect(try fixture.store.job(b)?.spec.after == [a])
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies WHERE job = ? AND depends_on = ?", [.text(b), .text(a)]) == "1")
        let first = try claim(fixture, now: 2_000)
        #expect(first.map(\.record.id) == [a])
        #expect(try claim(fixture, now: 3_000).isEmpty)
        #expect(try fixture.store.replay(verify: true).isConsistent)
        try finish(fixture, try #require(first.first), succeeded: true, now: 4_000)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "0")
        #expect(try claim(fixture, now: 5_000).map(\.record.id) == [b])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// A job that 30,000 jobs wait for could never succeed on SQLite: removing its waits is one DELETE
    /// inside the outcome's savepoint, whose undo journal passed the 4 MiB spill size this process then
    /// set, and SQLite 3.40 failed the spill as "database or disk is full" — the worker retried the
    /// outcome until it gave the job up, its dependants queued forever.
    @Test(arguments: Engine.allCases)
    func aJobThatThirtyThousandJobsWaitForSucceeds(engine: Engine) throws {
        let fixture = try StoreFixture("deps-wide", engine: engine)
        defer { fixture.remove() }
        let count = 30_000
        let specs = [spec(key: "root")] + (1...count).map { spec(key: "d\($0)", after: ["root"]) }
        let root = try fixture.store.submit(specs, actor: "cli:test", now: 1_000)[0].id
        let claimed = try claim(fixture, now: 2_000)
        try #require(claimed.map(\.record.id) == [root])
        try finish(fixture, try #require(claimed.first), succeeded: true, now: 3_000)
        #expect(try fixture.store.job(root)?.state == .succeeded)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "0")
        #expect(try claim(fixture, now: 4_000).count == 10)
    }

    /// A store that found no waits at all while finishing a job (SQLite looks once per transaction and
    /// then skips the DELETE for every job) still removes the waits submitted after that, by another
    /// process (another connection to the file) as much as by itself.
    @Test(arguments: Engine.allCases)
    func waitsSubmittedAfterAJobFinishedWithNoneAreStillRemoved(engine: Engine) throws {
        let fixture = try StoreFixture("deps-later", engine: engine)
        defer { fixture.remove() }
        let lone = try fixture.running(spec(key: "lone"))
        try finish(fixture, lone, succeeded: true, now: 1_500)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "0")
        let submitter: any JobStore = engine == .sqlite ? try EventStore(path: fixture.path) : fixture.store
        let ids = try submitter.submit([spec(key: "a"), spec(key: "b", after: ["a"])], actor: "cli:test", now: 2_000).map(\.id)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "1")
        let a = try #require(try claim(fixture, now: 3_000).first)
        #expect(a.record.id == ids[0])
        try finish(fixture, a, succeeded: true, now: 4_000)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "0")
        #expect(try claim(fixture, now: 5_000).map(\.record.id) == [ids[1]])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    @Test(arguments: Engine.allCases)
    func aFailedDependencyCancelsItsDependantsTransitivelyInOneCommit(engine: Engine) throws {
        let fixture = try StoreFixture("deps-cancel", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try #require(try claim(fixture, now: 2_000).first)
        #expect(claimed.record.id == ids[0])
        try finish(fixture, claimed, succeeded: false, now: 3_000)
        let b = try #require(try fixture.store.job(ids[1]))
        let c = try #require(try fixture.store.job(ids[2]))
        #expect(b.state == .cancelled && c.state == .cancelled)
        #expect(b.error?.code == .cancelled && b.error?.message == "dependency \(ids[0]) (key a) failed")
        #expect(c.error?.message == "dependency \(ids[1]) (key b) was cancelled")
        // In the same transaction as the failure: the same time, and the seqs right after it.
        let failed = try #require(try fixture.store.events(jobID: ids[0]).last)
        let cancelB = try #require(try fixture.store.events(jobID: ids[1]).last)
        let cancelC = try #require(try fixture.store.events(jobID: ids[2]).last)
        #expect(failed.type == .failed && cancelB.type == .cancelled && cancelC.type == .cancelled)
        // Each cancel names its dependency in a field of its own, as read back from the log.
        #expect(cancelB.payload.cancellingDependency == ids[0] && cancelC.payload.cancellingDependency == ids[1])
        // Each cancel's remedy names the job whose failure began it: c's dependency b, opened alone, would
        // only wait for the failed a.
        #expect(cancelB.payload.reason == "`jobctl retry \(ids[0]) --with-dependants` opens it again with its dependency")
        #expect(cancelC.payload.reason == "`jobctl retry \(ids[0]) --with-dependants` opens it again with \(ids[0]), whose end cancelled its dependency",
                "\(cancelC.payload.reason ?? "")")
        #expect([cancelB.atMs, cancelC.atMs] == [failed.atMs, failed.atMs])
        #expect(try [cancelB.seq, cancelC.seq].map { try #require($0) } == [try #require(failed.seq) + 1, try #require(failed.seq) + 2])
        #expect(try fixture.store.replay(verify: true).isConsistent)

        // Retrying the dependency does not revive the dependants; retried too, they wait for it again.
        _ = try fixture.store.control(.retry, id: ids[0], actor: "cli:test", now: 4_000)
        #expect(try fixture.store.job(ids[1])?.state == .cancelled)
        _ = try fixture.store.control(.retry, id: ids[1], actor: "cli:test", now: 4_100)
        let again = try claim(fixture, now: 5_000)
        #expect(again.map(\.record.id) == [ids[0]])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// A plain `retry` of a job whose dependency is still failed or cancelled is refused: it re-queued the
    /// job, which then waited for ever, and nothing said so. The refusal names the dependency and the
    /// retry that opens the job with it (the cascade's first job, `--with-dependants`); a job cancelled by
    /// hand is told to retry it after that. `retry --with-dependants` of such a job is refused the same
    /// way, its dry run and a dry run's plan (`planControl`) too — unless an earlier retry of the dry run
    /// opened the dependency. Once the dependency is open again, the same retries are taken.
    @Test(arguments: Engine.allCases)
    func aDependantIsNotRetriedAloneWhileItsDependencyHasEnded(engine: Engine) throws {
        let fixture = try StoreFixture("deps-retry-alone", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"]),
                                            spec(key: "d"), spec(key: "e", after: ["d"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        let (a, b, c, d, e) = (ids[0], ids[1], ids[2], ids[3], ids[4])
        // e is cancelled by hand, then d: e's cancel names no dependency.
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: e, actor: "cli:test", now: 1_500)
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: d, actor: "cli:test", now: 1_600)
        let claimed = try #require(try claim(fixture, now: 2_000).first { $0.record.id == a })
        try finish(fixture, claimed, succeeded: false, now: 3_000)
        #expect(try [b, c, e].map { try fixture.store.job($0)?.state } == [.cancelled, .cancelled, .cancelled])
        let versions = try ids.map { try fixture.store.job($0)?.version }

        func refusal(_ body: () throws -> Void) -> String {
            do { try body() } catch { return "\(error)" }
            return "taken"
        }
        let forB = "job \(b) still waits for \(a) (key a), which failed; retried alone, it could never run: "
            + "`jobctl retry \(a) --with-dependants` opens it again with \(a)"
        let forC = "job \(c) still waits for \(b) (key b), which was cancelled; retried alone, it could never run: "
            + "`jobctl retry \(a) --with-dependants` opens it again with \(a)"
        let forE = "job \(e) still waits for \(d) (key d), which was cancelled; retried alone, it could never run: "
            + "`jobctl retry \(d) --with-dependants` first, then `jobctl retry \(e)`"
        #expect(refusal { _ = try fixture.store.control(.retry, id: b, actor: "cli:test", now: 4_000) } == forB)
        #expect(refusal { _ = try fixture.store.control(.retry, id: c, actor: "cli:test", now: 4_000) } == forC)
        #expect(refusal { _ = try fixture.store.control(.retry, id: e, actor: "cli:test", now: 4_000) } == forE)
        for dryRun in [false, true] {
            #expect(refusal { _ = try fixture.store.retryWithDependants(id: b, actor: "cli:test", now: 4_000, ifStateIn: nil,
                                                                       dryRun: dryRun) } == forB, "dry run: \(dryRun)")
        }
        #expect(refusal { _ = try fixture.store.planControl(.retry, id: b, now: 4_000, openedBefore: []) } == forB)
        // Nothing changed, and no job can be claimed.
        #expect(try ids.map { try fixture.store.job($0)?.version } == versions)
        #expect(try claim(fixture, now: 4_500).isEmpty)

        // A dry run whose earlier retry opened a takes b's retry as the real run would.
        #expect(try fixture.store.planControl(.retry, id: b, now: 4_000, openedBefore: [a]).events.map(\.payload.type) == [.retried])
        // The remedies named: each job opens, and waits for its dependency again.
        let reopened = try #require(try fixture.store.retryWithDependants(id: a, actor: "cli:test", now: 5_000, ifStateIn: nil,
                                                                          dryRun: false).result)
        #expect(reopened.reopened.map(\.id) == [b, c])
        _ = try fixture.store.control(.retry, id: d, actor: "cli:test", now: 5_100)
        #expect(try fixture.store.control(.retry, id: e, actor: "cli:test", now: 5_200).record.state == .queued)
        #expect(Set(try claim(fixture, now: 6_000).map(\.record.id)) == [a, d])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// A job submitted after its dependency was cancelled by a cascade is cancelled at once, and its
    /// remedy names the job whose failure began the cascade, as the cascade's own cancels do: the
    /// dependency, opened with its dependants, would only wait for that failed job. Following the
    /// remedy runs the whole chain.
    @Test(arguments: Engine.allCases)
    func aLateDependantIsToldToRetryTheCascadesRoot(engine: Engine) throws {
        let fixture = try StoreFixture("deps-late-root", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        try finish(fixture, try #require(try claim(fixture, now: 2_000).first), succeeded: false, now: 3_000)
        // d waits for the cascade's tail c, e for d in the same submit, f for a itself.
        let late = try fixture.store.submit([spec(key: "d", after: ["c"]), spec(key: "e", after: ["d"]), spec(key: "f", after: ["a"])],
                                            actor: "cli:test", now: 3_500).map(\.id)
        let cancels = try late.map { try #require(try fixture.store.events(jobID: $0).last) }
        #expect(cancels.map(\.type) == [.cancelled, .cancelled, .cancelled])
        let viaRoot = "`jobctl retry \(ids[0]) --with-dependants` opens it again with \(ids[0]), whose end cancelled its dependency"
        #expect(cancels[0].payload.reason == viaRoot, "\(cancels[0].payload.reason ?? "")")
        #expect(cancels[1].payload.reason == viaRoot, "\(cancels[1].payload.reason ?? "")")
        #expect(cancels[2].payload.reason == "`jobctl retry \(ids[0]) --with-dependants` opens it again with its dependency")
        #expect(cancels.map(\.payload.cancellingDependency) == [ids[2], late[0], ids[0]])

        // b retried alone (not with its dependants): it waits for a again, so d's root is now c's cause, b.
        _ = try fixture.store.control(.retry, id: ids[0], actor: "cli:test", now: 4_000)
        _ = try fixture.store.control(.retry, id: ids[1], actor: "cli:test", now: 4_100)
        let later = try #require(try fixture.store.submit([spec(key: "g", after: ["c"])], actor: "cli:test", now: 4_200).first?.id)
        #expect(try fixture.store.events(jobID: later).last?.payload.reason
                == "`jobctl retry \(ids[2]) --with-dependants` opens it again with its dependency")

        // The remedy named for d opens a, b, c, d and e; claimed and finished in turn, every one succeeds.
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: ids[0], actor: "cli:test", now: 4_300)
        let reopened = try #require(try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 4_400, ifStateIn: nil,
                                                                          dryRun: false).result)
        #expect(Set(reopened.reopened.map(\.id)).isSuperset(of: [ids[1], ids[2], late[0], late[1], late[2]]),
                "\(reopened.reopened.map(\.id))")
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// `retry --with-dependants`: the dependency and the jobs its failure cancelled, through the chain,
    /// open again in one transaction, each with its own `retried`, and wait for it again; a dependant
    /// cancelled by hand (and what its cancel cancelled) stays cancelled.
    @Test(arguments: Engine.allCases)
    func aRetryWithDependantsReopensTheChainItsFailureCancelled(engine: Engine) throws {
        let fixture = try StoreFixture("deps-reopen", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"]),
                                            spec(key: "d", after: ["b"]), spec(key: "e", after: ["d"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        // d is cancelled by hand (e with it, by the cascade), then a fails (b and c with it).
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: ids[3], actor: "cli:test", now: 1_500)
        try finish(fixture, try #require(try claim(fixture, now: 2_000).first), succeeded: false, now: 3_000)
        #expect(try ids.map { try fixture.store.job($0)?.state } == [.failed, .cancelled, .cancelled, .cancelled, .cancelled])
        // Each dependency's cancel names its dependency in a field of its own; the user's names none.
        let cancels = try ids.map { try fixture.store.events(jobID: $0).last?.payload }
        #expect(cancels.map { $0?.cancellingDependency } == [nil, ids[0], ids[1], nil, ids[3]])

        let before = try fixture.scalar("SELECT max(seq) FROM events")
        let planned = try #require(try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 3_500, ifStateIn: nil,
                                                                          dryRun: true).result)
        #expect(planned.reopened.map(\.id) == [ids[1], ids[2]] && planned.kept.map(\.record.id) == [ids[3]])
        #expect(try fixture.scalar("SELECT max(seq) FROM events") == before, "a dry run wrote events")

        let answer = try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 4_000, ifStateIn: nil, dryRun: false)
        let result = try #require(answer.result)
        #expect(result.job.record.state == .queued && !result.job.isRepeat)
        #expect(result.reopened.map(\.id) == [ids[1], ids[2]] && result.reopened.allSatisfy { $0.state == .queued })
        #expect(result.kept.map(\.record.id) == [ids[3]])
        #expect(result.kept.first?.reason.contains("was not cancelled by a dependency's end") == true, "\(result.kept)")
        #expect(try ids.map { try fixture.store.job($0)?.state } == [.queued, .queued, .queued, .cancelled, .cancelled])
        // One transaction: one time, consecutive seqs, a `retried` for every job opened.
        let retried = try ids.prefix(3).map { id in try #require(try fixture.store.events(jobID: id).last) }
        #expect(retried.map(\.type) == [.retried, .retried, .retried] && retried.allSatisfy { $0.atMs == 4_000 })
        let seqs = try retried.map { try #require($0.seq) }
        #expect(seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2])
        #expect(retried[2].payload.reason == "dependency \(ids[1]) (key b) opened again (`retry --with-dependants`)")
        #expect(try fixture.store.replay(verify: true).isConsistent)

        // They wait for the dependency again: the chain runs in order.
        for (index, id) in ids.prefix(3).enumerated() {
            let claimed = try claim(fixture, now: 5_000 + Int64(index) * 1_000)
            #expect(claimed.map(\.record.id) == [id])
            try finish(fixture, try #require(claimed.first), succeeded: true, now: 5_500 + Int64(index) * 1_000)
        }
        #expect(try claim(fixture, now: 9_000).isEmpty)
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// A dependant its user had paused, then cancelled by its dependency's end, opens paused again: a plain
    /// `retried` made it queued, and it would have run once its dependency succeeded.
    @Test(arguments: Engine.allCases)
    func aPausedDependantOpensPaused(engine: Engine) throws {
        let fixture = try StoreFixture("deps-paused", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["a"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        _ = try fixture.store.control(.pause, id: ids[1], actor: "cli:test", now: 1_500, ifStateIn: nil)
        try finish(fixture, try #require(try claim(fixture, now: 2_000).first), succeeded: false, now: 3_000)
        #expect(try ids.map { try fixture.store.job($0)?.state } == [.failed, .cancelled, .cancelled])

        let result = try #require(try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 4_000, ifStateIn: nil,
                                                                         dryRun: false).result)
        #expect(result.reopened.map { "\($0.id) \($0.state)" } == ["\(ids[1]) paused", "\(ids[2]) queued"])
        #expect(try ids.map { try fixture.store.job($0)?.state } == [.queued, .paused, .queued])
        #expect(try fixture.store.events(jobID: ids[1]).map(\.type) == [.submitted, .paused, .cancelled, .retried, .paused])
        #expect(try fixture.store.replay(verify: true).isConsistent)
        // a succeeds: c runs, b waits for its user.
        try finish(fixture, try #require(try claim(fixture, now: 5_000).first), succeeded: true, now: 5_500)
        #expect(try claim(fixture, now: 6_000).map(\.record.id) == [ids[2]])
    }

    /// A job waiting for two jobs that both failed stays cancelled while either is still failed, and
    /// opens with the retry of the last, whichever of them its cancel named.
    @Test(arguments: Engine.allCases)
    func aJobWaitingForTwoFailedJobsOpensWithTheLast(engine: Engine) throws {
        let fixture = try StoreFixture("deps-two", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b"), spec(key: "c", after: ["a", "b"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try claim(fixture, now: 2_000)
        #expect(Set(claimed.map(\.record.id)) == Set(ids.prefix(2)))
        for (index, job) in claimed.sorted(by: { $0.record.seq < $1.record.seq }).enumerated() {
            try finish(fixture, job, succeeded: false, now: 3_000 + Int64(index))
        }
        #expect(try fixture.store.events(jobID: ids[2]).last?.payload.cancellingDependency == ids[0])

        let first = try #require(try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 4_000, ifStateIn: nil,
                                                                        dryRun: false).result)
        #expect(first.reopened.isEmpty && first.kept.map(\.record.id) == [ids[2]])
        #expect(first.kept.first?.reason.contains("also waits for \(ids[1]), which is still failed or cancelled") == true, "\(first.kept)")
        #expect(try fixture.store.events(jobID: ids[2]).map(\.type) == [.submitted, .cancelled])

        let second = try #require(try fixture.store.retryWithDependants(id: ids[1], actor: "cli:test", now: 5_000, ifStateIn: nil,
                                                                         dryRun: false).result)
        #expect(second.reopened.map(\.id) == [ids[2]] && second.kept.isEmpty)
        #expect(try fixture.store.job(ids[2])?.state == .queued)
        #expect(try fixture.store.replay(verify: true).isConsistent)
        // c waits for both again.
        #expect(Set(try claim(fixture, now: 6_000).map(\.record.id)) == Set(ids.prefix(2)))
    }

    /// All or nothing: when opening a dependant fails, the dependency's retry and every dependant opened
    /// before it are undone with it.
    @Test(arguments: Engine.allCases)
    func aRetryWithDependantsIsOneTransaction(engine: Engine) throws {
        let fixture = try StoreFixture("deps-atomic", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        try finish(fixture, try #require(try claim(fixture, now: 2_000).first), succeeded: false, now: 3_000)
        // The last job's `retried` is refused by the database itself, after the others were written.
        switch engine {
        case .sqlite:
            try fixture.sql("""
                CREATE TRIGGER refuse_c BEFORE INSERT ON events WHEN NEW.job_id = '\(ids[2])' AND NEW.type = 'retried'
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        case .postgres:
            try fixture.sql("""
                CREATE FUNCTION refuse_c() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                IF NEW.job_id = '\(ids[2])' AND NEW.type = 'retried' THEN RAISE EXCEPTION 'refused by the test'; END IF;
                RETURN NEW; END $$
                """)
            try fixture.sql("CREATE TRIGGER refuse_c BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_c()")
        }
        let before = try fixture.scalar("SELECT count(*) FROM events")
        #expect(throws: StoreError.self) {
            try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 4_000, ifStateIn: nil, dryRun: false)
        }
        #expect(try ids.map { try fixture.store.job($0)?.state } == [.failed, .cancelled, .cancelled])
        #expect(try fixture.scalar("SELECT count(*) FROM events") == before)
        // The refusing trigger is the test's own, which the verify names as one jobctl does not make.
        let report = try fixture.store.replay(verify: true)
        #expect(report.differences.isEmpty && report.problems.allSatisfy { $0.contains("'refuse_c'") }, "\(report.problems)")
    }

    /// A job that waits for two jobs of one cascade (`c` after `a` and `b`, `b` after `a`) is cancelled
    /// once, by the first: the cascade used to read `a`'s dependants once and cancel `c` again from that
    /// stale row after `b`'s turn had cancelled it, and the duplicate version refused the whole cancel
    /// (or a worker's `failed`) with a UNIQUE constraint error.
    @Test(arguments: Engine.allCases)
    func aJobWaitingForTwoJobsOfOneCascadeIsCancelledOnce(engine: Engine) throws {
        let fixture = try StoreFixture("deps-diamond", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["a", "b"]),
                                            spec(key: "d", after: ["c", "b"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try #require(try claim(fixture, now: 2_000).first)
        try finish(fixture, claimed, succeeded: false, now: 3_000)
        let states = try ids.map { try fixture.store.job($0)?.state }
        #expect(states == [.failed, .cancelled, .cancelled, .cancelled])
        #expect(try fixture.store.job(ids[2])?.error?.message == "dependency \(ids[0]) (key a) failed")
        #expect(try fixture.store.events(jobID: ids[2]).map(\.type) == [.submitted, .cancelled])
        #expect(try fixture.store.events(jobID: ids[3]).map(\.type) == [.submitted, .cancelled])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// Cancelling the head of a long chain cancels every job after it in one transaction. The cascade
    /// recursed once per link and overflowed the store thread's stack (SIGSEGV) a few thousand links
    /// in; a chain submitted tail first after a job already cancelled took the same path at submit.
    @Test(arguments: Engine.allCases)
    func aLongChainIsCancelledWithoutRecursing(engine: Engine) throws {
        let fixture = try StoreFixture("deps-chain", engine: engine)
        defer { fixture.remove() }
        let length = 5_000
        let chain = (0..<length).map { index in spec(key: "k\(index)", after: index == 0 ? nil : ["k\(index - 1)"]) }
        let ids = try fixture.store.submit(chain, actor: "cli:test", now: 1_000).map(\.id)
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: ids[0], actor: "cli:test", now: 2_000)
        let tail = try #require(try fixture.store.job(ids[length - 1]))
        #expect(tail.state == .cancelled && tail.error?.message == "dependency \(ids[length - 2]) (key k\(length - 2)) was cancelled")
        #expect(try fixture.scalar("SELECT count(*) FROM jobs WHERE state = 'cancelled'") == "\(length)")

        // Submitted tail first, after a job already cancelled: each new job waits for the next one
        // submitted, and the last one in (the head) is cancelled at once, and with it all of them.
        let reversed = (0..<length).reversed().map { index in
            spec(key: "r\(index)", after: [index == 0 ? ids[0] : "r\(index - 1)"])
        }
        let later = try fixture.store.submit(reversed, actor: "cli:test", now: 3_000).map(\.id)
        #expect(try fixture.store.job(later[0])?.state == .cancelled)
        #expect(try fixture.scalar("SELECT count(*) FROM jobs WHERE state = 'cancelled'") == "\(2 * length)")

        // Retried with its dependants, the head opens both chains again, walked the same way.
        let reopened = try #require(try fixture.store.retryWithDependants(id: ids[0], actor: "cli:test", now: 4_000, ifStateIn: nil,
                                                                           dryRun: false).result).reopened
        #expect(reopened.count == 2 * length - 1)
        #expect(try fixture.scalar("SELECT count(*) FROM jobs WHERE state = 'queued'") == "\(2 * length)")
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    @Test(arguments: Engine.allCases)
    func dependenciesInTheLogResolveByKeyIdOrPrefix(engine: Engine) throws {
        let fixture = try StoreFixture("deps-log", engine: engine)
        defer { fixture.remove() }
        let done = try fixture.running(spec(key: "done"))
        try finish(fixture, done, succeeded: true, now: 1_500)
        let pending = try fixture.submit(spec(key: "pending"), now: 1_600)
        let cancelled = try fixture.submit(spec(key: "gone"), now: 1_700)
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: cancelled, actor: "cli:test", now: 1_800)

        // A dependency that already succeeded holds nothing back (named by its full id).
        let free = try fixture.submit(spec(key: "free", after: [done.record.id]), now: 2_000)
        // One still queued, named by a unique id prefix.
        let prefix = uniquePrefix(of: pending, among: try fixture.store.jobs().map(\.id))
        #expect(prefix.count <= 15)
        let waiting = try fixture.submit(spec(key: "waiting", after: [prefix]), now: 2_000)
        // One already cancelled cancels the new job at once.
        let doomed = try fixture.submit(spec(key: "doomed", after: ["gone"]), now: 2_000)
        #expect(try fixture.store.job(waiting)?.spec.after == [pending])
        #expect(try fixture.store.job(doomed)?.state == .cancelled)
        #expect(try fixture.store.job(doomed)?.error?.message == "dependency \(cancelled) (key gone) was cancelled")
        let claimed = Set(try claim(fixture, now: 3_000).map(\.record.id))
        #expect(claimed == [free, pending])
        #expect(try fixture.store.replay(verify: true).isConsistent)

        // A name that means no job refuses the whole batch.
        #expect(throws: StoreError.unknownDependency("nobody")) {
            try fixture.store.submit([spec(key: "x"), spec(key: "y", after: ["nobody"])], actor: "cli:test", now: 4_000)
        }
        #expect(try fixture.store.jobs(filter: JobFilter()).contains { $0.key == "x" } == false)
        // Submitting the same manifest again maps to the same jobs: the resolved spec compares equal.
        let repeated = try fixture.store.submit([spec(key: "waiting", after: [prefix])], actor: "cli:test", now: 5_000)
        #expect(repeated.map(\.id) == [waiting] && repeated.map(\.created) == [false])
    }

    @Test(arguments: Engine.allCases)
    func replayRebuildsTheWaits(engine: Engine) throws {
        let fixture = try StoreFixture("deps-replay", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"])], actor: "cli:test", now: 1_000).map(\.id)
        try fixture.sql("DELETE FROM job_dependencies")
        let report = try fixture.store.replay(verify: true)
        #expect(report.differences.map(\.description) == ["\(ids[1]) after: stored no wait, rebuilt waits for \(ids[0])"])
        _ = try fixture.store.replay(verify: false)
        #expect(try fixture.store.replay(verify: true).isConsistent)
        #expect(try claim(fixture, now: 2_000).map(\.record.id) == [ids[0]])
    }

    /// Archiving removes the waits on and of the archived jobs, so replay still matches; a failed or
    /// cancelled job that a job staying in the log waits for (a dependant retried alone, which a release
    /// before `retry` refused that wrote) stays in the log with its waits — archived, the wait went with
    /// it, and the dependant ran though its dependency never succeeded.
    @Test(arguments: Engine.allCases)
    func archivingADependencyRemovesItsWaits(engine: Engine) throws {
        let fixture = try StoreFixture("deps-archive", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c"), spec(key: "d", after: ["c"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: ids[0], actor: "cli:test", now: 2_000)
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: ids[2], actor: "cli:test", now: 2_500)
        #expect(try fixture.store.job(ids[1])?.state == .cancelled && fixture.store.job(ids[3])?.state == .cancelled)
        // Retried while its dependency is still cancelled, d waits again: `retry` refuses that now (it could
        // never run), and the `retried` goes in as a release before that wrote it.
        #expect(throws: StoreError.self) { try fixture.store.control(.retry, id: ids[3], actor: "cli:test", now: 3_000) }
        _ = try fixture.perform(.report(.retried(reason: nil)), jobID: ids[3], leaseToken: nil, now: 3_000)
        #expect(try fixture.store.job(ids[3])?.state == .queued)
        #expect(try claim(fixture, now: 3_500).isEmpty)
        let selection = try fixture.store.archiveSelection(finishedBefore: 10_000)
        #expect(Set(selection.jobs.map(\.id)) == [ids[0], ids[1]], "c stays: d waits for it")
        let record = ArchiveRecord(file: "deps.ndjson.gz", sha256: String(repeating: "a", count: 64), beforeMs: selection.beforeMs,
                                   jobs: selection.jobs.count, events: selection.rows.count, blobs: 0, blobsRemoved: 0,
                                   firstSeq: selection.rows.first?.seq ?? 0, lastSeq: selection.rows.last?.seq ?? 0)
        _ = try fixture.store.removeArchived(selection, record: record, actor: "cli:test", now: 20_000) {}
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "1")
        #expect(try fixture.store.replay(verify: true).isConsistent)
        #expect(try claim(fixture, now: 21_000).isEmpty, "d still waits for c")
        _ = try fixture.store.control(.retry, id: ids[2], actor: "cli:test", now: 22_000)
        #expect(try claim(fixture, now: 23_000).map(\.record.id) == [ids[2]])
    }

    /// The jobs an archive keeps for a waiting dependant are found in one walk: a cancelled chain of
    /// 20,000 whose last job was retried keeps all of them, at once. Sweeping every wait until nothing
    /// changed removed one link per sweep, 20,000 sweeps of 20,000 waits: minutes inside the archive's
    /// read transaction.
    @Test(.timeLimit(.minutes(1)))
    func theJobsKeptForADependantAreFoundInOneWalk() {
        let length = 20_000
        let ids = (0..<length).map { String(format: "01CHAIN%019d", $0) }
        // Every job but the last, retried and waiting again, is selected; each waits for the one before.
        let selected = ids.dropLast().map { ArchivedJob(id: $0, version: 2, state: .cancelled, finishedAtMs: 1_000) }
        let waits = (1..<length).map { DependencyRow(job: ids[$0], dependsOn: ids[$0 - 1]) }
        #expect(ArchiveRemovalRules.withoutAwaited(selected, waits: waits).isEmpty)
        // A job nothing staying waits for is still archived; with the last wait gone, nothing is kept.
        let unrelated = [ArchivedJob(id: "01OTHER", version: 2, state: .failed, finishedAtMs: 1_000)]
        #expect(ArchiveRemovalRules.withoutAwaited(selected + unrelated, waits: waits).map(\.id) == ["01OTHER"])
        let alone = ArchiveRemovalRules.withoutAwaited(selected, waits: Array(waits.dropLast()))
        #expect(alone.count == length - 1)
    }

    /// The dependants of a job that ended failed or cancelled are read through the waits on it, not by
    /// walking the queued jobs: that walk made each link of a cancelled chain cost the whole queue
    /// (20,000 links: 77 s), and every failure in a long queue too.
    @Test
    func theDependantsOfAnEndedJobAreReadThroughItsWaits() throws {
        let fixture = try StoreFixture("deps-plan")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"])], actor: "cli:test", now: 1_000).map(\.id)
        let plan = try store.withConnection { (connection) throws(StoreError) -> String in
            try connection.query("EXPLAIN QUERY PLAN " + EventStore.waitingDependantsSQL, [SQLiteValue.text(ids[0])]) { row in
                row.text(3)
            }.joined(separator: "\n")
        }
        #expect(plan.contains("SEARCH job_dependencies USING INDEX job_dependencies_depends_on (depends_on=?)"), "\(plan)")
        #expect(plan.contains("SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"), "\(plan)")
        #expect(!plan.contains("jobs_claim") && !plan.contains("SCAN"), "\(plan)")
        // And it reads what it did.
        let dependants = try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.waitingDependants(of: ids[0]).map(\.id)
        }
        #expect(dependants == [ids[1]])
    }

    /// Archiving 10,000 jobs removes them in one transaction. One DELETE of every archived job's events
    /// grew its statement journal past the 4 MiB kept in memory, and SQLite 3.40 fails the spill to a
    /// file with SQLITE_FULL: "database or disk is full" with the disk nearly empty, nothing archived.
    @Test
    func archivingTenThousandJobsRemovesThemAll() throws {
        let fixture = try StoreFixture("deps-archive-many")
        defer { fixture.remove() }
        let length = 10_000
        let chain = (0..<length).map { index in spec(key: "k\(index)", after: index == 0 ? nil : ["k\(index - 1)"]) }
        let ids = try fixture.store.submit(chain, actor: "cli:test", now: 1_000).map(\.id)
        _ = try fixture.store.control(.cancel(by: "cli:test"), id: ids[0], actor: "cli:test", now: 2_000)
        let selection = try fixture.store.archiveSelection(finishedBefore: 10_000)
        #expect(selection.jobs.count == length && selection.rows.count == 2 * length)
        let record = ArchiveRecord(file: "many.ndjson.gz", sha256: String(repeating: "a", count: 64), beforeMs: selection.beforeMs,
                                   jobs: selection.jobs.count, events: selection.rows.count, blobs: 0, blobsRemoved: 0,
                                   firstSeq: selection.rows.first?.seq ?? 0, lastSeq: selection.rows.last?.seq ?? 0)
        _ = try fixture.store.removeArchived(selection, record: record, actor: "cli:test", now: 20_000) {}
        #expect(try fixture.scalar("SELECT count(*) FROM jobs") == "0")
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies") == "0")
        #expect(try fixture.scalar("SELECT count(*) FROM archive_authorisations") == "0")
        #expect(try fixture.scalar("SELECT count(*) FROM events") == "1")
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }
}
