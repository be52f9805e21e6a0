import Foundation
import JobModel

extension PostgresStore {
    /// Up to `limit` log rows with `seq > afterSeq`, in seq order, exactly as stored.
    public func logRows(afterSeq: Int64, limit: Int) throws(StoreError) -> [LogRow] {
        try withConnection { (connection) throws(StoreError) -> [LogRow] in
            try connection.rows("SELECT seq, job_id, version, type, at_ms, actor, lease, data FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                                [.integer(afterSeq), .int(max(0, limit))]) { (row) throws(StoreError) -> LogRow in
                LogRow(seq: try row.integer(0), jobID: try row.string(1), version: Int(try row.integer(2)), type: try row.string(3),
                       atMs: try row.integer(4), actor: try row.string(5), leaseToken: try row.optionalInteger(6),
                       data: try row.string(7))
            }
        }
    }

    /// The SHA-256 of every stored blob, in ascending order.
    public func blobDigests() throws(StoreError) -> [String] {
        try withConnection { (connection) throws(StoreError) -> [String] in
            try connection.rows("SELECT sha256 FROM blobs ORDER BY sha256 COLLATE \"C\"") { (row) throws(StoreError) in try row.string(0) }
        }
    }

    /// Every record of an expired blob, in ascending hash order, exactly as stored.
    public func expiredBlobRecords() throws(StoreError) -> [ExpiredBlob] {
        try withConnection { (connection) throws(StoreError) -> [ExpiredBlob] in
            try connection.rows("SELECT sha256, size, expired_at_ms FROM expired_blobs ORDER BY sha256 COLLATE \"C\"") {
                (row) throws(StoreError) in
                ExpiredBlob(sha256: try row.string(0), size: try row.integer(1), expiredAtMs: try row.integer(2))
            }
        }
    }

    /// How many log rows `importLog(from:allowingRunning:)` reads from the source, and inserts, at a time.
    static let importPageSize = 1_000

    /// Copies `source`'s log into this empty database in one transaction (see `JobStore.importLog`).
    ///
    /// The tables are locked first, so a worker that connects meanwhile waits for the copy instead of
    /// seeing half of it; the emptiness check runs under those locks. Events keep their seq
    /// (`OVERRIDING SYSTEM VALUE`), and the identity and `lease_tokens` sequences are moved past the
    /// highest values copied, so new events and tokens continue above them.
    public func importLog(from source: any JobStore, allowingRunning: Bool) throws(StoreError) -> LogImport {
        let location = location
        return try writeTransaction { (connection) throws(StoreError) -> LogImport in
            try connection.store("LOCK TABLE events, jobs, blobs, expired_blobs, leases IN ACCESS EXCLUSIVE MODE")
            let occupied = try connection.row("""
                SELECT (SELECT count(*) FROM events)::bigint, (SELECT count(*) FROM jobs)::bigint,
                       (SELECT count(*) FROM blobs)::bigint, (SELECT count(*) FROM expired_blobs)::bigint,
                       (SELECT count(*) FROM leases)::bigint
                """) { (row) throws(StoreError) in try (0..<5).map { (index) throws(StoreError) in try row.integer(index) } } ?? []
            guard occupied.allSatisfy({ $0 == 0 }) else {
                let names = ["events", "jobs", "blobs", "expired blobs", "leases"]
                let found = zip(names, occupied).filter { $0.1 > 0 }.map { "\($0.1) \($0.0)" }.joined(separator: ", ")
                throw StoreError.invalidControl("the target database \(location) is not empty (\(found)); nothing was copied: "
                    + "migrate into a new, empty database")
            }

            var events = 0
            var lastSeq: Int64 = 0
            var highestToken: Int64 = 0
            while true {
                let page = try source.logRows(afterSeq: lastSeq, limit: Self.importPageSize)
                guard !page.isEmpty else { break }
                var values: [PostgresValue] = []
                var tuples: [String] = []
                values.reserveCapacity(page.count * 8)
                for row in page {
                    let base = values.count
                    tuples.append("(" + (1...8).map { "$\(base + $0)" }.joined(separator: ", ") + ")")
                    values += [.integer(row.seq), .text(row.jobID), .int(row.version), .text(row.type), .integer(row.atMs),
                               .text(row.actor), .optional(row.leaseToken), .text(row.data)]
                    highestToken = max(highestToken, row.leaseToken ?? 0)
                }
                try connection.store("INSERT INTO events (seq, job_id, version, type, at_ms, actor, lease, data) "
                                     + "OVERRIDING SYSTEM VALUE VALUES " + tuples.joined(separator: ", "), values)
                events += page.count
                lastSeq = page[page.count - 1].seq
            }
            if lastSeq > 0 {
                try connection.store("SELECT pg_catalog.setval(\(PostgresBatchWriter.eventSeqSequence), $1::bigint)", [.integer(lastSeq)])
            }
            if highestToken > 0 {
                try connection.store("SELECT pg_catalog.setval('lease_tokens'::regclass, $1::bigint)", [.integer(highestToken)])
            }

            let digests = try source.blobDigests()
            for digest in digests {
                guard let bytes = try source.blob(sha256: digest) else {
                    throw StoreError.corrupt("blob \(digest) vanished from the source while it was copied")
                }
                try connection.store("INSERT INTO blobs (sha256, size, data) VALUES ($1, $2, $3)",
                                     [.text(digest), .int(bytes.count), .bytea(bytes)])
            }

            // The records of the blobs `archive --blobs-before` removed, so `result` on this store says a
            // result expired (with its size and date) rather than that the log lost it.
            let expired = try source.expiredBlobRecords()
            for record in expired {
                try connection.store("INSERT INTO expired_blobs (sha256, size, expired_at_ms) VALUES ($1, $2, $3)",
                                     [.text(record.sha256), .integer(record.size), .integer(record.expiredAtMs)])
            }

            let rebuilt = try Self.replay(connection, rewrite: true)
            let running = try connection.row("SELECT count(*) FROM jobs WHERE state = 'running'") { (row) throws(StoreError) in
                Int(try row.integer(0))
            } ?? 0
            if running > 0 && !allowingRunning {
                throw StoreError.invalidControl("\(running) \(running == 1 ? "job was" : "jobs were") running in the source when it was read; "
                    + "nothing was copied: stop its workers first (what they do after the copy would be lost), or pass --force to "
                    + "copy anyway (on the target those jobs have no lease, and the first worker's rescue expires them)")
            }
            var copied = LogImport(events: events, blobs: digests.count, expiredBlobs: expired.count, jobs: rebuilt.jobsRebuilt,
                                   highestLeaseToken: highestToken)
            copied.runningJobs = running
            return copied
        }
    }
}
