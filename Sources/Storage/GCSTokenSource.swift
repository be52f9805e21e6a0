import Foundation
import JobModel
import Synchronization

/// Supplies the bearer token for GCS requests: a fixed `accessToken`, or the output of `tokenCommand`
/// (run through `/bin/sh -c` at first use and again once after a 401), or nothing (anonymous).
///
/// The token never leaves this type except as an `Authorization` header line; errors describe the
/// command's failure without quoting its output.
final class GCSTokenSource: Sendable {
    private let fixedToken: String?
    private let command: String?
    private let cached = Mutex<String?>(nil)

    init(accessToken: String?, tokenCommand: String?) {
        fixedToken = accessToken
        command = tokenCommand
    }

    /// Whether a 401 can be answered by fetching a fresh token.
    var canRefresh: Bool { command != nil }

    /// The `Authorization` header line, or nil when anonymous.
    func authorizationHeader() throws(StorageError) -> String? {
        if let token = cached.withLock({ $0 }) { return "Authorization: Bearer \(token)" }
        if command != nil { return "Authorization: Bearer \(try refresh())" }
        if let fixedToken { return "Authorization: Bearer \(fixedToken)" }
        return nil
    }

    /// Runs the token command and caches its trimmed output.
    @discardableResult
    func refresh() throws(StorageError) -> String {
        guard let command else {
            throw StorageError(.unauthenticated, "no token command is configured to refresh the access token")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw StorageError(.unauthenticated, "the token command could not be started; check JOBCTL_TOKEN_COMMAND",
                               cause: "\(error)")
        }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0, !token.isEmpty, !token.contains("\n") else {
            throw StorageError(.unauthenticated,
                               "the token command failed (exit status \(process.terminationStatus)) or printed no single-line token; run it by hand to check")
        }
        cached.withLock { $0 = token }
        return token
    }
}
