import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// libpq pipeline mode (`PostgresConnection.enqueue`): held-back statements travel with the next one
/// in one round trip; a failure in the middle aborts the rest and is reported as itself; a server
/// that goes away mid-pipeline is a lost connection, never a half-reported success.
@Suite("PostgreSQL pipelines", .onTestThreads)
struct PipelineTests {
    @Test("held-back statements run before the next one, in order, in one round trip; each sees its own result")
    func heldBackInOrder() throws {
        let fixture = try PostgresFixture("pipeorder")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (n bigint PRIMARY KEY, note text)")
        let tripsBefore = connection.roundTrips
        let sentBefore = connection.statementsSent
        var seen: [Int64] = []
        for n in Int64(1)...3 {
            connection.enqueue("INSERT INTO t (n, note) VALUES ($1, $2) RETURNING n", [.integer(n), .text("row \(n)")]) { (result) throws(PostgresError) in
                seen.append(try result.rows[0].int64(0))
            }
        }
        #expect(connection.hasQueuedStatements)
        // Nothing has been sent yet.
        #expect(connection.roundTrips == tripsBefore)
        let total = try connection.first("SELECT sum(n)::bigint FROM t") { (row) throws(PostgresError) in try row.int64(0) }
        #expect(total == 6)
        #expect(seen == [1, 2, 3])
        #expect(!connection.hasQueuedStatements)
        #expect(connection.roundTrips - tripsBefore == 1)
        #expect(connection.statementsSent - sentBefore == 4)
        // The insert was prepared inside the pipeline, once, and is reused by the next one.
        #expect(connection.preparedStatementCount == 1)
        connection.enqueue("INSERT INTO t (n, note) VALUES ($1, $2) RETURNING n", [.integer(4), .text("row 4")])
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int64(0) } == 4)
        #expect(connection.preparedStatementCount == 1)
    }

    @Test("a statement failing mid-pipeline stops the rest, is reported with its own SQLSTATE and SQL, and rolls the transaction back")
    func failureMidPipeline() throws {
        let fixture = try PostgresFixture("pipefail")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (n bigint PRIMARY KEY)")
        var laterResultSeen = false
        let error = postgresError {
            try connection.transaction { () throws(PostgresError) in
                connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(1)])
                connection.enqueue("INSERT INTO t (n) VALUES ($1 / 0)", [.integer(2)])
                connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(3)]) { _ in laterResultSeen = true }
                try connection.run("INSERT INTO t (n) VALUES ($1)", [.integer(4)])
            }
        }
        guard case .server(let sqlstate, _, _, _, let sql)? = error else {
            Issue.record("expected the division's server error, got \(String(describing: error))")
            return
        }
        #expect(sqlstate == "22012")
        #expect(sql?.contains("/ 0") == true)
        #expect(!laterResultSeen)
        #expect(connection.isConnected)
        #expect(!connection.isInTransaction)
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int64(0) } == 0)
    }

    @Test("a COMMIT held back behind a failing statement is never reported done")
    func commitBehindFailure() throws {
        let fixture = try PostgresFixture("pipecommit")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (n bigint PRIMARY KEY)")
        connection.enqueue("BEGIN")
        connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(1)])
        connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(1)])  // a unique violation
        #expect(postgresError { try connection.execute("COMMIT") }?.sqlstate == "23505")
        // The transaction is left aborted, awaiting ROLLBACK; nothing of it is visible.
        #expect(connection.isInTransaction)
        try connection.run("ROLLBACK")
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int64(0) } == 0)
    }

    @Test("a value that cannot be sent fails the call before anything is sent, and the held-back statements stay held back")
    func unsendableValue() throws {
        let fixture = try PostgresFixture("pipeconvert")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (n bigint)")
        connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(1)])
        let tripsBefore = connection.roundTrips
        let bad = PostgresValue.array(PostgresArray(elementType: PostgresType.int8, elements: [.text("not a number")]))
        #expect(postgresError { try connection.execute("SELECT $1", [bad]) } != nil)
        #expect(connection.roundTrips == tripsBefore)
        #expect(connection.hasQueuedStatements)
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int64(0) } == 1)
    }

    @Test("the server ending the session mid-pipeline is a lost connection; nothing of the transaction stays; the connection reopens")
    func serverGoneMidPipeline() throws {
        let fixture = try PostgresFixture("pipegone")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (n bigint PRIMARY KEY)")
        let pid = connection.backendPID
        var laterResultSeen = false
        let error = postgresError {
            try connection.transaction { () throws(PostgresError) in
                connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(1)])
                // The backend terminates itself: the statements after it never run.
                connection.enqueue("SELECT pg_terminate_backend(pg_backend_pid())")
                connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(2)]) { _ in laterResultSeen = true }
                try connection.run("INSERT INTO t (n) VALUES ($1)", [.integer(3)])
            }
        }
        guard case .connectionLost? = error else {
            Issue.record("expected a lost connection, got \(String(describing: error))")
            return
        }
        #expect(!laterResultSeen)
        #expect(!connection.isConnected)
        try connection.reconnect()
        #expect(connection.backendPID != pid)
        #expect(!connection.hasQueuedStatements)
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int64(0) } == 0)
        // Pipelines work on the new session.
        connection.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(5)])
        #expect(try connection.first("SELECT sum(n)::bigint FROM t") { (row) throws(PostgresError) in try row.int64(0) } == 5)
    }

    @Test("a session the server ends at any point of a pipeline's transaction is a lost connection, never an answer jobctl cannot explain, and the next call opens a new session")
    func serverEndsSessionAtAnyPoint() throws {
        let fixture = try PostgresFixture("pipekill")
        let admin = try fixture.connect()
        try admin.run("CREATE TABLE t (n bigint)")
        let victim = try fixture.connect()
        let shared = KilledSessions(pid: victim.backendPID)
        let losses = 20
        // The victim runs small pipelined transactions back to back while its sessions are terminated at
        // random moments: before, between or after the statements, or after the COMMIT but before the
        // pipeline's end (its sync).
        let victimDone = DispatchSemaphore(value: 0)
        let handOver = UncheckedConnection(victim)
        Thread.detachNewThread {
            let victim = handOver.connection
            var n: Int64 = 0
            while shared.lossCount < losses && shared.problems.count < 5 {
                n += 1
                do throws(PostgresError) {
                    // A commit that waits 100 ms for its WAL flush, when the server ends the session only
                    // once it is done: then the termination's FATAL comes after every statement's answer.
                    if shared.needsSettings { try victim.executeScript("SET commit_delay = 100000; SET commit_siblings = 0") }
                    shared.settingsDone()
                    // One round trip as a group commit's: BEGIN, the writes, COMMIT.
                    victim.enqueue("BEGIN")
                    victim.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(n)])
                    victim.enqueue("INSERT INTO t (n) VALUES ($1)", [.integer(-n)])
                    let commit = try victim.execute("COMMIT")
                    if commit.commandStatus != "COMMIT" { shared.problem("transaction \(n): \(commit.commandStatus)") }
                } catch {
                    guard case .connectionLost = error else {
                        shared.problem("transaction \(n) failed with \(error)")
                        if victim.isConnected && victim.isInTransaction { _ = try? victim.execute("ROLLBACK") }
                        continue
                    }
                    if victim.isConnected { shared.problem("transaction \(n): lost, yet the connection still counts as open") }
                    do throws(PostgresError) { try victim.reconnect() } catch {
                        shared.problem("reconnect after transaction \(n) failed: \(error)")
                        break
                    }
                    shared.lost(newPID: victim.backendPID)
                }
            }
            victimDone.signal()
        }
        var terminations = 0
        while victimDone.wait(timeout: .now() + .milliseconds(Int.random(in: 1...150))) == .timedOut {
            _ = try admin.first("SELECT pg_terminate_backend($1::int)", [.integer(Int64(shared.pid))]) { (row) throws(PostgresError) in try row.bool(0) }
            terminations += 1
        }
        #expect(shared.problems.isEmpty, "\(shared.problems)")
        #expect(shared.lossCount >= losses, "only \(shared.lossCount) of \(terminations) terminations were seen")
        // Each transaction committed whole or not at all.
        let unpaired = try admin.first("SELECT count(*) FROM t a WHERE NOT EXISTS (SELECT 1 FROM t b WHERE b.n = -a.n)") {
            (row) throws(PostgresError) in try row.int64(0)
        }
        #expect(unpaired == 0)
    }

    @Test("a pipeline whose first answer is large and whose next statement is large does not deadlock")
    func largeBothWays() throws {
        let fixture = try PostgresFixture("pipelarge")
        let connection = try fixture.connect()
        let answerBytes: Int64 = 8 << 20
        var answered: Int = 0
        connection.enqueue("SELECT repeat('x', $1::int)", [.integer(answerBytes)]) { (result) throws(PostgresError) in
            answered = try result.rows[0].text(0).utf8.count
        }
        let sent = patternData(8 << 20)
        let length = try connection.first("SELECT length($1)", [.bytea(sent)]) { (row) throws(PostgresError) in try row.int64(0) }
        #expect(length == Int64(sent.count))
        #expect(answered == Int(answerBytes))
    }

    // MARK: - The store's group commit

    /// How a test makes the server refuse one row of a group commit's write.
    enum RowRule: String, CaseIterable, CustomTestStringConvertible {
        /// A PL/pgSQL trigger raising P0001 (RAISE EXCEPTION).
        case triggerRaises = "P0001"
        /// A trigger raising a data exception (22023, invalid parameter value).
        case triggerRaisesDataException = "22023"
        /// A check constraint on `events` (23514), whose detail names the failing row, data included.
        case checkConstraint = "23514"

        var testDescription: String { "\(self) (\(rawValue))" }

        /// Makes the server refuse the `type` event of job `jobID` from now on.
        func install(refusing type: EventType, ofJob jobID: String, on store: PostgresStore) throws {
            try store.withConnection { (connection) throws(StoreError) in
                switch self {
                case .triggerRaises, .triggerRaisesDataException:
                    try connection.store("""
                        CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $f$
                        BEGIN
                          IF NEW.job_id = '\(jobID)' AND NEW.type = '\(type.rawValue)' THEN
                            RAISE EXCEPTION 'refused by the test' USING ERRCODE = '\(rawValue)';
                          END IF;
                          RETURN NEW;
                        END $f$
                        """)
                    try connection.store("CREATE TRIGGER refuse_one BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_one()")
                case .checkConstraint:
                    try connection.store("""
                        ALTER TABLE events ADD CONSTRAINT refuse_one CHECK (job_id <> '\(jobID)' OR type <> '\(type.rawValue)') NOT VALID
                        """)
                }
            }
        }

        /// Undoes `install`.
        func remove(from store: PostgresStore) throws {
            try store.withConnection { (connection) throws(StoreError) in
                switch self {
                case .triggerRaises, .triggerRaisesDataException:
                    try connection.store("DROP TRIGGER refuse_one ON events")
                    try connection.store("DROP FUNCTION refuse_one()")
                case .checkConstraint:
                    try connection.store("ALTER TABLE events DROP CONSTRAINT refuse_one")
                }
            }
        }

        /// Whether `message` is the server's refusal by this rule, without the refused row's values.
        func matches(_ message: String) -> Bool {
            switch self {
            case .triggerRaises, .triggerRaisesDataException: message == "refused by the test"
            case .checkConstraint: message.contains("refuse_one") && !message.contains("Failing row") && !message.contains("attempt")
            }
        }
    }

    @Test("a group commit whose write the server refuses for one event's row writes the others and refuses that event alone, with the server's SQLSTATE and message",
          arguments: RowRule.allCases)
    func groupCommitRefusesOneEventAlone(rule: RowRule) throws {
        let fixture = try PostgresFixture("pipegroup")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let ids = try store.submit((0..<3).map { k in
            JobSpec(kind: .uploadData, destination: "file://pipe/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 60_000, now: 2_000)
        try #require(claimed.map(\.record.id) == ids)
        let before = try store.events(afterSeq: 0, limit: 1_000)
        // A real server-side refusal in the group's one write statement: one job's `started` event (the
        // other two are fine).
        try rule.install(refusing: .started, ofJob: ids[1], on: store)
        let events = try claimed.map { job in
            try PendingEvent(jobID: job.record.id, type: .started, actor: "w", leaseToken: job.token, data: EventData(attempt: 1))
        }
        let outcomes = try store.append(events, now: 3_000)
        try #require(outcomes.count == 3)
        #expect((try? outcomes[0].get()) != nil, "\(outcomes[0])")
        #expect((try? outcomes[2].get()) != nil, "\(outcomes[2])")
        guard case .failure(.serverRefused(let sqlstate, let message)) = outcomes[1] else {
            Issue.record("expected the server's refusal of job \(ids[1])'s event, got \(outcomes[1])")
            return
        }
        #expect(sqlstate == rule.rawValue)
        #expect(rule.matches(message), "\(message)")
        #expect(String(describing: StoreError.serverRefused(sqlstate: sqlstate, message: message)).contains("SQLSTATE \(rule.rawValue)"))
        // The others' events and rows are written; the refused one's not.
        #expect(try store.events(afterSeq: 0, limit: 1_000).count == before.count + 2)
        #expect(try store.events(jobID: ids[0]).map(\.type) == [.submitted, .claimed, .started])
        #expect(try store.events(jobID: ids[1]).map(\.type) == [.submitted, .claimed])
        #expect(try store.events(jobID: ids[2]).map(\.type) == [.submitted, .claimed, .started])
        #expect(try store.job(ids[1])?.version == 2)
        #expect(try store.replay(verify: true).isConsistent)

        // Refused again while the rule stands; written once it is gone.
        guard case .failure(.serverRefused)? = try store.append([events[1]], now: 4_000).first else {
            Issue.record("the refused event was written while the rule stands")
            return
        }
        try rule.remove(from: store)
        #expect((try? store.append([events[1]], now: 5_000).first?.get()) != nil)
        #expect(try store.counts() == [.running: 3])
        #expect(try store.events(afterSeq: 0, limit: 1_000).count == before.count + 3)
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("a group commit with a claim whose write the server refuses for one row refuses that event, or the claim, alone",
          arguments: [EventType.succeeded, .claimed])
    func groupCommitWithClaimRefusesOneWriteAlone(refused type: EventType) throws {
        let fixture = try PostgresFixture("pipegroupclaim")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let ids = try store.submit((0..<5).map { k in
            JobSpec(kind: .uploadData, destination: "file://pipe/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 60_000, now: 2_000)
        try #require(claimed.map(\.record.id) == Array(ids.prefix(3)))
        // The refused row: job 1's outcome, or the claim of job 3 (the next in line).
        try RowRule.triggerRaises.install(refusing: type, ofJob: type == .claimed ? ids[3] : ids[1], on: store)
        let outcomes = try claimed.map { job in
            try PendingEvent(jobID: job.record.id, type: .succeeded, actor: "w", leaseToken: job.token,
                             data: EventData(result: JobResult(size: 1)))
        }
        let both = try store.append(outcomes, now: 3_000,
                                    thenClaim: ClaimRequest(owner: "w", queues: nil, limit: 2, leaseMs: 60_000, now: 3_000))
        let refusal = StoreError.serverRefused(sqlstate: "P0001", message: "refused by the test")
        if type == .claimed {
            // Every outcome written; the claim refused as a whole (its own savepoint), nothing claimed.
            #expect(both.appended.allSatisfy { (try? $0.get()) != nil }, "\(both.appended)")
            #expect(throws: refusal) { try both.claimed.get() }
            #expect(try store.counts() == [.succeeded: 3, .queued: 2])
        } else {
            #expect((try? both.appended[0].get()) != nil && (try? both.appended[2].get()) != nil, "\(both.appended)")
            #expect(throws: refusal) { try both.appended[1].get() }
            #expect(try both.claimed.get().map(\.record.id) == Array(ids.suffix(2)))
            #expect(try store.counts() == [.succeeded: 2, .running: 3])
        }
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("a group commit whose write fails on the server for the transaction as a whole is rolled back whole, reports the server's error, and the store goes on",
          arguments: ["55P03", "57014", "53100", "42501", "40P01"])
    func groupCommitFailsWholeForTheTransaction(sqlstate: String) throws {
        let fixture = try PostgresFixture("pipegroupwhole")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let ids = try store.submit((0..<3).map { k in
            JobSpec(kind: .uploadData, destination: "file://pipe/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 60_000, now: 2_000)
        try #require(claimed.count == 3)
        let before = try store.events(afterSeq: 0, limit: 1_000)
        // The same trigger, raising what a lock timeout, a cancel, a full disk, a missing privilege or a
        // deadlock raises: none of them is about the row.
        try store.withConnection { (connection) throws(StoreError) in
            try connection.store("""
                CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                  IF NEW.job_id = '\(ids[1])' AND NEW.type = 'started' THEN
                    RAISE EXCEPTION 'failed by the test' USING ERRCODE = '\(sqlstate)';
                  END IF;
                  RETURN NEW;
                END $f$
                """)
            try connection.store("CREATE TRIGGER refuse_one BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_one()")
        }
        let events = try claimed.map { job in
            try PendingEvent(jobID: job.record.id, type: .started, actor: "w", leaseToken: job.token, data: EventData(attempt: 1))
        }
        let error: StoreError? = {
            do throws(StoreError) { _ = try store.append(events, now: 3_000); return nil } catch { return error }
        }()
        switch error {
        case .busy? where sqlstate == "40P01":
            break
        case .server(let state, let message)?:
            #expect(state == sqlstate && message.contains(sqlstate), "\(message)")
            #expect(message.contains("failed by the test"), "\(message)")
        default:
            Issue.record("expected the server's error for the whole group, got \(String(describing: error))")
        }
        // Nothing of the group was written: no event, no projection change.
        #expect(try store.events(afterSeq: 0, limit: 1_000).map(\.seq) == before.map(\.seq))
        #expect(try store.counts() == [.running: 3])

        _ = try store.withConnection { (connection) throws(StoreError) in try connection.store("DROP TRIGGER refuse_one ON events") }
        let outcomes = try store.append(events, now: 4_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        #expect(try store.counts() == [.running: 3])
        #expect(try store.events(afterSeq: 0, limit: 1_000).count == before.count + 3)
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("a store whose session the server ended while idle runs its next group commit on a new session, once, with nothing lost or doubled")
    func groupCommitAfterIdleLoss() throws {
        let fixture = try PostgresFixture("pipeidle")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let admin = try fixture.connect()
        _ = try store.submit((0..<2).map { k in
            JobSpec(kind: .uploadData, destination: "file://pipe/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w", queues: nil, limit: 2, leaseMs: 60_000, now: 2_000)
        try #require(claimed.count == 2)
        let pid = try store.withConnection { Int64($0.backendPID) }
        #expect(try admin.first("SELECT pg_terminate_backend($1::int)", [.integer(pid)]) { (row) throws(PostgresError) in try row.bool(0) } == true)
        let events = try claimed.map { job in
            try PendingEvent(jobID: job.record.id, type: .started, actor: "w", leaseToken: job.token, data: EventData(attempt: 1))
        }
        let outcomes = try store.append(events, now: 3_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        for job in claimed {
            #expect(try store.events(jobID: job.record.id).map(\.type) == [.submitted, .claimed, .started])
        }
        #expect(try store.replay(verify: true).isConsistent)
    }
}


/// The victim session of `serverEndsSessionAtAnyPoint`: its backend pid, how many losses it saw, and
/// what went wrong.
private final class KilledSessions: @unchecked Sendable {
    private let lock = NSLock()
    private var currentPID: Int32
    private var losses = 0
    private var recorded: [String] = []

    init(pid: Int32) { currentPID = pid }

    var pid: Int32 { lock.withLock { currentPID } }
    var lossCount: Int { lock.withLock { losses } }
    var problems: [String] { lock.withLock { recorded } }

    private var settingsNeeded = true
    var needsSettings: Bool { lock.withLock { settingsNeeded } }
    func settingsDone() { lock.withLock { settingsNeeded = false } }

    func lost(newPID: Int32) {
        lock.withLock {
            losses += 1
            currentPID = newPID
            settingsNeeded = true
        }
    }

    func problem(_ text: String) { lock.withLock { recorded.append(text) } }
}

/// Hands a connection to the one thread that uses it from then on.
private struct UncheckedConnection: @unchecked Sendable {
    let connection: PostgresConnection
    init(_ connection: PostgresConnection) { self.connection = connection }
}
