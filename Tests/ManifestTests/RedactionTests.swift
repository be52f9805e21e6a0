import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// Secrets never reach a message or a source line the manifest module prints, and the caret keeps
/// pointing at the token the error is about.
@Suite(.onTestThreads) struct RedactionTests {
    /// The rendered error's caret line and the source line above it: the shown character under the caret.
    private func caretTarget(_ error: ManifestError) throws -> (shown: String, column: Int) {
        let lines = error.render().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        try #require(lines.count == 3)
        return (lines[1], lines[2].unicodeScalars.count)
    }

    private func character(in line: String, atColumn column: Int) -> String {
        let scalars = Array(line.unicodeScalars)
        guard column >= 1, column <= scalars.count else { return "" }
        return String(String.UnicodeScalarView(scalars[(column - 1)...].prefix(4)))
    }

    @Test func aPasswordInAURLIsNotEchoed() throws {
        let errors = try #require(parse("- kind: download-memory\n  source: https://me:hunter2@example.com/x\n").errors)
        let error = try #require(errors.first)
        #expect("\(error.line):\(error.column)" == "2:11")
        let rendered = error.render()
        #expect(!rendered.contains("hunter2"))
        #expect(rendered.contains("https://me:REDACTED@example.com/x"))
        let (shown, column) = try caretTarget(error)
        #expect(character(in: shown, atColumn: column) == "http")
    }

    /// The error is after the secrets on the same line: the caret moves left by what redaction removed.
    @Test func theCaretFollowsTheTokenPastARedaction() throws {
        let yaml = """
        - {kind: upload-data, destination: "http://u:pa55word@h/x?token=tok-123&X-Goog-Signature=0a1b2c3d&alt=media", data: x, priority: high}
        """
        let errors = try #require(parse(yaml).errors)
        let messages = errors.map { $0.render() }.joined(separator: "\n")
        for secret in ["pa55word", "tok-123", "0a1b2c3d"] {
            #expect(!messages.contains(secret), "\(secret) in \(messages)")
        }
        let priority = try #require(errors.first { $0.code == .wrongType })
        #expect(priority.column == 130)
        let (shown, column) = try caretTarget(priority)
        #expect(shown.contains("http://u:REDACTED@h/x?token=REDACTED&X-Goog-Signature=REDACTED&alt=media"))
        #expect(character(in: shown, atColumn: column) == "high")
    }

    /// Messages quote values; a quoted URL loses its secrets there too.
    @Test(arguments: [
        "token=s3cr3t", "access_token=s3cr3t", "X-Goog-Signature=s3cr3t", "X-Amz-Signature=s3cr3t", "X-Amz-Credential=s3cr3t",
        "X-Amz-Security-Token=s3cr3t", "password=s3cr3t", "apikey=s3cr3t", "api_key=s3cr3t", "key=s3cr3t", "secret=s3cr3t",
        "sig=s3cr3t", "signature=s3cr3t", "GoogleAccessId=s3cr3t", "upload_id=s3cr3t", "auth_token=s3cr3t",
    ])
    func secretQueryParametersAreRedactedInMessagesAndLines(_ parameter: String) throws {
        // fetch-url refuses plain https URLs and quotes the URL in its message.
        let errors = try #require(parse("- kind: fetch-url\n  source: \"https://example.com/a.txt?alt=media&\(parameter)#frag\"\n").errors)
        let error = try #require(errors.first)
        #expect(error.code == .invalidReference)
        #expect(!error.render().contains("s3cr3t"), "\(error.render())")
        #expect(!error.message.contains("s3cr3t"))
        #expect(error.message.contains("alt=media&"))
        #expect(error.sourceLine?.contains("alt=media&") == true)
        #expect(error.sourceLine?.contains("=REDACTED") == true)
    }

    @Test func valuesOfKeysNamedLikeSecretsAreRedacted() throws {
        let errors = try #require(parse("""
        - kind: upload-data
          data: x
          destination: gs://bkt/x
          password: hunter2
          metadata:
            custom_metadata: {api_key: 12345, note: ok}
          key: my-idempotency-key
          token: "quoted secret" # comment
        """).errors)
        let rendered = ManifestErrors(errors).render()
        #expect(!rendered.contains("hunter2"))
        #expect(!rendered.contains("12345"))
        #expect(!rendered.contains("quoted secret"))
        #expect(rendered.contains("password: REDACTED"))
        #expect(rendered.contains("custom_metadata: {api_key: REDACTED, note: ok}"))
        #expect(rendered.contains("token: \"REDACTED\" # comment"))
        #expect(errors.map(\.code) == [.unknownKey, .wrongType, .unknownKey])
    }

    /// The idempotency key is a manifest field, not a secret.
    @Test func theIdempotencyKeyIsShown() throws {
        let errors = try #require(parse("- {kind: fetch-url, source: gs://bkt/x, key: nightly-1, priority: high}\n").errors)
        #expect(errors.first?.sourceLine?.contains("key: nightly-1") == true)
    }

    @Test func aCaretInsideASecretPointsAtItsReplacement() {
        let error = ManifestError(code: .invalidReference, file: "f.yaml", line: 1, column: 20, message: "m",
                                  sourceLine: "src: http://a:longpassword@host/x")
        #expect(error.render() == "f.yaml:1:20: error: m\nsrc: http://a:REDACTED@host/x\n              ^")
    }

    @Test func linesWithoutSecretsAreUnchanged() {
        let line = "  source: \"http://example.com/a:b/c?alt=media&generation=5\"  # token: in a comment"
        #expect(SecretText.redactedLine(line, column: 11) == (line, 11))
        #expect(SecretText.redacted("no URL here: token=abc") == "no URL here: token=abc")
    }
}
