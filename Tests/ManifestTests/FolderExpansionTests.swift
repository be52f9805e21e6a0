import Foundation
import JobModel
import Testing
import TestSupport
@testable import Manifest

/// Glob patterns, include/exclude filters, folder and glob uploads expanded against real files, prefix
/// downloads expanded from object names, and schedules.
@Suite(.onTestThreads) struct FolderExpansionTests {
    // MARK: - Patterns

    @Test(arguments: [
        ("*.jpg", "a.jpg", true), ("*.jpg", "a.png", false), ("*.jpg", "2024/a.jpg", false),
        ("?.jpg", "a.jpg", true), ("?.jpg", "ab.jpg", false),
        ("[ab].txt", "a.txt", true), ("[ab].txt", "c.txt", false), ("[a-c]x", "bx", true), ("[!a-c]x", "bx", false),
        ("[^a-c]x", "dx", true), ("\\*.txt", "*.txt", true), ("\\*.txt", "a.txt", false),
        ("**/*.jpg", "a.jpg", true), ("**/*.jpg", "2024/05/a.jpg", true), ("**/*.jpg", "2024/05/a.png", false),
        ("2024/**", "2024/05/a.jpg", true), ("2024/**", "2025/a.jpg", false), ("2024/**/raw/*", "2024/raw/x", true),
        ("2024/**/raw/*", "2024/a/b/raw/x", true), ("2024/**/raw/*", "2024/a/b/x", false),
        ("a*b*c", "aXbYc", true), ("a*b*c", "aXbY", false), ("*", "", false), ("**", "x/y", true),
        ("a**b", "aXXb", true), ("a**b", "a/b", false),
    ])
    func patternsMatchAsShellsDo(_ pattern: String, _ path: String, _ expected: Bool) throws {
        #expect(try PathPattern(pattern).matches(path) == expected, "\(pattern) ~ \(path)")
    }

    @Test(arguments: [("", "empty"), ("/abs/*", "starts with '/'"), ("a/../b", "climbs out"), ("[ab", "without a closing ']'"),
                      ("[z-a]", "backwards"), ("a\\", "escapes nothing")])
    func badPatternsAreRefused(_ pattern: String, _ fragment: String) {
        #expect(throws: PathPattern.Problem.self) { try PathPattern(pattern) }
        do { _ = try PathPattern(pattern) } catch { #expect(error.description.contains(fragment), "\(error)") }
    }

    @Test func excludeWinsAndNamesMatchAtAnyDepth() throws {
        let filter = PathFilter(include: [try PathPattern("*.jpg"), try PathPattern("docs/*")],
                                exclude: [try PathPattern("*-draft.*"), try PathPattern("2023/**")])
        #expect(filter.takes("a.jpg"))
        #expect(filter.takes("2024/05/a.jpg"), "a pattern without '/' matches the name at any depth")
        #expect(filter.takes("docs/readme.md"))
        #expect(!filter.takes("sub/docs/readme.md"), "a pattern with '/' matches the whole path")
        #expect(!filter.takes("b-draft.jpg"), "exclude wins over include")
        #expect(!filter.takes("2023/x.jpg"))
        #expect(!filter.takes("a.png"))
        #expect(PathFilter().takes("anything/at/all"))
    }

    // MARK: - Folder and glob uploads

    /// photos/a.jpg, photos/notes.txt, photos/2024/05/b.jpg, photos/2024/c.JPG, photos/.hidden.jpg, a link
    /// to a file outside, a link to a folder outside, and a FIFO.
    struct Tree {
        let directory: TemporaryDirectory
        let outside: TemporaryDirectory
        var base: String { LocalPath.standardize(directory.path) }

        init() throws {
            directory = try TemporaryDirectory("expansion")
            outside = try TemporaryDirectory("expansion-outside")
            let files = FileManager.default
            try files.createDirectory(atPath: directory.file("photos/2024/05"), withIntermediateDirectories: true)
            for (name, text) in [("photos/a.jpg", "a"), ("photos/notes.txt", "n"), ("photos/2024/05/b.jpg", "bb"),
                                 ("photos/2024/c.JPG", "c"), ("photos/.hidden.jpg", "h")] {
                try text.write(toFile: directory.file(name), atomically: true, encoding: .utf8)
            }
            try "secret".write(toFile: outside.file("secret.jpg"), atomically: true, encoding: .utf8)
            try files.createSymbolicLink(atPath: directory.file("photos/escape.jpg"), withDestinationPath: outside.file("secret.jpg"))
            try files.createSymbolicLink(atPath: directory.file("photos/elsewhere"), withDestinationPath: outside.path)
            guard mkfifo(directory.file("photos/pipe.jpg"), 0o600) == 0 else { throw CocoaError(.fileWriteUnknown) }
        }

        func remove() {
            directory.remove()
            outside.remove()
        }

        func parse(_ yaml: String) -> Result<[ManifestJob], ManifestErrors> {
            var parser = ManifestParser(baseDirectory: base)
            parser.nowMs = 1_800_000_000_000
            return parser.parseJobs(text: yaml, path: "m.yaml")
        }
    }

    @Test func aFolderBecomesOneJobPerRegularFileSharingABatch() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let jobs = try #require(tree.parse("""
        jobs:
          - kind: upload-file
            source: photos/
            destination: gs://bkt/backup/
            queue: photos
        """).jobs)
        let specs = jobs.map(\.spec)
        #expect(specs.map(\.destination) == [
            "gs://bkt/backup/.hidden.jpg", "gs://bkt/backup/2024/05/b.jpg", "gs://bkt/backup/2024/c.JPG", "gs://bkt/backup/a.jpg",
            "gs://bkt/backup/notes.txt",
        ])
        #expect(specs.map(\.source) == [".hidden.jpg", "2024/05/b.jpg", "2024/c.JPG", "a.jpg", "notes.txt"].map { tree.base + "/photos/" + $0 })
        let batch = try #require(specs.first?.batch)
        #expect(JobID.isValid(batch.id))
        #expect(batch.source == tree.base + "/photos/")
        #expect(Set(specs.compactMap { $0.batch?.id }) == [batch.id] && specs.allSatisfy { $0.queue == "photos" })
        #expect(specs.map { $0.batch?.path } == [".hidden.jpg", "2024/05/b.jpg", "2024/c.JPG", "a.jpg", "notes.txt"])
        #expect(jobs.allSatisfy { $0.line == 2 && $0.column == 5 })
        // The links (to a file and to a folder outside) and the FIFO are skipped, with one note.
        let note = try #require(jobs.first?.notes.first)
        #expect(jobs.flatMap(\.notes).count == 1)
        #expect(note.hasPrefix("m.yaml:2:5: note: 'source' 'photos/': skipped 'elsewhere' (a symbolic link) and 2 more entries"), "\(note)")
        #expect(!specs.contains { $0.source?.contains("secret") ?? false || $0.source?.contains("elsewhere") ?? false })
    }

    @Test func aGlobKeepsPathsBelowItsFirstPatternFreeFolder() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let specs = try #require(tree.parse("""
        - kind: upload-file
          source: "photos/**/*.jpg"
          destination: gs://bkt/
          exclude: [".*"]
        - kind: upload-file
          source: "photos/2024/*"
          destination: "http://127.0.0.1:9/put/here/?sig=1"
        """).jobs).map(\.spec)
        #expect(specs.map(\.destination) == [
            "gs://bkt/2024/05/b.jpg", "gs://bkt/a.jpg",
            "http://127.0.0.1:9/put/here/c.JPG?sig=1",
        ])
        #expect(specs[0].batch?.source == tree.base + "/photos/**/*.jpg")
        #expect(specs[0].batch?.exclude == [".*"] && specs[0].batch?.include == nil)
        #expect(specs[0].batch?.id != specs[2].batch?.id, "each expanding job has its own batch")
    }

    /// A glob is a pattern, not a path: a segment of character sets is longer than the names it matches
    /// (`[0-9a-f]` is 8 bytes for one), so the kernel's NAME_MAX and PATH_MAX are not its bounds. An
    /// exact pattern for `backup-<time>_<md5>.tar.gz` (66-byte names) is 346 bytes, and was refused as
    /// "a name of 346 bytes"; the folder before it, and every file it takes, still are held to them.
    @Test func aGlobSegmentLongerThanAFileNameIsAPattern() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let name = "backup-2026-01-01T00:00:00_0123456789abcdef0123456789abcdef.tar.gz"
        try "b".write(toFile: tree.directory.file("photos/" + name), atomically: true, encoding: .utf8)
        try "x".write(toFile: tree.directory.file("photos/backup-latest.tar.gz"), atomically: true, encoding: .utf8)
        let digit = "[0-9]", hex = "[0-9a-f]"
        let time = [String](repeating: digit, count: 4).joined() + "-" + digit + digit + "-" + digit + digit + "T"
            + [digit + digit, digit + digit, digit + digit].joined(separator: ":")
        let pattern = "backup-" + time + "_" + String(repeating: hex, count: 32) + ".tar.gz"
        #expect(pattern.utf8.count == 346)
        let specs = try #require(tree.parse("- {kind: upload-file, source: \"photos/\(pattern)\", destination: gs://bkt/}\n").jobs).map(\.spec)
        #expect(specs.map(\.source) == [tree.base + "/photos/" + name])
        // The folder before the pattern is a path: a name over 255 bytes there is refused as before.
        let long = String(repeating: "f", count: 256)
        let errors = try #require(tree.parse("- {kind: upload-file, source: \"\(long)/*.gz\", destination: gs://bkt/}\n").errors)
        #expect(errors.map(\.code) == [.invalidPath] && errors.first?.message.contains("has a name of 256 bytes") == true, "\(errors)")
    }

    /// A folder's or a glob's file whose object the destination cannot name — a file:// path past
    /// PATH_MAX, a gs:// name with a line break — refuses the expansion at 'destination', naming the
    /// file: it made the whole expansion no job at all, and submit said "0 jobs" and exited 0.
    @Test func aFileTheDestinationCannotNameRefusesTheExpansion() throws {
        let tree = try Tree()
        defer { tree.remove() }
        // A folder of 4,081 bytes fits, and so do the photos' paths under it, but for '2024/05/b.jpg'.
        let deep = (0..<20).map { _ in String(repeating: "d", count: 200) }.joined(separator: "/") + "/" + String(repeating: "e", count: 61)
        #expect(deep.utf8.count == 4_081)
        for source in ["photos/", "photos/**/*.jpg"] {
            for destination in ["file:///\(deep)/", "file://b/\(deep)/"] {
                let result = tree.parse("- {kind: upload-file, source: \"\(source)\", destination: \"\(destination)\"}\n")
                let errors = try #require(result.errors, "\(source) → \(destination.prefix(12)): \(result)")
                #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:\(48 + source.utf8.count) invalidReference"],
                        "\(errors)")
                #expect(errors.first?.message.contains("its file '2024/05/b.jpg' has no valid storage reference") == true, "\(errors)")
                #expect(errors.first?.message.contains("PATH_MAX") == true, "\(errors)")
            }
        }
        // A file name with a line break is no Cloud Storage object name: the folder's other files do not go alone.
        try "x".write(toFile: tree.directory.file("photos/two\nlines.jpg"), atomically: true, encoding: .utf8)
        let errors = try #require(tree.parse("- {kind: upload-file, source: photos/, destination: gs://bkt/up/}\n").errors)
        #expect(errors.map(\.code) == [.invalidReference], "\(errors)")
        #expect(errors.first?.message.contains("its file 'two\\u{A}lines.jpg' has no valid storage reference") == true, "\(errors)")
    }

    /// Makes the file (or, with `folder`, the folder) whose path is `bytes` (not UTF-8: no String names it).
    static func make(_ bytes: [UInt8], folder: Bool = false, holding text: String = "x") throws {
        let path = bytes.map { CChar(bitPattern: $0) } + [0]
        if folder {
            guard mkdir(path, 0o755) == 0 else { throw CocoaError(.fileWriteUnknown) }
            return
        }
        let fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0o644)
        guard fd >= 0 else { throw CocoaError(.fileWriteUnknown) }
        _ = text.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, text.utf8.count) }
        close(fd)
    }

    /// Names that are not UTF-8 are read as bytes and skipped with a note, never as the name with U+FFFD
    /// for those bytes: beside `bad\u{FFFD}.txt`, `bad\xFF.txt` was listed as `bad\u{FFFD}.txt`, looked up
    /// by that name, and so the look-alike was planned twice (two jobs for one file, one destination) and
    /// the file itself dropped without a word; a folder `d\xFF/` beside `d\u{FFFD}/` likewise, with
    /// everything in it. Folder uploads and globs alike; a key made the second job "already given".
    @Test func namesThatAreNotUTF8AreSkippedNeverTakenForALookAlike() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let folder = tree.directory.file("mixed")
        try FileManager.default.createDirectory(atPath: folder + "/d\u{FFFD}", withIntermediateDirectories: true)
        try "look-alike".write(toFile: folder + "/bad\u{FFFD}.txt", atomically: true, encoding: .utf8)
        try "other".write(toFile: folder + "/d\u{FFFD}/other.txt", atomically: true, encoding: .utf8)
        let base = Array(folder.utf8)
        try Self.make(base + Array("/bad".utf8) + [0xFF] + Array(".txt".utf8), holding: "the file not named in UTF-8")
        try Self.make(base + Array("/d".utf8) + [0xFF], folder: true)
        try Self.make(base + Array("/d".utf8) + [0xFF] + Array("/secret.txt".utf8), holding: "only copy")
        try Self.make(base + Array("/c".utf8) + [0xC0, 0xAF], holding: "an overlong '/'")
        for source in ["mixed/", "mixed/**"] {
            let jobs = try #require(tree.parse("- {kind: upload-file, source: \"\(source)\", destination: gs://bkt/up/, key: k}\n").jobs,
                                    "\(source)")
            #expect(jobs.map(\.spec.source) == [folder + "/bad\u{FFFD}.txt", folder + "/d\u{FFFD}/other.txt"], "\(source)")
            #expect(jobs.map(\.spec.key) == ["k/bad\u{FFFD}.txt", "k/d\u{FFFD}/other.txt"], "\(source)")
            let notes = jobs.flatMap(\.notes)
            #expect(notes == ["m.yaml:1:3: note: 'source' '\(source)': skipped 'bad\\xFF.txt' (a name that is not valid UTF-8, which "
                              + "no job can name: rename it) and 2 more entries: 2 names that are not valid UTF-8; a file whose name is "
                              + "not UTF-8 is uploaded once it is renamed"], "\(notes)")
        }
    }

    /// A folder whose path reaches PATH_MAX could not be looked up by its path (ENAMETOOLONG), and the
    /// walk took it for "not a regular file (a FIFO, or gone while listed)", leaving out every file below
    /// it without an error. The walk now goes down from each folder's descriptor: a file it takes at a path
    /// the kernel refuses is an error at 'source' saying how long the path is and what the limit is; one
    /// that 'exclude:' or the glob leaves out is no concern, and a FIFO is called a FIFO.
    @Test func aFilePastPathMaxIsAnErrorAtTheSourceNotAFIFO() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let source = tree.directory.file("src")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        try "s".write(toFile: source + "/shallow.txt", atomically: true, encoding: .utf8)
        #expect(mkfifo(source + "/pipe", 0o600) == 0)
        let deep = try DeepFolder(in: source)
        defer { deep.remove() }
        let length = (tree.base + "/src/" + deep.relativeFile).utf8.count
        #expect(length > 4_096)
        for written in ["src/", "src/**"] {
            let result = tree.parse("- {kind: upload-file, source: \"\(written)\", destination: gs://bkt/up/}\n")
            let errors = try #require(result.errors, "\(written): \(result)")
            #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:31 invalidPath"], "\(errors)")
            let message = errors.first?.message ?? ""
            #expect(message.hasPrefix("'source' '\(written)': its file '00ddd"), "\(message)")
            #expect(message.contains("dddd/deep.txt' is \(length) bytes long as an absolute path; Linux takes paths of at most 4095 bytes "
                                     + "(PATH_MAX), so no job could open it; move it to a shorter path, or 'exclude:' it"), "\(message)")
        }
        // Left out by 'exclude:' or by the glob: the rest is planned, and only the FIFO is noted, as a FIFO.
        for yaml in ["- {kind: upload-file, source: src/, destination: gs://bkt/up/, exclude: [deep.txt]}\n",
                     "- {kind: upload-file, source: \"src/*.txt\", destination: gs://bkt/up/}\n"] {
            let jobs = try #require(tree.parse(yaml).jobs, "\(yaml)")
            #expect(jobs.map(\.spec.source) == [tree.base + "/src/shallow.txt"], "\(yaml)")
            #expect(jobs.flatMap(\.notes) == ["m.yaml:1:3: note: 'source' '\(yaml.contains("*") ? "src/*.txt" : "src/")': skipped 'pipe' (a FIFO)"],
                    "\(jobs.flatMap(\.notes))")
        }
    }

    /// `source: /proc/sys/kernel/random/` expanded into six jobs, each of which failed when it ran (a file
    /// of procfs is refused then, and at submit when named by itself). A folder or glob whose own folder
    /// is on a filesystem the kernel makes as it is read is refused at 'source', as such a file is.
    @Test(arguments: ["/proc/sys/kernel/random/", "'/proc/sys/kernel/random/*'", "/proc/sys/kernel/random/**"])
    func aFolderOnProcfsIsRefusedAtItsSource(_ source: String) throws {
        let tree = try Tree()
        defer { tree.remove() }
        let result = tree.parse("- {kind: upload-file, source: \(source), destination: gs://bkt/up/}\n")
        let errors = try #require(result.errors, "\(source): \(result)")
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:31 sourceUnavailable"], "\(errors)")
        #expect(errors.first?.message.contains("the folder '/proc/sys/kernel/random' is on procfs, whose files the kernel makes as "
                                               + "they are read") == true, "\(errors)")
    }

    /// A cgroup2 folder bind-mounted inside an uploaded tree was taken file by file, each an empty object.
    /// A folder of such a filesystem is skipped whole, and a cgroup file mounted over a regular one is
    /// skipped too (its device is not its folder's), both named in the note with what they are on.
    @Test(.enabled(if: getuid() == 0 && CgroupFiles.zeroSizedWithContent != nil,
                   "needs root (bind mounts) and a cgroup file whose size says 0 while it holds bytes"))
    func aCgroupMountInsideAFolderIsSkippedAndNamed() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let file = try #require(CgroupFiles.zeroSizedWithContent), cgroupFolder = try #require(CgroupFiles.folder)
        let folder = tree.directory.file("up")
        try FileManager.default.createDirectory(atPath: folder + "/cg", withIntermediateDirectories: true)
        try "kept".write(toFile: folder + "/kept.txt", atomically: true, encoding: .utf8)
        try "covered".write(toFile: folder + "/depth.txt", atomically: true, encoding: .utf8)
        #expect(try runProcess("/bin/mount", ["--bind", cgroupFolder, folder + "/cg"]).status == 0)
        defer { _ = try? runProcess("/bin/umount", [folder + "/cg"]) }
        #expect(try runProcess("/bin/mount", ["--bind", file, folder + "/depth.txt"]).status == 0)
        defer { _ = try? runProcess("/bin/umount", [folder + "/depth.txt"]) }
        #expect(CgroupFiles.isCgroup(folder + "/cg") && CgroupFiles.isCgroup(folder + "/depth.txt"))
        for source in ["up/", "up/**"] {
            let jobs = try #require(tree.parse("- {kind: upload-file, source: \"\(source)\", destination: gs://bkt/up/}\n").jobs, "\(source)")
            #expect(jobs.map(\.spec.source) == [folder + "/kept.txt"], "\(source)")
            let notes = jobs.flatMap(\.notes)
            #expect(notes.count == 1, "\(notes)")
            #expect(notes.first?.hasPrefix("m.yaml:1:3: note: 'source' '\(source)': skipped 'cg' (on cgroup") == true, "\(notes)")
            #expect(notes.first?.contains("whose files the kernel makes as they are read) and 1 more entry: 1 entry on cgroup") == true,
                    "\(notes)")
            #expect(notes.first?.contains("copy what you need to regular files and upload those") == true, "\(notes)")
        }
    }

    @Test func includeAndExcludeFilterRelativePaths() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let specs = try #require(tree.parse("""
        - kind: upload-file
          source: photos
          destination: file://bucket/p/
          include: ["*.jpg", "*.JPG"]
          exclude: ["2024/05/*"]
        """).jobs).map(\.spec)
        #expect(specs.compactMap { $0.batch?.path } == [".hidden.jpg", "2024/c.JPG", "a.jpg"])
        #expect(specs.first?.batch?.include == ["*.jpg", "*.JPG"])
        let none = try #require(tree.parse("""
        - kind: upload-file
          source: photos/
          destination: gs://bkt/x/
          include: ["*.gif"]
        """).errors)
        #expect(none.map { "\($0.line):\($0.column) \($0.code)" } == ["1:3 emptyExpansion"])
        // What the walk skipped is said with the error (its note is not printed when submit fails).
        #expect(none.first?.message == "'source' 'photos/' holds no regular file that 'include'/'exclude' take; nothing would be uploaded; "
                    + "skipped 'elsewhere' (a symbolic link) and 2 more entries: 1 symbolic link, 1 FIFO; links are not followed out of "
                    + "the folder: name their targets in jobs of their own")
    }

    /// With `key:`, every file's key is the key plus its relative path, and the batch id comes from the
    /// key: submitting the same manifest again maps to the same jobs and the same batch.
    @Test func keysAndBatchIdsAreStableForKeyedJobs() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let yaml = "- {kind: upload-file, source: photos/2024/, destination: gs://bkt/y/, key: nightly}\n"
        let first = try #require(tree.parse(yaml).jobs).map(\.spec)
        let second = try #require(tree.parse(yaml).jobs).map(\.spec)
        #expect(first.map(\.key) == ["nightly/05/b.jpg", "nightly/c.JPG"])
        #expect(first == second)
        let unkeyed = "- {kind: upload-file, source: photos/2024/, destination: gs://bkt/y/}\n"
        let once = try #require(tree.parse(unkeyed).jobs)
        let again = try #require(tree.parse(unkeyed).jobs)
        #expect(once.first?.spec.batch?.id != again.first?.spec.batch?.id)
    }

    @Test func aFolderNeedsAFolderDestination() throws {
        let tree = try Tree()
        defer { tree.remove() }
        let errors = try #require(tree.parse("- kind: upload-file\n  source: photos/\n  destination: gs://bkt/one.jpg\n").errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["3:16 invalidReference"])
        // A bucket root is a folder.
        let rooted = try #require(tree.parse("- {kind: upload-file, source: photos/2024/05, destination: gs://bkt}\n").jobs)
        #expect(rooted.map(\.spec.destination) == ["gs://bkt/b.jpg"])
    }

    @Test func theJobLimitCountsExpandedFiles() throws {
        let tree = try Tree()
        defer { tree.remove() }
        var parser = ManifestParser(baseDirectory: tree.base, limits: ManifestLimits(maximumJobs: 3))
        parser.nowMs = 0
        let errors = try #require(parser.parseJobs(text: "- {kind: upload-file, source: photos/, destination: gs://bkt/}\n", path: "m.yaml").errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:31 limitExceeded"])
    }

    // MARK: - Prefix downloads

    func prefixJob(_ yaml: String) throws -> PrefixExpansion {
        var parser = ManifestParser(baseDirectory: testBase)
        parser.nowMs = 0
        let jobs = try #require(parser.parseJobs(text: yaml, path: "m.yaml").jobs)
        #expect(jobs.count == 1)
        return try #require(jobs.first?.prefixExpansion)
    }

    @Test func aPrefixBecomesOneJobPerObjectUnderTheFolder() throws {
        let expansion = try prefixJob("""
        - kind: download-file
          source: gs://bkt/photos/
          destination: out/
          key: pull
          exclude: ["*.tmp"]
        """)
        let specs = try #require(expansion.jobs(objectNames: [
            "photos/2024/b.jpg", "photos/a.jpg", "photos/", "photos/2024/", "photos/x.tmp", "other/c.jpg", "photosX/d.jpg",
        ]).jobs)
        #expect(specs.map(\.source) == ["gs://bkt/photos/2024/b.jpg", "gs://bkt/photos/a.jpg"])
        #expect(specs.map(\.destination) == [testBase + "/out/2024/b.jpg", testBase + "/out/a.jpg"])
        #expect(specs.map(\.key) == ["pull/2024/b.jpg", "pull/a.jpg"])
        #expect(specs.allSatisfy { $0.batch?.source == "gs://bkt/photos/" && $0.batch?.id == expansion.batchID && $0.kind == .downloadFile })
        // A bucket root lists everything; file:// buckets too.
        let root = try prefixJob("- {kind: download-file, source: \"file://demo/\", destination: /srv/all/}\n")
        let all = try #require(root.jobs(objectNames: ["a", "b/c"]).jobs)
        #expect(all.map(\.destination) == ["/srv/all/a", "/srv/all/b/c"])
    }

    /// A combining mark after a `/` joins it into another Character: `split(separator: "/")` then saw
    /// `../\u{301}evil` as one safe part, and the job wrote `out/../\u{301}evil`, beside the folder.
    @Test(arguments: ["photos/../../etc/passwd", "photos//abs", "photos/./a", "photos/a\u{0}b", "photos/../\u{301}evil",
                      "photos/a/..\u{600}/../\u{301}b", "photos/\u{600}/./\u{301}c", "photos/x//\u{301}"])
    func unsafeObjectNamesRefuseTheWholeExpansion(_ name: String) throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/photos/\n  destination: out/\n")
        let errors = try #require(expansion.jobs(objectNames: ["photos/fine.jpg", name]).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:11 invalidPath"])
        let reason = name.contains("\u{0}") ? "has a NUL character in its name" : "has a name that is not a safe relative path"
        #expect(errors.first?.message.contains(reason) == true, "\(errors)")
    }

    /// An object named like a `file://` bucket's metadata sidecar (or another of jobctl's own files), in
    /// its name or a folder of it, was downloaded as any other: into a bucket's folder it stood in for the
    /// real object's sidecar (another content type and generation believed, its custom metadata gone).
    /// Refused now, with the advice to exclude it; excluded, the rest expands.
    @Test(arguments: ["photos/.a.jpg.jobctl-meta.json", "photos/x.jobctl-upload/b.jpg", "photos/.c.jpg.01ABC.jobctl-partial"])
    func objectsNamedLikeJobctlsOwnFilesAreRefused(_ name: String) throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/photos/\n  destination: out/\n")
        let errors = try #require(expansion.jobs(objectNames: ["photos/a.jpg", name]).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:11 invalidPath"])
        #expect(errors.first?.message.contains("has a name jobctl keeps for its own temporary and metadata files") == true, "\(errors)")
        let relative = String(name.dropFirst("photos/".count))
        let excluded = try prefixJob("- kind: download-file\n  source: gs://bkt/photos/\n  destination: out/\n  exclude: [\"\(relative)\"]\n")
        let specs = try #require(excluded.jobs(objectNames: ["photos/a.jpg", name]).jobs, "\(excluded)")
        #expect(specs.map(\.destination) == [testBase + "/out/a.jpg"])
    }

    /// An object whose name holds a control character (a tab, a line break, U+0001) was written under the
    /// folder as a file so named, where a single download into a folder, and an HTTP URL, refuse it.
    @Test(arguments: ["photos/ctl\u{1}x", "photos/a\tb", "photos/line\nbreak/c.jpg", "photos/del\u{7F}"])
    func objectsWithControlCharactersInTheirNamesAreRefused(_ name: String) throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/photos/\n  destination: out/\n")
        let errors = try #require(expansion.jobs(objectNames: ["photos/a.jpg", name]).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:11 invalidPath"])
        #expect(errors.first?.message.contains("has a control character in its name") == true, "\(errors)")
    }

    /// Each name no job can download is refused for its own reason: a NUL, and a name over Cloud
    /// Storage's 1,024 bytes, were "not a safe relative path ('..', '.', an empty segment or a leading
    /// '/')". And the advice to "'exclude:' it" holds: the filters are asked first (such names were
    /// refused before them, so no exclude could leave them out).
    @Test func eachRefusedObjectNameHasItsOwnReasonAndExcludeLeavesItOut() throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/e/\n  destination: out/\n")
        let long = "e/l/" + String(repeating: "m", count: 1_021)
        #expect(long.utf8.count == 1_025)
        let names = ["e/ok", "e/x//y", "e/n/nul\u{0}x", long]
        let errors = try #require(expansion.jobs(objectNames: names).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:11 invalidPath", "2:11 invalidPath", "2:11 invalidPath"])
        let messages = errors.map(\.message)
        #expect(messages.count { $0.contains("not a safe relative path") } == 1, "\(messages)")
        #expect(messages.contains { $0.hasPrefix("the object 'e/x//y' under 'gs://bkt/e/' has a name that is not a safe relative path") },
                "\(messages)")
        #expect(messages.contains { $0.hasPrefix("the object 'e/n/nul\u{0}x' under 'gs://bkt/e/' has a NUL character in its name, which no "
                                                 + "file name and no reference can hold; 'exclude:' it or narrow the prefix") }, "\(messages)")
        #expect(messages.contains { $0.contains("cannot be named by a reference: the object name is 1025 bytes; Cloud Storage names are at "
                                                + "most 1024 bytes of UTF-8; 'exclude:' it or narrow the prefix") }, "\(messages)")
        let filtered = try prefixJob("- kind: download-file\n  source: gs://bkt/e/\n  destination: out/\n  exclude: [\"x/**\", \"n/*\", \"l/*\"]\n")
        #expect(filtered.jobs(objectNames: names).jobs?.map(\.source) == ["gs://bkt/e/ok"])
    }

    /// An object's path under the destination folder is a local path like any other: a segment over
    /// NAME_MAX (GCS takes 1,024-byte names without a `/`) or a whole path over PATH_MAX refuses the
    /// expansion at `source`, as an unsafe name does, rather than failing that job in the worker with
    /// ENAMETOOLONG.
    @Test func objectPathsOverTheKernelsBoundsRefuseTheExpansion() throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/photos/\n  destination: out/\n")
        let long = "photos/2024/" + String(repeating: "n", count: 256)
        let errors = try #require(expansion.jobs(objectNames: ["photos/fine.jpg", long]).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:11 invalidPath"])
        #expect(errors.first?.message.contains("a path that has a name of 256 bytes (") == true, "\(errors)")
        #expect(errors.first?.message.contains("file names are at most 255 bytes") == true, "\(errors)")
        #expect(errors.first?.message.contains("'photos/2024/\(String(repeating: "n", count: 28))...'") == true, "\(errors)")
        // 255 bytes a name is fine.
        let fits = "photos/2024/" + String(repeating: "n", count: 255)
        #expect(expansion.jobs(objectNames: [fits]).jobs?.map(\.destination) == [testBase + "/out/2024/" + String(repeating: "n", count: 255)])
        // A folder deep enough that an object's path passes PATH_MAX (4,095 bytes and the NUL).
        let folder = "/srv/" + String(repeating: "d/", count: 1_990)
        let deep = try prefixJob("- kind: download-file\n  source: gs://bkt/photos/\n  destination: \(folder)\n")
        let pathErrors = try #require(deep.jobs(objectNames: ["photos/a", "photos/" + String(repeating: "x", count: 120)]).errors)
        #expect(pathErrors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:11 invalidPath"])
        #expect(pathErrors.first?.message.contains("is 4105 bytes long as an absolute path; Linux takes paths of at most 4095 bytes") == true,
                "\(pathErrors)")
        #expect(deep.jobs(objectNames: ["photos/a"]).jobs?.count == 1)
    }

    /// Names are under the prefix when their bytes are, and are cut there: an object whose name goes on
    /// with a combining mark (`photos/\u{301}x`) is taken, not skipped for the Character `/\u{301}`, and
    /// one canonically equal to the prefix but not the same bytes (NFD for an NFC prefix) is not under it.
    @Test func namesAreUnderThePrefixByTheirBytes() throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/caf%C3%A9/\n  destination: out/\n")
        let specs = try #require(expansion.jobs(objectNames: ["caf\u{E9}/\u{301}x", "cafe\u{301}/nfd", "caf\u{E9}/d/\u{301}/y"]).jobs)
        #expect(specs.map { Array(($0.source ?? "").utf8) } == ["gs://bkt/caf%C3%A9/d/%CC%81/y", "gs://bkt/caf%C3%A9/%CC%81x"].map { Array($0.utf8) })
        #expect(specs.map { Array(($0.destination ?? "").utf8) }
                == [testBase + "/out/d/\u{301}/y", testBase + "/out/\u{301}x"].map { Array($0.utf8) })
        #expect(specs.map { $0.batch.map { Array($0.path.utf8) } } == [Array("d/\u{301}/y".utf8), Array("\u{301}x".utf8)])
    }

    /// Objects holding data under names ending in `/` are named in a note (the first, how many more),
    /// those the filters take; the zero-byte placeholders never reach it (the lister leaves them out).
    @Test func objectsWithDataWhoseNamesEndInASlashAreNoted() throws {
        let expansion = try prefixJob("- kind: download-file\n  source: gs://bkt/k/\n  destination: out/\n  exclude: [\"*.tmp\"]\n")
        #expect(expansion.slashNamedNote([]) == nil)
        #expect(expansion.slashNamedNote([("k/x.tmp/", 3), ("other/keep/", 4)]) == nil)
        let note = try #require(expansion.slashNamedNote([("k/z/", 1), ("k/keep/", 16), ("k/x.tmp/", 3), ("k/a/b/", 2)]))
        #expect(note.hasPrefix("m.yaml:2:11: note: 'source' 'gs://bkt/k/': skipped the object 'k/a/b/' (2 bytes) and 2 more such objects: "
                               + "its name ends in '/'"), "\(note)")
        // The objects themselves make no job, whatever their size.
        #expect(expansion.jobs(objectNames: ["k/keep/", "k/a/b/", "k/ok"]).jobs?.map(\.source) == ["gs://bkt/k/ok"])
    }

    @Test func anEmptyPrefixIsAnErrorAtTheJob() throws {
        let expansion = try prefixJob("jobs:\n  - kind: download-file\n    source: gs://bkt/photos/\n    destination: out/\n")
        let errors = try #require(expansion.jobs(objectNames: ["photos/", "elsewhere/a"]).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:5 emptyExpansion"])
        #expect(errors.first?.render().hasPrefix("m.yaml:2:5: error: the prefix 'gs://bkt/photos/' holds no object") == true)
        let listing = expansion.listingFailed("the bucket 'b' does not exist")
        #expect(listing.errors.map { "\($0.line):\($0.column) \($0.code)" } == ["3:13 sourceUnavailable"])
    }

    // MARK: - Schedules

    @Test func schedulesComeFromRunAfterOrDelayPerJobOrDefaults() throws {
        var parser = ManifestParser(baseDirectory: testBase, checksSources: false)
        parser.nowMs = 1_800_000_000_000
        let specs = try #require(parser.parse(text: """
        defaults:
          delay: 15m
        jobs:
          - {kind: fetch-url, source: gs://bkt/a}
          - {kind: fetch-url, source: gs://bkt/b, run_after: "2026-12-01T02:00:00+01:00"}
          - {kind: fetch-url, source: gs://bkt/c, delay: 2h}
          - {kind: fetch-url, source: gs://bkt/d, run_after: 2001-01-01T00:00:00.5Z}
          - {kind: fetch-url, source: gs://bkt/e, delay: 0s}
          - {kind: fetch-url, source: gs://bkt/f, run_after: 2016-12-31T23:59:60Z}
        """, path: "m.yaml").jobs)
        // The leap second is read as 23:59:59.999 UTC (the last millisecond of 2016).
        #expect(specs.map(\.runAfterMs) == [
            1_800_000_000_000 + 900_000, 1_796_086_800_000, 1_800_000_000_000 + 7_200_000, 978_307_200_500, 1_800_000_000_000,
            1_483_228_799_999,
        ])
        let plain = try #require(parse("- {kind: fetch-url, source: gs://bkt/a}\n").jobs)
        #expect(plain.first?.runAfterMs == nil)
    }
}
