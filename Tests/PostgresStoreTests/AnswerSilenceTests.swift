import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

/// The answer timeout measures silence: a call is given up once no byte of its answer has come for the
/// limit, not once it has run that long. A large answer that keeps arriving through a slow path is read
/// whole; a server gone quiet, before or part way through its answer, is still given up. The calls whose
/// answer is worth nothing once late (a worker's lease renewals, group commits and claims, a stopping
/// worker's writes) keep a bound on the whole call. The slow path is a `TCPFaultProxy` trickling the answer.
@Suite("PostgreSQL answer timeout: silence, not length", .onTestThreads)
struct AnswerSilenceTests {
    /// `url` with its port replaced by `proxy`'s.
    static func proxied(_ url: String, _ proxy: TCPFaultProxy) throws -> String {
        let server = try PostgresServer.shared()
        let direct = "@127.0.0.1:\(server.port)/"
        #expect(url.contains(direct))
        return url.replacingOccurrences(of: direct, with: "@127.0.0.1:\(proxy.port)/")
    }

    /// 200,000 bytes in one value: trickled 8 KiB every 0.1 s, about 2.5 s of answer.
    static let largeAnswer = "SELECT repeat('x', 200000)"

    /// How long `body` took, and what it threw (nil: it returned).
    static func timed(_ body: () throws -> Void) -> (seconds: Double, error: (any Error)?) {
        let start = Date()
        do {
            try body()
            return (Date().timeIntervalSince(start), nil)
        } catch {
            return (Date().timeIntervalSince(start), error)
        }
    }

    @Test("a large answer that trickles in for longer than the answer timeout, never pausing that long, is read whole")
    func trickledAnswerIsReadWhole() throws {
        let fixture = try PostgresFixture("silence-trickle")
        let proxy = try TCPFaultProxy(upstreamPort: fixture.server.port, rules: [
            TCPFaultProxy.Rule(marker: "repeat(", action: .trickleAnswer(bytes: 8_192, intervalMs: 100)),
        ])
        defer { proxy.stop() }
        let connection = try PostgresConnection(try Self.proxied(fixture.url, proxy))
        try connection.setAnswerTimeout(milliseconds: 1_000)
        var length = 0
        let call = Self.timed {
            length = try #require(try connection.first(Self.largeAnswer) { (row) throws(PostgresError) in try row.text(0) }).utf8.count
        }
        #expect(proxy.firedRules.count == 1)
        let callError = call.error.map { "\($0)" }
        #expect(callError == nil, "after \(call.seconds) s: \(callError ?? "")")
        #expect(length == 200_000)
        // The answer took longer than the limit: a limit on the whole call would have cut it.
        #expect(call.seconds > 2, "the answer took only \(call.seconds) s")
        #expect(connection.isConnected)
    }

    @Test("a server gone silent part way through its answer is given up about the limit after its last byte")
    func silentMidAnswerIsGivenUp() throws {
        let fixture = try PostgresFixture("silence-mid")
        // 96 KiB trickled (1.2 s, longer than the limit), then nothing more.
        let proxy = try TCPFaultProxy(upstreamPort: fixture.server.port, rules: [
            TCPFaultProxy.Rule(marker: "repeat(", action: .trickleAnswer(bytes: 8_192, intervalMs: 100, silentAfter: 98_304)),
        ])
        defer { proxy.stop() }
        let connection = try PostgresConnection(try Self.proxied(fixture.url, proxy))
        try connection.setAnswerTimeout(milliseconds: 1_000)
        let call = Self.timed { _ = try connection.execute(Self.largeAnswer) }
        let ended = Date()
        #expect(proxy.firedRules.count == 1)
        let silentAt = try #require(proxy.wentSilentAt, "the proxy never went silent (the call ended after \(call.seconds) s)")
        let failure = try #require(call.error as? PostgresError, "the call returned after \(call.seconds) s")
        guard case .connectionLost(let message, let sql) = failure else {
            Issue.record("expected connectionLost, got \(failure)")
            return
        }
        #expect(message.contains("the server sent no more of its answer for 1 s"), "\(message)")
        #expect(sql == Self.largeAnswer)
        let silence = ended.timeIntervalSince(silentAt)
        #expect(silence >= 0.9 && silence < 2.5, "given up \(silence) s after the last byte (the call took \(call.seconds) s)")
        #expect(!connection.isConnected)
        try connection.reconnect()
        #expect(try connection.first("SELECT 41 + 1") { (row) throws(PostgresError) in try row.int(0) } == 42)
    }

    @Test("a server silent from the start is given up after the limit, as before")
    func silentFromTheStartIsGivenUp() throws {
        let fixture = try PostgresFixture("silence-start")
        let connection = try fixture.connect()
        try connection.setAnswerTimeout(milliseconds: 1_000)
        let call = Self.timed { _ = try connection.execute("SELECT pg_sleep(20)") }
        let failure = try #require(call.error as? PostgresError, "the call returned after \(call.seconds) s")
        #expect("\(failure)".contains("the server sent no answer for 1 s"), "\(failure)")
        #expect(call.seconds >= 0.9 && call.seconds < 3, "given up after \(call.seconds) s")
    }

    /// What ends a trickled answer that keeps arriving: a limit on whole calls (`timingAnswersWhole`, as
    /// a worker's writes and the lease renewals run) or a stopping worker's cap.
    enum WholeCallBound: CaseIterable, Sendable { case timedWhole, cap }

    @Test("a call timed whole, or under a stopping worker's cap, is still given up at the limit however its answer trickles",
          arguments: WholeCallBound.allCases)
    func wholeCallBoundsStillCutATrickle(bound: WholeCallBound) throws {
        let fixture = try PostgresFixture("silence-whole")
        let proxy = try TCPFaultProxy(upstreamPort: fixture.server.port, rules: [
            TCPFaultProxy.Rule(marker: "repeat(", action: .trickleAnswer(bytes: 8_192, intervalMs: 100)),
        ])
        defer { proxy.stop() }
        let connection = try PostgresConnection(try Self.proxied(fixture.url, proxy))
        let cap = AnswerWaitCap()
        let call: (seconds: Double, error: (any Error)?)
        switch bound {
        case .timedWhole:
            try connection.setAnswerTimeout(milliseconds: 1_000)
            call = Self.timed { try connection.timingAnswersWhole { () throws(PostgresError) in _ = try connection.execute(Self.largeAnswer) } }
        case .cap:
            try connection.setAnswerTimeout(milliseconds: 10_000, cap: cap)
            cap.milliseconds = 1_000
            call = Self.timed { _ = try connection.execute(Self.largeAnswer) }
        }
        #expect(proxy.firedRules.count == 1)
        let failure = try #require(call.error as? PostgresError, "\(bound): the call returned after \(call.seconds) s")
        #expect("\(failure)".contains("the server had not finished its answer within 1 s"), "\(bound): \(failure)")
        #expect(call.seconds >= 0.9 && call.seconds < 2.2, "\(bound): given up after \(call.seconds) s")
    }

    @Test("a worker's claim and lease renewal whose answers trickle are given up at their limits and run again; a read's trickle is read")
    func workerCallsKeepTheirWholeCallBound() async throws {
        let fixture = try PostgresFixture("silence-worker")
        let direct = try PostgresStore(url: fixture.url, mode: .create)
        _ = try direct.submit((0..<10).map { k in
            JobSpec(kind: .uploadData, destination: "file://silence/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        let held = try direct.claim(owner: "w1", queues: nil, limit: 1, leaseMs: 60_000, now: 2_000)
        try #require(held.count == 1)
        // Each rule trickles one answer a byte every 20 ms: a few KiB would take minutes.
        let proxy = try TCPFaultProxy(upstreamPort: fixture.server.port)
        defer { proxy.stop() }
        let store = try PostgresStore(url: try Self.proxied(fixture.url, proxy), mode: .readWrite, answerTimeoutMs: 1_000)

        // A read (the store's connection, 1): its answer trickles 64 bytes every 0.1 s, past the limit, and is read.
        proxy.add(TCPFaultProxy.Rule(marker: "FROM jobs", connection: 1, action: .trickleAnswer(bytes: 64, intervalMs: 100)))
        var listed = 0
        let read = Self.timed { listed = try store.jobs(filter: JobFilter()).count }
        let readError = read.error.map { "\($0)" }
        #expect(readError == nil, "after \(read.seconds) s: \(readError ?? "")")
        #expect(listed == 10)
        #expect(read.seconds > 1.2, "the read's answer took only \(read.seconds) s")

        // A claim on a store of its own: its first round trip (BEGIN and the claim's statement) trickles a
        // byte every 20 ms, without end in sight. It is given up at the store's limit and, as for any
        // session found dead by a transaction's first round trip, run again on a new session.
        let claimProxy = try TCPFaultProxy(upstreamPort: fixture.server.port, rules: [
            TCPFaultProxy.Rule(marker: "nextval('lease_tokens'", action: .trickleAnswer(bytes: 1, intervalMs: 20)),
        ])
        defer { claimProxy.stop() }
        let claimer = try PostgresStore(url: try Self.proxied(fixture.url, claimProxy), mode: .readWrite, answerTimeoutMs: 1_000)
        var claimed: [ClaimedJob] = []
        let claim = Self.timed { claimed = try claimer.claim(owner: "w2", queues: nil, limit: 2, leaseMs: 60_000, now: 3_000) }
        let claimError = claim.error.map { "\($0)" }
        #expect(claimProxy.firedRules.count == 1)
        #expect(claimError == nil, "after \(claim.seconds) s: \(claimError ?? "")")
        #expect(claimed.count == 2)
        #expect(claimProxy.acceptedConnections == 2, "the trickled session was not given up")
        #expect(claim.seconds >= 0.9 && claim.seconds < 3, "the claim took \(claim.seconds) s")

        // A lease renewal on its own connection (the lane's: connection 2 of `proxy`), a third of a 3 s
        // lease (1 s), trickled the same way: given up at 1 s and run again on a new connection (3).
        proxy.add(TCPFaultProxy.Rule(marker: "lease_expires_at_ms = $4", connection: 2,
                                     action: .trickleAnswer(bytes: 1, intervalMs: 20)))
        let started = Date()
        let renewal = try await store.renewLeases(owner: "w1", leases: [held[0].record.id: held[0].token], leaseMs: 3_000, now: 4_000)
        let renewalSeconds = Date().timeIntervalSince(started)
        #expect(proxy.firedRules.count == 2, "\(proxy.firedRules)")
        #expect(renewal == LeaseRenewal(renewed: [held[0].record.id], lost: []), "\(renewal)")
        #expect(proxy.acceptedConnections == 3, "the trickled renewal's connection was not given up")
        #expect(renewalSeconds >= 0.9 && renewalSeconds < 3, "the renewal took \(renewalSeconds) s")
    }
}
