import Foundation
import JobModel
@testable import Manifest

/// The folder relative paths resolve against in these tests (never read or written).
let testBase = "/srv/manifests"

/// Parses YAML text as `jobs/test.yaml` with `testBase` as the base directory. Upload sources are not
/// looked for on disk (`testBase` does not exist); `SourceCheckTests` covers that with real files.
func parse(_ yaml: String, path: String = "jobs/test.yaml") -> Result<[JobSpec], ManifestErrors> {
    ManifestParser(baseDirectory: testBase, checksSources: false).parse(text: yaml, path: path)
}

extension Result where Failure == ManifestErrors {
    /// The jobs, or nil (for `#require`) when parsing failed.
    var jobs: Success? {
        if case .success(let jobs) = self { return jobs }
        return nil
    }

    /// The errors, or nil when parsing succeeded.
    var errors: [ManifestError]? {
        if case .failure(let errors) = self { return errors.errors }
        return nil
    }
}
