// jobctl-fuzz: coverage-guided fuzzing (libFuzzer) of jobctl's parsers, one binary for all of them.
//
// Built only with JOBCTL_FUZZ=1 (see Package.swift); `make fuzz` builds it and runs every parser for
// FUZZ_SECONDS each. To run one parser by hand:
//
//   JOBCTL_FUZZ=1 swift build -c release --product jobctl-fuzz --scratch-path .build/fuzz/build
//   mkdir -p corpus/manifest && cp jobs/*.yaml corpus/manifest/
//   .build/fuzz/build/release/jobctl-fuzz --target=manifest corpus/manifest -max_total_time=600 -timeout=5 -rss_limit_mb=2048
//
// `--target=NAME` (or JOBCTL_FUZZ_TARGET=NAME) chooses the parser: `--target=list` prints the names and
// what each calls. Every other argument is libFuzzer's (a crash file to replay, -minimize_crash=1, …).
// JOBCTL_FUZZ_VERBOSE=1 prints what each input gave (an error, jobs, a transfer's outcome); scratch files
// go under $TMPDIR. A parser must answer every input with a value or an error: a trap (overflow, index
// out of range, force-unwrap, precondition), a hang or a memory blow-up is a defect, and so is a broken
// round trip (a stored value that does not read back as itself), which the harness turns into a trap.
// Run with ASAN_OPTIONS=detect_leaks=0 and SWIFT_BACKTRACE=enable=no (the Swift backtracer and
// AddressSanitizer trip over each other; libFuzzer prints the stack).

#if canImport(Glibc)
import Glibc
#endif

@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<CInt>,
                     _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

Harness.start(arguments: CommandLine.arguments)
var fuzzerArgc = CommandLine.argc
var fuzzerArgv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(runFuzzerDriver(&fuzzerArgc, &fuzzerArgv) { data, size in
    LLVMFuzzerTestOneInput(data, size)
})
