import Foundation
import JobLifecycle
import JobModel
import Testing
@testable import jobctl
import TestSupport

/// The CLI's pure output helpers, tested as values: the progress bar's rate and ETA, table fitting
/// and elision, duration parsing with checked arithmetic.
@Suite("CLI output helpers", .onTestThreads) struct OutputUnitTests {
    @Test("a cell's visible width: printable ASCII by its bytes, anything else by its terminal columns without colour codes")
    func visibleWidthCountsColumns() {
        /// The width as `visibleWidth` counted before its ASCII shortcut: characters outside ANSI sequences.
        func characters(_ text: String) -> Int {
            var count = 0
            var inEscape = false
            for character in text {
                if character == "\u{1B}" { inEscape = true; continue }
                if inEscape { if character == "m" { inEscape = false }; continue }
                count += 1
            }
            return count
        }
        let cells = ["", "01M8QR43ERNMYW13N5YDE0JC2C", "2026-12-01T02:49:43.801Z", "64 B", "N7UECQ==", " ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
                     "\u{1B}[32msucceeded\u{1B}[0m", "a\r\nb", "tab\there", "\u{7F}", "é", "e\u{301}", "\u{1B}[1mé\u{1B}[0m"]
        for cell in cells { #expect(visibleWidth(cell) == characters(cell), "\(cell.debugDescription)") }
        // Wide characters take two columns, as a terminal draws them; marks and zero-width ones none.
        let wide: [(String, Int)] = [("日本語", 6), ("写真.jpg", 8), ("🚀x", 3), ("한국어", 6), ("ｆｕｌｌ", 8), ("\u{3000}", 2),
                                     ("❤\u{FE0F}", 2), ("❤", 1), ("\u{301}", 0), ("a\u{200B}b", 2), ("ｶﾀｶﾅ", 4), ("\u{1B}[1m日\u{1B}[0m", 2)]
        for (text, columns) in wide { #expect(visibleWidth(text) == columns, "\(text.debugDescription)") }
        // Cut by columns: the middle, the end, and a route's two sides; never wider than asked, and as wide
        // as a wide character allows.
        #expect(Elide.end("日本語のファイル", to: 7) == "日本語…")
        #expect(Elide.middle("写真フォルダ/名前.jpg", to: 12) == "写真フ….jpg")  // 11 columns: half of 前 does not fit
        #expect(Elide.middle("写真フォルダ/名前.jpg", to: 13) == "写真フ…前.jpg")
        for width in 3...20 {
            for text in ["/tmp/写真の名前がとても長いファイル名です.jpg → file://bkt/照片/写真の名前.jpg", "日本語日本語日本語日本語"] {
                let cut = Elide.route(text, to: width)
                #expect(visibleWidth(cut) <= width && visibleWidth(cut) >= width - 2, "\(width): \(cut)")
            }
        }
        #expect(wrap("日本語 の ファイル名です", width: 8).allSatisfy { visibleWidth($0) <= 8 })
        #expect(visibleWidth("a\r\nb") == 3)
        #expect(visibleWidth("\u{1B}[32msucceeded\u{1B}[0m") == 9)
        #expect(visibleWidth("01M8QR43ERNMYW13N5YDE0JC2C") == 26)
    }

    private func progress(_ bytes: Int64, of total: Int64, at ms: Int64, confirmed: Int64? = nil) -> JobEvent {
        let resume = confirmed.map { ResumePoint.upload(sessionURI: "https://h/s?upload_id=x", confirmedOffset: $0, total: total) }
        return JobEvent(jobID: "J", version: 1, atMs: ms, actor: "w",
                        payload: .progress(TransferProgress(bytesDone: bytes, bytesTotal: total, resumePoint: resume)))
    }

    private func event(_ payload: EventPayload, at ms: Int64) -> JobEvent {
        JobEvent(jobID: "J", version: 1, atMs: ms, actor: "w", payload: payload)
    }

    /// Slow before a pause, fast after the resume: the rate shown is the new one, not an average
    /// reaching back before the pause (which read 513 KiB/s at 2 MiB/s).
    @Test func rateRestartsAfterAResume() {
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: false)
        let total: Int64 = 64 << 20
        _ = bar.observe(event(.started(.none), at: 0), width: nil)
        var bytes: Int64 = 0
        for second in 0...10 {
            bytes = Int64(second) * 100 * 1024
            _ = bar.observe(progress(bytes, of: total, at: Int64(second) * 1000), width: nil)
        }
        _ = bar.observe(event(.paused(.none, reason: nil), at: 11_000), width: nil)
        _ = bar.observe(event(.started(.none), at: 100_000), width: nil)
        var line = ""
        for second in 0...3 {
            bytes += second == 0 ? 0 : 2 << 20
            line = bar.observe(progress(bytes, of: total, at: 100_000 + Int64(second) * 1000), width: nil) ?? ""
        }
        #expect(line.contains("2 MiB/s"), "\(line)")
    }

    /// The rate is a moving one: a transfer that slowed down shows its recent speed.
    @Test func rateFollowsTheLastFewSeconds() {
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: false)
        let total: Int64 = 1 << 30
        var bytes: Int64 = 0
        var line = ""
        for second in 0...30 {
            if second > 0 { bytes += second <= 20 ? 4 << 20 : 1 << 20 }
            line = bar.observe(progress(bytes, of: total, at: Int64(second) * 1000), width: nil) ?? ""
        }
        #expect(line.contains("  1 MiB/s"), "\(line)")
    }

    @Test func etaReadsAsMinutesAndHours() {
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: false)
        let total: Int64 = 1_000 << 20
        _ = bar.observe(progress(0, of: total, at: 0), width: nil)
        let line = bar.observe(progress(1 << 20, of: total, at: 1000), width: nil) ?? ""
        #expect(line.contains("ETA 16m39s"), "\(line)")
        #expect(TimeText.duration(seconds: 45) == "45s")
        #expect(TimeText.duration(seconds: 374) == "6m14s")
        #expect(TimeText.duration(seconds: 3720) == "1h02m")
        #expect(TimeText.duration(seconds: 2 * 86400 + 3 * 3600) == "2d03h")
    }

    /// An upload's bar moves with the bytes sent (a bar of the confirmed offset sat at 0 % through a whole
    /// small upload); the part the server confirmed is solid and named.
    @Test func uploadBarShowsSentAndConfirmedBytes() {
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: true)
        let sent = bar.observe(progress(2 << 20, of: 8 << 20, at: 0, confirmed: 0), width: 100) ?? ""
        #expect(sent.hasPrefix("[=======.......................]  25% 2 MiB/8 MiB (0 B confirmed)"), "\(sent)")
        let half = bar.observe(progress(6 << 20, of: 8 << 20, at: 1_000, confirmed: 4 << 20), width: 100) ?? ""
        #expect(half.hasPrefix("[###############=======........]  75% 6 MiB/8 MiB (4 MiB confirmed)"), "\(half)")
        let whole = bar.observe(progress(8 << 20, of: 8 << 20, at: 2_000, confirmed: 8 << 20), width: 100) ?? ""
        #expect(whole.hasPrefix("[##############################] 100% 8 MiB/8 MiB") && !whole.contains("confirmed"), "\(whole)")
        // A download's bar is what was written.
        var download = ProgressBar(enabled: false, countsConfirmedBytes: false)
        let line = download.observe(progress(2 << 20, of: 8 << 20, at: 0), width: 100) ?? ""
        #expect(line.hasPrefix("[#######.......................]  25% 2 MiB/8 MiB") && !line.contains("confirmed"), "\(line)")
    }

    /// `list`'s column counts what a running upload sent, as the bar does; a paused one what it confirmed
    /// (where it resumes); a download what it wrote.
    @Test func listProgressCountsWhatARunningUploadSent() throws {
        let spec = JobSpec(kind: .uploadFile, source: "/tmp/a", destination: "gs://b/o")
        var record = try #require(JobRecord(submitted: JobEvent(jobID: "J", version: 1, atMs: 0, actor: "cli:u", payload: .submitted(spec: spec))))
        record.state = .running
        record.bytesTotal = 8 << 20
        record.bytesDone = 6 << 20
        record.resumePoint = .upload(sessionURI: "https://h/s", confirmedOffset: 2 << 20, total: 8 << 20)
        #expect(record.movingProgressText == "75%" && record.progressText == "25%")
        record.state = .paused
        #expect(record.movingProgressText == "25%")
        var download = try #require(JobRecord(submitted: JobEvent(jobID: "D", version: 1, atMs: 0, actor: "cli:u",
                                                                  payload: .submitted(spec: JobSpec(kind: .downloadFile, source: "gs://b/o",
                                                                                                    destination: "/tmp/o")))))
        download.state = .running
        download.bytesTotal = 8 << 20
        download.bytesDone = 4 << 20
        #expect(download.movingProgressText == "50%" && download.progressText == "50%")
    }

    @Test(arguments: [100, 60, 40, 25, 12])
    func progressLineFitsTheWidth(width: Int) {
        var bar = ProgressBar(enabled: false, countsConfirmedBytes: false)
        let total: Int64 = 6 << 30
        _ = bar.observe(progress(0, of: total, at: 0), width: width)
        let line = bar.observe(progress(3 << 20, of: total, at: 1000), width: width) ?? ""
        #expect(line.count <= width - 1, "\(line.count) > \(width - 1): \(line)")
        if width >= 60 { #expect(line.contains("ETA") && line.contains("[")) }
    }

    @Test func routeElisionKeepsBothEnds() {
        let route = "https://example.com/a/very/long/path/to/the/source.bin → /home/user/downloads/deep/inside/a/tree/destination.bin"
        let cut = Elide.route(route, to: 50)
        #expect(cut.count == 50, "\(cut)")
        #expect(cut.hasPrefix("https://ex"))
        #expect(cut.contains(".bin → /home"))
        #expect(cut.hasSuffix("destination.bin") || cut.hasSuffix("ation.bin"))
        #expect(Elide.route("a → b", to: 50) == "a → b")
    }

    @Test func tablesFitTheirWidth() {
        let columns = [TableColumn("ID"), TableColumn("AGE", dropRank: 1),
                       TableColumn("ROUTE", fit: .elide(minimum: 20), elide: Elide.route)]
        let rows = [["01ABCDEFGHJKMNPQRSTVWXYZ00", "3d", String(repeating: "s", count: 80) + " → " + String(repeating: "d", count: 80)]]
        for width in [200, 80, 50, 40] {
            let table = renderTable(columns, rows, width: width)
            for line in table.text.split(separator: "\n") {
                #expect(line.count <= width, "width \(width): \(line)")
            }
            #expect(table.text.contains(" → "))
        }
        #expect(renderTable(columns, rows, width: 40).hidden == ["AGE"])
        #expect(renderTable(columns, rows, width: nil).text.contains(String(repeating: "d", count: 80)))
    }

    @Test func durationsNeverOverflow() {
        #expect(DurationInput.read("90s", defaultUnitMs: nil) == .milliseconds(90_000))
        #expect(DurationInput.read("30", defaultUnitMs: 1000) == .milliseconds(30_000))
        #expect(DurationInput.read("1500ms", defaultUnitMs: 1000) == .milliseconds(1_500))
        #expect(DurationInput.read("99999999999999d", defaultUnitMs: nil) == .tooLarge)
        #expect(DurationInput.read("9223372036854775807s", defaultUnitMs: nil) == .tooLarge)
        #expect(DurationInput.read("99999999999999999999", defaultUnitMs: 1000) == .tooLarge)
        for text in ["inf", "nan", "1e300", "-5s", "1.5h", "", "s", "5x"] {
            #expect(DurationInput.read(text, defaultUnitMs: 1000) == .invalid, "\(text)")
        }
    }

    @Test func messagesSayOneByte() {
        #expect(Display.singularByte("the object is 1 bytes, more than 0") == "the object is 1 byte, more than 0")
        #expect(Display.singularByte("1 bytes") == "1 byte")
        #expect(Display.singularByte("ended after 11 bytes of 21 bytes") == "ended after 11 bytes of 21 bytes")
        #expect(Display.singularByte("2.1 bytes") == "2.1 bytes")
        let error = StorageError(.downloadSizeExceeded, "the object is 1 bytes, more than the maximum of 0; it will be resumed")
        #expect(Display.redacting.message(error) == "the object is 1 byte, more than the maximum of 0")
    }

    /// The rescue's reasons carry a lease's end in epoch ms; `history` reads them as RFC 3339. Any other
    /// text keeps its digits: "…/snap at 1700000000000.txt" in an error was printed as a date.
    @Test func rescueTimesReadAsRFC3339AndNothingElse() {
        #expect(TimeText.rescueReasonWithReadableTime("lease held by w expired at 1764410400000")
            == "lease held by w expired at 2025-11-29T10:00:00.000Z")
        #expect(TimeText.rescueReasonWithReadableTime("lease expired at 1764410400000") == "lease expired at 2025-11-29T10:00:00.000Z")
        #expect(TimeText.rescueReasonWithReadableTime("its worker (worker:h:1) died or lost its lease at 1764410400000 while a pause "
                                                      + "was pending; `jobctl resume J` runs it again")
            == "its worker (worker:h:1) died or lost its lease at 2025-11-29T10:00:00.000Z while a pause was pending; `jobctl resume J` runs it again")
        for text in ["attempt 2 at 12", "lease expired", "lease held by w expired at 1764410400000.txt",
                     "the destination '/o/snap at 1700000000000.txt' already exists", "snap at 1700000000000"] {
            #expect(TimeText.rescueReasonWithReadableTime(text) == text)
        }
        let error = StorageError(.unknown, "the destination '/o/snap at 1700000000000.txt' already exists")
        #expect(Display.redacting.message(error) == error.message)
    }

    /// `submit --at` with a duration had no upper bound: from a clock in 9999, `--at 3650d` scheduled jobs in
    /// year 10009. It stops at 9999-12-31 as an RFC 3339 time and `delay:` do; the leap second ending 9999 is taken.
    @Test func atStaysWithin9999() throws {
        let june9999 = try #require(RFC3339.parse("9999-06-01T00:00:00Z"))
        #expect(throws: UsageError.self) { _ = try TimeInput.future("3650d", option: "at", now: june9999) }
        #expect(throws: UsageError.self) { _ = try TimeInput.future("214d", option: "at", now: june9999) }
        #expect(try TimeInput.future("213d", option: "at", now: june9999) == june9999 + 213 * 86_400_000)
        #expect(try TimeInput.future("9999-12-31T23:59:60Z", option: "at", now: june9999) == TimeInput.latestMs)
        do {
            _ = try TimeInput.future("3650d", option: "at", now: june9999)
        } catch let error as UsageError {
            #expect("\(error)".contains("--at 3650d reaches past 9999-12-31"), "\(error)")
        }
        // Second 60 of the last minute of 1969 is a leap second before 1970: said to be out of range.
        do {
            _ = try TimeInput.parse("1969-12-31T23:59:60Z", option: "since", now: june9999)
            Issue.record("a time before 1970 was taken")
        } catch let error as UsageError {
            #expect("\(error)".contains("out of range: expected a time between 1970-01-01 and 9999-12-31"), "\(error)")
        }
    }

    /// A relative `--since`/`--until` reaching before 1970 (100 years back from 2026) is 1970, not a
    /// negative time; within range it is now less the duration.
    @Test func relativeTimesStayFrom1970() throws {
        let now = try #require(RFC3339.parse("2026-12-07T00:00:00Z"))
        #expect(try TimeInput.parse("36500d", option: "since", now: now) == TimeInput.earliestMs)
        #expect(try TimeInput.parse("1h", option: "until", now: now) == now - 3_600_000)
        #expect(try TimeInput.parse("1d", option: "since", now: 1_000) == TimeInput.earliestMs)
    }

    /// An object's name shown by `show` and the result's JSON hides secret path parameters (a plain-HTTP
    /// object is named by its URL's path); other names, `;` and all, are kept.
    @Test func objectNamesHideTheirPathParameters() {
        #expect(Display.redacting.objectName("meta.txt;jsessionid=text") == "meta.txt;jsessionid=REDACTED")
        #expect(Display.redacting.objectName("files;token=abc/a.bin") == "files;token=REDACTED/a.bin")
        #expect(Display.redacting.objectName("a;b.txt") == "a;b.txt")
        #expect(Display.redacting.objectName("plain/name.bin") == "plain/name.bin")
        #expect(Display(showSecrets: true).objectName("meta.txt;jsessionid=text") == "meta.txt;jsessionid=text")
    }

    /// `Display.url` skips parsing text without `@`, `?` or `#`: for every kind of URL it still gives
    /// exactly what redaction gives.
    @Test func urlShortcutRedactsAsBefore() {
        let urls = ["gs://bucket/a/b.bin", "file:///tmp/x y/ü.bin", "/local/path", "", "https://h:8080/p",
                    "https://user:secret@h/p", "https://token@h/p", "https://h/p?X-Goog-Signature=abc&x=1", "https://h/p#access_token=t",
                    "http://h/a@b", "no scheme ? here", "https://h/p?", "gs://b/o#", "https://h/%40?token=1",
                    "https://h/files;jsessionid=S1/a.bin;token=T1", "http://h/a;v=2", "https://h/a\\b"]
        for url in urls {
            #expect(Display.redacting.url(url) == redactedURL(url), "\(url)")
            #expect(Display(showSecrets: true).url(url) == url)
        }
        #expect(Display.redacting.url("https://user:secret@h/p") == "https://user:REDACTED@h/p")
        // Path parameters hold no `@`, `?` or `#`: the shortcut once returned them unredacted.
        #expect(Display.redacting.url("https://h/files;jsessionid=S1/a.bin;token=T1") == "https://h/files;jsessionid=REDACTED/a.bin;token=REDACTED")
    }

    /// CSV fields are quoted exactly when they hold a comma or a quote; control characters (a line
    /// feed, a carriage return) are shown as `\u{…}`, so a row is one line; a field starting like a
    /// formula (or with the `'` that neutralizes one) gets a `'` in front, a plain integer does not.
    @Test func csvQuotesWhatNeedsQuoting() throws {
        let cases: [(String, String)] = [
            ("/plain/path", "/plain/path"), ("/a,b", "\"/a,b\""), ("/say \"hi\"", "\"/say \"\"hi\"\"\""),
            ("/line\nfeed", #"/line\u{A}feed"#), ("/cr\rhere", #"/cr\u{D}here"#), ("/é,ü", "\"/é,ü\""), ("/é", "/é"),
            ("=1+2", "'=1+2"), ("+1", "'+1"), ("-1+2", "'-1+2"), ("@SUM(A1)", "'@SUM(A1)"), ("'quoted", "''quoted"),
            ("=a,b", "\"'=a,b\""), ("\t=1", #"\u{9}=1"#), ("-13010", "-13010"), ("-", "'-"),
        ]
        for (source, expected) in cases {
            let spec = JobSpec(kind: .uploadFile, source: source, destination: "gs://b/o")
            let record = try #require(JobRecord(submitted: JobEvent(jobID: "J", version: 1, atMs: 0, actor: "cli:u", payload: .submitted(spec: spec))))
            let line = AuditRow(record, display: .redacting).csvLine
            #expect(line.hasPrefix("J,upload-file,queued,0,\(expected),gs://b/o,"), "\(line)")
        }
    }

    /// `audit`'s hand-written rows (`AuditRowWriter`) are the bytes of `AuditRow` through the encoder
    /// (`--json`, as an array element and alone) and through `csvLine` (`--csv`); rows they cannot write
    /// are declined with nothing appended and take `AuditRow`.
    @Test func auditRowWriterWritesTheRowsBytes() throws {
        let result = JobResult(object: StorageObject(bucket: "b", name: "o", size: 9, md5Hash: "server=="), size: 64, md5: "md5==",
                               crc32c: "crc==")
        let objectOnly = JobResult(object: StorageObject(bucket: "b", name: "o", size: 9, md5Hash: "server==", crc32c: "objcrc=="))
        // `verified` recorded: nothing compared, or one of the two hashes computed.
        var unverified = result
        unverified.verified = []
        var oneVerified = result
        oneVerified.verified = [.crc32c]
        // `if_exists: skip` settled it: `"skipped": true`.
        let skipped = JobResult(object: StorageObject(bucket: "b", name: "o", size: 9, crc32c: "objcrc=="), path: "/tmp/o", size: 9,
                                skipped: true)
        let specs = [
            JobSpec(kind: .downloadMemory, source: "file:///tmp/b/o0.bin"),
            JobSpec(kind: .uploadFile, source: "/tmp/a b", destination: "gs://bucket/dir/o?x=1"),
            JobSpec(kind: .uploadFile, source: "/tmp/é", destination: "gs://b/o"),
            JobSpec(kind: .downloadFile, source: "https://user:pw@h/o", destination: "/tmp/\"q\""),
            JobSpec(kind: .downloadFile, source: "gs://b/a,b", destination: "/tmp/line\nfeed"),
            JobSpec(kind: .uploadData, destination: "file://b/back\\slash"),
            JobSpec(kind: .downloadFile, source: "gs://b/o", destination: "=1+2"),
            JobSpec(kind: .delete, destination: "gs://b/o", batch: JobBatch(id: "b", source: "/s", path: "p")),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        var written = (json: 0, csv: 0)
        for spec in specs {
            for createdAtMs: Int64 in [1_700_000_000_123, 0, 253_402_300_799_999, 253_402_300_800_000] {
                let submitted = JobEvent(jobID: "01J", version: 1, atMs: createdAtMs, actor: "cli:u", payload: .submitted(spec: spec))
                var record = try #require(JobRecord(submitted: submitted))
                var records = [record]
                record.state = .succeeded
                record.attempts = 2
                record.startedAtMs = 1_700_000_001_000
                record.finishedAtMs = 1_700_000_002_999
                record.result = result
                records.append(record)
                record.result = objectOnly
                records.append(record)
                record.result = unverified
                records.append(record)
                record.result = oneVerified
                records.append(record)
                record.result = skipped
                records.append(record)
                record.result = nil
                record.bytesTotal = 12_345
                records.append(record)
                record.state = .failed
                record.error = StorageError(.objectNotFound, "gone")
                records.append(record)
                for record in records {
                    for display in [Display.redacting, Display(showSecrets: true)] {
                        let row = AuditRow(record, display: display)
                        let expected = String(decoding: try encoder.encode(row), as: UTF8.self)
                        var bytes: [UInt8] = Array("[\n  ".utf8)
                        if AuditRowWriter.appendJSON(record, display: display, indent: 2, to: &bytes) {
                            written.json += 1
                            #expect(String(decoding: bytes, as: UTF8.self) == "[\n  " + expected.replacingOccurrences(of: "\n", with: "\n  "))
                            var alone: [UInt8] = []
                            #expect(AuditRowWriter.appendJSON(record, display: display, indent: 0, to: &alone))
                            #expect(alone == Array(expected.utf8), "\(expected)")
                        } else {
                            #expect(bytes == Array("[\n  ".utf8), "a declined row appends nothing")
                            #expect(row.error != nil || row.batch != nil || expected.contains("\\") || !expected.allSatisfy(\.isASCII)
                                    || createdAtMs > 253_402_300_799_999)
                        }
                        var line: [UInt8] = [UInt8(ascii: "x")]
                        if AuditRowWriter.appendCSV(record, display: display, to: &line) {
                            written.csv += 1
                            #expect(line == Array(("x" + row.csvLine).utf8), "\(row.csvLine)")
                        } else {
                            #expect(line == [UInt8(ascii: "x")], "a declined row appends nothing")
                            #expect(row.error != nil || row.batch != nil || row.csvLine.contains("\"") || !row.csvLine.allSatisfy(\.isASCII)
                                    || row.csvLine.contains("\\u{") || row.csvLine.contains(",'") || createdAtMs > 253_402_300_799_999)
                        }
                    }
                }
            }
        }
        // The seven rows without an error (two with `verified` recorded, one skipped) of the two plain specs, both ways of
        // display, at the three times TimeText computes (the fourth, past 9999, is Foundation's); JSON also writes the
        // formula's (CSV gives it a `'`), CSV also the backslash's.
        #expect(written.json == 7 * 3 * 3 * 2, "\(written.json)")
        #expect(written.csv == 7 * 3 * 3 * 2, "\(written.csv)")
    }

    /// Numbers and times written as bytes are `String(_:)`'s and Foundation's ISO 8601 text (what
    /// `RFC3339.string` prints, through the same bytes: `RFC3339`'s).
    @Test func auditRowWriterNumbersAndTimes() {
        for value: Int64 in [0, 7, 10, 99, 100, 1_234_567_890, -1, -10, Int64.max, Int64.min] {
            var bytes: [UInt8] = []
            DecimalText.append(value, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == String(value))
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        for ms: Int64 in [0, 1, 999, 86_399_999, 86_400_000, 951_782_400_000, 1_700_000_000_123, 4_102_444_800_000, 253_402_300_799_999] {
            var bytes: [UInt8] = []
            let foundation = formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
            #expect(RFC3339.append(ms, to: &bytes))
            #expect(String(decoding: bytes, as: UTF8.self) == foundation)
            #expect(RFC3339.string(ms) == foundation)
        }
        var outside: [UInt8] = []
        #expect(!RFC3339.append(-1, to: &outside) && !RFC3339.append(253_402_300_800_000, to: &outside))
        #expect(RFC3339.string(-1) == formatter.string(from: Date(timeIntervalSince1970: -0.001)))
    }
}

extension OutputUnitTests {
    /// A download's resume point shows the CRC32C of its kept bytes when one was recorded (a pause, a
    /// retryable failure), so whether a resume will check them can be told; none from a periodic checkpoint.
    @Test func aDownloadsResumePointShowsThePrefixCRC32C() throws {
        func keys(_ point: ResumePoint) throws -> [String: Any] {
            let data = try JSONEncoder().encode(ResumePointView(point, display: .redacting))
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
        let recorded = try keys(.download(bytesWritten: 5, generation: "1", etag: nil, tempPath: "/t/.x.jobctl-partial", prefixCRC32C: "3sD8vA=="))
        #expect(recorded["prefix_crc32c"] as? String == "3sD8vA==" && recorded["bytes_written"] as? Int == 5, "\(recorded)")
        let periodic = try keys(.download(bytesWritten: 5, generation: "1", etag: nil, tempPath: "/t/.x.jobctl-partial"))
        #expect(periodic["prefix_crc32c"] == nil, "\(periodic)")
    }
}
