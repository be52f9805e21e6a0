import Foundation
import JobModel
import Testing
@testable import Storage

/// What a token endpoint's answer may hold. The answers reach the parser whole here; the servers that
/// send them (and cut them) are in GoogleCredentialsTests.
@Suite("token answers")
struct AccessTokenResponseTests {
    private func error(_ body: String) -> StorageError? {
        do {
            _ = try AccessTokenResponse(parsing: Data(body.utf8), from: "the token endpoint")
            return nil
        } catch {
            return error
        }
    }

    @Test("a whole answer that cannot be read is refused for good, not taken for one cut short")
    func unreadableWholeAnswer() throws {
        for body in [#"{"access_token":"tok-1","expires_in":1e400}"#, "{\"access_token\":\"tok-1\",\"expires_in\":3600 x} \n"] {
            let refusal = try #require(error(body), "\(body)")
            #expect(!refusal.retryable && refusal.message.contains("cannot be read"), "\(refusal)")
            #expect(!refusal.message.contains("tok-1"))
        }
        let cut = try #require(error(#"{"access_token":"tok-1","expi"#))
        #expect(cut.retryable && cut.message.contains("breaks off"), "\(cut)")
        let fine = try AccessTokenResponse(parsing: Data(#"{"access_token":"tok-1","expires_in":3600}"#.utf8), from: "x")
        #expect(fine.lifetime == 3600)
    }
}
