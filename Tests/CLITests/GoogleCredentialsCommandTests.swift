import Foundation
import Testing
import TestSupport

/// A worker finds Google credentials in its environment: a service-account key is used end to end, a
/// bad one stops the worker at start naming the file and the field, never a value.
@Suite("worker with Google credentials", .onTestThreads) struct GoogleCredentialsCommandTests {
    @Test func serviceAccountKeyEndToEnd() throws {
        let server = try TokenServer.start()
        defer { server.stop() }
        try server.serve(Data("hi".utf8), metadata: #"{"bucket":"bkt","name":"a.txt","size":"2","generation":"1","crc32c":"9Z3Zwg=="}"#)
        let workspace = try CLIWorkspace("credentials")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: download-memory, source: \"gs://bkt/a.txt\", max_attempts: 1}\n")
        let environment = ["GOOGLE_APPLICATION_CREDENTIALS": try server.serviceAccountKeyFile(),
                           "STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path]
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        let result = try workspace.jobctl(["result", try #require(ids.first)])
        #expect(result.stdout == "hi", "\(result.stderr)")
        #expect(server.tokenRequests.map(\.problem) == [nil], "one accepted token request: \(server.tokenRequests)")
        for output in [worker.stdout, worker.stderr] { #expect(!output.contains("tok-1") && !output.contains("PRIVATE KEY")) }
    }

    /// The metadata server is asked directly, never through `http_proxy` / `ALL_PROXY`, as Google's
    /// auth libraries do: here the proxy refuses every connection, and the storage requests (to
    /// `localhost`, in `no_proxy`) go around it, so only the token request could meet it.
    @Test func metadataServerTokensBypassTheProxy() throws {
        let server = try TokenServer.start()
        defer { server.stop() }
        try server.serve(Data("hi".utf8), metadata: #"{"bucket":"bkt","name":"a.txt","size":"2","generation":"1","crc32c":"9Z3Zwg=="}"#)
        let deadProxy = ClosedLoopbackPort()
        let workspace = try CLIWorkspace("credentials-metadata-proxy")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: download-memory, source: \"gs://bkt/a.txt\", max_attempts: 1}\n")
        let environment = ["GCE_METADATA_HOST": "127.0.0.1:\(server.port)",
                           "STORAGE_EMULATOR_HOST": "http://localhost:\(server.port)", "HOME": workspace.directory.path,
                           "http_proxy": "http://\(deadProxy.hostAndPort)", "ALL_PROXY": "http://\(deadProxy.hostAndPort)",
                           "no_proxy": "localhost"]
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        let result = try workspace.jobctl(["result", try #require(ids.first)])
        #expect(result.stdout == "hi", "\(result.stderr)")
        #expect(server.tokenRequests.map(\.metadataFlavor) == ["Google"], "one metadata token request: \(server.tokenRequests)")
    }

    /// A key file's `token_uri` is named in the error of a token request that failed as every URL is:
    /// its secrets redacted, in what commands print and in the log's own copy of the error.
    @Test func tokenURISecretsAreRedactedInErrors() throws {
        let server = try TokenServer.start()
        defer { server.stop() }
        let deadEndpoint = ClosedLoopbackPort()
        let workspace = try CLIWorkspace("credentials-token-uri")
        defer { workspace.directory.remove() }
        let id = try #require(try workspace.submit("- {kind: download-memory, source: \"gs://bkt/a.txt\", max_attempts: 1}\n").first)
        let keyFile = try server.serviceAccountKeyFile(tokenURI: "http://127.0.0.1:\(deadEndpoint.port)/token?key=S3CR3T-uri")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: [
            "GOOGLE_APPLICATION_CREDENTIALS": keyFile, "STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path])
        #expect(worker.status == 2, "\(worker.stderr)")
        let stored = try workspace.jobctl(["history", id, "--json", "--show-secrets"])
        #expect(stored.stdout.contains("/token?key=REDACTED"), "\(stored.stdout)")
        for output in [worker.stdout, worker.stderr, stored.stdout, try workspace.jobctl(["show", id]).stdout] {
            #expect(!output.contains("S3CR3T"), "\(output)")
        }
    }

    @Test func badKeyStopsTheWorkerAtStart() throws {
        let workspace = try CLIWorkspace("credentials-bad")
        defer { workspace.directory.remove() }
        let keyFile = try workspace.write("key.json", #"""
            {"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nS3CR3T\n-----END PRIVATE KEY-----\n"}
            """#)
        let worker = try workspace.jobctl(["worker", "--drain"], environment: ["GOOGLE_APPLICATION_CREDENTIALS": keyFile])
        #expect(worker.status == 1)
        #expect(worker.stderr.contains(keyFile) && worker.stderr.contains("'private_key'"), "\(worker.stderr)")
        #expect(!worker.stderr.contains("S3CR3T"))
    }
}
