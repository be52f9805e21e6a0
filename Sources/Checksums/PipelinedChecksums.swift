import Dispatch
import Foundation
import Synchronization

/// CRC32C — and MD5 when asked for — of a byte stream, hashed off the caller's thread so that I/O and
/// hashing overlap. MD5 is off by default: it runs at under 1 GB/s a core where hardware CRC32C runs at
/// several, so a stream pays for it only when something will compare it.
///
/// `update(_:)` copies the bytes into blocks; each full block is hashed on a serial dispatch queue that
/// belongs to this stream (GCD's thread pool: no thread is created per transfer), in order. At most
/// `backlogBytes` are held at once: beyond that `update` waits for the queue to catch up, so memory
/// stays flat whatever the stream's length. `finish()` waits for the queue and returns both hashes.
///
/// The first `inlineBytes` are hashed on the caller's thread, without a copy or a queue: small streams
/// (metadata, inline data, in-memory downloads) cost what they did before.
///
/// A stream without MD5 is hashed on the caller's thread throughout: hardware CRC32C runs at several
/// GB/s, as fast as the copy into a block would, so handing it to a queue only added a copy of every
/// byte and a thread wake-up per MiB (the profile of a 512 MiB `file://` upload showed the copy at 11 %
/// and the CRC at 13 % of the samples; inline, the copy is gone).
///
/// Not `Sendable`: one stream, fed from one thread at a time.
public final class PipelinedChecksums {
    /// Bytes hashed per queued block.
    public static let blockSize = 1 << 20
    /// Default bound on the bytes copied and not yet hashed (including the block being filled).
    public static let defaultBacklogBytes = 8 << 20
    /// Default number of leading bytes hashed on the caller's thread.
    public static let defaultInlineBytes = 1 << 20

    private let hashes: RunningHashes
    private let pool = BlockPool()
    private let inlineLimit: Int
    private var inlineHashed = 0
    /// One permit per block that may be held (filled or waiting to be hashed).
    private let permits: DispatchSemaphore
    /// How many permits there are: the blocks of the backlog.
    private let permitCount: Int
    /// Created at the first byte past `inlineLimit`.
    private var queue: DispatchQueue?
    /// The block being filled (its permit is taken) and how many bytes it holds.
    private var current: Block?
    private var filled = 0
    private var result: (md5Base64: String?, crc32cBase64: String)?
    /// Permits taken ahead by `reserve(forNext:)` for blocks not yet started.
    private var reserved = 0

    /// Whether this stream computes MD5 (CRC32C is always computed).
    public var computesMD5: Bool { hashes.computesMD5 }

    /// Whether any block went to the queue (tests: a CRC-only stream never does).
    var hashedOffThread: Bool { queue != nil }

    /// A hasher that keeps at most `backlogBytes` (at least one block) waiting, and hashes the first
    /// `inlineBytes` on the caller's thread; it computes MD5 only when `md5` is true.
    public init(md5: Bool = false, backlogBytes: Int = defaultBacklogBytes, inlineBytes: Int = defaultInlineBytes) {
        hashes = RunningHashes(md5: md5)
        permitCount = max(1, backlogBytes / Self.blockSize)
        permits = DispatchSemaphore(value: permitCount)
        inlineLimit = md5 ? max(0, inlineBytes) : Int.max
    }

    deinit {
        // Abandoned mid-stream (an error ended the transfer): give back the block being filled. Blocks
        // already queued keep the semaphore and the hashes alive until they are hashed and freed.
        if let current {
            pool.give(current)
            permits.signal()
        }
        releaseReserved()
    }

    /// Gives back the permits `reserve(forNext:)` took for blocks that will not be started.
    private func releaseReserved() {
        while reserved > 0 {
            permits.signal()
            reserved -= 1
        }
    }

    /// Whether `update` of the next `count` bytes can go on without waiting for the queue. When it can,
    /// the blocks those bytes need are set aside for them (taken without waiting), so the `update` that
    /// follows does not wait. A caller that must never block — the curl thread, which every transfer of
    /// the process shares — asks first and pauses its one stream when the answer is no, instead of
    /// waiting in `update` while every other transfer waits for it.
    ///
    /// When the blocks are not free and a block is being filled, that block is handed to the queue as it
    /// is: it holds a permit the queue could never give back while it waits to be filled, and with a
    /// backlog of one block nothing else would ever free one. Bytes needing more blocks than the backlog
    /// holds could never be set aside: for them the answer is yes, and `update` waits as before.
    public func reserve(forNext count: Int) -> Bool {
        var rest = count
        if inlineHashed < inlineLimit { rest -= min(inlineLimit - inlineHashed, rest) }
        if current != nil { rest -= min(Self.blockSize - filled, rest) }
        let needed = (rest + Self.blockSize - 1) / Self.blockSize
        guard needed <= permitCount else { return true }
        while reserved < needed {
            guard permits.wait(timeout: .now()) == .success else {
                if current != nil { submitCurrent() }
                return false
            }
            reserved += 1
        }
        return true
    }

    /// Adds the next bytes of the stream. May wait while the backlog is full. Not after `finish()`.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(result == nil, "PipelinedChecksums.update after finish")
        var rest = bytes
        if inlineHashed < inlineLimit, !rest.isEmpty {
            let count = min(inlineLimit - inlineHashed, rest.count)
            hashes.update(UnsafeRawBufferPointer(rebasing: rest[0..<count]))
            inlineHashed += count
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
        }
        while !rest.isEmpty {
            let block: Block
            if let current {
                block = current
            } else {
                if reserved > 0 { reserved -= 1 } else { permits.wait() }
                block = pool.take()
                current = block
            }
            let count = min(Self.blockSize - filled, rest.count)
            block.copy(UnsafeRawBufferPointer(rebasing: rest[0..<count]), at: filled)
            filled += count
            rest = UnsafeRawBufferPointer(rebasing: rest[count...])
            if filled == Self.blockSize { submitCurrent() }
        }
    }

    /// Waits for every queued block and returns base64 MD5 (nil when not computed) and base64
    /// big-endian CRC32C (GCS's encodings). Later calls return the same values.
    public func finish() -> (md5Base64: String?, crc32cBase64: String) {
        if let result { return result }
        if filled > 0 { submitCurrent() }
        releaseReserved()
        queue?.sync {}
        let result = hashes.finish()
        self.result = result
        return result
    }

    /// Hands the block being filled to the queue; the queue gives it back to the pool and returns its permit.
    private func submitCurrent() {
        guard let block = current else { return }
        let count = filled
        current = nil
        filled = 0
        let queue = self.queue ?? DispatchQueue(label: "jobctl.checksums")
        self.queue = queue
        let hashes = self.hashes
        let permits = self.permits
        let pool = self.pool
        queue.async {
            hashes.update(block.bytes(count))
            pool.give(block)
            permits.signal()
        }
    }
}

// MARK: - Blocks and running hashes

/// A heap block of `PipelinedChecksums.blockSize` bytes, owned by whoever holds it: the pool, the
/// producer while it fills it, then the queue while it hashes it.
private struct Block: @unchecked Sendable {
    // @unchecked: the producer stops touching a block before handing it to the queue.
    private let storage: UnsafeMutableRawBufferPointer

    init() {
        // malloc's own alignment (16): a larger one goes through memalign, whose leftovers fragment the heap.
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: PipelinedChecksums.blockSize, alignment: 16)
    }

    func copy(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
        UnsafeMutableRawBufferPointer(rebasing: storage[offset..<(offset + bytes.count)]).copyMemory(from: bytes)
    }

    func bytes(_ count: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: storage[0..<count])
    }

    func deallocate() { storage.deallocate() }
}

/// The blocks of one stream, reused until the stream ends. Allocating and freeing a block per MiB from
/// two threads leaves glibc's heap fragmented (hundreds of MiB of peak RSS over a 1 GiB transfer);
/// a stream's few blocks, kept, hold memory at the backlog bound.
private final class BlockPool: Sendable {
    private let free = Mutex<[Block]>([])

    /// A free block, or a new one (at most one per permit exists, so the pool never outgrows the backlog).
    func take() -> Block {
        free.withLock { $0.popLast() } ?? Block()
    }

    func give(_ block: Block) {
        free.withLock { $0.append(block) }
    }

    deinit {
        // Every block is back: queued work holds the pool until it has returned its block.
        free.withLock { blocks in
            for block in blocks { block.deallocate() }
        }
    }
}

/// The CRC32C state, and the MD5 state when computed, of one stream.
private final class RunningHashes: @unchecked Sendable {
    // @unchecked: used by one thread at a time — the caller's for the inline prefix, then the serial
    // queue, then the caller's again in `finish()` after `queue.sync {}` has waited for the queue.
    private let md5: Digest?
    private var crc = CRC32C()

    init(md5: Bool) {
        self.md5 = md5 ? Digest(.md5) : nil
    }

    var computesMD5: Bool { md5 != nil }

    func update(_ bytes: UnsafeRawBufferPointer) {
        md5?.update(bytes)
        crc.update(bytes)
    }

    func finish() -> (md5Base64: String?, crc32cBase64: String) {
        (md5.map { Data($0.finalize()).base64EncodedString() }, crc.base64)
    }
}
