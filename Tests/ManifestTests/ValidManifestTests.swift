import Foundation
import JobModel
import Testing
import TestSupport
@testable import Manifest

@Suite(.onTestThreads) struct ValidManifestTests {
    @Test func everyKind() throws {
        let result = parse("""
        jobs:
          - kind: upload-file
            source: photos/a.jpg
            destination: gs://my-bucket/photos/a.jpg
            metadata:
              content_type: image/jpeg
              cache_control: public, max-age=60
              content_disposition: inline
              content_encoding: identity
              content_language: no
              custom_metadata:
                album: "2024"
                owner: ada
          - kind: upload-data
            data: |
              hello
              world
            destination: gs://my-bucket/hello.txt
          - kind: upload-data
            data_base64: aGVs
              bG8=
            destination: https://firebasestorage.googleapis.com/v0/b/my-bucket/o/b64%2Fhello.bin
          - kind: download-file
            source: http://127.0.0.1:9023/v0/b/my-bucket/o/photos%2Fa.jpg
            destination: ../out/a.jpg
          - kind: download-memory
            source: gs://my-bucket/config.json
            max_size: 512KiB
          - kind: download-memory
            source: https://storage.googleapis.com/my-bucket/small.json
          - kind: fetch-url
            source: gs://my-bucket/photos/a.jpg
            key: share-a
            priority: -3
            max_attempts: 2
            queue: links
        """)
        let jobs = try #require(result.jobs, "\(result.errors ?? [])")
        #expect(jobs == [
            JobSpec(kind: .uploadFile, source: "/srv/manifests/photos/a.jpg", destination: "gs://my-bucket/photos/a.jpg",
                    metadata: UploadMetadata(contentType: "image/jpeg", cacheControl: "public, max-age=60",
                                             contentDisposition: "inline", contentEncoding: "identity", contentLanguage: "no",
                                             customMetadata: ["album": "2024", "owner": "ada"])),
            JobSpec(kind: .uploadData, destination: "gs://my-bucket/hello.txt", data: Data("hello\nworld\n".utf8)),
            JobSpec(kind: .uploadData, destination: "gs://my-bucket/b64/hello.bin", data: Data("hello".utf8)),
            // A Firebase-form URL on a host other than Firebase's (or the emulator's `STORAGE_EMULATOR_HOST`) is a plain URL.
            JobSpec(kind: .downloadFile, source: "http://127.0.0.1:9023/v0/b/my-bucket/o/photos%2Fa.jpg", destination: "/srv/out/a.jpg"),
            JobSpec(kind: .downloadMemory, source: "gs://my-bucket/config.json", maxSize: 524_288),
            JobSpec(kind: .downloadMemory, source: "gs://my-bucket/small.json", maxSize: JobSpec.defaultMaxSize),
            JobSpec(kind: .fetchURL, source: "gs://my-bucket/photos/a.jpg", key: "share-a", priority: -3, maxAttempts: 2, queue: "links"),
        ])
    }

    @Test func defaultsMergeAndTheJobWins() throws {
        let jobs = try #require(parse("""
        defaults:
          kind: upload-data
          queue: nightly
          priority: 7
          max_attempts: 9
          max_size: 2MB
          metadata:
            contentType: text/plain
            cache_control: no-store
            customMetadata: {team: storage, tier: "1"}
        jobs:
          - data: a
            destination: gs://bkt/a.txt
          - data: b
            destination: gs://bkt/b.txt
            queue: urgent
            priority: 0
            metadata:
              content_type: text/markdown
              custom_metadata: {tier: "2"}
          - kind: download-memory
            source: gs://bkt/a.txt
          - kind: download-memory
            source: gs://bkt/a.txt
            max_size: 10
          - kind: fetch-url
            source: gs://bkt/a.txt
            max_attempts: 1
        """).jobs)
        #expect(jobs.count == 5)
        #expect(jobs[0] == JobSpec(kind: .uploadData, destination: "gs://bkt/a.txt", data: Data("a".utf8),
                                   metadata: UploadMetadata(contentType: "text/plain", cacheControl: "no-store",
                                                            customMetadata: ["team": "storage", "tier": "1"]),
                                   priority: 7, maxAttempts: 9, queue: "nightly"))
        #expect(jobs[1].queue == "urgent")
        #expect(jobs[1].priority == 0)
        #expect(jobs[1].metadata == UploadMetadata(contentType: "text/markdown", cacheControl: "no-store",
                                                   customMetadata: ["team": "storage", "tier": "2"]))
        // Defaults that do not apply to a kind (metadata on a download) are skipped, not errors.
        #expect(jobs[2] == JobSpec(kind: .downloadMemory, source: "gs://bkt/a.txt", maxSize: 2_000_000, priority: 7, maxAttempts: 9, queue: "nightly"))
        #expect(jobs[3].maxSize == 10)
        #expect(jobs[4] == JobSpec(kind: .fetchURL, source: "gs://bkt/a.txt", priority: 7, maxAttempts: 1, queue: "nightly"))
    }

    @Test func bareSequenceOfJobs() throws {
        let jobs = try #require(parse("""
        - kind: fetch-url
          source: gs://bkt/x
        - {kind: download-memory, source: "gs://bkt/y", max_size: 1MiB}
        """).jobs)
        #expect(jobs == [
            JobSpec(kind: .fetchURL, source: "gs://bkt/x"),
            JobSpec(kind: .downloadMemory, source: "gs://bkt/y", maxSize: 1_048_576),
        ])
    }

    @Test(arguments: [
        ("1048576", Int64(1_048_576)), ("512KiB", 524_288), ("1MiB", 1_048_576), ("2MB", 2_000_000),
        ("\"0.5GiB\"", 536_870_912), ("512MiB", 536_870_912), ("0.25GB", 250_000_000), ("'64 KB'", 64_000), ("1K", 1024),
        ("1k", 1024), ("2m", 2_097_152), ("\"256 m\"", 268_435_456),
    ])
    func maxSizeUnits(_ written: String, _ bytes: Int64) throws {
        let jobs = try #require(parse("- {kind: download-memory, source: gs://bkt/x, max_size: \(written)}").jobs)
        #expect(jobs.first?.maxSize == bytes)
    }

    /// Numbers in a manifest follow the grammar of every number a user types (digits only, the units of
    /// sizes and rates as `--bwlimit` takes them): YAML's `+4`, `0x10`, `0o17` and `1_000` were read as
    /// numbers here while the command line and the environment refused them, and `1k` was a rate but
    /// not a size.
    @Test(arguments: [
        ("max_attempts: +4", "decimal digits only"), ("max_attempts: 0x10", "decimal digits only"),
        ("max_attempts: 0o17", "decimal digits only"), ("max_attempts: 1_000", "decimal digits only"),
        ("priority: +5", "decimal digits only"), ("priority: -0x5", "decimal digits only"),
        ("max_size: +5", "'max_size' must be"), ("max_size: 0x100", "'max_size' must be"),
        ("max_size: 10_000", "'max_size' must be"), ("max_size: \"\u{A0}5KiB\"", "'max_size' must be"),
        ("max_rate: \"\u{A0}1M\"", "'max_rate' must be"), ("timeout: \"\u{A0}60s\"", "'timeout'"),
        // 010 is octal 8 to YAML 1.1 (libyaml's version, which `%YAML 1.1` names), decimal 10 to YAML 1.2.
        ("priority: 010", "may not start with 0"), ("priority: -010", "may not start with 0"),
        ("max_attempts: 08", "may not start with 0"), ("priority: 00", "may not start with 0"),
        ("max_size: 010", "may not start with 0"), ("max_rate: \"01024\"", "'max_rate' must be"),
        // A time trims what a number trims (spaces and tabs), not a no-break space.
        ("run_after: \"2027-01-01T00:00:00Z\\u00A0\"", "'run_after' must be"),
        ("run_after: \"\\u2003 2027-01-01T00:00:00Z\"", "'run_after' must be"),
    ])
    func otherNumberFormsAreRefused(_ field: String, _ message: String) throws {
        let errors = try #require(parse("- {kind: download-memory, source: gs://bkt/x, \(field)}\n").errors, "\(field) was taken")
        #expect(errors.count == 1 && errors.first?.message.contains(message) == true, "\(field): \(errors)")
    }

    @Test func localPathsResolveAgainstTheManifestFolder() throws {
        let jobs = try #require(parse("""
        - kind: upload-file
          source: ./data/../data//report.csv
          destination: file://demo/report.csv
        - kind: upload-file
          source: /var/lib/app/export.json
          destination: file:///var/exports/export.json
        - kind: upload-file
          source: file:///var/lib/app/a%20b.txt
          destination: gs://bkt/a b.txt
        - kind: download-file
          source: gs://bkt/reports/2024/summary.json
          destination: downloads/
        - kind: download-file
          source: file://demo/report.csv
          destination: file:///tmp/copy.csv
        """).jobs)
        #expect(jobs.map(\.source) == [
            "/srv/manifests/data/report.csv", "/var/lib/app/export.json", "/var/lib/app/a b.txt",
            "gs://bkt/reports/2024/summary.json", "file://demo/report.csv",
        ])
        #expect(jobs.map(\.destination) == [
            "file://demo/report.csv", "file:///var/exports/export.json", "gs://bkt/a%20b.txt",
            "/srv/manifests/downloads/summary.json", "/tmp/copy.csv",
        ])
    }

    @Test func baseDirectoryDefaultsToTheManifestsFolder() throws {
        // Sources are not looked for: a.txt exists in neither folder.
        let parser = ManifestParser(checksSources: false)
        let jobs = try #require(parser.parse(text: "- {kind: upload-file, source: a.txt, destination: gs://bkt/a}",
                                             path: "jobs/nightly.yaml").jobs)
        let current = FileManager.default.currentDirectoryPath
        #expect(jobs.first?.source == LocalPath.standardize(current + "/jobs/a.txt"))
        let absolute = try #require(parser.parse(text: "- {kind: upload-file, source: a.txt, destination: gs://bkt/a}",
                                                 path: "/etc/jobctl/nightly.yaml").jobs)
        #expect(absolute.first?.source == "/etc/jobctl/a.txt")
    }

    @Test func anchorsUnderExtensionKeysAndMergeKeys() throws {
        // Top-level `x-` keys are ignored, as in Compose files: a place to keep anchors.
        let jobs = try #require(parse("""
        x-common: &common
          kind: upload-data
          queue: media
        jobs:
          - <<: *common
            data: one
            destination: gs://bkt/1
          - <<: *common
            queue: other
            data: two
            destination: &dest gs://bkt/2
          - kind: fetch-url
            source: *dest
        """).jobs)
        #expect(jobs.map(\.kind) == [.uploadData, .uploadData, .fetchURL])
        #expect(jobs.map(\.queue) == ["media", "other", "default"])
        #expect(jobs[2].source == "gs://bkt/2")
    }

    @Test func aliasesWithinJobs() throws {
        let jobs = try #require(parse("""
        defaults: &d
          queue: media
        jobs:
          - &first
            kind: upload-data
            data: one
            destination: gs://bkt/1
            key: k1
          - <<: *first
            destination: gs://bkt/2
            key: k2
          - kind: fetch-url
            source: gs://bkt/1
            <<: *d
        """).jobs)
        #expect(jobs.map(\.destination) == ["gs://bkt/1", "gs://bkt/2", nil])
        #expect(jobs.map(\.queue) == ["media", "media", "media"])
        #expect(jobs[1].data == Data("one".utf8))
        #expect(jobs.map(\.key) == ["k1", "k2", nil])
    }

    @Test func jobsKeepTheirPositions() throws {
        let jobs = try ManifestParser(baseDirectory: testBase).parseJobs(text: """
        jobs:
          - kind: fetch-url
            source: gs://bkt/x
          -   kind: fetch-url
              source: gs://bkt/y
        """, path: "x.yaml").get()
        #expect(jobs.map { [$0.line, $0.column] } == [[2, 5], [4, 7]])
    }

    @Test func readsFilesAndBytes() throws {
        let directory = try TemporaryDirectory("manifest")
        defer { directory.remove() }
        let path = directory.file("nightly.yaml")
        try "\u{FEFF}jobs:\r\n  - {kind: upload-file, source: in/a.txt, destination: gs://bkt/a}\r\n".write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: directory.file("in"), withIntermediateDirectories: true)
        try "a".write(toFile: directory.file("in/a.txt"), atomically: true, encoding: .utf8)
        let jobs = try ManifestParser().parse(contentsOf: path).get()
        #expect(jobs.first?.source == LocalPath.standardize(directory.path) + "/in/a.txt")
        let missing = ManifestParser().parse(contentsOf: directory.file("absent.yaml"))
        #expect(missing.errors?.first?.code == .unreadable)
        #expect(missing.errors?.first?.message.contains("does not exist") == true)
    }

    @Test func quotedAndPlainScalarsAsStrings() throws {
        let jobs = try #require(parse("""
        - kind: upload-data
          data: 42
          destination: "gs://bkt/the answer.txt"
          key: 2024-01-01
          queue: "7"
        - kind: upload-data
          data: ""
          destination: 'gs://bkt/empty'
          key: yes
        """).jobs)
        #expect(jobs[0].data == Data("42".utf8))
        #expect(jobs[0].destination == "gs://bkt/the%20answer.txt")
        #expect(jobs[0].key == "2024-01-01")
        #expect(jobs[0].queue == "7")
        #expect(jobs[1].data == Data())
        #expect(jobs[1].key == "yes")
    }

    @Test func yamlTags() throws {
        let jobs = try #require(parse("""
        - kind: upload-data
          data: !!binary |
            aGVs
            bG8=
          destination: gs://bkt/x
          priority: !!int "5"
          key: !!str 12
        """).jobs)
        #expect(jobs.first?.data == Data("hello".utf8))
        #expect(jobs.first?.priority == 5)
        #expect(jobs.first?.key == "12")
    }

    // MARK: - Dependencies

    @Test func afterKeepsItsNamesInOrderWithTheirPositions() throws {
        let yaml = """
            jobs:
              - kind: fetch-url
                source: gs://bkt/late
                after: [first, 01JDEPS0PREFIX]
              - kind: upload-data
                data: x
                destination: gs://bkt/first
                key: first
            """
        let jobs = try ManifestParser().parseJobs(text: yaml, path: "deps.yaml").get()
        try #require(jobs.count == 2)
        #expect(jobs[0].spec.after == ["first", "01JDEPS0PREFIX"])
        #expect(jobs[0].dependencies.map { "\($0.file):\($0.line):\($0.column) \($0.name)" }
                    == ["deps.yaml:4:13 first", "deps.yaml:4:20 01JDEPS0PREFIX"])
        #expect(jobs[1].spec.after == nil && jobs[1].dependencies.isEmpty)
        // An empty list is no dependency, so the spec encodes as one written without it.
        let none = try ManifestParser().parse(text: "- kind: fetch-url\n  source: gs://bkt/a\n  after: []\n", path: "m.yaml").get()
        #expect(none.first?.after == nil)
    }

    // MARK: - Shipped examples

    @Test func demoManifestParses() throws {
        let folder = PackagePaths.root + "/jobs"
        let jobs = try ManifestParser().parse(contentsOf: folder + "/demo.yaml").get()
        // The demo shows every transfer; the object operations are in gcs-example.yaml.
        #expect(Set(jobs.map(\.kind)) == Set(JobKind.allCases.filter { !$0.isObjectOperation }))
        for job in jobs {
            for text in [job.source, job.destination].compactMap({ $0 }) where text.contains("://") {
                let reference = try StorageReference(parsing: text)
                #expect(reference.scheme == .file && reference.bucket == "demo", "\(text) is not in file://demo/")
            }
            if job.kind == .uploadFile, let source = job.source {
                #expect(source.hasPrefix(LocalPath.standardize(folder) + "/demo-data/"))
                #expect(FileManager.default.fileExists(atPath: source), "\(source) is missing")
            }
        }
        // Whatever a download reads, the demo uploads — and the download waits (`after:`) for that upload.
        let writers = Dictionary(jobs.filter(\.kind.isUpload).compactMap { job in job.destination.map { ($0, job.key) } },
                                 uniquingKeysWith: { first, _ in first })
        for job in jobs where !job.kind.isUpload {
            let writer = writers[job.source ?? ""]
            #expect(writer != nil, "\(job.source ?? "nil") is never uploaded")
            if let writerKey = writer ?? nil {
                #expect(job.after == [writerKey], "\(job.source ?? "nil") does not wait for its upload")
            } else {
                Issue.record("the upload of \(job.source ?? "nil") has no key to wait for")
            }
        }
    }

    @Test func gcsExampleParses() throws {
        let jobs = try ManifestParser().parse(contentsOf: PackagePaths.root + "/jobs/gcs-example.yaml").get()
        #expect(Set(jobs.map(\.kind)) == Set(JobKind.allCases))
        for job in jobs {
            for text in [job.source, job.destination].compactMap({ $0 }) where text.contains("://") {
                #expect(try StorageReference(parsing: text).bucket == "my-bucket")
            }
        }
    }
}
