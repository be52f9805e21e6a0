import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Files of this machine's cgroup filesystems (cgroup, cgroup2), for tests of what an upload does with
/// a file the kernel makes as it is read: read from `/sys/fs/cgroup`, never written.
public enum CgroupFiles {
    /// `CGROUP_SUPER_MAGIC`, `CGROUP2_SUPER_MAGIC` (linux/magic.h).
    private static let filesystems: Set<Int> = [0x0027_E0EB, 0x6367_7270]

    /// Names whose content stays put while a test runs (limits, not counters), looked at first.
    private static let steady = ["cgroup.max.depth", "cgroup.max.descendants", "cgroup.controllers", "memory.limit_in_bytes",
                                 "cpu.shares", "notify_on_release"]

    /// A cgroup or cgroup2 file whose `stat` size is 0 while it holds bytes (`cgroup.max.depth` says 0
    /// and holds `max`), under `/sys/fs/cgroup` or one folder below it; nil when this machine has none
    /// (no cgroup filesystem mounted there, or none readable).
    public static let zeroSizedWithContent: String? = find()

    /// The folder of `zeroSizedWithContent`: a folder of a cgroup filesystem.
    public static var folder: String? { zeroSizedWithContent.map { ($0 as NSString).deletingLastPathComponent } }

    /// Whether `path` is on cgroup or cgroup2 (`stat -f`: Glibc's Swift module has no `statfs`).
    public static func isCgroup(_ path: String) -> Bool {
        guard let output = try? runProcess("/usr/bin/stat", ["-f", "-c", "%t", path], seconds: 30), output.status == 0,
              let type = Int(output.stdout.trimmingCharacters(in: .whitespacesAndNewlines), radix: 16) else { return false }
        return filesystems.contains(type)
    }

    private static func find() -> String? {
        let root = "/sys/fs/cgroup"
        let below = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).sorted().map { root + "/" + $0 }
        var candidates: [String] = []
        for folder in [root] + below where isCgroup(folder) {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
            candidates += names.filter(steady.contains).map { folder + "/" + $0 }
            candidates += names.filter { !steady.contains($0) }.map { folder + "/" + $0 }
        }
        return candidates.first(where: zeroSizedButHoldsBytes)
    }

    private static func zeroSizedButHoldsBytes(_ path: String) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size == 0 else { return false }
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 64)
        return read(descriptor, &buffer, buffer.count) > 0
    }
}
