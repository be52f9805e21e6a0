import Foundation
import JobModel

/// Standard output written in blocks of about 64 KiB: a command that prints row after row as it
/// reads them (`audit`) makes one write per block, not one per row, and holds at most one block.
final class BufferedOutput {
    private var buffer: [UInt8] = []
    private let blockSize = 64 << 10
    private static let indent: [UInt8] = [UInt8(ascii: " "), UInt8(ascii: " ")]

    init() { buffer.reserveCapacity(blockSize + 4_096) }

    deinit { flush() }

    /// Appends text, writing the block out once it is full.
    func write(_ text: String) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= blockSize { flush() }
    }

    /// Appends pretty-printed JSON with every line after the first indented by two spaces (an
    /// element of a pretty-printed array); JSON strings hold no raw newline, so every newline is
    /// the encoder's own.
    func write(indented json: Data) {
        // Line by line over an array (iterating `Data` byte by byte costs more than the encoding).
        let bytes = [UInt8](json)
        var start = 0
        while let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
            buffer.append(contentsOf: bytes[start...newline])
            buffer.append(contentsOf: Self.indent)
            start = newline + 1
        }
        buffer.append(contentsOf: bytes[start...])
        if buffer.count >= blockSize { flush() }
    }

    /// Lets `write` append bytes to the block (it returns false when it appended nothing), writing the
    /// block out once it is full; what `write` returned.
    func append(_ write: (inout [UInt8]) -> Bool) -> Bool {
        guard write(&buffer) else { return false }
        if buffer.count >= blockSize { flush() }
        return true
    }

    /// Writes out what is buffered.
    func flush() {
        guard !buffer.isEmpty else { return }
        StandardOutput.write(buffer)
        buffer.removeAll(keepingCapacity: true)
    }
}
