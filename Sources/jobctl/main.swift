import Foundation

// jobctl — a durable, event-sourced transfer job queue. This file only dispatches: each command's
// behaviour lives in Commands+*.swift, the work itself in the library modules.

setvbuf(stdout, nil, _IOLBF, 0)
let arguments = Array(CommandLine.arguments.dropFirst())
exit(CommandRunner.run(arguments))
