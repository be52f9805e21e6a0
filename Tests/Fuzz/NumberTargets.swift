import Foundation
@testable import jobctl
@testable import JobModel
@testable import Storage

// MARK: - numbers: sizes, rates, durations, times, counts

/// Every grammar of a number a user types, on the same text: `ByteSize` (`max_size:`, `JOBCTL_CHUNK_SIZE`),
/// `TransferRate` (`max_rate:`, `--bwlimit`), `DurationText` (`timeout:`, `delay:`, `--lease`,
/// `JOBCTL_STALL_TIMEOUT`), `TimeInput` (`--since`, `--until`, `--at`), `RFC3339` (`run_after:`),
/// `DecimalText` (`priority:`, counts), the storage settings and `JOBCTL_DB_ANSWER_TIMEOUT`,
/// (`Retry-After` is `httpheaders`'s.) What they read must print back as itself where a writer exists (`DurationText.format`,
/// `RFC3339.string`).
let numbersTarget = FuzzTarget(
    name: "numbers",
    summary: "ByteSize/TransferRate/IfExists/DecimalText/DurationText/RFC3339/TimeInput/StorageConfiguration parsing",
    run: { input in
        let text = input.text
        if case .bytes(let bytes) = ByteSize.read(text) {
            _ = ByteSize.format(bytes)
            expect(ByteSize.parse("\(bytes)") == bytes, "ByteSize '\(text)' = \(bytes) does not read back")
        }
        _ = ByteSize.grammarNote(for: text)
        _ = TransferRate.read(text)
        _ = TransferRate.problem(with: text, what: "--bwlimit")
        switch DecimalText.read(text) {
        case .value(let value):
            var written: [UInt8] = []
            DecimalText.append(value, to: &written)
            expect(DecimalText.read(String(decoding: written, as: UTF8.self)) == .value(value), "DecimalText '\(text)' = \(value) does not read back")
        default: break
        }
        _ = DecimalText.leadingZeroNote(for: text)
        for unit: Int64? in [nil, 1_000, 1] {
            if case .milliseconds(let ms) = DurationText.read(text, defaultUnitMs: unit), unit == nil, ms % 1_000 == 0, ms > 0,
               let seconds = Int(exactly: ms / 1_000) {
                let written = DurationText.format(seconds)
                expect(DurationText.parse(written) == seconds, "duration '\(text)' = \(seconds)s is written '\(written)', which reads back as \(String(describing: DurationText.parse(written)))")
            }
        }
        _ = DurationText.parse(text)
        let now: Int64 = 1_764_410_400_000
        for option in ["since", "at"] {
            do { _ = option == "at" ? try TimeInput.future(text, option: option, now: now) : try TimeInput.parse(text, option: option, now: now) } catch {
                _ = String(describing: error)
            }
        }
        if let ms = RFC3339.parse(text) {
            let written = RFC3339.string(ms)
            if (0...253_402_300_799_999).contains(ms) {
                expect(RFC3339.parse(written) == ms, "RFC 3339 '\(text)' = \(ms) is written '\(written)', which reads back as \(String(describing: RFC3339.parse(written)))")
            }
        }
        _ = RFC3339.parseDate(text)
        _ = RFC3339.isMisplacedLeapSecond(text)
        do throws(UsageError) { _ = try Context.answerTimeoutMs(parsing: text) } catch { _ = error.message }
        do { _ = try NumberInput.integer(text, option: "concurrency", range: 1...256) } catch { _ = String(describing: error) }
        do { _ = try DurationInput.milliseconds(text, option: "lease", defaultUnitMs: 1_000, range: 10_000...3_600_000, rangeText: "of 10s to 1h") } catch {
            _ = String(describing: error)
        }
        for variable in ["JOBCTL_CHUNK_SIZE", "JOBCTL_RESUMABLE_THRESHOLD", "JOBCTL_STALL_TIMEOUT", "JOBCTL_MIN_RATE",
                         "JOBCTL_SLICED_THRESHOLD", "JOBCTL_SLICES", "JOBCTL_REFUSE_EXECUTABLES", "STORAGE_EMULATOR_HOST",
                         "JOBCTL_TOKEN_COMMAND", Context.answerTimeoutVariable] {
            _ = Setting.formProblem(of: variable, value: text)
        }
        _ = StorageConfiguration.sizeOrTooLarge(text)
        // Numbers the log holds, printed back (times, sizes, durations): the first eight bytes as one.
        var raw: Int64 = 0
        for byte in input.bytes.prefix(8) { raw = raw << 8 | Int64(byte) }
        for value in [raw, -raw, raw >> 8, raw & 0xFFFF_FFFF_FFFF] {
            _ = RFC3339.string(value)
            var bytes: [UInt8] = []
            _ = RFC3339.append(value, to: &bytes)
            _ = ByteSize.format(value)
            _ = DurationText.format(Int(value))
            _ = TimeText.duration(seconds: value)
            _ = TimeText.age(value, now: 1_764_410_400_000)
        }
        _ = TimeText.rescueReasonWithReadableTime(text)
    })
