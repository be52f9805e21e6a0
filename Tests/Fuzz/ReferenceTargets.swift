import Foundation
@testable import JobModel
@testable import Manifest
@testable import PostgresStore
@testable import Storage

// MARK: - reference: storage references and URLs

/// `StorageReference(parsing:)` (every `source:`/`destination:`, object-operation arguments: gs://, file://,
/// http(s)://, Firebase-form URLs), what is done with a reference (a child, its description, its
/// encodings) and the URL helpers of the backends, on the input split at NUL bytes (a reference, then a
/// second text: a child path, a glob, a host). A reference's text (what a spec stores) must parse back
/// to the same reference.
let referenceTarget = FuzzTarget(
    name: "reference",
    summary: "StorageReference(parsing:) + description round trip, percent coding, PathPattern, URL/host helpers",
    run: { input in
        let parts = input.parts
        let text = parts[0]
        let other = parts.count > 1 ? parts[1] : "a/b.txt"
        for hosts: FirebaseHosts in [.firebase, ["127.0.0.1:9199", "localhost"]] {
            guard let reference = try? StorageReference(parsing: text, firebaseHosts: hosts) else { continue }
            let written = reference.description
            let again: StorageReference
            do throws(StorageError) {
                again = try StorageReference(parsing: written, firebaseHosts: hosts)
            } catch {
                fatalError("round trip: '\(text)' is the reference '\(written)', which does not parse: \(error.message)")
            }
            expect(again.description == written && again.scheme == reference.scheme && again.bucket == reference.bucket
                       && again.fullPath == reference.fullPath && again.query == reference.query,
                   "'\(text)' is the reference '\(written)', which parses as '\(again.description)'")
            _ = reference.encodedPath
            _ = reference.root
            try? reference.requireObject()
            if let child = try? reference.child(other) { _ = child.description }
            _ = UploadPolicy.destinationDescription(reference)
            _ = UploadPolicy.entry(other, covers: reference)
            _ = ContentTypes.infer(path: reference.fullPath)
        }
        _ = try? ManifestReader(file: "fuzz", source: SourceText(""), baseDirectory: nil, firebaseHosts: ["127.0.0.1:9199"]).submittedReference(text)
        if let decoded = try? StorageReference.percentDecode(text) {
            let encoded = StorageReference.percentEncode(decoded, keepSlash: true)
            expect((try? StorageReference.percentDecode(encoded)) == decoded, "percent coding of '\(decoded)' does not read back")
        }
        _ = StorageReference.escapingUnsafeBytes(text)
        _ = StorageReference.cloudStorageBucketProblem(text)
        _ = try? StorageReference.normalise(text)
        _ = StorageReference.alreadyNormal(text)
        _ = HiddenName.reservedComponent(in: text)
        _ = SlashSeparatedPath.parts(of: text, keepingEmpty: true)
        _ = SlashSeparatedPath.lastPart(of: text)
        _ = SlashSeparatedPath.directory(of: text)
        _ = LocalPath.standardize(text)
        _ = LocalPathBounds.problem(text)
        _ = FileIdentity(text)
        _ = JobID.isValid(text)
        _ = JobID.derived(from: text)
        _ = QueueName.isValid(text)
        _ = UploadPolicy.isValidEntry(text)
        _ = UploadPolicy.executableExtension(of: text)
        if PathPattern.isPattern(text), let pattern = try? PathPattern(text) {
            _ = pattern.matches(other)
            _ = pattern.matchesName(of: other)
            _ = PathFilter(include: [pattern], exclude: []).takes(other)
        }
        _ = GCSBackend.origin(of: text)
        _ = GCSBackend.sessionURI(text, startedAt: "http://127.0.0.1:9023/upload/storage/v1/b/b/o?uploadType=resumable&name=x")
        _ = redirectTarget(text, from: other)
        _ = CurlEngine.isHTTPS(text)
        _ = GoogleCredentials.isAcceptableTokenURI(text)
        _ = try? GoogleCredentials.metadataHost(text)
        _ = try? StorageConfiguration.emulatorEndpoint(text)
        _ = ProxyEnvironment.endpoint(of: text)
        _ = ProxyEnvironment.excludes(text, host: other)
        _ = ProxyEnvironment.proxy(for: other, environment: ["https_proxy": text, "http_proxy": text, "no_proxy": "example.com"])
        _ = ProxyEnvironment.describedProxy(for: other, environment: ["ALL_PROXY": text])
        _ = isPostgresURL(text)
    })

// MARK: - redaction: secrets out of URLs and messages

/// Every redaction of what may hold a secret before it is shown: URLs (query parameters, user info),
/// endpoints, the PostgreSQL URL or keyword string (`--db`), proxies, manifest lines (`SecretText`),
/// header lines; the input split at NUL bytes (a text, then a second text: a URL whose secrets to scrub).
let redactionTarget = FuzzTarget(
    name: "redaction",
    summary: "SecretRedaction.*, redactedDatabaseURL, ProxyEnvironment redaction, SecretText, headerSecrets",
    run: { input in
        let parts = input.parts
        let text = parts[0]
        let other = parts.count > 1 ? parts[1] : text
        _ = SecretRedaction.redactURL(text)
        _ = SecretRedaction.redactEndpoint(text)
        _ = SecretRedaction.endpointSecretValues(in: text)
        let secrets = SecretRedaction.secretValues(in: other)
        _ = SecretRedaction.scrub(text, secrets: secrets)
        _ = SecretRedaction.redactURLs(in: text)
        _ = SecretRedaction.redactURLsScanning(in: text)
        _ = SecretRedaction.isSecretName(Substring(text))
        _ = redactedURL(text)
        _ = redactedDatabaseURL(text)
        _ = isPostgresURL(text)
        _ = ProxyEnvironment.redacted(text)
        _ = ProxyEnvironment.scrubbed(text, environment: ["https_proxy": other, "ALL_PROXY": other])
        _ = SecretText.redacted(text)
        for column in [1, 2, text.unicodeScalars.count / 2 + 1, text.unicodeScalars.count + 1] {
            _ = SecretText.redactedLine(text, column: column)
        }
        _ = HTTPRequest.headerSecrets(parts)
        _ = curlFailure(code: 7, text: text, url: other, environment: ["https_proxy": other])
    })
