import Foundation
import JobLifecycle
import JobModel
import StorePort

/// pause / resume / cancel / retry on every job a filter selects (`--state`, `--queue`, `--kind`,
/// `--since`, `--batch`), or with `--dry-run` on ids or a filter: what would change, then the counts.
///
/// Each job still goes through the store's control of one job, in turn, so every rule (and every
/// refusal) is the lifecycle's, exactly as for one id; `jobsPerTransaction` of them share a transaction
/// (each in a savepoint of its own), so a bulk control of thousands is not a sync per job. A dry run asks
/// the same lifecycle about the job as read and appends nothing.
struct BulkControl {
    let name: String
    let filter: JobFilter?
    let ids: [String]
    let dryRun: Bool
    let json: Bool
    /// `retry --with-dependants`: each job's retry reopens the dependants its end cancelled.
    let withDependants: Bool

    /// The help paragraph every control command shows about filters.
    static func discussion(_ name: String) -> String {
        """
        Instead of ids, --state, --queue, --kind, --since and --batch select every matching job (oldest first), and
        \(name) goes to each in turn; a summary line counts the jobs changed, already so and refused. --dry-run
        (with ids or filters) prints what would happen to each job and changes nothing. Exit 1 when any job
        was (or, with --dry-run, would be) refused; harmless repeats do not count. A job whose transaction's
        COMMIT went unanswered (a PostgreSQL connection lost just then) is counted as of unknown outcome (exit
        1): the change may have been made, and its line says how to tell.
        """
    }

    /// The bulk form of the command line, or nil when it names ids without `--dry-run` (the plain form).
    init?(name: String, arguments: ParsedArguments) throws {
        let states = try arguments.stateSet()
        let kinds = try arguments.kindSet()
        let queue = try arguments.value(Options.queue)
        let since = try arguments.value(Options.since)
        let batch = try arguments.value(Options.batch)
        let filtered = states != nil || kinds != nil || queue != nil || since != nil || batch != nil
        let ids = arguments.positionals
        if filtered && !ids.isEmpty {
            throw UsageError("give job ids or filters (--state, --queue, --kind, --since, --batch), not both")
        }
        if !filtered && ids.isEmpty {
            throw UsageError("give job ids, or select jobs with --state, --queue, --kind, --since or --batch")
        }
        dryRun = arguments[Options.dryRun]
        guard filtered || dryRun else { return nil }
        self.name = name
        self.ids = ids
        self.json = arguments[Options.json]
        withDependants = name == "retry" && arguments[Options.withDependants]
        filter = filtered ? JobFilter(states: states, kinds: kinds, queue: queue, createdSince: since, batch: batch) : nil
    }

    /// What happened (or would happen) to one job.
    struct Decision: Encodable {
        let id: String
        let kind: String
        let state_before: String
        /// The state after the command (a dry run: the state now); `unknown` when the outcome is.
        let state: String
        /// `changed`, `repeat` or `refused`; `unknown` when the transaction's COMMIT went unanswered (the
        /// change may have been made: the job never goes through the command again, and `reason` says
        /// how to tell); for a dependant with `--with-dependants`, also `kept`.
        let outcome: String
        /// The events appended (a dry run: the events the lifecycle would append).
        let events: [String]
        /// Why it was refused (or, for a dependant, left cancelled), or why its outcome is unknown.
        let reason: String?
        /// With `--with-dependants`: the selected job whose retry reopens (or leaves cancelled) this
        /// dependant; absent for the selected jobs themselves.
        var dependant_of: String? = nil
    }

    struct Report: Encodable {
        let command: String
        let dry_run: Bool
        let matched, changed, repeats, refused: Int
        /// Jobs whose transaction's COMMIT went unanswered: changed or not, nobody knows (see `Decision.outcome`).
        let unknown: Int
        /// Jobs selected by `--state` whose state changed before their turn (a worker claimed one).
        let no_longer_selected: Int
        /// With `--with-dependants`: the dependants reopened (or that would be) and those left cancelled.
        let dependants_reopened: Int?
        let dependants_kept: Int?
        let jobs: [Decision]
    }

    func run(context: Context, lifecycle command: JobCommand) throws -> Int32 {
        let store = try context.openStore(readOnly: dryRun)
        var targets: [JobRecord] = []
        var unresolved: [(String, String)] = []
        if let filter {
            let passedOver = PassedOver()
            targets = try store.jobs(filter: filter, passingOver: passedOver).reversed()
            if let note = passedOver.sentence("left alone") { emitError(note) }
        } else {
            for given in ids {
                do { targets.append(try store.job(resolving: given)) } catch { unresolved.append((given, "\(error)")) }
            }
        }
        var decisions: [Decision] = []
        for (given, reason) in unresolved {
            decisions.append(Decision(id: given, kind: "-", state_before: "-", state: "-", outcome: "refused", events: [], reason: reason))
        }
        // A selected job a retry before it reopened as a dependant, by its id: the job whose retry did.
        var reopenedWith: [String: String] = [:]
        // A dry run's retries so far, and the dependants they reopened: what the log would hold open by
        // now, for the plans after them (a dependant of two selected jobs opens with the second).
        var openedBefore: Set<String> = []
        // A selected job that waits for another (`after:`) and whose retry was refused goes once more after
        // the others: a later selected job's retry may open the job it waits for (or, with
        // --with-dependants, reopen it with that one), so what a bulk retry does does not depend on which
        // of the two is older. Not one whose COMMIT went unanswered (outcome `unknown`): its retry may have
        // been made, and made again it re-ran the job (or was refused for the state the first left).
        var waitingTurn: [JobRecord] = []
        func take(_ job: JobRecord, mayWait: Bool) {
            if withDependants {
                if let root = reopenedWith[job.id] {
                    decisions.append(Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue,
                                              state: dryRun ? job.state.rawValue : JobState.queued.rawValue, outcome: "repeat", events: [],
                                              reason: "reopened with \(root) above"))
                    return
                }
                let made = retryWithDependants(job, store: store, context: context, openedBefore: openedBefore)
                if mayWait, made.first?.outcome == "refused", !(job.spec.after ?? []).isEmpty {
                    waitingTurn.append(job)
                    return
                }
                for dependant in made.dropFirst() where dependant.outcome == "changed" { reopenedWith[dependant.id] = job.id }
                if dryRun { openedBefore.formUnion(made.filter { $0.outcome == "changed" }.map(\.id)) }
                decisions += made
                return
            }
            // Only a dry run comes here: the changes go through `performEach`, many jobs a transaction.
            let decision = predict(job, command, store: store, openedBefore: openedBefore)
            if mayWait, command == .retry, decision.outcome == "refused", !(job.spec.after ?? []).isEmpty {
                waitingTurn.append(job)
                return
            }
            // A retry opens the job for the plans after it, as the log would have it by then.
            if dryRun && decision.outcome == "changed" && command == .retry { openedBefore.insert(job.id) }
            decisions.append(decision)
        }
        // Without --dry-run or --with-dependants, `jobsPerTransaction` jobs at a time go through the store
        // in one transaction (`controlEach`), each still the lifecycle's decision on the job as it stands.
        func takeAll(_ jobs: [JobRecord], mayWait: Bool) {
            guard !dryRun, !withDependants else {
                for job in jobs { take(job, mayWait: mayWait) }
                return
            }
            for start in stride(from: 0, to: jobs.count, by: Self.jobsPerTransaction) {
                let chunk = Array(jobs[start..<min(jobs.count, start + Self.jobsPerTransaction)])
                for (job, decision) in zip(chunk, performEach(chunk, store: store, context: context, command: command)) {
                    if mayWait, command == .retry, decision.outcome == "refused", !(job.spec.after ?? []).isEmpty {
                        waitingTurn.append(job)
                    } else {
                        decisions.append(decision)
                    }
                }
            }
        }
        takeAll(targets, mayWait: true)
        let secondTurn = waitingTurn
        waitingTurn = []
        takeAll(secondTurn, mayWait: false)
        // A dependant left cancelled at one selected job's retry and reopened by a later one's was not left
        // cancelled: only its reopening is reported. One left cancelled at several is reported once, at
        // the last (its reason as things end).
        var lastKept: [String: Int] = [:]
        for (index, decision) in decisions.enumerated() where decision.outcome == "kept" { lastKept[decision.id] = index }
        decisions = decisions.enumerated().filter { index, decision in
            decision.outcome != "kept" || (reopenedWith[decision.id] == nil && lastKept[decision.id] == index)
        }.map(\.element)
        let selected = decisions.filter { $0.dependant_of == nil }
        let dependants = decisions.filter { $0.dependant_of != nil }
        let report = Report(command: name, dry_run: dryRun, matched: targets.count,
                            changed: selected.filter { $0.outcome == "changed" }.count,
                            repeats: selected.filter { $0.outcome == "repeat" }.count,
                            refused: selected.filter { $0.outcome == "refused" }.count,
                            unknown: selected.filter { $0.outcome == "unknown" }.count,
                            no_longer_selected: selected.filter { $0.outcome == "no longer selected" }.count,
                            dependants_reopened: withDependants ? dependants.filter { $0.outcome == "changed" }.count : nil,
                            dependants_kept: withDependants ? dependants.filter { $0.outcome == "kept" }.count : nil,
                            jobs: decisions)
        if json {
            emit(try jsonText(report))
        } else {
            for decision in decisions { printLine(decision, context: context) }
            emit(summary(report))
        }
        return report.refused == 0 && report.unknown == 0 ? ExitCode.ok : ExitCode.failure
    }

    /// The lifecycle's answer for `job`, read again by the store with the facts the command would be
    /// decided on (a retry: how the jobs it waits for stand, those in `openedBefore` taken as open, as the
    /// retries before it would leave them): nothing is appended.
    private func predict(_ job: JobRecord, _ command: JobCommand, store: any JobStore, openedBefore: Set<String>) -> Decision {
        do {
            let (events, record) = try store.planControl(command, id: job.id, now: Clock.nowMs(), openedBefore: openedBefore)
            return Decision(id: job.id, kind: job.kind.rawValue, state_before: record.state.rawValue, state: record.state.rawValue,
                            outcome: events.isEmpty ? "repeat" : "changed", events: events.map(\.payload.type.rawValue), reason: nil)
        } catch {
            return Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue, state: job.state.rawValue,
                            outcome: "refused", events: [], reason: "\(error)")
        }
    }

    /// Jobs a bulk control changes in one transaction: a few milliseconds of the write lock, one sync for
    /// them all.
    static let jobsPerTransaction = 256

    /// The store's control call for each of `jobs` (a filter selected them: without `--dry-run` the bulk
    /// form has one), all in one transaction (`controlEach`); a failed transaction refuses them all with
    /// its error. Selected by `--state`, a job is acted on only while it is still in one of those states
    /// (the store checks in the transaction): a job a worker claimed since the listing is left alone and
    /// said so.
    private func performEach(_ jobs: [JobRecord], store: any JobStore, context: Context, command: JobCommand) -> [Decision] {
        let states = filter?.states
        let answers: [Result<ControlAnswer, StoreError>]
        do {
            answers = try store.controlEach(command, ids: jobs.map(\.id), actor: context.actor, now: Clock.nowMs(), ifStateIn: states)
        } catch {
            answers = Array(repeating: .failure(error), count: jobs.count)
        }
        return zip(jobs, answers).map { job, answer in
            switch answer {
            case .success(let answer):
                guard let result = answer.result else {
                    let selected = (states ?? []).map(\.rawValue).sorted().joined(separator: " or ")
                    return Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue, state: answer.state.rawValue,
                                    outcome: "no longer selected", events: [],
                                    reason: "it is \(answer.state.rawValue) now, no longer \(selected); left alone")
                }
                return Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue, state: result.record.state.rawValue,
                                outcome: result.isRepeat ? "repeat" : "changed", events: answer.events.map(\.rawValue), reason: nil)
            case .failure(let error):
                return failed(job, error)
            }
        }
    }

    /// `retry --with-dependants` of `job` (a dry run: what it would do): the job's decision, then one per
    /// dependant reopened (`changed`) or left cancelled (`kept`, with why). One transaction.
    private func retryWithDependants(_ job: JobRecord, store: any JobStore, context: Context, openedBefore: Set<String>) -> [Decision] {
        do {
            let states = filter?.states
            let answer = try store.retryWithDependants(id: job.id, actor: context.actor, now: Clock.nowMs(), ifStateIn: states,
                                                       dryRun: dryRun, openedBefore: openedBefore)
            guard let result = answer.result else {
                let selected = (states ?? []).map(\.rawValue).sorted().joined(separator: " or ")
                return [Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue, state: answer.state.rawValue,
                                 outcome: "no longer selected", events: [], reason: "it is \(answer.state.rawValue) now, no longer \(selected); left alone")]
            }
            let retried = EventType.retried.rawValue
            var decisions = [Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue,
                                      state: result.job.record.state.rawValue, outcome: "changed", events: [retried], reason: nil)]
            for dependant in result.reopened {
                decisions.append(Decision(id: dependant.id, kind: dependant.kind.rawValue, state_before: JobState.cancelled.rawValue,
                                          state: dependant.state.rawValue, outcome: "changed",
                                          // One paused when the cascade cancelled it opens paused (a dry run reads it as it is now).
                                          events: dependant.state == .paused ? [retried, EventType.paused.rawValue] : [retried], reason: nil,
                                          dependant_of: job.id))
            }
            for kept in result.kept {
                decisions.append(Decision(id: kept.record.id, kind: kept.record.kind.rawValue, state_before: kept.record.state.rawValue,
                                          state: kept.record.state.rawValue, outcome: "kept", events: [], reason: kept.reason,
                                          dependant_of: job.id))
            }
            return decisions
        } catch {
            return [failed(job, error)]
        }
    }

    /// `job`'s decision when the command's transaction failed with `error`: refused, or — its COMMIT
    /// unanswered — of unknown outcome, saying how to tell whether the change was made (it was reported
    /// `refused` with the state before, though the server had made it).
    private func failed(_ job: JobRecord, _ error: StoreError) -> Decision {
        guard case .commitUnconfirmed(let loss) = error else {
            return Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue, state: job.state.rawValue,
                            outcome: "refused", events: [], reason: "\(error)")
        }
        return Decision(id: job.id, kind: job.kind.rawValue, state_before: job.state.rawValue, state: "unknown", outcome: "unknown",
                        events: [], reason: LostCommit.control(name, id: job.id, loss: loss, withDependants: withDependants))
    }

    private func printLine(_ decision: Decision, context: Context) {
        let state = JobState(rawValue: decision.state).map { context.paint(state: $0) } ?? decision.state
        // Ids and reasons are the log's text (a reason may quote a stored error): shown as `list` shows
        // them, control characters as `\u{…}`, never sent to the terminal raw.
        let with = decision.dependant_of.map { " (dependant of \(TerminalText.printable($0)))" } ?? ""
        let id = TerminalText.printable(decision.id)
        let reason = decision.reason.map(TerminalText.printable)
        switch (decision.outcome, dryRun) {
        case ("kept", _):
            emit("\(id)  \(state)  left cancelled\(with): \(reason ?? "")")
        case ("changed", true) where decision.dependant_of != nil:
            emit("\(id)  \(state)  would append \(decision.events.joined(separator: ", "))\(with)")
        case ("changed", false) where decision.dependant_of != nil:
            emit("\(id)  \(decision.state_before) → \(state)  (\(decision.events.joined(separator: ", ")))\(with)")
        case ("repeat", _) where decision.reason != nil:
            emit("\(id)  \(state)  (\(reason ?? ""))")
        case ("refused", _):
            emitError("Error: \(id): \(reason ?? "refused")")
        case ("unknown", _):
            emitError("Error: \(id): outcome unknown: \(reason ?? "its COMMIT went unanswered")")
        case ("no longer selected", _):
            emit("\(id)  \(state)  (\(reason ?? "no longer selected"))")
        case ("repeat", true):
            emit("\(id)  \(state)  already so; nothing would change")
        case ("repeat", false):
            emit("\(id)  \(state)  (already so; nothing changed)")
        case (_, true):
            emit("\(id)  \(state)  would append \(decision.events.joined(separator: ", "))")
        default:
            emit("\(id)  \(decision.state_before) → \(state)  (\(decision.events.joined(separator: ", ")))")
        }
    }

    private func summary(_ report: Report) -> String {
        let prefix = report.dry_run ? "dry run: \(name) would change" : "\(name):"
        let counts = "\(report.changed) of \(plural(report.matched, "job")) changed"
        let tail = "\(report.repeats) already so, \(report.refused) refused"
            + (report.unknown > 0 ? ", \(report.unknown) of unknown outcome (the change may have been made)" : "")
            + (report.no_longer_selected > 0 ? ", \(report.no_longer_selected) no longer \(filter?.states.map { $0.map(\.rawValue).sorted().joined(separator: "/") } ?? "selected")" : "")
            + (report.dependants_reopened.map { ", \(plural($0, "dependant")) \(report.dry_run ? "would be reopened" : "reopened")" } ?? "")
            + (report.dependants_kept.map { $0 > 0 ? ", \(plural($0, "dependant")) left cancelled" : "" } ?? "")
        if report.dry_run {
            return "\(prefix) \(report.changed) of \(plural(report.matched, "job")) (\(tail)); nothing was changed"
        }
        return "\(prefix) \(counts) (\(tail))"
    }
}
