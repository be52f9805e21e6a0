import CZlib
import Foundation

/// Gzip streams through zlib (the one file that calls it): `GzipCompressor` turns bytes into one gzip
/// member, `GzipDecompressor` turns one gzip member back into bytes.
///
/// Both own a heap-allocated `z_stream`: zlib keeps a pointer back to the stream inside its state and
/// checks it on every call, so the stream must not move between calls. Neither is `Sendable`: one
/// stream belongs to one file. See https://www.zlib.net/manual.html
final class GzipCompressor {
    private let stream: UnsafeMutablePointer<z_stream>
    private var finished = false

    /// Starts a gzip stream at compression `level` (1–9).
    ///
    /// Wraps `deflateInit2` (https://www.zlib.net/manual.html#Advanced) with a gzip header.
    init(level: Int32 = 6) throws(RetentionError) {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let code = jobctl_deflate_init_gzip(stream, level)
        guard code == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw Self.error(code, "starting compression")
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Compresses `input` and returns the compressed bytes ready so far; with `finish`, ends the stream
    /// (writes the gzip trailer) and returns the rest.
    ///
    /// Wraps `deflate` (https://www.zlib.net/manual.html#Basic).
    func compress(_ input: Data, finish: Bool = false) throws(RetentionError) -> Data {
        guard !finished else { throw RetentionError.compression("the gzip stream was already finished") }
        let flush = finish ? Z_FINISH : Z_NO_FLUSH
        let (output, code, _) = pump(stream, input, untilDrained: !finish) { deflate($0, flush) }
        // Z_BUF_ERROR only means no progress was possible: all input taken and nothing to flush.
        guard code == Z_OK || code == Z_BUF_ERROR || code == Z_STREAM_END else { throw Self.error(code, "compressing") }
        if finish { finished = true }
        return output
    }

    fileprivate static func error(_ code: Int32, _ what: String) -> RetentionError {
        .compression("zlib failed \(what) (code \(code)); this is a bug or the process ran out of memory")
    }
}

/// Turns one gzip member back into bytes; refuses anything after it.
final class GzipDecompressor {
    private let stream: UnsafeMutablePointer<z_stream>
    /// Whether the gzip trailer (CRC-32 and length, checked by zlib) has been read.
    private(set) var isFinished = false

    /// Starts reading a gzip stream.
    ///
    /// Wraps `inflateInit2` (https://www.zlib.net/manual.html#Advanced) accepting only gzip.
    init() throws(RetentionError) {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let code = jobctl_inflate_init_gzip(stream)
        guard code == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw GzipCompressor.error(code, "starting decompression")
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Decompresses `input` and returns the bytes it yields. Throws on damaged data (including a
    /// CRC-32 or length mismatch in the gzip trailer) and on bytes after the end of the stream.
    ///
    /// Wraps `inflate` (https://www.zlib.net/manual.html#Basic).
    func decompress(_ input: Data) throws(RetentionError) -> Data {
        guard !input.isEmpty else { return Data() }
        guard !isFinished else { throw RetentionError.invalidArchive("there are bytes after the end of the gzip stream") }
        let (output, code, leftover) = pump(stream, input, untilDrained: true) { inflate($0, Z_NO_FLUSH) }
        if code == Z_STREAM_END {
            isFinished = true
            if leftover > 0 { throw RetentionError.invalidArchive("there are bytes after the end of the gzip stream") }
            return output
        }
        guard code == Z_OK || code == Z_BUF_ERROR else {
            let message = stream.pointee.msg.map { String(cString: $0) } ?? "code \(code)"
            throw RetentionError.invalidArchive("the gzip data is damaged (\(message))")
        }
        return output
    }
}

/// Feeds `input` to `stream` through `step` (`deflate` or `inflate`), collecting what it produces in
/// 64 KiB chunks, until the stream ends, `step` fails, or — with `untilDrained` — all input is taken and
/// nothing more is pending. Returns the output, the last zlib code and the input bytes left unread.
private func pump(_ stream: UnsafeMutablePointer<z_stream>, _ input: Data, untilDrained: Bool,
                  _ step: (UnsafeMutablePointer<z_stream>) -> Int32) -> (output: Data, code: Int32, leftover: Int) {
    var output = Data()
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    var input = input
    let count = input.count
    var code = Z_OK
    input.withUnsafeMutableBytes { (bytes: UnsafeMutableRawBufferPointer) in
        stream.pointee.next_in = bytes.baseAddress?.assumingMemoryBound(to: Bytef.self)
        stream.pointee.avail_in = uInt(count)
        while true {
            code = chunk.withUnsafeMutableBufferPointer { buffer -> Int32 in
                stream.pointee.next_out = buffer.baseAddress
                stream.pointee.avail_out = uInt(buffer.count)
                return step(stream)
            }
            output.append(contentsOf: chunk[0..<(chunk.count - Int(stream.pointee.avail_out))])
            guard code == Z_OK || code == Z_BUF_ERROR else { break }
            if untilDrained && stream.pointee.avail_in == 0 && stream.pointee.avail_out != 0 { break }
        }
        stream.pointee.next_in = nil
    }
    return (output, code, Int(stream.pointee.avail_in))
}
