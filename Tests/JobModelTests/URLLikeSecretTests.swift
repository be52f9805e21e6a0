@testable import JobModel
import Testing

/// Secrets the list of names and the URL redaction missed: the parameters of CDNs' and clouds' signed
/// URLs, and values shown that are no URL but hold URL-like secrets (a setting's path with a query).
@Suite("URL-like secrets") struct URLLikeSecretTests {
    @Test("signed URLs of CDNs and clouds have their credentials redacted", arguments: [
        "auth_key", "hmac", "hdnts", "Policy", "client_key", "sas", "ticket", "AUTH_KEY", "HDNTS",
    ])
    func cdnParameterNames(_ name: String) {
        #expect(redactedURL("https://cdn.example/v.mp4?\(name)=CDNs3cr3t&w=1") == "https://cdn.example/v.mp4?\(name)=REDACTED&w=1")
    }

    @Test("a value that is no URL still has its URL-like secrets redacted", arguments: [
        ("/b?token=BUs3cr3t", "/b?token=REDACTED"),
        ("https://ru:REs3cr3t@127.0.0.1", "https://ru:REDACTED@127.0.0.1"),
        ("'https:/127.0.0.1/x?token=TKs3cr3t&X-Goog-Signature=SIGs3cr3t' is not a storage URL",
         "'https:/127.0.0.1/x?token=REDACTED&X-Goog-Signature=REDACTED' is not a storage URL"),
        ("/srv/a;jsessionid=JSs3cr3t/b and ru:pw@proxy:3128", "/srv/a;jsessionid=REDACTED/b and ru:REDACTED@proxy:3128"),
        ("30s on PostgreSQL (worker: its lease, at least 10s; archive: none)", "30s on PostgreSQL (worker: its lease, at least 10s; archive: none)"),
        ("/data/buckets", "/data/buckets"),
        ("/home/u@x/buckets", "/home/u@x/buckets"),
        ("media,mail", "media,mail"),
        ("a raw '@' or '/' before its last '@'", "a raw '@' or '/' before its last '@'"),
        ("ops@example.com and @scope/p?token=T", "ops@example.com and @scope/p?token=REDACTED"),
    ])
    func urlLikeValues(_ value: String, _ shown: String) {
        #expect(SecretRedaction.redactURLLike(value) == shown)
    }
}
