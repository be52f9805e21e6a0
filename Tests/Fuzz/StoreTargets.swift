import Foundation
@testable import JobModel
@testable import Manifest
@testable import StorePort
@testable import Storage
@testable import jobctl

// MARK: - storejson: the event log's own JSON

/// `StoreJSON.decode` of arbitrary text as each shape the log stores (event payloads, specs, results,
/// errors, resume points, events, archive records), by the hand-written reader (`FastJSON`) and by
/// Foundation's: the hand-written one promises the value Foundation's gives, or nil. Whatever decodes
/// must survive `StoreJSON.encode` (hand-written writer: Foundation's bytes) and decode back as itself;
/// a payload must also survive `PayloadJSON` and `EventPayload(type:wire:)`.
let storeJSONTarget = FuzzTarget(
    name: "storejson",
    summary: "StoreJSON/FastJSON decode of each stored shape (fast == Foundation), encode → decode round trips",
    run: { input in
        let text = input.text
        checkStored(EventData.self, text)
        if let spec = checkStored(JobSpec.self, text) { showJSON(SpecView(spec, display: .redacting)) }
        if let result = checkStored(JobResult.self, text) { showJSON(ResultView(result, display: .redacting)) }
        checkStored(UploadMetadata.self, text)
        checkStored(JobBatch.self, text)
        if let error = checkStored(StorageError.self, text) {
            showJSON(ErrorView(error, display: .redacting))
            _ = Display.redacting.errorLine(error)
        }
        checkStored(StorageObject.self, text)
        if let resume = checkStored(ResumePoint.self, text) { showResumePoint(resume) }
        checkStored(ArchiveRecord.self, text)
        if let event = checkStored(JobEvent.self, text) { showEvent(event) }
        if let wire = try? StoreJSON.decode(EventData.self, text, what: "event data") {
            for type in EventType.allCases {
                guard let payload = try? EventPayload(type: type, wire: wire) else { continue }
                checkPayload(payload, type: type)
            }
        }
        _ = TerminalText.escapingJSONControls(input.data)
    })

/// What `show`, `history`, `watch` and their `--json` print of a resume point read from the log.
func showResumePoint(_ resume: ResumePoint) {
    _ = resume.bytesDone
    _ = Describe.resumePoint(resume)
    showJSON(ResumePointView(resume, display: .redacting))
}

/// What `history` and `watch` (text and `--json`) print of an event read from the log.
func showEvent(_ event: JobEvent) {
    _ = Describe.event(event, display: .redacting)
    showJSON(EventView(event, display: .redacting))
    showJSON(EventDataView(event.data, display: .redacting))
    if let resume = event.data.resumePoint { showResumePoint(resume) }
}

/// What `--json` prints of a stored value (escaped for terminals).
func showJSON<T: Encodable>(_ view: T) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    if let json = try? encoder.encode(view) { _ = TerminalText.escapingJSONControls(json) }
}

/// Decodes `text` as `T` both ways, compares, and round-trips what decoded; the value, if any.
@discardableResult
func checkStored<T: Codable & Equatable>(_ type: T.Type, _ text: String) -> T? {
    let fast = FastJSON.decode(T.self, text)
    let slow = try? StoreJSON.foundationDecode(T.self, text, what: "value")
    if let fast {
        expect(slow == fast, "\(T.self) from \(text): FastJSON read \(fast), Foundation \(slow.map { "\($0)" } ?? "an error")")
    }
    guard let value = fast ?? slow else { return nil }
    let written: String
    do { written = try StoreJSON.encode(value) } catch { fatalError("round trip: \(T.self) \(value) read from \(text) cannot be written: \(error)") }
    if let foundation = try? StoreJSON.foundationEncode(value) {
        expect(foundation == written, "\(T.self) \(value): StoreJSON wrote \(written), Foundation writes \(foundation)")
    }
    let back = try? StoreJSON.decode(T.self, written, what: "value")
    expect(back == value, "\(T.self) read from \(text) is written \(written), which reads back as \(back.map { "\($0)" } ?? "an error")")
    let backSlow = try? StoreJSON.foundationDecode(T.self, written, what: "value")
    expect(backSlow == value, "\(T.self) read from \(text) is written \(written), which Foundation reads back as \(backSlow.map { "\($0)" } ?? "an error")")
    return value
}

/// A payload as the log stores it (`PayloadJSON`) reads back as itself.
func checkPayload(_ payload: EventPayload, type: EventType) {
    let text: String
    do { text = try PayloadJSON.encode(payload) } catch { fatalError("round trip: payload \(payload) cannot be written: \(error)") }
    if let written = try? StoreJSON.encode(payload.wire) {
        expect(written == text, "payload \(payload): PayloadJSON wrote \(text), StoreJSON writes \(written)")
    }
    guard let wire = try? StoreJSON.decode(EventData.self, text, what: "payload") else {
        fatalError("round trip: payload \(payload) is written \(text), which does not read back")
    }
    let back = try? EventPayload(type: type, wire: wire)
    expect(back == payload, "payload \(payload) is written \(text), which reads back as \(back.map { "\($0)" } ?? "an error")")
}

// MARK: - sidecar: a file:// object's metadata file

/// `SidecarJSON.decode` (the hand-written reader of a `file://` object's metadata sidecar) against
/// Foundation's reading of the same bytes, which it promises to agree with where it answers, and the
/// hand-written writer against Foundation's bytes, and a read-back of what is written.
let sidecarTarget = FuzzTarget(
    name: "sidecar",
    summary: "SidecarJSON.decode vs decodeWithFoundation, encode vs encodeWithFoundation, round trip",
    run: { input in
        let data = input.data
        let fast = SidecarJSON.decode(data)
        let slow = try? SidecarJSON.decodeWithFoundation(data)
        if let fast {
            expect(slow.map { $0.object == fast.object && $0.file == fast.file } ?? false,
                   "sidecar \(input.text): hand-written read \(fast), Foundation \(slow.map { "\($0)" } ?? "an error")")
        }
        guard let contents = fast ?? slow else { return }
        let foundation = SidecarJSON.encodeWithFoundation(contents.object, describing: contents.file)
        if let written = SidecarJSON.encode(contents.object, describing: contents.file) {
            expect(written == foundation, "sidecar \(contents): hand-written \(String(decoding: written, as: UTF8.self)), Foundation \(String(decoding: foundation, as: UTF8.self))")
        }
        let back = SidecarJSON.decode(foundation) ?? (try? SidecarJSON.decodeWithFoundation(foundation))
        expect(back.map { $0.object == contents.object && $0.file == contents.file } ?? false,
               "sidecar \(contents) is written \(String(decoding: foundation, as: UTF8.self)), which reads back as \(back.map { "\($0)" } ?? "an error")")
    })

// MARK: - text: what is shown on terminals, in CSV, in JSON, in headers

/// The escapes of values shown to people and programs: `TerminalText` (every table cell, message and
/// log line), `escapingJSONControls` (every `--json`: must stay JSON with the same values), `CSVField`
/// (`audit --csv`), header-value checks (metadata, tokens), `TimeText.rescueReasonWithReadableTime`.
let textTarget = FuzzTarget(
    name: "text",
    summary: "TerminalText.*, escapingJSONControls (same values back), CSVField, HeaderValues, BearerToken",
    run: { input in
        let text = input.text
        _ = TerminalText.clipped(text, limit: Int(input.selector))
        _ = TerminalText.clipped(text)
        _ = TerminalText.printable(text)
        _ = TerminalText.printableKeepingLines(text)
        _ = TerminalText.printableKeepingTabs(text)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        if let json = try? encoder.encode([text: [text]]) {
            let escaped = TerminalText.escapingJSONControls(json)
            let back = try? JSONDecoder().decode([String: [String]].self, from: escaped)
            expect(back == [text: [text]], "escapingJSONControls turned \(String(decoding: json, as: UTF8.self)) into \(String(decoding: escaped, as: UTF8.self)), which reads as \(back.map { "\($0)" } ?? "no JSON")")
        }
        let field = CSVField.text(text)
        _ = CSVField.isPlain(text)
        _ = field
        _ = HeaderValues.firstControlCharacter(in: text)
        try? HeaderValues.check(text, what: "the value", remedy: "fix it")
        _ = HeaderValues.whyNotSendableBack(text)
        _ = HeaderValues.isSafeLine(text)
        _ = HeaderValues.printableName(of: text)
        try? BearerToken.validate(text, source: "the token")
        _ = ManifestReader.hasControlCharacter(text)
        _ = TimeText.rescueReasonWithReadableTime(text)
    })
