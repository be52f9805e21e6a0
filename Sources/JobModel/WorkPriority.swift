import Dispatch

/// The one priority of everything a command runs concurrently: its async body, each job's task, the
/// transfers' tasks and the `file://` read queue.
///
/// Why one: on Linux each priority is a pool of Dispatch threads of its own, as wide as the machine. A
/// worker's work had three (its loop and most job tasks at user-initiated, inherited from the command's
/// task; a transfer's task at default; `file://` reads at utility), so a job's hand-offs went from one
/// pool to another and two cores ran up to six pool threads, each woken for a few microseconds of work.
/// At one priority a 10,000-job `download-memory` drain switched threads 60 % less often and took ~6 %
/// less time, in one process and in four alike (BENCHMARKS.md). A task started from a thread outside any
/// task takes that thread's priority, so every task and queue names this one rather than inheriting.
public enum WorkPriority {
    /// For `Task(priority:)` and `Task.detached(priority:)`.
    public static let task: TaskPriority = .medium
    /// The same class for Dispatch queues.
    public static let dispatch: DispatchQoS = .default
}
