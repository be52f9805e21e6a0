import Foundation

// jobctl — a durable, event-sourced transfer job queue. This file only dispatches: each command's
// behaviour lives in Commands+*.swift, the work itself in the library modules.

let arguments = Array(CommandLine.arguments.dropFirst())
exit(CommandRunner.run(arguments))
