import Foundation

// MARK: - JSON

/// The one JSON dialect of every store adapter: sorted keys so equal values give equal bytes (replay compares them).
///
/// One encoder and one decoder serve every call: they are configured once and never changed, and
/// Foundation's coders are safe to share between threads (each call keeps its own state), so an append
/// does not pay for building and configuring a coder per value.
public enum StoreJSON {
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static let decoder = JSONDecoder()

    /// `value` as JSON text: sorted keys, slashes not escaped.
    ///
    /// Specs and results are written by hand when their bytes are certain (`FastJSONEncodable`: the
    /// same bytes as Foundation's); anything else goes through Foundation's encoder.
    public static func encode<T: Encodable>(_ value: T) throws(StoreError) -> String {
        if let text = FastJSON.encode(value) { return text }
        return try foundationEncode(value)
    }

    /// `encode` through Foundation's encoder alone (what the hand-written writers are compared with).
    static func foundationEncode<T: Encodable>(_ value: T) throws(StoreError) -> String {
        do {
            return String(decoding: try encoder.encode(value), as: UTF8.self)
        } catch {
            throw StoreError.corrupt("cannot encode \(T.self) as JSON: \(error)")
        }
    }

    /// Decodes JSON text; `what` names the value in the error (built only for one: a row's read names
    /// its job in each, and building those names for every row was a tenth of a claim's decoding).
    ///
    /// The store's own shapes (event payloads, specs, results, errors) are read by hand first
    /// (`FastJSON`): Foundation's decoder was most of `audit`'s and `replay`'s CPU. Whatever the hand-
    /// written readers decline — malformed text included — goes to Foundation, which decides it as before.
    public static func decode<T: Decodable>(_ type: T.Type, _ text: String, what: @autoclosure () -> String) throws(StoreError) -> T {
        if let value = FastJSON.decode(type, text) { return value }
        return try foundationDecode(type, text, what: what())
    }

    /// `decode` through Foundation's decoder alone (what the hand-written readers are compared with).
    static func foundationDecode<T: Decodable>(_ type: T.Type, _ text: String, what: @autoclosure () -> String) throws(StoreError) -> T {
        do {
            return try decoder.decode(type, from: Data(text.utf8))
        } catch {
            throw StoreError.corrupt("\(what()) is not valid \(T.self) JSON: \(error)")
        }
    }

    /// `decode`, or nil for no text.
    public static func decodeOptional<T: Decodable>(_ type: T.Type, _ text: String?, what: @autoclosure () -> String) throws(StoreError) -> T? {
        guard let text else { return nil }
        return try decode(type, text, what: what())
    }
}
