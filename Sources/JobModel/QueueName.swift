/// A queue's name: 1 to 64 ASCII letters, digits, `-`, `_`, `.` or `:` — the rule a manifest's `queue:`
/// and a worker's `--queue` (or its settings file) share, so that a worker cannot be told to wait on a
/// queue no job can be put in.
public enum QueueName {
    /// The rule, for messages: "a name of 1 to 64 letters, …".
    public static let rule = "a name of 1 to 64 letters, digits, '-', '_', '.' or ':'"

    public static func isValid(_ name: String) -> Bool {
        let bytes = name.utf8
        return (1...64).contains(bytes.count) && bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
        }
    }
}
