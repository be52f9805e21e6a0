/// Integers written as decimal ASCII straight into a byte buffer: what `String(value)` prints, without
/// making that string. The log lines, the stored JSON and the audit rows each write several a job.
public enum DecimalText {
    /// `value` in decimal, as `String(value)` prints it, appended to `bytes`.
    public static func append(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so Int64.min has one too.
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits, written from the end
        withUnsafeMutableBytes(of: &digits) { buffer in
            var start = buffer.count
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }
}
