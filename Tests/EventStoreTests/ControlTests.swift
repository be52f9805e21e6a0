import Foundation
import JobLifecycle
import JobModel
import Testing
@testable import EventStore
import StorePort
import TestSupport

/// Where a job is before a control command.
enum ControlSetup: String, CaseIterable, Sendable {
    case queued, running, runningPauseRequested, runningCancelRequested, runningBothRequested, paused
    case succeeded, failed, cancelled
}

enum ControlCommand: String, CaseIterable, Sendable {
    case pause, resume, cancel, retry
}

/// What a control command should do.
enum ControlOutcome: Equatable {
    /// Appends one event; the job ends in `state` with these flags.
    case appends(JobState, pauseRequested: Bool = false, cancelRequested: Bool = false)
    /// A harmless repeat: appends nothing, succeeds, and says so; the record comes back unchanged.
    case repeats
    /// Refused with `invalidControl`, whose message names the job and contains `because`.
    case refused(because: String)
}

@Suite("Control commands", .onTestThreads)
struct ControlTests {
    /// The table of `EventStore+Control.swift`, written out independently.
    static func expected(_ setup: ControlSetup, _ command: ControlCommand) -> ControlOutcome {
        switch (setup, command) {
        case (.queued, .pause): .appends(.paused)
        case (.queued, .resume): .refused(because: "queued, not paused")
        case (.queued, .cancel): .appends(.cancelled)
        case (.running, .pause): .appends(.running, pauseRequested: true)
        case (.running, .resume): .refused(because: "running, not paused")
        case (.running, .cancel): .appends(.running, cancelRequested: true)
        case (.runningPauseRequested, .pause): .repeats
        case (.runningPauseRequested, .resume): .appends(.running)
        case (.runningPauseRequested, .cancel): .appends(.running, pauseRequested: true, cancelRequested: true)
        case (.runningCancelRequested, .pause), (.runningBothRequested, .pause): .refused(because: "being cancelled")
        case (.runningCancelRequested, .resume), (.runningBothRequested, .resume): .refused(because: "being cancelled")
        case (.runningCancelRequested, .cancel), (.runningBothRequested, .cancel): .repeats
        case (.paused, .pause): .repeats
        case (.paused, .resume): .appends(.queued)
        case (.paused, .cancel): .appends(.cancelled)
        case (.cancelled, .cancel): .repeats
        case (.failed, .retry), (.cancelled, .retry): .appends(.queued)
        case (.succeeded, _): .refused(because: "succeeded")
        case (.failed, .resume), (.cancelled, .resume): .refused(because: "jobctl retry")
        case (.failed, _): .refused(because: "failed")
        case (.cancelled, _): .refused(because: "cancelled")
        case (_, .retry): .refused(because: "not failed or cancelled")
        }
    }

    /// Brings a new job into `setup` and returns its id.
    static func prepare(_ setup: ControlSetup, in fixture: StoreFixture) throws -> String {
        let store = fixture.store
        switch setup {
        case .queued:
            return try fixture.submit()
        case .running:
            return try fixture.running().record.id
        case .runningPauseRequested, .runningCancelRequested, .runningBothRequested:
            let id = try fixture.running().record.id
            if setup != .runningCancelRequested { _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100) }
            if setup != .runningPauseRequested { _ = try store.requestCancel(id: id, actor: "cli:test", now: 1_200) }
            return id
        case .paused:
            let id = try fixture.submit()
            _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100)
            return id
        case .succeeded, .failed:
            let claim = try fixture.running()
            let data = setup == .succeeded ? EventData(result: JobResult(size: 1))
                : EventData(error: StorageError(.objectNotFound, "gone", httpStatus: 404))
            try fixture.append(PendingEvent(jobID: claim.record.id, type: setup == .succeeded ? .succeeded : .failed,
                                            actor: workerName, leaseToken: claim.token, data: data), now: 1_100)
            return claim.record.id
        case .cancelled:
            let id = try fixture.submit()
            _ = try store.requestCancel(id: id, actor: "cli:test", now: 1_100)
            return id
        }
    }

    @Test("every state × command", arguments: ControlSetup.allCases, ControlCommand.allCases)
    func table(setup: ControlSetup, command: ControlCommand) throws {
        let fixture = try StoreFixture("store-control")
        defer { fixture.remove() }
        let store = fixture.store
        let id = try Self.prepare(setup, in: fixture)
        let before = try #require(try store.job(id))
        let expectation = Self.expected(setup, command)
        // A prefix of the id, in lower case, is accepted too.
        let handle = String(id.lowercased().prefix(command == .resume ? 26 : 20))

        let run = { () throws -> ControlResult in
            switch command {
            case .pause: try store.requestPause(id: handle, actor: "cli:test", now: 5_000)
            case .resume: try store.requestResume(id: handle, actor: "cli:test", now: 5_000)
            case .cancel: try store.requestCancel(id: handle, actor: "cli:test", now: 5_000)
            case .retry: try store.retry(id: handle, actor: "cli:test", now: 5_000)
            }
        }
        switch expectation {
        case .refused(let because):
            #expect {
                _ = try run()
            } throws: { error in
                guard case StoreError.invalidControl(let message) = error else { return false }
                return message.contains(id) && message.contains(because)
            }
            #expect(try store.job(id) == before)
        case .repeats:
            let result = try run()
            #expect(result.isRepeat)
            #expect(result.record == before)
            #expect(try store.job(id) == before)
        case .appends(let state, let pauseRequested, let cancelRequested):
            let result = try run()
            let record = result.record
            #expect(!result.isRepeat)
            #expect(record.state == state)
            #expect(record.pauseRequested == pauseRequested)
            #expect(record.cancelRequested == cancelRequested)
            #expect(record.version == before.version + 1)
            #expect(try store.job(id) == record)
            if state == .cancelled { #expect(record.error?.code == .cancelled) }
            if command == .retry { #expect(record.attempts == 0 && record.error == nil && record.runAfterMs == 5_000) }
            if state == .queued { #expect(record.runAfterMs == 5_000) }
        }
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("controlEach decides every job as control does, in one call; a refused or unknown job fails alone",
          arguments: Engine.allCases, [ControlCommand.cancel, .retry, .pause])
    func controlEachAsControlDoes(engine: Engine, command: ControlCommand) throws {
        let fixture = try StoreFixture("store-control-each", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        // Those that claim a job first: `prepare` claims the oldest queued job.
        let setups: [ControlSetup] = [.running, .runningPauseRequested, .runningCancelRequested, .runningBothRequested,
                                      .succeeded, .failed, .paused, .cancelled, .queued]
        #expect(Set(setups) == Set(ControlSetup.allCases))
        var ids: [String] = []
        for setup in setups { ids.append(try Self.prepare(setup, in: fixture)) }
        let before = try ids.map { try #require(try store.job($0)) }
        let missing = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
        let lifecycle: JobCommand = switch command {
        case .pause: .pause
        case .resume: .resume
        case .cancel: .cancel(by: "cli:test")
        case .retry: .retry
        }
        let answers = try store.controlEach(lifecycle, ids: Array(ids.prefix(3)) + [missing] + Array(ids.dropFirst(3)),
                                            actor: "cli:test", now: 5_000, ifStateIn: nil)
        try #require(answers.count == ids.count + 1)
        var byJob = answers
        let unknown = byJob.remove(at: 3)
        #expect(throws: StoreError.self) { try unknown.get() }
        for (index, setup) in setups.enumerated() {
            let answer = byJob[index]
            let now = try #require(try store.job(ids[index]))
            switch Self.expected(setup, command) {
            case .refused(let because):
                guard case .failure(.invalidControl(let message)) = answer else {
                    Issue.record("\(setup): \(answer), expected a refusal")
                    continue
                }
                #expect(message.contains(because), "\(setup): \(message)")
                #expect(now == before[index], "\(setup): a refused job is left as it was")
            case .repeats:
                let got = try answer.get()
                let result = try #require(got.result, "\(setup)")
                #expect(result.isRepeat && now == before[index] && got.events.isEmpty, "\(setup)")
            case .appends(let state, let pauseRequested, let cancelRequested):
                let got = try answer.get()
                let result = try #require(got.result, "\(setup)")
                #expect(!result.isRepeat && got.state == state && now == result.record, "\(setup)")
                #expect(now.state == state && now.pauseRequested == pauseRequested && now.cancelRequested == cancelRequested,
                        "\(setup)")
                #expect(got.events.count == now.version - before[index].version && !got.events.isEmpty, "\(setup): \(got.events)")
            }
        }
        // A state condition: only the jobs still in it are acted on, the others answered with their state.
        let queued = try fixture.submit()
        let running = try #require(setups.firstIndex(of: .running).map { ids[$0] })
        let runningState = try #require(try store.job(running)).state
        let answers2 = try store.controlEach(.cancel(by: "cli:test"), ids: [queued, running], actor: "cli:test",
                                             now: 6_000, ifStateIn: [.queued])
        let first = try answers2[0].get(), second = try answers2[1].get()
        #expect(first.state == JobState.cancelled && first.result != nil)
        #expect(second.result == nil && second.state == runningState)
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("refusals say why", arguments: Engine.allCases)
    func refusalMessage(engine: Engine) throws {
        let fixture = try StoreFixture("store-control-message", engine: engine)
        defer { fixture.remove() }
        let id = try Self.prepare(.succeeded, in: fixture)
        #expect(throws: StoreError.invalidControl("job \(id) has already succeeded; nothing to pause")) {
            _ = try fixture.store.requestPause(id: id, actor: "cli:test", now: 2)
        }
    }

    @Test("ids resolve from unique prefixes of 6 or more characters, in any case", arguments: Engine.allCases)
    func resolveID(engine: Engine) throws {
        let fixture = try StoreFixture("store-resolve", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        // Submitted in the same millisecond, the ids share their 10-character time prefix.
        let outcomes = try store.submit([uploadSpec(), uploadSpec()], actor: "cli:test", now: 1_700_000_000_000)
        let (a, b) = (outcomes[0].id, outcomes[1].id)
        let common = zip(a, b).prefix { $0 == $1 }.count
        #expect(common >= 10)
        #expect(try store.resolveID(a) == a)
        #expect(try store.resolveID(a.lowercased()) == a)
        #expect(try store.resolveID(String(a.prefix(common + 1)).lowercased()) == a)
        #expect(throws: StoreError.ambiguous(prefix: String(a.prefix(8)), matches: [a, b].sorted())) {
            _ = try store.resolveID(String(a.prefix(8)))
        }
        #expect(throws: StoreError.notFound("ZZZZZZZZ")) { _ = try store.resolveID("ZZZZZZZZ") }
        #expect(throws: StoreError.notFound("not-an-id!")) { _ = try store.resolveID("not-an-id!") }
        // Upper-cased as ASCII only: `ß` upper-cases to `SS` and `ﬀ` to `FF`, and a prefix holding them was
        // looked up as those letters.
        for typed in ["01abcdß", "01abcd\u{FB00}", "01ＡBCDEF"] {
            #expect(throws: StoreError.notFound(typed)) { _ = try JobIDQuery(typed) }
        }
        #expect {
            _ = try store.resolveID(String(a.prefix(5)))
        } throws: { error in
            "\(error)".contains("at least 6")
        }
    }

    @Test("the control poll's light read answers what the whole record says, for every state, in one call",
          arguments: Engine.allCases)
    func controlStatesMatchRecords(engine: Engine) throws {
        let fixture = try StoreFixture("store-controlstates", engine: engine)
        defer { fixture.remove() }
        var ids: [String] = []
        // The queued job last: preparing a running job claims the oldest queued one.
        for setup in ControlSetup.allCases.filter({ $0 != .queued }) + [.queued] {
            ids.append(try Self.prepare(setup, in: fixture))
        }
        let missing = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
        let states = try fixture.store.controlStates(ids: ids + [missing])
        // Every existing job answers once; the missing id is left out.
        #expect(states.map(\.id).sorted() == ids.sorted())
        for state in states {
            let record = try #require(try fixture.store.job(state.id))
            #expect(state == JobControlState(record))
        }
        // The setups' requests are all seen: a pause, a cancel, both, and the states they end in.
        #expect(states.filter(\.pauseRequested).count == 2)
        #expect(states.filter(\.cancelRequested).count == 2)
        #expect(Set(states.map(\.state)) == [.queued, .running, .paused, .succeeded, .failed, .cancelled])
        #expect(try fixture.store.controlStates(ids: []) == [])
    }

    /// A bulk control selects by state, then controls each job in a transaction of its own: a job that
    /// changed state in between (a worker claimed it) is left alone, with nothing written.
    @Test("a control conditioned on states leaves a job no longer in them alone", arguments: Engine.allCases)
    func conditionedOnState(engine: Engine) throws {
        let fixture = try StoreFixture("controlifstate", engine: engine)
        defer { fixture.remove() }
        let claimedMeanwhile = try fixture.submit(now: 1_000)
        let stillQueued = try fixture.submit(now: 1_000)
        let claims = try fixture.store.claim(owner: "worker:a", queues: nil, limit: 1, leaseMs: 60_000, now: 2_000)
        #expect(claims.map(\.record.id) == [claimedMeanwhile])
        let left = try fixture.store.control(.cancel(by: "cli:test"), id: claimedMeanwhile, actor: "cli:test", now: 3_000, ifStateIn: [.queued])
        #expect(left.result == nil && left.state == .running)
        #expect(try fixture.store.job(claimedMeanwhile)?.cancelRequested == false)
        #expect(try fixture.store.events(jobID: claimedMeanwhile).map(\.type) == [.submitted, .claimed])
        let done = try fixture.store.control(.cancel(by: "cli:test"), id: stillQueued, actor: "cli:test", now: 3_000, ifStateIn: [.queued])
        #expect(done.result?.record.state == .cancelled && done.state == .cancelled)
    }
}
