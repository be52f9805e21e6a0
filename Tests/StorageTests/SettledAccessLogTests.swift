import Foundation
import TestSupport
import Testing

/// `NginxServer.settledAccessLog()`, which the checks that a request did NOT reach nginx read: it must
/// hold the line of every request answered before it, and must not answer at all when it cannot know.
@Suite("nginx's settled access log", .onTestThreads)
struct SettledAccessLogTests {
    @Test("a log that settles nothing (the marker never logged) is an error, not a log without the request")
    func aMarkerThatNeverCameIsAnError() throws {
        let server = try NginxServer.start()
        defer {
            server.stop()
            server.directory.remove()
        }
        _ = try runProcess("/usr/bin/curl", ["-s", "--noproxy", "*", "-o", "/dev/null", server.baseURL + "/before.txt"])
        let settled = try server.settledAccessLog()
        #expect(settled.contains("GET /before.txt") && settled.contains("/.log-marker-"), "\(settled)")
        // Stopped, its log kept: the marker cannot reach it, so the log cannot say what did not come.
        server.stop(removeFiles: false)
        #expect(throws: TestServerError.self) { _ = try server.settledAccessLog() }
    }
}
