import Foundation
import JobModel
import Testing
import TestSupport
@testable import Manifest

/// upload-file sources are checked on disk at submit, against real files in a fresh folder.
@Suite(.onTestThreads) struct SourceCheckTests {
    /// A folder holding `t.csv`, `a[1].csv` (a real file whose name looks like a glob), `photos/`, a link
    /// to `t.csv`, a link to nothing and a FIFO.
    struct Folder {
        let directory: TemporaryDirectory
        var path: String { LocalPath.standardize(directory.path) }

        init() throws {
            directory = try TemporaryDirectory("source-check")
            try "a,b\n".write(toFile: directory.file("t.csv"), atomically: true, encoding: .utf8)
            try "x".write(toFile: directory.file("a[1].csv"), atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: directory.file("photos"), withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: directory.file("link.csv"), withDestinationPath: "t.csv")
            try FileManager.default.createSymbolicLink(atPath: directory.file("dangling.csv"), withDestinationPath: "gone.csv")
            guard mkfifo(directory.file("pipe"), 0o600) == 0 else { throw CocoaError(.fileWriteUnknown) }
        }

        /// Parses one upload-file job reading `source`, with the checks on unless `checks` is false.
        func parse(source: String, extra: String = "", defaults: String = "", checks: Bool = true) -> Result<[JobSpec], ManifestErrors> {
            let yaml = "\(defaults)jobs:\n  - kind: upload-file\n    source: \(source)\n    destination: gs://bkt/x\n\(extra)"
            return ManifestParser(baseDirectory: path, checksSources: checks).parse(text: yaml, path: "m.yaml")
        }
    }

    @Test func readableFilesAndLinksToThemAreAccepted() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        #expect(try #require(folder.parse(source: "t.csv").jobs).first?.source == folder.path + "/t.csv")
        #expect(try #require(folder.parse(source: folder.path + "/t.csv").jobs).count == 1)
        // The worker opens the path as written, following links: the spec keeps the link.
        #expect(try #require(folder.parse(source: "link.csv").jobs).first?.source == folder.path + "/link.csv")
        // A name with glob characters is a file like any other when it exists.
        #expect(try #require(folder.parse(source: "'a[1].csv'").jobs).count == 1)
    }

    /// A `..` after a folder reached through a symbolic link climbs from where the link leads, as the
    /// kernel (and `cat`) does: taken by its text, `jobs/../t.txt` (with `jobs` a link to `../data/jobs`)
    /// named `home/t.txt`, and that other file was uploaded. A folder that does not exist is climbed by its
    /// text, as before.
    @Test func aParentAfterALinkIsWhereTheLinkLeads() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        let manager = FileManager.default
        try manager.createDirectory(atPath: folder.directory.file("lx/home"), withIntermediateDirectories: true)
        try manager.createDirectory(atPath: folder.directory.file("lx/data/jobs"), withIntermediateDirectories: true)
        try manager.createDirectory(atPath: folder.directory.file("lx/real/deep"), withIntermediateDirectories: true)
        try "LEXICAL".write(toFile: folder.directory.file("lx/home/t.txt"), atomically: true, encoding: .utf8)
        try "KERNEL".write(toFile: folder.directory.file("lx/data/t.txt"), atomically: true, encoding: .utf8)
        try "KERNEL".write(toFile: folder.directory.file("lx/real/t.txt"), atomically: true, encoding: .utf8)
        try manager.createSymbolicLink(atPath: folder.directory.file("lx/home/jobs"), withDestinationPath: "../data/jobs")
        try manager.createSymbolicLink(atPath: folder.directory.file("lx/home/lnk"), withDestinationPath: "../real/deep")
        let home = folder.path + "/lx/home"
        func source(_ written: String, base: String) throws -> String? {
            let yaml = "jobs:\n  - {kind: upload-file, source: '\(written)', destination: gs://bkt/x}\n"
            return try #require(ManifestParser(baseDirectory: base).parse(text: yaml, path: "m.yaml").jobs).first?.source
        }
        // The manifest in `jobs/` (named through the link), `../t.txt` relative to it.
        #expect(try source("../t.txt", base: home + "/jobs") == folder.path + "/lx/data/t.txt")
        #expect(try source("lnk/../t.txt", base: home) == folder.path + "/lx/real/t.txt")
        #expect(try source(home + "/lnk/../t.txt", base: "/") == folder.path + "/lx/real/t.txt")
        // No link before the `..`: by its text, the same as the kernel's.
        #expect(try source("../home/t.txt", base: home) == home + "/t.txt")
        for (written, file) in [("../t.txt", home + "/jobs"), ("lnk/../t.txt", home)] {
            let path = try #require(try source(written, base: file))
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "KERNEL", "\(written)")
        }
        // A link into a folder whose name is not UTF-8 (`odd\xFF`) cannot be named: climbed by its text,
        // never through that name decoded with U+FFFD (another folder's).
        var target: [CChar] = Array((folder.path + "/lx/odd").utf8CString.dropLast()) + [CChar(bitPattern: 0xFF), 0]
        #expect(mkdir(&target, 0o755) == 0)
        #expect(symlink(&target, home + "/raw") == 0)
        let climbed = LocalPath.resolve(home + "/raw/../t.txt")
        #expect(climbed == home + "/t.txt" && !climbed.unicodeScalars.contains("\u{FFFD}"), "\(climbed)")
        // A folder not there yet is climbed by its text.
        #expect(LocalPath.resolve(home + "/new/../t.txt") == home + "/t.txt")
        #expect(LocalPath.resolve("/../a/./b//c") == "/a/b/c")
    }

    /// A source whose `*`, `?` and `[` are all escaped is no glob, and names the file without the escapes,
    /// as a glob takes them: `a\[1\].csv` was looked up with its backslashes and "named no file (its
    /// '*', '?' or '[' are escaped, so it is not a glob)" while `a[1].csv` was there. A folder and a
    /// glob's folder written so are found the same way; a name that exists with its backslashes is that.
    @Test func aSourceWithItsGlobCharactersEscapedNamesTheFileWithoutTheEscapes() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        #expect(try #require(folder.parse(source: "'a\\[1\\].csv'").jobs).map(\.source) == [folder.path + "/a[1].csv"])
        #expect(try #require(folder.parse(source: "'\(folder.path)/a\\[1\\].csv'").jobs).map(\.source) == [folder.path + "/a[1].csv"])
        let missing = try #require(folder.parse(source: "'no\\[1\\].csv'").errors)
        #expect(missing.map(\.code) == [.sourceUnavailable])
        #expect(missing.first?.message.hasPrefix("'source' 'no\\[1\\].csv' names no file (its '*', '?' or '[' are escaped, so it is not "
                                                 + "a glob; the file looked for is '\(folder.path)/no[1].csv')") == true, "\(missing)")
        // A file named with the backslashes is the one named.
        try "literal".write(toFile: folder.directory.file("b\\[2\\].csv"), atomically: true, encoding: .utf8)
        #expect(try #require(folder.parse(source: "'b\\[2\\].csv'").jobs).map(\.source) == [folder.path + "/b\\[2\\].csv"])
        // A folder, and the folder before a glob.
        try FileManager.default.createDirectory(atPath: folder.directory.file("c[3]/d"), withIntermediateDirectories: true)
        try "x".write(toFile: folder.directory.file("c[3]/d/x.csv"), atomically: true, encoding: .utf8)
        for source in ["'c\\[3\\]/'", "'c\\[3\\]/**/*.csv'"] {
            let yaml = "- {kind: upload-file, source: \(source), destination: gs://bkt/up/}\n"
            let specs = try #require(ManifestParser(baseDirectory: folder.path).parse(text: yaml, path: "m.yaml").jobs, "\(source)")
            #expect(specs.map(\.source) == [folder.path + "/c[3]/d/x.csv"], "\(source)")
        }
    }

    /// Each problem at the source's line and column, with what to do about it.
    @Test(arguments: [
        ("missing.csv", ManifestError.Code.sourceUnavailable, "'source' 'missing.csv' does not exist (FOLDER/missing.csv); if it will exist when the job runs, add 'check_source: false' to the job (or to 'defaults:') or submit with --no-check-sources"),
        ("dangling.csv", .sourceUnavailable, "'source' 'dangling.csv' is a symbolic link to 'gone.csv', which does not exist"),
        ("pipe", .sourceUnavailable, "'source' 'pipe' is a FIFO, not a regular file"),
        ("t.csv/inner", .sourceUnavailable, "'source' 't.csv/inner' cannot be reached (FOLDER/t.csv/inner): a folder on its path is a file"),
        // Its size is 0 and its content a few KB: the upload stored an empty object. (`/proc/self/status`
        // is refused before that, for the link it leads through: `aPathThroughALinkOfProcIsRefused`.)
        ("/proc/cpuinfo", .sourceUnavailable, "'source' '/proc/cpuinfo' is on procfs, whose files the kernel makes as they are "
            + "read: their size (0 bytes for most of /proc) is not their content, so an upload would store an empty or cut object; "
            + "copy it to a regular file first"),
    ])
    func refusedAtTheSourcesPosition(_ source: String, _ code: ManifestError.Code, _ message: String) throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        let errors = try #require(folder.parse(source: source).errors)
        #expect(errors.map(\.code) == [code])
        #expect(errors.map { "\($0.line):\($0.column)" } == ["3:13"])
        let expected = message.replacingOccurrences(of: "FOLDER", with: folder.path)
        #expect(errors.first?.message.contains(expected) == true, "\(errors)")
    }

    /// `/sys/fs/cgroup/unified/cgroup.max.depth` says 0 bytes and holds `max`: it passed the check (only
    /// procfs, sysfs and a few others were known) and uploaded as an empty object. Every pseudo
    /// filesystem whose sizes are not its files' content is refused as procfs is.
    @Test(.enabled(if: CgroupFiles.zeroSizedWithContent != nil, "no cgroup file whose size says 0 while it holds bytes on this machine"))
    func aCgroupFileIsRefusedAsAProcfsFileIs() throws {
        let file = try #require(CgroupFiles.zeroSizedWithContent)
        let folder = try Folder()
        defer { folder.directory.remove() }
        let errors = try #require(folder.parse(source: file).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["3:13 sourceUnavailable"])
        #expect(errors.first?.message.contains("'source' '\(file)' is on cgroup") == true, "\(errors)")
        #expect(errors.first?.message.contains("whose files the kernel makes as they are read") == true, "\(errors)")
    }

    /// `/dev/stdin` is `/proc/self/fd/0`: submit checked the file its own standard input was, and the
    /// worker uploaded its own standard input (3 bytes) and succeeded; `/proc/self/cwd/c.txt` was the
    /// worker's folder's file. A source that leads through a link of /proc is refused at its position,
    /// whether it is checked (`check_source`) or not, a folder or a glob.
    @Test(arguments: ["/dev/stdin", "/dev/fd/0", "/proc/self/cwd/t.csv", "/proc/self/status", "/proc/thread-self/root/FOLDER/t.csv",
                      "/dev/fd/", "'/proc/self/fd/*'", "/proc/1/root/FOLDER/t.csv"])
    func aPathThroughALinkOfProcIsRefused(_ written: String) throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        let source = written.replacingOccurrences(of: "FOLDER", with: folder.path.dropFirst())
        let link = source.hasPrefix("'/proc/self") || source.hasPrefix("/dev/") || source.hasPrefix("/proc/self") ? "/proc/self"
            : source.hasPrefix("/proc/thread-self") ? "/proc/thread-self" : "/proc/1/root"
        for checks in [true, false] {
            let errors = try #require(folder.parse(source: source, checks: checks).errors,
                                      "\(source) was accepted")
            #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["3:13 invalidPath"], "\(source): \(errors)")
            let message = errors.first?.message ?? ""
            #expect(message.contains("leads through '\(link)', a link the kernel's /proc makes"), "\(message)")
            #expect(message.contains("names a file of the submitting process") == (link != "/proc/1/root"), "\(message)")
        }
        // The same file by its own path is taken.
        #expect(try #require(folder.parse(source: folder.path + "/t.csv").jobs).count == 1)
    }

    /// A download into `/dev/stdout` wrote where the worker's standard output leads; into `/dev/` an object
    /// named `stdin`, where the worker's standard input leads. Both are refused at the destination.
    @Test func aDownloadDestinationThroughALinkOfProcIsRefused() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        let yaml = """
        - {kind: download-file, source: gs://bkt/a.txt, destination: /dev/stdout}
        - {kind: download-file, source: gs://bkt/stdin, destination: /dev/}
        - {kind: download-file, source: gs://bkt/p/, destination: /proc/self/cwd/restore/}
        - {kind: download-file, source: gs://bkt/a.txt, destination: /dev/null}
        """
        let errors = try #require(ManifestParser(baseDirectory: folder.path).parse(text: yaml, path: "m.yaml").errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:62 invalidPath", "2:62 invalidPath", "3:59 invalidPath"], "\(errors)")
        #expect(errors.allSatisfy { $0.message.contains("leads through '/proc/self'") && $0.message.contains("the worker would write") },
                "\(errors)")
        #expect(errors[1].message.contains("'destination' '/dev/' is a folder, and with the object's name the path '/dev/stdin' leads"))
    }

    /// Folders and globs expand at submit whatever the check says; one that takes no file is an error at
    /// the job's position (line 2, column 5: its first key).
    @Test(arguments: ["photos", "photos/", "'photos/?.jpg'", "'[ab].csv'"])
    func anExpansionThatTakesNothingIsRefusedWithOrWithoutTheCheck(_ source: String) throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        for checks in [true, false] {
            let errors = try #require(folder.parse(source: source, extra: "", checks: checks).errors)
            #expect(errors.map(\.code) == [.invalidReference, .emptyExpansion] || errors.map(\.code) == [.emptyExpansion]
                    || errors.map(\.code) == [.invalidReference], "\(errors)")
        }
        // With a folder destination only the empty expansion is left.
        let yaml = "jobs:\n  - kind: upload-file\n    source: \(source)\n    destination: gs://bkt/x/\n"
        let errors = try #require(ManifestParser(baseDirectory: folder.path).parse(text: yaml, path: "m.yaml").errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:5 emptyExpansion"])
        #expect(errors.first?.message.contains("holds no regular file; nothing would be uploaded") == true, "\(errors)")
    }

    @Test func theCheckCanBeTurnedOffPerJobInDefaultsOrForTheWholeSubmit() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        #expect(folder.parse(source: "later.csv").errors?.map(\.code) == [.sourceUnavailable])
        let perJob = try #require(folder.parse(source: "later.csv", extra: "    check_source: false\n").jobs)
        #expect(perJob.first?.source == folder.path + "/later.csv")
        #expect(try #require(folder.parse(source: "later.csv", defaults: "defaults: {check_source: no}\n").jobs).count == 1)
        #expect(try #require(folder.parse(source: "later.csv", checks: false).jobs).count == 1)
        // The job's own `true` wins over the defaults' `false`; the submit-wide switch wins over both.
        let jobWins = folder.parse(source: "later.csv", extra: "    check_source: true\n", defaults: "defaults: {check_source: false}\n")
        #expect(jobWins.errors?.map(\.code) == [.sourceUnavailable])
        #expect(folder.parse(source: "later.csv", extra: "    check_source: true\n", checks: false).jobs?.count == 1)
        // A `check_source` default does not bother jobs of other kinds.
        let mixed = ManifestParser(baseDirectory: folder.path).parse(text: """
        defaults: {check_source: false}
        jobs:
          - {kind: upload-file, source: later.csv, destination: gs://bkt/later.csv}
          - {kind: fetch-url, source: gs://bkt/later.csv}
        """, path: "m.yaml")
        #expect(mixed.jobs?.count == 2)
    }

    /// Every job is checked and every problem reported, not only the first.
    @Test func everyMissingSourceIsReported() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        let result = ManifestParser(baseDirectory: folder.path).parse(text: """
        - {kind: upload-file, source: t.csv, destination: gs://bkt/t.csv}
        - {kind: upload-file, source: one.csv, destination: gs://bkt/one.csv}
        - {kind: upload-file, source: two.csv, destination: gs://bkt/two.csv}
        """, path: "m.yaml")
        #expect(try #require(result.errors).map { "\($0.line):\($0.column) \($0.code)" } == [
            "2:31 sourceUnavailable", "3:31 sourceUnavailable",
        ])
    }

    /// A source that a download-file job writes is not looked for when the upload waits for that job,
    /// directly or through others, wherever in the manifest the download is; otherwise it is.
    @Test func aSourceThatAWaitedForDownloadWritesIsNotLookedFor() throws {
        let folder = try Folder()
        defer { folder.directory.remove() }
        func parse(_ yaml: String) -> Result<[JobSpec], ManifestErrors> {
            ManifestParser(baseDirectory: folder.path).parse(text: yaml, path: "m.yaml")
        }
        // The download after the upload in the file, the upload waiting for it by its key.
        let direct = try #require(parse("""
        - {kind: upload-file, source: out/a.csv, destination: gs://bkt/a.csv, after: [fetch]}
        - {kind: download-file, source: gs://bkt/src.csv, destination: out/a.csv, key: fetch}
        """).jobs)
        #expect(direct.map(\.source) == [folder.path + "/out/a.csv", "gs://bkt/src.csv"])
        // Through another job; and into a folder, under the object's name.
        #expect(try #require(parse("""
        - {kind: download-file, source: gs://bkt/src.csv, destination: out/, key: fetch}
        - {kind: download-memory, source: gs://bkt/other, key: look, after: [fetch]}
        - {kind: upload-file, source: out/src.csv, destination: gs://bkt/a.csv, after: [look]}
        """).jobs).count == 3)
        // A prefix's download writes under its folder.
        #expect(try #require(parse("""
        - {kind: download-file, source: gs://bkt/photos/, destination: out/photos/, key: fetch}
        - {kind: upload-file, source: out/photos/2024/x.jpg, destination: gs://ckt/x.jpg, after: [fetch]}
        """).jobs).count == 2)
        // Refused where nothing waited for writes the file and every job waited for is in the manifest:
        // no after:, a download of another file.
        for yaml in [
            "- {kind: download-file, source: gs://bkt/src.csv, destination: out/a.csv, key: fetch}\n"
                + "- {kind: upload-file, source: out/a.csv, destination: gs://bkt/a.csv}",
            "- {kind: download-file, source: gs://bkt/src.csv, destination: out/b.csv, key: fetch}\n"
                + "- {kind: upload-file, source: out/a.csv, destination: gs://bkt/a.csv, after: [fetch]}",
        ] {
            let errors = try #require(parse(yaml).errors, "\(yaml)")
            #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:31 sourceUnavailable"], "\(yaml)")
            #expect(errors.first?.message.contains("a download-file job that writes it (in the manifests submitted, or not yet "
                                                   + "finished in the log) can be named in the job's 'after:'") == true)
        }
        // A chain that names a job outside the manifest (another manifest's, or the log's) is left to the
        // submit, with the error it would report.
        for yaml in [
            "- {kind: download-file, source: gs://bkt/src.csv, destination: out/a.csv, key: fetch, after: [up]}\n"
                + "- {kind: upload-file, source: out/a.csv, destination: gs://bkt/a.csv, key: up, after: [other]}",
            "- {kind: download-file, source: gs://bkt/src.csv, destination: out/a.csv}\n"
                + "- {kind: upload-file, source: out/a.csv, destination: gs://bkt/a.csv, after: [other]}",
        ] {
            let jobs = try ManifestParser(baseDirectory: folder.path).parseJobs(data: Data(yaml.utf8), path: "m.yaml").get()
            let check = try #require(jobs[1].pendingSourceCheck, "\(yaml)")
            #expect(check.path == folder.path + "/out/a.csv" && check.after == ["other"])
            #expect("\(check.error.line):\(check.error.column) \(check.error.code)" == "2:31 sourceUnavailable")
            // Nothing in the log: reported.
            #expect(PendingSourceCheck.unresolved(jobs) { _ in nil } == [check.error])
            // 'other' is a download in the log, not yet finished, writing the file: left to it.
            #expect(PendingSourceCheck.unresolved(jobs) { name in
                name == "other" ? PendingSourceCheck.LoggedJob(writes: check.path, after: []) : nil
            }.isEmpty)
            // Through a job of the log that waits for one that writes it; not through one that writes another.
            let chain: [String: PendingSourceCheck.LoggedJob] = [
                "other": .init(writes: nil, after: ["01ID0000000000000000000001"]),
                "01ID0000000000000000000001": .init(writes: check.path, after: []),
            ]
            #expect(PendingSourceCheck.unresolved(jobs) { chain[$0] }.isEmpty)
            #expect(PendingSourceCheck.unresolved(jobs) { name in
                name == "other" ? PendingSourceCheck.LoggedJob(writes: folder.path + "/out/b.csv", after: []) : nil
            } == [check.error])
        }
        // Another manifest of the same submit: its download, keyed 'other', writes the file.
        let upload = try ManifestParser(baseDirectory: folder.path).parseJobs(
            data: Data("- {kind: upload-file, source: out/a.csv, destination: gs://bkt/a.csv, after: [other]}".utf8), path: "up.yaml").get()
        let download = try ManifestParser(baseDirectory: folder.path).parseJobs(
            data: Data("- {kind: download-file, source: gs://bkt/src.csv, destination: out/a.csv, key: other}".utf8), path: "down.yaml").get()
        #expect(PendingSourceCheck.unresolved(upload + download) { _ in nil }.isEmpty)
        #expect(PendingSourceCheck.unresolved(upload) { _ in nil }.count == 1)
        // A source that is there but unusable is refused at once, whatever the job waits for.
        let pipe = try #require(parse("""
        - {kind: download-file, source: gs://bkt/src.csv, destination: pipe, key: fetch}
        - {kind: upload-file, source: pipe, destination: gs://bkt/a.csv, after: [fetch]}
        """).errors)
        #expect(pipe.map(\.message).first?.contains("is a FIFO, not a regular file") == true, "\(pipe)")
    }
}
