import Foundation

// jobctl — a durable, event-sourced transfer job queue. This file only dispatches: each command's
// behaviour lives in Commands+*.swift, the work itself in the library modules.

// First, before any thread exists (every thread inherits this mask): hold SIGTERM and SIGINT, so one
// that arrives while the worker is still starting waits for its handler instead of killing the process.
// Commands other than `worker` release them again before they run.
ShutdownSignals.block()

let arguments = Array(CommandLine.arguments.dropFirst())
exit(CommandRunner.run(arguments))
