import Foundation
import Testing
import TestSupport
@testable import Worker
#if canImport(Glibc)
import Glibc
#endif

/// The worker's log written from a thread of its own: a reader that stops reading costs lines, never
/// the worker's progress; lines keep their order; a flush waits for them, but not forever.
@Suite("log line writer", .onTestThreads)
struct LogLineWriterTests {
    /// A pipe: (read end, write end), both closed by `close`.
    private func pipeEnds() throws -> (read: Int32, write: Int32) {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        return (ends[0], ends[1])
    }

    /// Writes `f`s to the pipe until it holds no more; returns how many.
    private func fillPipe(_ descriptor: Int32) -> Int {
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(descriptor, F_SETFL, flags) }
        let chunk = [UInt8](repeating: UInt8(ascii: "f"), count: 512)
        var total = 0
        while true {
            let count = write(descriptor, chunk, chunk.count)
            if count <= 0 { break }
            total += count
        }
        return total
    }

    /// Everything readable from `descriptor` until end of file.
    private func readAll(_ descriptor: Int32) -> String {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count <= 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        return String(decoding: data, as: UTF8.self)
    }

    @Test("lines arrive in order, several to a write; a flush returns once they are written")
    func linesInOrder() throws {
        let ends = try pipeEnds()
        defer { close(ends.read) }
        let writer = LogLineWriter(descriptor: ends.write)
        let collected = OutputCollector()
        startThread { collected.text = self.readAll(ends.read) }
        for index in 0..<5_000 { writer.write("line \(index)\n") }
        #expect(writer.flush(waitingAtMost: 30))
        close(ends.write)
        #expect(collected.wait(seconds: 30))
        #expect(collected.text == (0..<5_000).map { "line \($0)\n" }.joined())
        #expect(writer.droppedLines == 0)
    }

    @Test("a reader that stops reading: writes return at once, lines past the limit are dropped and counted, then said")
    func stalledReader() throws {
        let ends = try pipeEnds()
        defer { close(ends.read) }
        let writer = LogLineWriter(descriptor: ends.write, limit: 16_384)
        let line = String(repeating: "x", count: 99) + "\n"
        // The pipe full already (a reader that stopped a while ago): the writer holds 16 KiB more, the rest
        // of 2,000 lines (200 KB) is dropped, and no call waits for the reader.
        let filler = fillPipe(ends.write)
        #expect(filler >= 4_096)
        let started = Date()
        for _ in 0..<2_000 { writer.write(line) }
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(!writer.flush(waitingAtMost: 0.2), "nothing reads the pipe: the flush gives up")
        let dropped = writer.droppedLines
        #expect(dropped > 0 && dropped < 2_000, "\(dropped) dropped")
        // Reading again: what was kept arrives, then the count of what was not.
        let collected = OutputCollector()
        startThread { collected.text = self.readAll(ends.read) }
        writer.write("after\n")
        #expect(writer.flush(waitingAtMost: 30))
        close(ends.write)
        #expect(collected.wait(seconds: 30))
        #expect(collected.text.hasPrefix(String(repeating: "f", count: filler)))
        let lines = collected.text.dropFirst(filler).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        let kept = lines.filter { $0 == line.dropLast() }.count
        #expect(kept + dropped == 2_000)
        // Each notice counts the lines dropped since the one before, where they were dropped: one notice
        // when the writer stayed blocked through all 2,000 writes, two when it had taken a batch just
        // before (the pending lines it took made room, then filled again) — their counts add up to every
        // line dropped, and the last one comes before the line written after.
        let prefix = "jobctl worker: ", suffix = " log lines dropped: standard error was not being read"
        let notices = lines.filter { $0.hasPrefix(prefix) && $0.hasSuffix(suffix) }
        let counts = notices.compactMap { Int($0.dropFirst(prefix.count).dropLast(suffix.count)) }
        #expect(counts.count == notices.count && !counts.isEmpty && counts.count <= 2, "\(notices)")
        #expect(counts.reduce(0, +) == dropped, "\(notices) for \(dropped) dropped")
        #expect(lines.last == "after" && lines.dropLast().last.map(notices.contains) == true, "\(lines.suffix(3))")
    }
    /// Standard error a file on a full disk: the lines whose write failed are counted, and once writing
    /// works again a notice in their place says how many and why. They were lost without a trace: a log
    /// that skipped jobs read as complete.
    @Test("lines lost to a write that failed (a full disk) are counted and said where they were")
    func linesLostToAFullDiskAreSaid() throws {
        let directory = try TemporaryDirectory("log-full-disk")
        defer { directory.remove() }
        let filesystem = try SmallFilesystem(at: directory.file("small"), size: "64k")
        defer { filesystem.unmount() }
        let path = "\(filesystem.path)/worker.log"
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let writer = LogLineWriter(descriptor: descriptor)
        // A first line of one whole page: the file has no room left in a page of its own.
        let before = String(repeating: "b", count: 4_095) + "\n"
        writer.write(before)
        #expect(writer.flush(waitingAtMost: 5))
        // Fill the filesystem to its last byte.
        let filler = open("\(filesystem.path)/filler", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        try #require(filler >= 0)
        let block = [UInt8](repeating: 0, count: 4_096)
        while write(filler, block, block.count) > 0 {}
        close(filler)
        for index in 0..<10 { writer.write("lost \(index)\n") }
        writer.flush(waitingAtMost: 5)
        #expect(writer.droppedLines == 10)
        // Space again: the next write says what was lost, then goes on.
        try FileManager.default.removeItem(atPath: "\(filesystem.path)/filler")
        writer.write("after\n")
        #expect(writer.flush(waitingAtMost: 5))
        let log = try String(contentsOfFile: path, encoding: .utf8)
        #expect(log == before + "jobctl worker: 10 log lines dropped: writing standard error failed: No space left on device\nafter\n", "\(log.suffix(200))")
    }

    @Test("the worker's log says how many lines were dropped in its own format, text or JSON")
    func droppedNoticeInTheLogsFormat() throws {
        let json = WorkerLog.droppedNotice(7, formatter: WorkerLogFormatter(format: .json), atMs: 1_700_000_000_000)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(object["event"] as? String == "log_lines_dropped" && object["level"] as? String == "warning")
        #expect((object["fields"] as? [String: Any])?["lines"] as? Int == 7)
        #expect(json.hasSuffix("\n") && json.filter { $0 == "\n" }.count == 1)
        let text = WorkerLog.droppedNotice(1, formatter: WorkerLogFormatter(format: .text, timestamps: false, color: false))
        #expect(text.contains("log_lines_dropped") && text.contains("lines=1"), "\(text)")
    }
}

/// Text a reader thread collects, and a wait for it.
private final class OutputCollector: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var value = ""
    var text: String {
        get { value }
        set { value = newValue; done.signal() }
    }
    func wait(seconds: Double) -> Bool { done.wait(timeout: .now() + seconds) == .success }
}
