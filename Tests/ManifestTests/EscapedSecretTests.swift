import Foundation
import Testing
@testable import Manifest

/// Secrets the scans of a line's raw text missed: written with a YAML escape, after a scheme with one
/// slash, or under a key the list did not name. Neither the message nor the quoted line holds them.
@Suite struct EscapedSecretTests {
    /// Everything an error prints: its message and its quoted line.
    private func printed(_ yaml: String) throws -> String {
        let errors = try #require(parse(yaml).errors, "the manifest is refused")
        return ManifestErrors(errors).render()
    }

    @Test("an escape in a double-quoted scalar hides no secret from the quoted line", arguments: [
        #"- {kind: download-memory, source: "http://user1:PWs3cr3t\x40127.0.0.1/x"}"#,
        #"- {kind: download-memory, source: "http://127.0.0.1/x?tok\x65n=TKs3cr3t", priority: high}"#,
        #"- {kind: download-memory, source: "http://127.0.0.1/x?token=TKs3cr3t\u0026a=1", priority: high}"#,
    ])
    func escapedSecrets(_ yaml: String) throws {
        let text = try printed(yaml)
        #expect(!text.contains("s3cr3t"), "\(text)")
        #expect(text.contains("REDACTED"), "\(text)")
    }

    @Test func aMalformedSchemeStillHasItsQueryRedacted() throws {
        let text = try printed(#"- {kind: download-memory, source: "https:/127.0.0.1/x?token=TKs3cr3t&X-Goog-Signature=SIGs3cr3t&alt=media"}"#)
        #expect(!text.contains("s3cr3t"), "\(text)")
        #expect(text.contains("token=REDACTED&X-Goog-Signature=REDACTED&alt=media"), "\(text)")
    }

    @Test func cookiesAreSecrets() throws {
        let text = try printed("""
            - kind: download-memory
              source: http://127.0.0.1/x
              cookie: SID=CKs3cr3t
              headers: {Cookie: SID=HDs3cr3t}
            """)
        #expect(!text.contains("s3cr3t"), "\(text)")
    }

    /// Escapes that hold nothing secret leave the line as written, and the caret where it was.
    @Test func anEscapeWithoutASecretIsShown() throws {
        let errors = try #require(parse(#"- {kind: upload-data, data: "tab\there", destination: "gs://b/x", priority: high}"#).errors)
        let error = try #require(errors.first)
        #expect(error.sourceLine?.contains(#""tab\there""#) == true, "\(error.render())")
    }

    @Test("YAML's double-quoted escapes decode as libyaml reads them", arguments: [
        (#"a\x40b"#, "a@b"), (#"\u0041\U0001F600"#, "A😀"), (#"q\"\\\/"#, #"q"\/"#), (#"t\tn\n"#, "t\tn\n"),
    ])
    func decoding(_ raw: String, _ decoded: String) {
        #expect(SecretText.decodedDoubleQuoted(Array(raw.unicodeScalars)[...]) == decoded)
    }

    @Test func anUnknownEscapeDoesNotDecode() {
        #expect(SecretText.decodedDoubleQuoted(Array(#"a\qb"#.unicodeScalars)[...]) == nil)
    }
}
