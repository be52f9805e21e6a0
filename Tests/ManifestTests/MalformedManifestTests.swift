import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// A manifest that must be refused with one error at an exact position.
struct MalformedCase: Sendable, CustomTestStringConvertible {
    let name: String
    let input: [UInt8]
    let line: Int
    let column: Int
    let code: ManifestError.Code
    let fragment: String
    /// How many errors the manifest has in all; the first is the one described.
    let count: Int
    /// Whether upload sources are looked for on disk (under `testBase`, which does not exist).
    let checksSources: Bool

    init(_ name: String, _ yaml: String, _ line: Int, _ column: Int, _ code: ManifestError.Code, _ fragment: String, count: Int = 1,
         checksSources: Bool = false) {
        self.init(name, bytes: Array(yaml.utf8), line, column, code, fragment, count: count, checksSources: checksSources)
    }

    init(_ name: String, bytes: [UInt8], _ line: Int, _ column: Int, _ code: ManifestError.Code, _ fragment: String, count: Int = 1,
         checksSources: Bool = false) {
        self.count = count
        self.checksSources = checksSources
        self.name = name
        self.input = bytes
        self.line = line
        self.column = column
        self.code = code
        self.fragment = fragment
    }

    var testDescription: String { name }
}

private let malformedCases: [MalformedCase] = [
    // MARK: YAML itself
    .init("unclosed quote", """
    jobs:
      - kind: "upload-file

    """, 2, 11, .syntax, "found unexpected end of stream while scanning a quoted scalar that starts here"),
    .init("unclosed flow mapping", "- {kind: fetch-url, source: gs://bkt/x\n", 1, 3, .syntax, "did not find expected ',' or '}' while parsing a flow mapping that starts here"),
    .init("tab indentation", "jobs:\n  - kind: fetch-url\n\tsource: gs://bkt/x\n", 3, 1, .syntax, "tab character here: YAML indents with spaces only"),
    .init("over-indented key", """
    jobs:
      - kind: fetch-url
         source: gs://bkt/x
    """, 3, 12, .syntax, "mapping values are not allowed in this context"),
    .init("duplicate key", """
    - kind: fetch-url
      source: gs://bkt/x
      source: gs://bkt/y
    """, 3, 3, .duplicateKey, "duplicate key 'source' (first written at line 2, column 3)"),
    .init("alias without anchor", """
    - kind: fetch-url
      source: *nowhere
    """, 2, 11, .unsupportedYAML, "alias '*nowhere' refers to no anchor"),
    .init("recursive alias", "- &a {kind: fetch-url, source: *a}\n", 1, 32, .unsupportedYAML, "refers to the collection that contains it"),
    .init("two documents", """
    - {kind: fetch-url, source: gs://bkt/x}
    ---
    - {kind: fetch-url, source: gs://bkt/y}
    """, 2, 1, .unsupportedYAML, "a second one starts here"),
    .init("not UTF-8", bytes: Array("jobs:\n  - kind: ".utf8) + [0xFF] + Array("\n".utf8), 2, 11, .invalidEncoding,
          "not valid UTF-8 (byte 0xFF at offset 16)"),
    .init("UTF-16", bytes: [0xFF, 0xFE, 0x6A, 0x00, 0x6F, 0x00], 1, 1, .invalidEncoding, "UTF-16; save it as UTF-8"),
    .init("control character", "- kind: fetch\u{01}-url\n", 1, 14, .syntax, "control characters are not allowed"),
    .init("nested too deep", String(repeating: "[", count: 70) + String(repeating: "]", count: 70) + "\n", 1, 65, .limitExceeded,
          "collections nest more than 64 levels deep here"),

    // MARK: Shape of the manifest
    .init("empty file", "", 1, 1, .emptyManifest, "the manifest has no jobs"),
    .init("only comments", "# nothing to do\n\n", 1, 1, .emptyManifest, "the manifest has no jobs"),
    .init("empty jobs list", "jobs: []\n", 1, 7, .emptyManifest, "'jobs' is an empty list"),
    .init("null jobs", "defaults: {queue: q}\njobs:\n", 2, 1, .emptyManifest, "'jobs' lists no jobs"),
    .init("no jobs key", "defaults: {queue: q}\n", 1, 1, .missingField, "the manifest has no 'jobs:'"),
    .init("top-level scalar", "just some text\n", 1, 1, .invalidTopLevel, "not the string 'just some text'"),
    .init("single job at the top", "kind: fetch-url\nsource: gs://bkt/x\n", 1, 1, .invalidTopLevel, "this looks like a single job"),
    .init("misspelled jobs", "job:\n  - {kind: fetch-url, source: gs://bkt/x}\n", 1, 1, .unknownKey, "unknown key 'job' at the top of the manifest (did you mean 'jobs'?)"),
    .init("jobs is a mapping", """
    jobs:
      kind: fetch-url
      source: gs://bkt/x
    """, 2, 3, .wrongType, "'jobs' must be a list of jobs, each starting with '- ', not a mapping"),
    .init("job is a scalar", "jobs:\n  - fetch-url gs://bkt/x\n", 2, 5, .wrongType, "a job must be a mapping of fields ('kind: ...', 'source: ...'), not the string 'fetch-url gs://bkt/x'"),
    .init("defaults is a list", "defaults: [queue]\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n", 1, 11, .wrongType, "'defaults' must be a mapping"),
    .init("key in defaults", """
    defaults:
      key: k
    jobs:
      - {kind: fetch-url, source: gs://bkt/x}
    """, 2, 3, .fieldNotAllowed, "'key' cannot be a default: idempotency keys must differ"),

    // MARK: Keys and types
    .init("unknown key with suggestion", """
    jobs:
      - kind: upload-file
        source: a.txt
        destinaton: gs://bkt/a.txt
    """, 4, 5, .unknownKey, "unknown key 'destinaton' (did you mean 'destination'?)"),
    .init("unknown key without suggestion", "- {kind: fetch-url, source: gs://bkt/x, colour: red}\n", 1, 41, .unknownKey, "unknown key 'colour'; a job takes kind, source"),
    .init("mapping as a key", "- kind: fetch-url\n  source: gs://bkt/x\n  ? [a]\n  : b\n", 3, 5, .wrongType, "keys must be names, not a sequence"),
    .init("source is a mapping", """
    - kind: download-memory
      source:
        bucket: b
    """, 3, 5, .wrongType, "'source' must be a local path or storage reference, not a mapping"),
    .init("priority is a word", """
    - kind: fetch-url
      source: gs://bkt/x
      priority: high
    """, 3, 13, .wrongType, "'priority' must be an integer (higher runs first), not the string 'high'"),
    .init("priority is quoted", """
    - kind: fetch-url
      source: gs://bkt/x
      priority: "5"
    """, 3, 13, .wrongType, "not the string '5'"),
    .init("priority tagged as a string", "- kind: fetch-url\n  source: gs://bkt/x\n  priority: !!str 5\n", 3, 13, .wrongType, "not the string '5'"),
    // Tags jobctl gives no meaning to were dropped and the value taken as text.
    .init("an application tag on a value", "- kind: !custom upload-data\n  data: x\n  destination: gs://bkt/x\n", 1, 9, .unsupportedYAML,
          "the tag '!custom' is not one jobctl reads (a value takes !!str, !!int, !!float, !!bool, !!null or !!binary); remove it"),
    .init("a YAML type jobctl does not read", "- kind: upload-data\n  data: !!timestamp 2026-01-01\n  destination: gs://bkt/x\n", 2, 9,
          .unsupportedYAML, "the tag '!!timestamp' is not one jobctl reads"),
    .init("!!set on a mapping", "- kind: update-metadata\n  destination: gs://bkt/x\n  metadata: !!set {a: 1}\n", 3, 13, .unsupportedYAML,
          "the tag '!!set' is not one jobctl reads (a mapping takes only !!map)"),
    .init("a tag on the job list", "!jobs\n- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n", 1, 1, .unsupportedYAML,
          "(a sequence takes only !!seq)"),
    .init("!!int on text", "- kind: upload-data\n  data: !!int hello\n  destination: gs://bkt/x\n", 2, 9, .wrongType,
          "'data' must be the text to upload, not a value tagged !!int"),
    .init("!!binary on a reference", "- kind: upload-data\n  data: x\n  destination: !!binary Zm9v\n", 3, 16, .wrongType,
          "'destination' must be a local path or storage reference, not a value tagged !!binary"),
    .init("bad !!binary data", "- kind: upload-data\n  data: !!binary '%%%'\n  destination: gs://bkt/x\n", 2, 9, .invalidBase64, "'data' is not valid base64"),
    .init("wrong kind does not fall back to the default kind", """
    defaults: {kind: fetch-url}
    jobs:
      - kind: upload
        data: x
        destination: gs://bkt/x
    """, 3, 11, .unknownKind, "unknown kind 'upload'"),
    .init("data without a value", """
    - kind: upload-data
      data:
      destination: gs://bkt/x
    """, 2, 3, .invalidValue, "'data' has no value; expected the text to upload"),

    // MARK: Kinds and required fields
    .init("missing kind", "- source: gs://bkt/x\n", 1, 3, .missingField, "the job has no 'kind'; expected one of upload-file, upload-data"),
    .init("unknown kind", "- kind: downlaod-file\n  source: gs://bkt/x\n", 1, 9, .unknownKind, "unknown kind 'downlaod-file' (did you mean 'download-file'?)"),
    .init("missing destination", """
    jobs:
      - kind: upload-file
        source: a.txt
    """, 2, 5, .missingField, "the upload-file job has no 'destination' (the storage reference to upload to)"),
    .init("upload-data without data", "- kind: upload-data\n  destination: gs://bkt/x\n", 1, 3, .missingField, "has no 'data' (text) or 'data_base64'"),
    .init("max_size on upload-file", """
    - kind: upload-file
      source: a.txt
      destination: gs://bkt/a.txt
      max_size: 1MiB
    """, 4, 3, .fieldNotAllowed, "'max_size' is only for download-memory jobs, not upload-file"),
    .init("metadata on a download", """
    - kind: download-file
      source: gs://bkt/a.txt
      destination: a.txt
      metadata: {content_type: text/plain}
    """, 4, 3, .fieldNotAllowed, "'metadata' is only for uploads and update-metadata; a download-file job writes no metadata"),
    .init("data on upload-file", "- kind: upload-file\n  source: a\n  destination: gs://bkt/a\n  data: x\n", 4, 3, .fieldNotAllowed,
          "'data' is only for upload-data jobs; an upload-file job reads the file named by 'source'"),
    .init("destination on fetch-url", "- kind: fetch-url\n  source: gs://bkt/x\n  destination: x\n", 3, 3, .fieldNotAllowed,
          "a fetch-url job produces a download URL and takes no 'destination'"),
    .init("data and data_base64", """
    - kind: upload-data
      data: x
      data_base64: eA==
      destination: gs://bkt/x
    """, 3, 3, .conflictingFields, "'data' and 'data_base64' exclude each other"),

    // MARK: References and paths
    .init("unknown scheme", "- kind: fetch-url\n  source: s3://b/x\n", 2, 11, .invalidReference, "unknown scheme 's3'"),
    .init("malformed escape", "- kind: download-memory\n  source: gs://bkt/a%zz\n", 2, 11, .invalidReference, "malformed percent escape"),
    .init("trailing percent", "- kind: download-memory\n  source: 'gs://bkt/a%'\n", 2, 11, .invalidReference, "malformed percent escape"),
    .init("no scheme", "- kind: upload-data\n  data: x\n  destination: my-bucket/x.txt\n", 3, 16, .invalidReference,
          "'destination' is not a valid storage reference: 'my-bucket/x.txt' is not a storage URL"),
    .init("dot-dot segment", "- kind: download-memory\n  source: gs://bkt/a/../b\n", 2, 11, .invalidReference, "contains a '..' segment"),
    .init("credentials in URL", "- kind: download-memory\n  source: https://me:pw@example.com/x\n", 2, 11, .invalidReference, "credentials in URLs are refused"),
    .init("bad port", "- kind: download-memory\n  source: http://example.com:99999/x\n", 2, 11, .invalidReference, "invalid port"),
    .init("bad bucket characters", "- kind: download-memory\n  source: gs://my_bucket!/x\n", 2, 11, .invalidReference, "invalid bucket name 'my_bucket!'"),
    .init("upload to a bucket root", "- kind: upload-data\n  data: x\n  destination: gs://my-bucket/\n", 3, 16, .bucketRoot,
          "'destination' gs://my-bucket/ is a bucket root; an upload needs an object path such as gs://my-bucket/path/file.txt"),
    .init("download of a bucket root", "- kind: download-memory\n  source: gs://bkt\n", 2, 11, .bucketRoot, "is a bucket root"),
    .init("fetch-url on http", "- kind: fetch-url\n  source: https://example.com/a.txt\n", 2, 11, .invalidReference,
          "fetch-url needs a gs:// or Firebase reference; 'https://example.com/a.txt' is a plain https URL"),
    .init("fetch-url on a local file", "- kind: fetch-url\n  source: file:///tmp/a.txt\n", 2, 11, .invalidReference, "is a plain local file with no download URL"),
    .init("upload-file source is a URL", "- kind: upload-file\n  source: gs://bkt/a.txt\n  destination: gs://bkt/copy.txt\n", 2, 11, .invalidPath,
          "'source' must be a local file path, not the URL 'gs://bkt/a.txt'"),
    .init("swapped download", "- kind: download-file\n  source: out/a.txt\n  destination: gs://bkt/a.txt\n", 2, 11, .invalidReference,
          "(did you swap 'source' and 'destination'?)", count: 2),
    .init("bad source with a folder destination", "- kind: download-file\n  source: gs://bkt/%\n  destination: out/\n", 2, 11, .invalidReference,
          "malformed percent escape"),
    .init("local bucket as a local path", "- kind: upload-file\n  source: file://demo/a.txt\n  destination: gs://bkt/a\n", 2, 11, .invalidPath,
          "names the local bucket 'demo'"),
    .init("home directory", "- kind: upload-file\n  source: ~/a.txt\n  destination: gs://bkt/a\n", 2, 11, .invalidPath, "starts with '~'"),
    .init("missing upload source", "- kind: upload-file\n  source: nowhere/a.txt\n  destination: gs://bkt/a\n", 2, 11, .sourceUnavailable,
          "'source' 'nowhere/a.txt' does not exist (/srv/manifests/nowhere/a.txt); if it will exist when the job runs, add 'check_source: false'",
          checksSources: true),
    .init("missing folder as upload source", "- kind: upload-file\n  source: photos/\n  destination: gs://bkt/photos/\n", 2, 11, .sourceUnavailable,
          "'source' 'photos/' is a folder that does not exist (or is not a folder)"),
    .init("glob in a missing folder", "- kind: upload-file\n  source: photos/*.jpg\n  destination: gs://bkt/photos/\n", 2, 11, .sourceUnavailable,
          "'source' 'photos/*.jpg' is a glob whose folder '/srv/manifests/photos' does not exist (or is not a folder)", checksSources: true),
    .init("the whole filesystem as upload source", "- kind: upload-file\n  source: /\n  destination: gs://bkt/all/\n", 2, 11, .unsupportedSource,
          "'source' '/' would expand the whole filesystem from '/'; name the folder to upload"),
    // (`/proc/self/fd/`, a folder of links, is refused at its source now: it is on procfs, and leads
    // through `/proc/self`.) What was skipped is said with the error, as its note is not printed then.
    .init("a folder of devices only", "- kind: upload-file\n  source: /dev/pts/\n  destination: gs://bkt/fd/\n", 1, 3, .emptyExpansion,
          "'source' '/dev/pts/' holds no regular file; nothing would be uploaded; skipped '"),
    .init("a folder into one object", "- kind: upload-file\n  source: /dev/pts/\n  destination: gs://bkt/fd\n", 3, 16, .invalidReference,
          "'destination' 'gs://bkt/fd' names one object, but 'source' is a folder or glob; end it in '/'"),
    .init("an unclosed bracket in a glob", "- kind: upload-file\n  source: /dev/pts/[0\n  destination: gs://bkt/fd/\n", 2, 11, .invalidValue,
          "'source' '/dev/pts/[0' is not a valid glob: '[0' opens '[' without a closing ']'"),
    .init("prefix download into a file", "- kind: download-file\n  source: gs://bkt/photos/\n  destination: out\n", 3, 16, .invalidPath,
          "'destination' 'out' must end in '/': the objects of a prefix go into a local folder"),
    .init("prefix download without a destination", "- kind: download-file\n  source: gs://bkt/photos/\n", 1, 3, .missingField,
          "the download-file job has no 'destination' (the local folder to download into, ending in '/')"),
    .init("include with an unclosed bracket", "- kind: download-file\n  source: gs://bkt/p/\n  destination: out/\n  include: [\"[a\"]\n", 4, 13,
          .invalidValue, "'include': '[a' opens '[' without a closing ']'"),
    .init("exclude as a mapping", "- kind: download-file\n  source: gs://bkt/p/\n  destination: out/\n  exclude: {a: b}\n", 4, 12,
          .wrongType, "'exclude' must be a list of patterns like [\"*.jpg\", \"2024/**\"], not a mapping"),
    .init("exclude climbing out", "- kind: download-file\n  source: gs://bkt/p/\n  destination: out/\n  exclude: [a, ../b]\n", 4, 16,
          .invalidValue, "'exclude': '../b' climbs out with '..'"),
    .init("include that is empty", "- kind: download-file\n  source: gs://bkt/p/\n  destination: out/\n  include: []\n", 4, 12,
          .invalidValue, "'include' is an empty list; leave it out or give at least one pattern"),
    .init("include on one file", "- kind: download-file\n  source: gs://bkt/p/a.jpg\n  destination: out/\n  include: [\"*.jpg\"]\n", 4, 3,
          .fieldNotAllowed, "'include' applies only when 'source' is a folder, a glob or a prefix (ending in '/'); this job names one file"),
    .init("include on an upload-data job", "- kind: upload-data\n  data: x\n  destination: gs://bkt/a\n  include: [\"*\"]\n", 4, 3,
          .fieldNotAllowed, "'include' is not allowed in an upload-data job"),
    .init("include in defaults", "defaults:\n  include: [\"*\"]\njobs:\n  - {kind: fetch-url, source: gs://bkt/a}\n", 2, 3,
          .fieldNotAllowed, "'include' cannot be a default: filters belong to the folder, glob or prefix they filter"),
    .init("run_after that is no time", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: tomorrow\n", 3, 14, .invalidValue,
          "'run_after' must be an RFC 3339 time like 2026-12-01T02:00:00Z (or with an offset, +01:00), not 'tomorrow'"),
    .init("run_after without a time zone", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2026-12-01T02:00:00\n", 3, 14, .invalidValue,
          "'run_after' must be an RFC 3339 time"),
    .init("run_after with a leap second where none can be", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2027-01-01T23:59:60Z\n", 3, 14,
          .invalidValue, "'run_after' '2027-01-01T23:59:60Z' has second 60, a leap second, which only 23:59:60 UTC on the last day of a month can be"),
    .init("run_after a date alone", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2026-12-01\n", 3, 14, .invalidValue,
          "'run_after' must be an RFC 3339 time"),
    // Foundation's formatter rolled these over into other times (March 1st, +09:00, the next day).
    .init("run_after on February 29th of a common year", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2027-02-29T00:00:00Z\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after on April 31st", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2027-04-31T00:00:00Z\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after at hour 24", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2027-01-01T24:00:00Z\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after with an offset of +99:00", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: \"2027-01-01T00:00:00+99:00\"\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after with offset minutes 99", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: \"2027-01-01T00:00:00+05:99\"\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after at minute 60", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2027-01-01T10:60:00Z\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after before 1970", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 1969-12-31T23:59:59Z\n", 3, 14, .invalidValue,
          "'run_after' must be between 1970-01-01 and 9999-12-31, not '1969-12-31T23:59:59Z'"),
    // A leap second, but before 1970: said so, not called a misplaced leap second.
    .init("run_after a leap second before 1970", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 1969-12-31T23:59:60Z\n", 3, 14,
          .invalidValue, "'run_after' must be between 1970-01-01 and 9999-12-31, not '1969-12-31T23:59:60Z'"),
    .init("run_after a leap second before 1970 in another zone", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: \"1970-01-01T00:59:60+01:00\"\n",
          3, 14, .invalidValue, "'run_after' must be between 1970-01-01 and 9999-12-31, not '1970-01-01T00:59:60+01:00'"),
    .init("run_after with a five-digit year", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 10000-01-01T00:00:00Z\n", 3, 14,
          .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("run_after as a number", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: [1]\n", 3, 14, .wrongType,
          "'run_after' must be an RFC 3339 time like 2026-12-01T02:00:00Z (or with an offset, +01:00), not a sequence"),
    .init("run_after empty", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after:\n", 3, 3, .invalidValue, "'run_after' must be an RFC 3339 time"),
    .init("delay without a unit", "- kind: fetch-url\n  source: gs://bkt/a\n  delay: 15\n", 3, 10, .invalidValue,
          "'delay' must be a duration like 90s, 15m, 2h or 1d (a unit is required), not '15'"),
    .init("delay of eleven years", "- kind: fetch-url\n  source: gs://bkt/a\n  delay: 4000d\n", 3, 10, .invalidValue,
          "'delay' must be at most 3650d (ten years), not '4000d'"),
    .init("delay that overflows", "- kind: fetch-url\n  source: gs://bkt/a\n  delay: 99999999999999999999d\n", 3, 10, .invalidValue,
          "'delay' must be at most 3650d (ten years)"),
    .init("negative delay", "- kind: fetch-url\n  source: gs://bkt/a\n  delay: -5m\n", 3, 10, .invalidValue, "'delay' must be a duration"),
    .init("after that is no list", "- kind: fetch-url\n  source: gs://bkt/a\n  after: a\n", 3, 10, .wrongType,
          "'after' must be a list of the keys or ids of the jobs this one waits for, like [upload-photos], not the string 'a'"),
    .init("after empty", "- kind: fetch-url\n  source: gs://bkt/a\n  after:\n", 3, 3, .invalidValue, "'after' must be a list"),
    .init("after holding a list", "- kind: fetch-url\n  source: gs://bkt/a\n  after: [[x]]\n", 3, 11, .wrongType,
          "each of 'after' must be the key or id of a job, not a sequence"),
    .init("after naming a job twice", "- kind: fetch-url\n  source: gs://bkt/a\n  after: [x, x]\n", 3, 14, .invalidDependency,
          "'x' is already in 'after' (column 11 of line 3); list each job once"),
    .init("after naming the job itself", "- kind: fetch-url\n  source: gs://bkt/a\n  key: a\n  after: [b, a]\n", 4, 14, .invalidDependency,
          "job 'a' cannot wait for itself; remove 'a' from its 'after'"),
    .init("after making a cycle", """
        - kind: fetch-url
          source: gs://bkt/a
          key: a
          after: [b]
        - kind: fetch-url
          source: gs://bkt/b
          key: b
          after: [c, a]
        - kind: fetch-url
          source: gs://bkt/c
          key: c
        """, 8, 14, .invalidDependency, "'after' makes a cycle (a → b → a): these jobs would wait for each other forever"),
    .init("after in defaults", "defaults: {after: [a]}\njobs:\n  - kind: fetch-url\n    source: gs://bkt/a\n", 1, 12, .fieldNotAllowed,
          "'after' cannot be a default: each job names the jobs it waits for"),
    .init("run_after and delay together", "- kind: fetch-url\n  source: gs://bkt/a\n  run_after: 2026-12-01T02:00:00Z\n  delay: 2h\n", 4, 3,
          .conflictingFields, "'run_after' and 'delay' exclude each other; keep one"),
    .init("upload-data into a folder", "- kind: upload-data\n  data: x\n  destination: gs://bkt/folder/\n", 3, 16, .invalidReference,
          "'destination' 'gs://bkt/folder/' ends in '/', so it names a folder, and an upload-data job has no file name to put in it; write the object's full name, such as gs://bkt/folder/data.bin"),

    .init("check_source on a download", "- kind: download-file\n  source: gs://bkt/a\n  destination: a\n  check_source: false\n", 4, 3, .fieldNotAllowed,
          "'check_source' is only for upload-file jobs"),
    .init("check_source is a word", "- kind: upload-file\n  source: a\n  destination: gs://bkt/a\n  check_source: maybe\n", 4, 17, .wrongType,
          "'check_source' must be true or false"),
    // A `!!bool` tag makes no boolean of a word that is none (it was taken as false).
    .init("check_source tagged !!bool but no boolean", "- kind: upload-file\n  source: a\n  destination: gs://bkt/a\n  check_source: !!bool maybe\n",
          4, 17, .wrongType, "'check_source' must be true or false"),

    // MARK: Values
    .init("size is a word", """
    jobs:
      - kind: download-memory
        source: gs://bkt/x
        max_size: lots
    """, 4, 15, .invalidSize, "'max_size' must be a size like 1048576, 512KiB or 2MB, not 'lots'"),
    .init("size is zero", "- {kind: download-memory, source: gs://bkt/x, max_size: 0}\n", 1, 57, .invalidSize, "not '0'"),
    .init("size is negative", "- {kind: download-memory, source: gs://bkt/x, max_size: -1KiB}\n", 1, 57, .invalidSize, "not '-1KiB'"),
    .init("max_attempts zero", "- kind: fetch-url\n  source: gs://bkt/x\n  max_attempts: 0\n", 3, 17, .invalidValue, "'max_attempts' must be at least 1, not 0"),
    .init("max_attempts negative", "- kind: fetch-url\n  source: gs://bkt/x\n  max_attempts: -2\n", 3, 17, .invalidValue, "at least 1, not -2"),
    .init("max_attempts too many", "- kind: fetch-url\n  source: gs://bkt/x\n  max_attempts: 1001\n", 3, 17, .invalidValue,
          "'max_attempts' must be between 1 and 1000, not 1001"),
    .init("max_attempts past 64 bits", "- kind: fetch-url\n  source: gs://bkt/x\n  max_attempts: 99999999999999999999\n", 3, 17, .invalidValue,
          "'max_attempts' must be between 1 and 1000, not 99999999999999999999"),
    .init("priority past 64 bits", "- kind: fetch-url\n  source: gs://bkt/x\n  priority: -99999999999999999999\n", 3, 13, .invalidValue,
          "'priority' must be between -1000000000 and 1000000000, not -99999999999999999999"),
    .init("priority too high", "- kind: fetch-url\n  source: gs://bkt/x\n  priority: 0x7fffffffffffffff\n", 3, 13, .invalidValue,
          "written in decimal digits only (no sign, separator or 0x/0o prefix), not 0x7fffffffffffffff"),
    .init("priority is 1e400", "- kind: fetch-url\n  source: gs://bkt/x\n  priority: 1e400\n", 3, 13, .wrongType,
          "'priority' must be an integer (higher runs first), not the number 1e400"),
    // Not "too large": a fraction of a byte, a negative number of twenty digits.
    .init("size a fraction of a byte", "- {kind: download-memory, source: gs://bkt/x, max_size: 1.5}\n", 1, 57, .invalidSize,
          "'max_size' must be a size like 1048576, 512KiB or 2MB, not '1.5' (without a unit the number is a whole number of bytes, "
          + "written without a point; a fraction takes a unit: 1.5KiB)"),
    // `1.0` was 1 byte, where `priority: 1.0` is refused: a number without a unit has no point.
    .init("size a whole number with a point", "- {kind: download-memory, source: gs://bkt/x, max_size: 1.0}\n", 1, 57, .invalidSize,
          "'max_size' must be a size like 1048576, 512KiB or 2MB, not '1.0' (without a unit the number is a whole number of bytes"),
    .init("size a fraction without a whole part", "- {kind: download-memory, source: gs://bkt/x, max_size: .5KiB}\n", 1, 57, .invalidSize,
          "not '.5KiB' (a fraction has digits on both sides of its point: 0.5M, not .5M; 5M, not 5.M)"),
    .init("size of bytes and a half", "- {kind: download-memory, source: gs://bkt/x, max_size: 1.5B}\n", 1, 57, .invalidSize,
          "'max_size' must be a whole number of bytes (a size like 1048576, 512KiB or 2MB), not '1.5B'"),
    .init("key with a NUL", "- {kind: fetch-url, source: gs://bkt/x, key: \"k\\0ey\"}\n", 1, 46, .invalidValue,
          "'key' must not contain control characters (NUL, line breaks, escapes), not 'k\\u{0}ey'"),
    .init("key with a line break", "- {kind: fetch-url, source: gs://bkt/x, key: \"a\\nb\"}\n", 1, 46, .invalidValue,
          "'key' must not contain control characters (NUL, line breaks, escapes), not 'a\\u{A}b'"),
    .init("after with a NUL", "- {kind: fetch-url, source: gs://bkt/x, after: [\"ab\\0c\"]}\n", 1, 49, .invalidDependency,
          "each of 'after' must be the key or id of a job, without control characters, not 'ab\\u{0}c'"),
    .init("size a fraction of a byte in KiB", "- {kind: download-memory, source: gs://bkt/x, max_size: 0.0001KiB}\n", 1, 57, .invalidSize,
          "'max_size' must be a whole number of bytes (a size like 1048576, 512KiB or 2MB), not '0.0001KiB'"),
    .init("size negative past 64 bits", "- {kind: download-memory, source: gs://bkt/x, max_size: -99999999999999999999}\n", 1, 57, .invalidSize,
          "'max_size' must be a size like 1048576, 512KiB or 2MB, not '-99999999999999999999'"),
    .init("timeout past 64 bits", "- {kind: fetch-url, source: gs://bkt/x, timeout: 99999999999999999999d}\n", 1, 50, .invalidValue,
          "'timeout' must be at most 7d, not '99999999999999999999d'"),
    .init("timeout of a fraction of a second", "- {kind: fetch-url, source: gs://bkt/x, timeout: 1500ms}\n", 1, 50, .invalidValue,
          "'timeout' must be whole seconds"),
    .init("size past 64 bits", "- {kind: download-memory, source: gs://bkt/x, max_size: 99999999999999999999GiB}\n", 1, 57, .invalidSize,
          "'max_size' must be at most 512MiB (536870912 bytes)"),
    .init("size past 64 bits without a unit", "- {kind: download-memory, source: gs://bkt/x, max_size: 99999999999999999999}\n", 1, 57, .invalidSize,
          "'max_size' must be at most 512MiB (536870912 bytes)"),
    .init("size above the store's limit", "- {kind: download-memory, source: gs://bkt/x, max_size: 1GiB}\n", 1, 57, .invalidSize,
          "use download-file for larger objects, not '1GiB'"),
    .init("size one byte above the limit", "- {kind: download-memory, source: gs://bkt/x, max_size: 536870913}\n", 1, 57, .invalidSize,
          "'max_size' must be at most 512MiB"),
    .init("bad base64", "- kind: upload-data\n  data_base64: not base64!\n  destination: gs://bkt/x\n", 2, 16, .invalidBase64, "'data_base64' is not valid base64"),
    .init("empty idempotency key", "- kind: fetch-url\n  source: gs://bkt/x\n  key: \"\"\n", 3, 8, .invalidValue, "'key' must be a non-empty idempotency key"),
    .init("idempotency key too long", "- kind: fetch-url\n  source: gs://bkt/x\n  key: \(String(repeating: "k", count: 1_025))\n", 3, 8, .invalidValue,
          "'key' is 1025 bytes long; an idempotency key may have at most 1024"),
    .init("empty queue", "- kind: fetch-url\n  source: gs://bkt/x\n  queue: ''\n", 3, 10, .invalidValue, "'queue' must be a name of 1 to 64"),
    .init("duplicate idempotency key", """
    - kind: fetch-url
      source: gs://bkt/x
      key: same
    - kind: fetch-url
      source: gs://bkt/y
      key: same
    """, 6, 8, .duplicateIdempotencyKey, "idempotency key 'same' is already used by the job at line 1"),

    // MARK: Metadata
    .init("metadata is a string", "- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n  metadata: text/plain\n", 4, 13, .wrongType,
          "'metadata' must be a mapping"),
    .init("unknown metadata key", "- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n  metadata:\n    contentTyp: text/plain\n", 5, 5, .unknownKey,
          "unknown metadata key 'contentTyp' (did you mean 'contentType'?)"),
    .init("both spellings of a metadata key", """
    - kind: upload-data
      data: x
      destination: gs://bkt/x
      metadata:
        contentType: text/plain
        content_type: text/html
    """, 6, 5, .duplicateKey, "'content_type' repeats 'contentType' (line 5)"),
    .init("content type without a slash", "- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n  metadata: {content_type: plain}\n", 4, 28, .invalidValue,
          "must be a media type like text/plain"),
    .init("custom metadata number", """
    - kind: upload-data
      data: x
      destination: gs://bkt/x
      metadata:
        custom_metadata:
          version: 3
    """, 6, 16, .wrongType, "custom metadata value for 'version' must be a string, not the number 3; quote it: \"3\""),
    .init("custom metadata mapping", """
    - kind: upload-data
      data: x
      destination: gs://bkt/x
      metadata:
        customMetadata:
          owner: {name: ada}
    """, 6, 14, .wrongType, "custom metadata value for 'owner' must be a string, not a mapping"),
    .init("custom metadata is a list", "- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n  metadata:\n    custom_metadata: [a]\n", 5, 22, .wrongType,
          "'custom_metadata' must be a mapping of names to strings, not a sequence"),
    // Metadata becomes HTTP headers: a control character is refused at submit, never echoed.
    .init("CR LF in cache_control", "- kind: upload-data\n  data: x\n  destination: http://127.0.0.1:1/x\n  metadata: {cache_control: \"max-age=1\\r\\nX-Injected: 1\"}\n",
          4, 29, .invalidValue, "'cache_control' holds a control character (U+000D at character 10); metadata becomes HTTP headers"),
    .init("an escape sequence in content_type", "- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n  metadata: {content_type: \"\\e[31mred\"}\n",
          4, 28, .invalidValue, "'content_type' holds a control character (U+001B at character 1)"),
    .init("NUL in a custom metadata value", "- kind: update-metadata\n  destination: gs://bkt/x\n  metadata: {custom_metadata: {k: \"a\\0b\"}}\n",
          3, 35, .invalidValue, "the custom metadata value of 'k' holds a control character (U+0000 at character 2)"),
    .init("LF in a custom metadata key", "- kind: upload-data\n  data: x\n  destination: gs://bkt/x\n  metadata: {custom_metadata: {\"a\\nb\": v}}\n",
          4, 32, .invalidValue, "the custom metadata key 'a\\u{A}b' holds a control character (U+000A at character 2)"),
]

@Suite(.onTestThreads) struct MalformedManifestTests {
    @Test(arguments: malformedCases)
    func refused(_ row: MalformedCase) throws {
        let result = ManifestParser(baseDirectory: testBase, checksSources: row.checksSources).parse(data: Data(row.input), path: "jobs/bad.yaml")
        let errors = try #require(result.errors, "accepted: \(result.jobs ?? [])")
        #expect(errors.count == row.count, "\(errors)")
        let error = try #require(errors.first)
        #expect(error.code == row.code, "\(error)")
        #expect("\(error.line):\(error.column)" == "\(row.line):\(row.column)", "\(error)")
        #expect(error.message.contains(row.fragment), "\(error)")
        #expect(error.file == "jobs/bad.yaml")
        // Rendered: the diagnostic, the source line, a caret under the column.
        let lines = error.render().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.first == "jobs/bad.yaml:\(row.line):\(row.column): error: \(error.message)")
        if row.input.count > 6 {
            #expect(lines.count == 3)
            #expect(lines.last?.unicodeScalars.count == row.column, "\(error.render())")
            #expect(lines.last?.hasSuffix("^") == true)
        }
    }

    @Test func tableCoversEveryErrorCode() {
        #expect(malformedCases.count >= 25)
        let covered = Set(malformedCases.map(\.code))
        #expect(covered == Set(ManifestError.Code.allCases).subtracting([.unreadable]))
    }

    // MARK: - Rendering

    @Test func renderShowsTheLineAndACaret() throws {
        let yaml = """
        jobs:
          - kind: download-memory
            source: gs://bkt/x
            max_size: lots
        """
        let errors = try #require(parse(yaml, path: "jobs/x.yaml").errors)
        #expect(errors.count == 1)
        #expect(errors[0].render() == """
        jobs/x.yaml:4:15: error: 'max_size' must be a size like 1048576, 512KiB or 2MB, not 'lots'
            max_size: lots
                      ^
        """)
        let all = ManifestErrors(errors).render()
        #expect(all.hasPrefix("jobs/x.yaml:4:15: error: "))
        #expect(all.hasSuffix("\n1 error generated."))
    }

    @Test func caretKeepsTabsAndCountsCharacters() {
        let error = ManifestError(code: .invalidValue, file: "f.yaml", line: 1, column: 8, message: "m", sourceLine: "\tké: é x")
        #expect(error.render() == "f.yaml:1:8: error: m\n\tké: é x\n\t      ^")
        let noSource = ManifestError(code: .unreadable, file: "f.yaml", line: 1, column: 1, message: "gone")
        #expect(noSource.render() == "f.yaml:1:1: error: gone")
    }

    /// No manifest writes terminal escapes through an error: control characters in the file name and the
    /// message (a quoted value) show as `\u{…}`, those in the source line as U+FFFD, the caret still
    /// under its column.
    @Test func controlCharactersAreShownNotSent() {
        let error = ManifestError(code: .invalidValue, file: "m\u{1B}]0;t\u{7}.yaml", line: 1, column: 12, message: "not '\u{1B}[31m5'",
                                  sourceLine: "a: \u{1B}[2J\u{9B}x: bad")
        #expect(error.render() == "m\\u{1B}]0;t\\u{7}.yaml:1:12: error: not '\\u{1B}[31m5'\na: \u{FFFD}[2J\u{FFFD}x: bad\n           ^")
        #expect(!error.render().unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 || $0.value == 0x9B })
        let tab = ManifestError(code: .invalidValue, file: "f.yaml", line: 1, column: 3, message: "a\tb", sourceLine: "\tx")
        #expect(tab.render() == "f.yaml:1:3: error: a\tb\n\tx\n\t ^")
    }

    @Test func caretUnderAColumnAfterMultibyteText() throws {
        let errors = try #require(parse("- {kind: fetch-url, source: \"gs://bkt/é\", priority: très}\n").errors)
        #expect(errors.map(\.column) == [53])
        #expect(errors[0].render().hasSuffix("\n" + String(repeating: " ", count: 52) + "^"))
    }

    // MARK: - Several errors

    @Test func everyProblemIsReportedInSourceOrder() throws {
        let yaml = """
        defaults:
          priorty: 3
        jobs:
          - kind: upload-data
            data: a.txt
            destination: gs://bkt/
          - kind: download-memory
            source: gs://bkt/x
            max_size: lots
            metadata: {content_type: text/plain}
          - kind: teleport
          - just a string
          - kind: fetch-url
            source: http://example.com/x
            max_attempts: 0
        """
        let errors = try #require(parse(yaml).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == [
            "2:3 unknownKey",
            "6:18 bucketRoot",
            "9:15 invalidSize",
            "10:5 fieldNotAllowed",
            "11:11 unknownKind",
            "12:5 wrongType",
            "14:13 invalidReference",
            "15:19 invalidValue",
        ])
        #expect(errors[0].message == "unknown key 'priorty' (did you mean 'priority'?)")
        let rendered = ManifestErrors(errors).render()
        #expect(rendered.hasSuffix("8 errors generated."))
        #expect(rendered.components(separatedBy: ": error: ").count == 9)
    }

    @Test func duplicateKeysAreFoundEvenInJobsWithOtherErrors() throws {
        let errors = try #require(parse("""
        - {kind: fetch-url, source: gs://bkt/x, key: k, priority: high}
        - {kind: fetch-url, source: gs://bkt/y, key: k}
        """).errors)
        #expect(errors.map(\.code) == [.wrongType, .duplicateIdempotencyKey])
    }

    @Test func aManifestWithAnyErrorYieldsNoJobs() {
        let result = parse("""
        - {kind: fetch-url, source: gs://bkt/ok}
        - {kind: fetch-url, source: gs://bkt/ok2, priority: x}
        """)
        #expect(result.jobs == nil)
        #expect(result.errors?.count == 1)
    }

    @Test func aliasBombIsRefused() throws {
        var yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        for level in 1...6 {
            yaml += "a\(level): &a\(level) [" + Array(repeating: "*a\(level - 1)", count: 10).joined(separator: ", ") + "]\n"
        }
        yaml += "jobs: *a6\n"
        let errors = try #require(parse(yaml).errors)
        #expect(errors.count == 1)
        #expect(errors.first?.code == .limitExceeded)
        #expect(errors.first?.message.contains("aliases expand the document by more than 100000 nodes") == true)
        // At the alias that crossed the limit: lines 2-4 add 12,330 nodes, each `*a3` on line 5 adds 11,111
        // more, so the eighth one (column 45) passes 100,000.
        #expect(errors.map { "\($0.line):\($0.column)" } == ["5:45"])
    }

    @Test func editDistanceSuggestions() {
        #expect(NearestName.editDistance("kitten", "sitting") == 3)
        #expect(ManifestReader.suggestion(for: "maxSize", among: JobField.allCases.map(\.rawValue)) == " (did you mean 'max_size'?)")
        #expect(ManifestReader.suggestion(for: "prority", among: JobField.allCases.map(\.rawValue)) == " (did you mean 'priority'?)")
        #expect(ManifestReader.suggestion(for: "colour", among: JobField.allCases.map(\.rawValue)) == "")
    }
}
