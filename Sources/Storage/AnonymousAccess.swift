import Foundation
import JobModel

extension StorageConfiguration {
    /// Where `fromEnvironment` looks for Google credentials, in its order: what a worker names when it
    /// found none of them.
    public static let googleCredentialSources = [
        "GOOGLE_OAUTH_ACCESS_TOKEN", "JOBCTL_TOKEN_COMMAND", "GOOGLE_APPLICATION_CREDENTIALS",
        "the gcloud well-known file ($HOME/\(wellKnownCredentialsPath))",
        "a metadata server (GCE_METADATA_HOST, or a Google Compute Engine machine)",
    ]

    /// Whether `gs://` requests go out without any credentials: no token, no token command, no Google
    /// credentials, and no emulator (which takes none). Public buckets still work that way.
    public var sendsGCSRequestsAnonymously: Bool {
        !usesEmulator && accessToken == nil && tokenCommand == nil && googleCredentials == nil
    }
}

extension JobSpec {
    /// Whether the job's storage side is a `gs://` object (served by the GCS backend) under `storage`'s
    /// settings (a Firebase URL on its emulator's host is one).
    public func usesGCS(under storage: StorageConfiguration) -> Bool {
        (try? remoteReference(firebaseHosts: storage.firebaseHosts))?.scheme == .gs
    }
}
