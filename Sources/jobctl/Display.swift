import Foundation
import JobLifecycle
import JobModel
import StorePort

/// How URLs, references and messages are shown: secrets redacted (unless `--show-secrets`), storage
/// paths decoded for people, control characters never sent to a terminal raw.
///
/// Every place the CLI prints a job's source or destination, a result URL, an upload session URI or
/// an error's URL or text goes through one of these functions.
struct Display: Sendable {
    /// `--show-secrets`: print URLs as the log holds them.
    let showSecrets: Bool

    static let redacting = Display(showSecrets: false)

    /// A URL kept a URL (JSON, CSV): secrets redacted, encoding untouched.
    ///
    /// Text `SecretRedaction.mayHoldSecret` finds nothing to hide in is returned as it is, unparsed:
    /// `audit` prints a source and a destination per row, and parsing them was a seventh of its CPU. Its
    /// own list of bytes here once left out the `;` of path parameters (`/a;jsessionid=…`), which
    /// `list`, `show`, `audit` and `history` then printed whole.
    func url(_ text: String) -> String {
        if showSecrets || !SecretRedaction.mayHoldSecret(text) { return text }
        return redactedURL(text)
    }

    /// Free text that may quote URLs (messages, causes, reasons): every URL in it redacted.
    func text(_ text: String) -> String {
        showSecrets ? text : SecretRedaction.redactURLs(in: text)
    }

    /// An object's name as shown: a plain-HTTP object is named by its URL's path, whose path parameters
    /// (`a.bin;jsessionid=…`) may carry a session, printed whole by `show`'s `object:` line and the result's
    /// `name` while the job's URL read `REDACTED` there. Secret path parameters are hidden in any
    /// object's name (a `gs://` name holding `;token=` is one, too).
    func objectName(_ name: String) -> String {
        guard !showSecrets, name.utf8.contains(UInt8(ascii: ";")) else { return name }
        let prefix = "x://h/"
        return String(SecretRedaction.redactURL(prefix + name).dropFirst(prefix.count))
    }

    /// A custom metadata value under `key`, as shown: `REDACTED` when the key is named like a credential
    /// (`SecretRedaction.isSecretMetadataKey`) — above all `firebaseStorageDownloadTokens`, the download tokens a
    /// manifest may set through `custom_metadata:`, which `show --json`, `history --json` and `result`
    /// printed whole while the object's `download_tokens` read `REDACTED` — otherwise with its URLs redacted.
    func metadataValue(_ value: String, key: String) -> String {
        guard !showSecrets else { return value }
        return SecretRedaction.isSecretMetadataKey(key) ? SecretRedaction.marker : text(value)
    }

    /// Custom metadata as shown: each value through `metadataValue`.
    func customMetadata(_ metadata: [String: String]?) -> [String: String]? {
        guard !showSecrets, let metadata else { return metadata }
        return Dictionary(uniqueKeysWithValues: metadata.map { ($0.key, metadataValue($0.value, key: $0.key)) })
    }

    /// A source or destination for people: `gs://` and `file://` references with their paths decoded
    /// (as gsutil prints them), other URLs redacted, local paths as they are; control characters escaped.
    func location(_ text: String) -> String {
        let lowered = text.lowercased()
        if lowered.hasPrefix("gs://") || lowered.hasPrefix("file://"),
           let reference = try? StorageReference(parsing: text) {
            return "\(reference.scheme.rawValue)://\(reference.bucket)/\(Self.escapingControls(reference.fullPath, percent: true))"
        }
        if text.hasPrefix("/") { return Self.localPath(text) }
        return Self.escapingControls(url(text))
    }

    /// A local path for people: its control characters as `\u{1B}`, as every other outside text is
    /// shown, and a backslash as `\\`, so that no two paths print alike. As `%1B` (a URL's escape, which a
    /// local path is not read with), the files named `a%1B` and `a<ESC>` printed alike — `%` is common in
    /// file names saved from URLs (`report%20final.pdf`); with the backslash left as it is, so did the
    /// files `a\u{1B}` and `a<ESC>`.
    static func localPath(_ path: String) -> String {
        TerminalText.printable(path.utf8.contains(UInt8(ascii: "\\")) ? path.replacingOccurrences(of: "\\", with: "\\\\") : path)
    }

    /// Control characters (C0, DEL, C1) as `%XX`, so a decoded name cannot move the cursor or recolour
    /// the terminal. With `percent`, `%` itself as `%25` too: a `gs://` or `file://` reference's path is
    /// percent-decoded when read back, so the object named `c/a%2Fb` printed as `gs://b/c/a%2Fb` was, pasted
    /// into a manifest, another object (`c/a/b`), and the names `tab<TAB>x` and `tab%09x` printed alike.
    static func escapingControls(_ text: String, percent: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: { TerminalText.isControl($0) || percent && $0 == "%" }) else { return text }
        var output = ""
        for scalar in text.unicodeScalars {
            if TerminalText.isControl(scalar) || percent && scalar == "%" {
                for byte in String(scalar).utf8 { output += String(format: "%%%02X", byte) }
            } else {
                output.unicodeScalars.append(scalar)
            }
        }
        return output
    }


    // MARK: - Errors

    /// Phrases older logs (and some storage messages) carry that promise a retry whether or not one
    /// was scheduled. They are dropped; whether a retry is scheduled is said from the job's state.
    static let retryPromises = [
        "; the transfer will be retried", " — the transfer will be retried", "; it will be retried",
        "; the download will restart", "; the upload will be retried from the start", "; it will be resumed",
    ]

    /// An error's message as displayed: no retry promise, URLs redacted, `1 byte` in the singular. Its
    /// digits are left as they are: a message holds paths and a server's words.
    func message(_ error: StorageError) -> String {
        text(Self.singularByte(Self.withoutRetryPromises(error.message)))
    }

    /// An error's cause as displayed.
    func cause(_ error: StorageError) -> String? {
        error.cause.map { text(Self.singularByte(Self.withoutRetryPromises($0))) }
    }

    /// `1 bytes` → `1 byte` in messages written by other layers (and by older versions, in the log).
    static func singularByte(_ text: String) -> String {
        guard text.contains("1 bytes") else { return text }
        return text.replacingOccurrences(of: #"(^|[^\d.,])1 bytes\b"#, with: "$11 byte", options: .regularExpression)
    }

    static func withoutRetryPromises(_ text: String) -> String {
        retryPromises.reduce(text) { $0.replacingOccurrences(of: $1, with: "") }
    }

    /// `cancelled: the transfer was stopped` — a state and its error — without saying the state twice:
    /// `cancelled by cli:ann while queued`, not `cancelled: cancelled by cli:ann while queued`.
    /// Text for a terminal: the error's control characters shown as `\u{…}`.
    func stateLine(_ state: JobState, _ error: StorageError?, paint: (JobState) -> String) -> String {
        guard let error else { return paint(state) }
        let line = TerminalText.printable(errorLine(error, state: state))
        if line.lowercased().hasPrefix(state.rawValue + " ") {
            return paint(state) + line.dropFirst(state.rawValue.count)
        }
        return "\(paint(state)): \(line)"
    }

    /// `name: message`, without repeating the name when the message (or the job's state) already says it:
    /// a cancelled job reads `cancelled: cancelled by cli:ann`, not `cancelled: cancelled: …`.
    func errorLine(_ error: StorageError, state: JobState? = nil) -> String {
        let message = message(error)
        let name = error.code.name
        if state?.rawValue == name || message.lowercased().hasPrefix(name.lowercased()) { return message }
        return "\(name): \(message)"
    }
}

// MARK: - Jobs for people

extension JobRecord {
    /// The bytes that count as done: for an upload, what the server confirmed (the resume point's
    /// offset; everything once it succeeded) — never bytes merely read or sent; for a download, the
    /// bytes written. A failed or cancelled job keeps only what its resume point still holds.
    var confirmedBytes: Int64 {
        switch state {
        case .succeeded:
            return result?.size ?? result?.object?.knownSize ?? bytesTotal ?? bytesDone
        case .failed, .cancelled:
            return resumePoint?.bytesDone ?? 0
        case .queued, .running, .paused:
            if spec.kind.isUpload {
                if case .upload(_, let offset, _, _)? = resumePoint { return offset }
                return 0
            }
            return bytesDone
        }
    }

    /// What the worker last reported moving (sent for an upload), when it differs from `confirmedBytes`.
    var unconfirmedBytes: Int64? {
        guard spec.kind.isUpload, state != .succeeded, bytesDone > confirmedBytes else { return nil }
        return bytesDone
    }

    /// `42%` or `1.2 MiB` or `-`, from the confirmed bytes.
    var progressText: String { progressText(of: confirmedBytes) }

    /// `progressText`, but of what a running job has moved so far (for an upload: sent, confirmed or
    /// not), as `watch`'s bar counts it: `list`'s column. A stopped upload counts what it confirmed,
    /// where it resumes.
    var movingProgressText: String { progressText(of: movingBytes) }

    /// The bytes `movingProgressText` counts.
    var movingBytes: Int64 { state == .running ? max(bytesDone, confirmedBytes) : confirmedBytes }

    private func progressText(of done: Int64) -> String {
        if state == .succeeded { return "100%" }
        if let total = bytesTotal, total > 0 {
            // Of a row's values, whatever they are: more done than the total is 100 %, less than nothing 0 %.
            return "\(min(100, max(0, (Double(done) / Double(total) * 100).clampedInt64)))%"
        }
        return done > 0 ? ByteSize.format(done) : "-"
    }

    /// The resume point worth showing: none once the job succeeded (nothing is left to resume).
    var displayedResumePoint: ResumePoint? { state == .succeeded ? nil : resumePoint }

    /// Whether the job's error is followed by a scheduled retry.
    var retryScheduled: Bool { state == .queued && error != nil }

    /// A job paused while its retry waited: `resume` keeps that time, so it is shown with the error.
    var pausedRetryWaits: Bool {
        state == .paused && error != nil && attempts < maxAttempts && runAfterMs > Clock.nowMs()
    }

    /// What the job reads, for people.
    func sourceText(_ display: Display) -> String {
        if let source = spec.source { return display.location(source) }
        if spec.kind == .uploadData { return "<\(plural(Int64(spec.data?.count ?? 0), "byte"))>" }
        return "-"
    }

    /// What the job writes, for people.
    func destinationText(_ display: Display) -> String {
        if let destination = spec.destination { return display.location(destination) }
        switch spec.kind {
        case .downloadMemory: return "<memory>"
        case .fetchURL: return "<url>"
        case .getMetadata: return "<metadata>"
        default: return "-"
        }
    }

    /// `source → destination`.
    func routeText(_ display: Display) -> String {
        "\(sourceText(display)) → \(destinationText(display))"
    }
}

/// Short descriptions of log values, shared by `show`, `history` and `watch`.
enum Describe {
    static func resumePoint(_ resume: ResumePoint) -> String {
        if resume.holdsNoDownloadedBytes { return "none (no byte kept: the next attempt starts at byte 0)" }
        return switch resume {
        case .upload(_, let offset, let total, _):
            "upload session, \(ByteSize.format(offset)) confirmed" + (total.map { " of \(ByteSize.format($0))" } ?? "")
        case .download(let written, let generation, _, _, _, _, _):
            "\(ByteSize.format(written)) written" + (generation.map { " (generation \($0))" } ?? "")
        case .slicedDownload(let slices, let generation, _, _):
            "\(ByteSize.format(resume.bytesDone)) written in \(slices.count) slices (generation \(generation))"
        case .sentUpload(let total):
            "upload of \(ByteSize.format(total)) sent, its answer lost"
        case .sentDelete:
            "delete sent, its answer lost"
        case .unanswered:
            "an earlier attempt ended without a word (its worker died)"
        }
    }

    /// A `started` event's note when its resume point holds no byte (the earlier attempts' were dropped).
    static let freshStart = "from byte 0 (no byte kept from earlier attempts)"

    /// The details column of `history` and the event lines of `watch`.
    static func event(_ event: JobEvent, display: Display) -> String {
        let data = event.data
        var parts: [String] = []
        if let spec = data.spec { parts.append(spec.kind.rawValue) }
        if let owner = data.leaseOwner { parts.append("lease \(event.leaseToken ?? 0) → \(owner)") }
        if let attempt = data.attempt { parts.append("attempt \(attempt)") }
        if let done = data.bytesDone {
            parts.append(ByteSize.format(done) + (data.bytesTotal.map { "/\(ByteSize.format($0))" } ?? ""))
        }
        if let resume = data.resumePoint, event.type != .succeeded {
            // An attempt started from a point that holds nothing is a fresh start, not a resume of nothing.
            parts.append(event.type == .started && resume.holdsNoDownloadedBytes ? Self.freshStart : "resume: \(resumePoint(resume))")
        }
        if let error = data.error {
            let state: JobState? = event.type == .cancelled ? .cancelled : nil
            parts.append(display.errorLine(error, state: state))
        }
        if let retry = data.retryAtMs { parts.append("retry at \(RFC3339.string(retry))") }
        if let result = data.result {
            if let size = result.size { parts.append(plural(size, "byte")) }
            if let url = result.url { parts.append(display.url(url)) }
            if let path = result.path { parts.append(display.location(path)) }
            // A memory download's bytes are named by their hash, which outlives them (`archive --blobs-before`).
            if let blob = result.bytesSHA256 { parts.append("blob sha256:\(blob)") }
        }
        if let reason = data.reason {
            let text = display.text(TimeText.rescueReasonWithReadableTime(reason))
            // `cancelled` events of older logs repeat the error as their reason.
            if !parts.contains(where: { $0.hasSuffix(text) }) { parts.append(text) }
        }
        if let archive = data.archive {
            parts.append("\(plural(archive.jobs, "job")) finished before \(RFC3339.string(archive.beforeMs)) moved to "
                         + "\(Display.localPath(archive.file)) (\(plural(archive.events, "event")), seq \(archive.firstSeq)–\(archive.lastSeq), "
                         + "\(plural(archive.blobs, "blob")), sha256 \(archive.sha256))")
        }
        return parts.joined(separator: "; ")
    }
}
