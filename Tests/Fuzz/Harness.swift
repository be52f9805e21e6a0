import Foundation

/// The input libFuzzer hands over, with the views the parsers take.
struct FuzzInput {
    let bytes: [UInt8]

    /// The bytes as text, invalid UTF-8 replaced (as Swift does with arguments and environment values).
    var text: String { String(decoding: bytes, as: UTF8.self) }
    var data: Data { Data(bytes) }

    /// The first byte (a selector), and the rest as text.
    var selector: UInt8 { bytes.first ?? 0 }
    var restText: String { String(decoding: bytes.dropFirst(), as: UTF8.self) }
    var restData: Data { Data(bytes.dropFirst()) }

    /// The text split at NUL bytes (several values from one input).
    var parts: [String] { bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) } }
    /// After the selector byte, split at NUL bytes.
    var restParts: [String] {
        bytes.dropFirst().split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// One parser under test.
struct FuzzTarget: Sendable {
    let name: String
    let summary: String
    /// Run once before fuzzing (scratch files).
    var setUp: @Sendable () -> Void = {}
    let run: @Sendable (FuzzInput) -> Void
}

/// A broken promise of a parser (a round trip that does not give back what went in): a trap, so libFuzzer
/// keeps the input as a crash, with the message naming what differed.
func expect(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
            file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("round trip: " + message(), file: file, line: line) }
}

enum Harness {
    nonisolated(unsafe) static var target: FuzzTarget?
    /// A folder of this process's own for files the parsers read (under $TMPDIR).
    nonisolated(unsafe) static var scratch = ""
    /// JOBCTL_FUZZ_VERBOSE=1: what each input gave (a value or an error), on standard error, for looking
    /// at one input by hand.
    static let verbose = ProcessInfo.processInfo.environment["JOBCTL_FUZZ_VERBOSE"] == "1"

    static func note(_ text: @autoclosure () -> String) {
        if verbose { FileHandle.standardError.write(Data(("jobctl-fuzz: " + text() + "\n").utf8)) }
    }

    static let targets: [FuzzTarget] = [
        manifestTarget, configTarget, numbersTarget, referenceTarget, redactionTarget, textTarget,
        storeJSONTarget, sidecarTarget, httpHeadersTarget, gcsJSONTarget, archiveTarget, argumentsTarget,
        httpLiveTarget, metricsTarget, databaseTarget,
    ]

    static func start(arguments: [String]) {
        let chosen = arguments.first(where: { $0.hasPrefix("--target=") }).map { String($0.dropFirst("--target=".count)) }
            ?? ProcessInfo.processInfo.environment["JOBCTL_FUZZ_TARGET"]
        if chosen == "list" || chosen == nil {
            var text = chosen == nil ? "jobctl-fuzz: choose a parser with --target=NAME (or JOBCTL_FUZZ_TARGET=NAME):\n" : ""
            for target in targets { text += "  \(target.name.padding(toLength: 11, withPad: " ", startingAt: 0)) \(target.summary)\n" }
            (chosen == nil ? FileHandle.standardError : FileHandle.standardOutput).write(Data(text.utf8))
            exit(chosen == nil ? 2 : 0)
        }
        guard let found = targets.first(where: { $0.name == chosen }) else {
            FileHandle.standardError.write(Data("jobctl-fuzz: no parser '\(chosen!)'; --target=list names them\n".utf8))
            exit(2)
        }
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        scratch = "\(base)/jobctl-fuzz-\(found.name)-\(getpid())"
        try? FileManager.default.removeItem(atPath: scratch)
        try? FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: Harness.scratch) }
        target = found
        found.setUp()
    }

    /// Writes `data` to the scratch file `name` (mode 0600) and returns its path.
    static func scratchFile(_ name: String, _ data: Data) -> String {
        let path = "\(scratch)/\(name)"
        // (libFuzzer's timer signal can interrupt a call: EINTR is tried again.)
        var descriptor: Int32
        repeat { descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) } while descriptor < 0 && errno == EINTR
        precondition(descriptor >= 0, "cannot write \(path)")
        data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                precondition(written > 0, "cannot write \(path)")
                offset += written
            }
        }
        close(descriptor)
        return path
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let target = Harness.target else { return 0 }
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    target.run(FuzzInput(bytes: bytes))
    return 0
}
