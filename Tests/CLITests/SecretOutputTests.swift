import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// Secrets in URLs — query parameters of every secret name, passwords in userinfo, upload session
/// URIs, download tokens, database passwords — never reach any command's output unless
/// `--show-secrets` asks for them.
@Suite("secrets in output", .onTestThreads) struct SecretOutputTests {
    /// Every secret value carries this marker; it must never appear in redacted output.
    static let marker = "S3CR3T"

    static let secretNames = [
        "token", "access_token", "refresh_token", "X-Goog-Signature", "X-Goog-Credential", "X-Amz-Signature",
        "X-Amz-Credential", "X-Amz-Security-Token", "password", "apikey", "APIKEY", "api_key", "key", "secret",
        "sig", "signature", "client_secret", "Token",
    ]

    /// `?token=S3CR3T0&access_token=S3CR3T1&…` with every secret name, plus a harmless parameter.
    static var secretQuery: String {
        secretNames.enumerated().map { "\($0.element)=\(marker)\($0.offset)" }.joined(separator: "&") + "&alt=media"
    }

    /// Jobs holding secrets in every place a job can: spec URLs, error URLs, messages and causes,
    /// resume points, result URLs and download tokens.
    struct Jobs {
        let failed: String
        let paused: String
        let fetched: String
    }

    static func fabricate(in workspace: CLIWorkspace) throws -> Jobs {
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let worker = "worker:test:1"
        let specs = [
            JobSpec(kind: .downloadMemory, source: "https://files.example.com/report.csv?\(secretQuery)", maxSize: 1024, maxAttempts: 2),
            JobSpec(kind: .uploadFile, source: "/tmp/upload.bin", destination: "https://bucket.example.com/upload.bin?\(secretQuery)"),
            JobSpec(kind: .fetchURL, source: "gs://bucket/shared.txt"),
        ]
        let ids = try store.submit(specs, actor: "cli:test", now: now).map(\.id)
        let error = StorageError(.unknown, "the upload to https://bucket.example.com/u?sig=\(marker)-message failed",
                                 httpStatus: 503, url: "https://user:\(marker)-password@files.example.com/report.csv?\(secretQuery)",
                                 retryable: true, cause: "see https://files.example.com/x?api_key=\(marker)-cause")

        // The download fails twice: a retry scheduled, then final.
        var claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        #expect(claim.record.id == ids[0])
        try store.append(PendingEvent(jobID: ids[0], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now)
        try store.append(PendingEvent(jobID: ids[0], type: .attemptFailed, actor: worker, leaseToken: claim.token,
                                      data: EventData(attempt: 1, error: error, retryAtMs: now)), now: now)
        claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now + 1).first)
        #expect(claim.record.id == ids[0])
        try store.append(PendingEvent(jobID: ids[0], type: .failed, actor: worker, leaseToken: claim.token,
                                      data: EventData(attempt: 2, error: error)), now: now + 2)

        // The upload is paused in the middle of a resumable session.
        claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now + 3).first)
        #expect(claim.record.id == ids[1])
        let session = ResumePoint.upload(sessionURI: "https://bucket.example.com/upload?upload_id=\(marker)-session",
                                         confirmedOffset: 262_144, total: 1 << 20)
        try store.append(PendingEvent(jobID: ids[1], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now + 3)
        try store.append(PendingEvent(jobID: ids[1], type: .progress, actor: worker, leaseToken: claim.token,
                                      data: EventData(bytesDone: 524_288, bytesTotal: 1 << 20, resumePoint: session)), now: now + 4)
        try store.append(PendingEvent(jobID: ids[1], type: .paused, actor: worker, leaseToken: claim.token,
                                      data: EventData(resumePoint: session, reason: "pause requested")), now: now + 5)

        // The fetch-url result: a download URL with a token, and the object's download tokens.
        claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now + 6).first)
        #expect(claim.record.id == ids[2])
        let object = StorageObject(bucket: "bucket", name: "shared.txt", size: 5, downloadTokens: "\(marker)-tokens")
        let result = JobResult(object: object, size: 5,
                               url: "https://firebasestorage.example.com/v0/b/bucket/o/shared.txt?alt=media&token=\(marker)-url")
        try store.append(PendingEvent(jobID: ids[2], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now + 6)
        try store.append(PendingEvent(jobID: ids[2], type: .succeeded, actor: worker, leaseToken: claim.token,
                                      data: EventData(result: result)), now: now + 7)
        return Jobs(failed: ids[0], paused: ids[1], fetched: ids[2])
    }

    @Test func noCommandPrintsASecret() throws {
        let workspace = try CLIWorkspace("secrets")
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace)
        var commands: [[String]] = [
            ["list"], ["list", "--json"], ["audit"], ["audit", "--json"], ["audit", "--csv"],
            ["watch", jobs.failed], ["watch", jobs.fetched], ["watch", jobs.failed, "--json"],
            ["replay", "--verify"], ["replay", "--verify", "--json"],
        ]
        for id in [jobs.failed, jobs.paused, jobs.fetched] {
            commands += [["show", id], ["show", id, "--json"], ["history", id], ["history", id, "--json"]]
        }
        commands += [["result", jobs.fetched, "-o", workspace.directory.file("url.txt")], ["result", jobs.failed],
                     ["resume", jobs.paused, "--json"], ["cancel", jobs.paused], ["retry", jobs.paused, "--json"]]
        for arguments in commands {
            let output = try workspace.jobctl(arguments)
            #expect(!output.stdout.contains(Self.marker), "jobctl \(arguments.joined(separator: " ")) printed a secret:\n\(output.stdout)")
            #expect(!output.stderr.contains(Self.marker), "jobctl \(arguments.joined(separator: " ")) printed a secret:\n\(output.stderr)")
            #expect(!output.stdout.isEmpty || arguments.first == "result", "jobctl \(arguments.joined(separator: " ")) printed nothing: \(output.stderr)")
        }
        // What is redacted is still shown as redacted, with the harmless parts intact.
        let list = try workspace.jobctl(["list"])
        #expect(list.stdout.contains("token=REDACTED"), "\(list.stdout)")
        let show = try workspace.jobctl(["show", jobs.failed])
        #expect(show.stdout.contains("alt=media"))
        #expect(show.stdout.contains("https://user:REDACTED@files.example.com"), "\(show.stdout)")
    }

    @Test func showSecretsRevealsThem() throws {
        let workspace = try CLIWorkspace("show-secrets")
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace)
        for arguments in [["show", jobs.failed], ["show", jobs.paused, "--json"], ["history", jobs.failed],
                          ["history", jobs.fetched, "--json"], ["audit", "--json"], ["audit", "--csv"]] {
            let output = try workspace.jobctl(arguments + ["--show-secrets"])
            #expect(output.status == 0, "\(output.stderr)")
            #expect(output.stdout.contains(Self.marker), "jobctl \(arguments.joined(separator: " ")) --show-secrets: \(output.stdout)")
        }
        let session = try workspace.jobctl(["show", jobs.paused, "--json", "--show-secrets"])
        #expect(session.stdout.contains("upload_id=\(Self.marker)-session"))
        let tokens = try workspace.jobctl(["result", jobs.fetched, "--show-secrets"])
        #expect(tokens.stdout.contains("token=\(Self.marker)-url"))
        // `list` and `watch` never reveal: they have no such option.
        #expect(try workspace.jobctl(["list", "--show-secrets"]).status == 64)
        #expect(try workspace.jobctl(["watch", jobs.failed, "--show-secrets"]).status == 64)
    }

    /// `result` prints a fetched URL with its token: that URL is what the command is for. The upload
    /// metadata's download tokens stay redacted unless asked for.
    @Test func resultPrintsTheDownloadURL() throws {
        let workspace = try CLIWorkspace("result-url")
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace)
        let url = try workspace.jobctl(["result", jobs.fetched])
        #expect(url.status == 0)
        #expect(url.stdout == "https://firebasestorage.example.com/v0/b/bucket/o/shared.txt?alt=media&token=\(Self.marker)-url\n")
        let json = try workspace.jobctl(["result", jobs.fetched, "--json"])
        #expect(json.stdout.contains("token=\(Self.marker)-url"))
        #expect(!json.stdout.contains("\(Self.marker)-tokens"), "\(json.stdout)")
        #expect(json.stdout.contains("\"download_tokens\" : \"REDACTED\""), "\(json.stdout)")
    }

    /// Manifests, dry runs, a worker's log lines and a database URL's password.
    @Test func submitWorkerAndDatabaseOutput() throws {
        let workspace = try CLIWorkspace("secret-run")
        defer { workspace.directory.remove() }
        let port = freeLoopbackPort()
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: download-memory, source: "http://127.0.0.1:\(port)/x?\(Self.secretQuery)", max_attempts: 1}
        """)
        for arguments in [["submit", "--dry-run", manifest], ["submit", "--dry-run", "--json", manifest],
                          ["submit", manifest], ["worker", "--drain"], ["list", "--json"]] {
            let output = try workspace.jobctl(arguments)
            #expect(!output.stdout.contains(Self.marker) && !output.stderr.contains(Self.marker),
                    "jobctl \(arguments.joined(separator: " ")):\n\(output.stdout)\(output.stderr)")
        }
        let database = "postgres://jobs:\(Self.marker)-db@db.example.com:5432/jobctl"
        let output = try runProcess(PackagePaths.jobctlBinary, ["--db", database, "list"], environment: ["NO_COLOR": "1"])
        #expect(output.status == 1)
        #expect(output.stderr.contains("postgres://jobs:REDACTED@db.example.com"), "\(output.stderr)")
        #expect(!output.stderr.contains(Self.marker))
        let fromEnvironment = try runProcess(PackagePaths.jobctlBinary, ["show", "01ABCDEFGH"],
                                             environment: ["JOBCTL_DB": database, "NO_COLOR": "1"])
        #expect(!fromEnvironment.stderr.contains(Self.marker), "\(fromEnvironment.stderr)")
    }
}
