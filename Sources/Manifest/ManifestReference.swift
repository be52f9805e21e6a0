import Foundation
import JobModel

/// The manifest reference `jobctl help manifest` prints and the README quotes: every field the reader
/// accepts, the kinds that take it, its default and its limits.
///
/// Which kinds take a field comes from the reader's own table (`JobField.allowed`), and the numbers from
/// `ManifestLimits`, `ManifestValueRange` and `JobSpec`, so only the prose is written here; a test checks
/// that it documents exactly the reader's fields.
public enum ManifestReference {
    /// One documented field.
    struct FieldEntry {
        let name: String
        let summary: String
        let defaultText: String?
    }

    /// The fields in the order the reference lists them.
    static var fieldEntries: [FieldEntry] {
        let priority = ManifestValueRange.priority
        let attempts = ManifestValueRange.maxAttempts
        let timeout = JobSpec.timeoutRange
        let size = ManifestValueRange.maxSize
        let kinds = JobKind.allCases.map(\.rawValue).joined(separator: ", ")
        let checksums = ChecksumAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")
        let metadata = ManifestReader.metadataKeys.map(\.snake).joined(separator: ", ")
        return [
            FieldEntry(name: "kind", summary: "What the job does: \(kinds). Required.", defaultText: nil),
            FieldEntry(name: "source", summary: "A local path (relative to the manifest's folder) or a storage reference "
                       + "(gs://, file://, http(s)://). Required. upload-file sources must exist when submitted "
                       + "unless check_source: false, or a download-file job that the upload waits for (after:) writes them "
                       + "(in the manifests submitted, or not yet finished in the log). An upload-file folder (photos/) or glob "
                       + "(\"photos/**/*.jpg\"), and a download-file prefix (gs://b/photos/, file://bucket/photos/), expand at submit into one job per "
                       + "file or object (see FOLDERS, GLOBS AND PREFIXES). get-metadata: the object (an http(s) URL is "
                       + "read with a HEAD).", defaultText: nil),
            FieldEntry(name: "destination", summary: "A local path or storage reference; ending in '/' means into that "
                       + "folder, under the source's name (for a folder, glob or prefix: under each file's relative path). "
                       + "update-metadata and delete: the object (delete also takes an http(s) URL: a DELETE). "
                       + "Required.", defaultText: nil),
            FieldEntry(name: "data", summary: "The text to upload (UTF-8); excludes data_base64. One of the two is required.",
                       defaultText: nil),
            FieldEntry(name: "data_base64", summary: "The bytes to upload, base64-encoded; excludes data.", defaultText: nil),
            FieldEntry(name: "max_size", summary: "The largest object the download may return, \(ByteSize.format(size.lowerBound)) to "
                       + "\(ByteSize.format(size.upperBound)); units B, KiB, MiB, GiB, KB, MB, GB, and K, M, G (1024-based, either case).",
                       defaultText: ByteSize.format(JobSpec.defaultMaxSize)),
            FieldEntry(name: "metadata", summary: "Object metadata: \(metadata) (or their camelCase spellings); "
                       + "custom_metadata is a mapping of strings. update-metadata: the fields to change (required, taken "
                       + "from the job only, not from defaults); a custom_metadata key set to null is deleted, a field set to null "
                       + "(custom_metadata: every key but download tokens) is removed.", defaultText: "none"),
            FieldEntry(name: "key", summary: "Idempotency key, at most \(ManifestValueRange.maximumKeyBytes) bytes: the same job again "
                       + "creates no second one (its run time aside: it keeps the one its first submit gave it, whatever `delay:` or "
                       + "`submit --at` say again); the same key with a different job is refused. A key holds while its job is in the "
                       + "log: once `jobctl archive` moved the job out, the key names nothing. Not allowed in defaults.",
                       defaultText: "none"),
            FieldEntry(name: "priority", summary: "Higher runs first, \(priority.lowerBound) to \(priority.upperBound).",
                       defaultText: "0"),
            FieldEntry(name: "max_attempts", summary: "Attempts before the job fails, \(attempts.lowerBound) to \(attempts.upperBound).",
                       defaultText: "\(JobSpec.defaultMaxAttempts)"),
            FieldEntry(name: "queue", summary: "The queue (workers take --queue); letters, digits and - _ . :, at most 64 characters.",
                       defaultText: JobSpec.defaultQueue),
            FieldEntry(name: "timeout", summary: "One attempt's limit: 90s, 30m, 1h30m, 2d; \(DurationText.format(timeout.lowerBound)) "
                       + "to \(DurationText.format(timeout.upperBound)).", defaultText: "none"),
            FieldEntry(name: "check_source", summary: "false: the source file may be missing at submit.", defaultText: "true"),
            FieldEntry(name: "checksums", summary: "Hashes to compute and compare: a list of \(checksums).",
                       defaultText: "crc32c, and md5 where it is the one hash offered"),
            FieldEntry(name: "if_exists", summary: "When the destination already exists: overwrite, skip, fail (one step where "
                       + "the server offers a precondition), or skip-identical (same size and CRC32C: uploads compare the "
                       + "source with the object's; download-file compares the local file with the object's CRC32C from GCS "
                       + "or the file:// sidecar, and over http(s) with a CRC32C the server reports to a HEAD (x-goog-hash, "
                       + "Digest, Repr-Digest): a server that reports none, like nginx, is downloaded from again).",
                       defaultText: "overwrite"),
            FieldEntry(name: "include", summary: "Folder, glob or prefix jobs: a list of patterns; only paths matching one "
                       + "are taken. Not allowed in defaults.", defaultText: "every file"),
            FieldEntry(name: "exclude", summary: "Folder, glob or prefix jobs: a list of patterns; paths matching one are "
                       + "left out (exclude wins over include). Not allowed in defaults.", defaultText: "none"),
            FieldEntry(name: "run_after", summary: "Not before this RFC 3339 time (2026-12-01T02:00:00Z, an offset allowed), "
                       + "1970-01-01 to 9999-12-31; a past time runs at once. Excludes delay.", defaultText: "at once"),
            FieldEntry(name: "delay", summary: "Not before this long after submit: 90s, 15m, 2h, 1d; at most 3650d. Excludes "
                       + "run_after. submit --at TIME sets either for jobs that give neither.", defaultText: "none"),
            FieldEntry(name: "after", summary: "Jobs this one waits for: a list of keys (of jobs in the manifest or the log), "
                       + "job ids or unique id prefixes. Not claimed until all have succeeded; cancelled when one ends "
                       + "failed or cancelled (jobctl retry ID --with-dependants reopens it with that one). Not "
                       + "allowed in defaults.", defaultText: "none"),
            FieldEntry(name: "bucket", summary: "In defaults: only: the bucket (gs://my-app.appspot.com, file://name) an object "
                       + "path written without a scheme resolves against, as reference(withPath:) does: 'destination: "
                       + "images/cat.jpg' (uploads, update-metadata, delete) or 'source: images/cat.jpg' (downloads, "
                       + "fetch-url, get-metadata) means that bucket's "
                       + "images/cat.jpg. The submitted job stores the full reference; '..' is refused as in full references.",
                       defaultText: "none (object paths must be full references)"),
            FieldEntry(name: "max_rate", summary: "This job's bandwidth, bytes per second with rclone's units: 512k, 10M "
                       + "(K/M/G/T are 1024s); gs://, http(s) and file:// transfers.", defaultText: "unlimited"),
            FieldEntry(name: "if_generation", summary: "delete and update-metadata: act only while the object is this "
                       + "generation (a positive integer, as get-metadata shows it); gs:// sends ifGenerationMatch, file:// "
                       + "compares the sidecar's generation; another generation fails the job without retries "
                       + "(precondition failed). Not for http(s) URLs; not allowed in defaults.", defaultText: "none"),
        ]
    }

    /// The names of the documented fields.
    static var documentedFields: [String] { fieldEntries.map(\.name) }

    /// The reference as plain text, lines of at most about 100 characters.
    public static var text: String {
        let limits = ManifestLimits.default
        var lines = [
            "MANIFEST REFERENCE",
            "",
            "A manifest is a YAML file: a mapping with 'jobs:' (a sequence of jobs) and optionally 'defaults:'",
            "(fields merged into every job; the job wins), or a bare sequence of jobs. Keys starting with 'x-'",
            "are ignored at the top.",
            "",
            "FIELDS:",
        ]
        for entry in fieldEntries {
            let kinds = kindsText(entry.name)
            lines.append("  \(entry.name)")
            lines += wrap(entry.summary, indent: 6)
            lines += wrap("kinds: \(kinds)" + (entry.defaultText.map { "; default: \($0)" } ?? ""), indent: 6)
        }
        lines += [
            "",
            "FIELDS BY KIND:",
        ]
        for kind in JobKind.allCases {
            let names = fieldEntries.map(\.name).filter { name in
                JobField(rawValue: name).map { JobField.allowed[kind]?.contains($0) ?? false } ?? false
            }
            lines += wrap("\(kind.rawValue): " + names.joined(separator: ", "), indent: 2)
        }
        lines += [
            "",
            "FOLDERS, GLOBS AND PREFIXES:",
        ]
        for paragraph in [
            "upload-file: a source written with a trailing '/' or naming a folder takes every regular file below it, at "
                + "any depth; a source holding *, ? or [ (and naming no file) is a glob: * and ? match within one path "
                + "segment, [a-z] and [!a-z] one character, ** any number of segments, \\ escapes. download-file: a gs:// "
                + "or file:// source ending in '/' (or a bucket root) takes every object under that prefix (GCS: the list "
                + "API, page by page; file://: a walk of the bucket folder, which leaves out links, FIFOs and devices and "
                + "names them in a note).",
            "Each file or object becomes a job of its own (own id, own history), all sharing a batch id that submit "
                + "prints and list, show, audit, watch --batch and pause|resume|cancel|retry --batch use. The destination "
                + "must end in '/' (or be a bucket root): each job writes to it plus the path relative to the folder, "
                + "the glob's first folder without a pattern, or the prefix. What was expanded (batch id, source, "
                + "filters, relative path) is recorded in each job's submitted event.",
            "include/exclude patterns use the same syntax, matched against that relative path; a pattern without '/' "
                + "matches the file's name at any depth (as rsync and .gitignore), one with '/' the whole path. A path is "
                + "taken when it matches an include (or there is none) and no exclude.",
            "Symbolic links inside a folder are not followed (like rsync without -L): they are skipped and a note names "
                + "them; FIFOs, sockets and devices likewise. Object names no job can download (.., ., empty segments, a NUL, "
                + "a gs:// name over 1,024 bytes) refuse the whole submit, each with its reason, unless include/exclude "
                + "leave them out. An expansion that takes nothing is an error at the job's line. With "
                + "key:, each job's key is the key plus '/' plus its relative path, so submitting the manifest again maps "
                + "to the same jobs.",
        ] {
            lines += wrap(paragraph, indent: 2)
            lines.append("")
        }
        lines += [
            "LIMITS:",
        ]
        lines += wrap("\(ByteSize.format(Int64(limits.maximumBytes))) per manifest, \(limits.maximumDepth) levels of nesting, "
                      + "\(limits.maximumNodes) YAML nodes, \(limits.maximumJobs) jobs, \(ByteSize.format(Int64(limits.maximumScalarBytes))) "
                      + "per scalar (\(ByteSize.format(Int64(limits.maximumScalarTextBytes))) of its text as written, read no further); aliases add at most \(limits.maximumAliasNodes) nodes or \(limits.aliasExpansionFactor) times the "
                      + "nodes written, whichever is more.", indent: 2)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The kinds that take `name`, from the reader's table.
    private static func kindsText(_ name: String) -> String {
        guard let field = JobField(rawValue: name) else { return "none" }
        if JobField.common.contains(field) { return "all" }
        if field == .bucket { return "all (written in defaults: only)" }
        return JobKind.allCases.filter { JobField.allowed[$0]?.contains(field) ?? false }.map(\.rawValue).joined(separator: ", ")
    }

    /// Words of `text` in lines of at most 100 characters, indented.
    private static func wrap(_ text: String, indent: Int) -> [String] {
        let pad = String(repeating: " ", count: indent)
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty, pad.count + line.count + 1 + word.count > 100 {
                lines.append(pad + line)
                line = ""
            }
            line += line.isEmpty ? String(word) : " " + word
        }
        if !line.isEmpty { lines.append(pad + line) }
        return lines
    }
}
