import Foundation
@testable import EventStore

extension JobctlProcess {
    /// Stops the worker (SIGSTOP) at a moment it holds no write lock of the SQLite `database`: every
    /// jobctl writer takes the database's writer lock (`WriterLock`) before `BEGIN IMMEDIATE` and lets it
    /// go after COMMIT, so a worker stopped inside a write holds every other process's writes back for as
    /// long as it stays stopped (no one can take a lock from a live process) — a rescuer then waits out its
    /// busy timeout instead of rescuing. Tests of what a frozen worker can no longer do freeze it between
    /// writes: after each stop the lock is taken and given back here, and a stop that caught the worker
    /// holding it is undone and tried again. Other databases (PostgreSQL): a plain SIGSTOP.
    func freezeOutsideWrites(sqliteDatabase database: String?) throws {
        guard let database, let lock = try WriterLock.openOrCreate(forDatabase: database) else {
            signal(SIGSTOP)
            return
        }
        for _ in 0..<50 {
            signal(SIGSTOP)
            if lock.lock(waitingAtMostNs: 250_000_000) == .acquired {
                lock.unlock()
                return
            }
            signal(SIGCONT)
            usleep(20_000)
        }
        throw FreezeFailure()
    }
}

/// Fifty stops in a row caught the worker inside a write.
struct FreezeFailure: Error, CustomStringConvertible {
    var description: String { "the worker held the database's writer lock at each of 50 stops" }
}
