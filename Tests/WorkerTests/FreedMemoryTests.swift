import Foundation
import Testing
@testable import Worker

/// A periodic sweep hands the memory malloc holds free back to the kernel (`FreedMemory.release`): glibc
/// keeps the free pages inside its heaps, so a long-running worker's resident size settled at several
/// times its live heap.
@Suite("freed memory goes back to the kernel") struct FreedMemoryTests {
    /// The process's resident size in bytes (`/proc/self/statm`, its second field in pages).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
              let field = text.split(separator: " ").dropFirst().first, let pages = Int(field) else { return -1 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// 64 MiB in blocks of 1 KiB, every 64th kept so that nothing freed lies at a heap's top (where
    /// `free` itself would give it back): 63 MiB free inside the heap, resident until released. Run in
    /// a process of its own, where no other test allocates meanwhile; it exits 0 when the release took
    /// the resident size down by at least 32 MiB, 1 when it did not, 2 when it could not be measured.
    @Test func releaseShrinksTheResidentSize() async {
        await #expect(processExitsWith: .success) {
            let count = 65_536
            var blocks: [UnsafeMutableRawPointer] = []
            blocks.reserveCapacity(count)
            for _ in 0..<count {
                guard let block = malloc(1_024) else { exit(2) }
                memset(block, 0x5A, 1_024)
                blocks.append(block)
            }
            for (index, block) in blocks.enumerated() where index % 64 != 0 { free(block) }
            let before = FreedMemoryTests.residentBytes()
            FreedMemory.release()
            let after = FreedMemoryTests.residentBytes()
            guard before > 0, after > 0 else { exit(2) }
            print("resident before \(before >> 20) MiB, after \(after >> 20) MiB")
            exit(before - after >= 32 << 20 ? 0 : 1)
        }
    }
}
