import Foundation
import Synchronization
import Testing
@testable import Worker

/// The pool's heartbeats, one at a time between its loop and its lease keeper, each renewing from the
/// time it begins.
@Suite("heartbeat turns") struct HeartbeatTurnsTests {
    /// A test clock and the times the heartbeats were made at.
    private final class Recorder: Sendable {
        let clock = Mutex<Int64>(1_000)
        let beats = Mutex<[Int64]>([])
        let gate = Mutex(false)

        func beat(_ now: Int64) async {
            beats.withLock { $0.append(now) }
            while !gate.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
        }
    }

    /// A caller that found a heartbeat in flight (the loop, behind the keeper's) and waited seconds for
    /// it beats at the clock's time after the wait: a time read before it would renew the leases to a
    /// moment already past.
    @Test func aCallerThatWaitedBeatsAtTheTimeAfterItsWait() async throws {
        let recorder = Recorder()
        let turns = HeartbeatTurns(clock: { recorder.clock.withLock { $0 } })
        recorder.clock.withLock { $0 = 2_000 }
        let first = Task { try await turns.beatIfDue(every: 500) { now in await recorder.beat(now) } }
        while recorder.beats.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(2)) }
        let second = Task { try await turns.beatIfDue(every: 500) { now in await recorder.beat(now) } }
        try await Task.sleep(for: .milliseconds(50))
        #expect(recorder.beats.withLock { $0 } == [2_000], "a second heartbeat ran beside the first")
        recorder.clock.withLock { $0 = 9_000 }
        recorder.gate.withLock { $0 = true }
        try await first.value
        try await second.value
        #expect(recorder.beats.withLock { $0 } == [2_000, 9_000])
    }

    /// Not due within `every` of the last one; due again after it, and at once after the clock stepped
    /// back past the last one.
    @Test func aHeartbeatIsDueEveryPeriodAndAfterAStepBack() async throws {
        let recorder = Recorder()
        recorder.gate.withLock { $0 = true }
        let turns = HeartbeatTurns(clock: { recorder.clock.withLock { $0 } })
        for time: Int64 in [1_400, 1_500, 1_900, 1_999, 2_000, 500] {
            recorder.clock.withLock { $0 = time }
            try await turns.beatIfDue(every: 500) { now in await recorder.beat(now) }
        }
        #expect(recorder.beats.withLock { $0 } == [1_500, 2_000, 500])
    }
}
