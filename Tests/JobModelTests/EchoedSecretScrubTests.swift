@testable import JobModel
import Testing

/// What a server sends back quoting a request's secret in another form than the one sent — re-encoded,
/// cut — and the values of an answer a job stores: none keeps the secret.
@Suite("secrets a server sends back, in other forms") struct EchoedSecretScrubTests {
    /// A JSON message that percent-encodes what it quotes (`%20` for the space, `%33` for a `3`) hid the
    /// token from an exact comparison.
    @Test("scrub finds a secret with any of its bytes percent-encoded", arguments: [
        ("Bearer%20ATs%33cr3tTOKEN was refused", "Bearer%20REDACTED was refused"),
        ("Bearer ATs3cr3tTOKEN was refused", "Bearer REDACTED was refused"),
        ("x=%41%54s3cr3t%54OKEN;", "x=REDACTED;"),
        ("x=%61%74s3cr3tTOKEN", "x=%61%74s3cr3tTOKEN"),
        ("ATs3cr3tTOKE", "ATs3cr3tTOKE"),
    ])
    func percentEncodedForms(_ text: String, _ scrubbed: String) {
        #expect(SecretRedaction.scrub(text, secrets: ["ATs3cr3tTOKEN"]) == scrubbed)
    }

    /// A SigV4 URL's whole `X-Amz-*` family is hidden where the URL is shown, but only its credentials are
    /// scrubbed from what a server sends back: `X-Amz-SignedHeaders=host` and `X-Amz-Expires=3600` made a
    /// stored `max-age=3600` read `max-age=REDACTED`, and jobctl's own word "host" read "REDACTED".
    @Test func aSignedURLsDescriptiveParametersAreNoSecretsToScrub() {
        let url = "https://h/o.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20261207&X-Amz-Date=20261207T000000Z"
            + "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token=SESSIONs3cr3t&X-Amz-Signature=0123456789abcdef"
        let secrets = Set(SecretRedaction.secretValues(in: url))
        #expect(secrets.isSuperset(of: ["AKIAEXAMPLE%2F20261207", "AKIAEXAMPLE/20261207", "SESSIONs3cr3t", "0123456789abcdef"]), "\(secrets)")
        #expect(secrets.isDisjoint(with: ["AWS4-HMAC-SHA256", "20261207T000000Z", "3600", "host"]), "\(secrets)")
        #expect(SecretRedaction.scrub("public, max-age=3600; the certificate names other hosts", secrets: secrets)
                == "public, max-age=3600; the certificate names other hosts")
        // Shown, the whole family is still hidden.
        let shown = SecretRedaction.redactURL(url)
        #expect(shown.contains("X-Amz-Expires=REDACTED") && shown.contains("X-Amz-Signature=REDACTED"), "\(shown)")
    }

    /// Custom metadata is the user's description of an object: only keys named as a credential are
    /// hidden (`tokens_used`, `policy`, `code`, `session` read `REDACTED`).
    @Test func onlyCredentialMetadataKeysAreSecret() {
        for key in ["firebaseStorageDownloadTokens", "FIREBASESTORAGEDOWNLOADTOKENS", "api_key", "db_password", "client_secret",
                    "token", "access_token", "private_key", "aws_credentials"] {
            #expect(SecretRedaction.isSecretMetadataKey(key), "\(key)")
        }
        for key in ["tokens_used", "max_tokens", "code", "policy", "session", "ticket", "keyword", "author", "sig"] {
            #expect(!SecretRedaction.isSecretMetadataKey(key), "\(key)")
        }
    }

    @Test func aSpaceMayBeAPlus() {
        #expect(SecretRedaction.scrub("p=two+words+here", secrets: ["two words here"]) == "p=REDACTED")
    }

    /// Text cut from a longer one (an answer read up to a limit) may end inside a secret: its first bytes
    /// are replaced too, never printed up to the cut; text not cut keeps a word that only begins alike.
    @Test func aSecretCutAtTheEndIsReplacedWhenTheTextWasCut() {
        let secret = "SIGs3cr3t" + String(repeating: "ab", count: 40)
        let text = "request GET /x?X-Goog-Signature=" + secret.prefix(30)
        #expect(SecretRedaction.scrub(text, secrets: [secret], cutShort: true) == "request GET /x?X-Goog-Signature=REDACTED")
        #expect(SecretRedaction.scrub(text + "%6", secrets: [secret], cutShort: true) == "request GET /x?X-Goog-Signature=REDACTED")
        #expect(SecretRedaction.scrub(text, secrets: [secret]) == text)
        #expect(SecretRedaction.scrub("ends SIG", secrets: [secret], cutShort: true) == "ends SIG")
    }

    /// A server's values stored in a result: each secret of the request replaced, the object's own
    /// bucket and name kept.
    @Test func anObjectsReportedValuesLoseTheRequestsSecrets() {
        let object = StorageObject(bucket: "b", name: "m", size: 11, contentType: "text/plain; token=HTs3cr3t",
                                   cacheControl: "token=HTs3cr3t", contentDisposition: "attachment; token=HTs3cr3t",
                                   customMetadata: ["echo": "HTs3cr3t"], generation: "\"token=HTs3cr3t\"", updated: "HTs3cr3t")
        let scrubbed = JobResult(object: object).withoutSecrets(["HTs3cr3t"]).object
        #expect(scrubbed?.contentType == "text/plain; token=REDACTED" && scrubbed?.cacheControl == "token=REDACTED")
        #expect(scrubbed?.contentDisposition == "attachment; token=REDACTED" && scrubbed?.generation == "\"token=REDACTED\"")
        #expect(scrubbed?.customMetadata == ["echo": "REDACTED"] && scrubbed?.updated == "REDACTED")
        #expect(scrubbed?.bucket == "b" && scrubbed?.name == "m")
        let error = StorageError(.unknown, "validator 'token=HTs3cr3t'", cause: "HTs3cr3t").withoutSecrets(["HTs3cr3t"])
        #expect(error.message == "validator 'token=REDACTED'" && error.cause == "REDACTED")
        #expect(JobSpec(kind: .getMetadata, source: "http://127.0.0.1:9/m?token=HTs3cr3t").urlSecrets == ["HTs3cr3t"])
        #expect(JobSpec(kind: .getMetadata, source: "gs://b/m").urlSecrets.isEmpty)
    }
}
