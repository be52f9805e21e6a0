@testable import EventStore
import JobLifecycle
import Testing
import TestSupport

/// The projection UPDATE's text comes from a cache keyed by the set of columns it sets; it must be the
/// text the per-call builder wrote: the columns in `changingColumns` order, `col = ?` each, the id last.
@Suite(.onTestThreads)
struct UpdateStatementTests {
    @Test func everyColumnSetGivesTheBuiltText() {
        let columns = JobRecord.changingColumns
        #expect(JobRecord.ChangingColumn.allCases.map(\.name) == columns)
        var wrong: [UInt32] = []
        for set in UInt32(1)..<(UInt32(1) << UInt32(columns.count)) {
            let names = columns.indices.filter { set & (1 << UInt32($0)) != 0 }.map { columns[$0] }
            let expected = "UPDATE jobs SET " + names.map { "\($0) = ?" }.joined(separator: ", ") + " WHERE id = ?"
            // Built, then asked again (from the cache): the same text both times.
            if JobRecord.updateSQL(setting: set) != expected || JobRecord.updateSQL(setting: set) != expected { wrong.append(set) }
        }
        #expect(wrong.isEmpty, "column sets with another text: \(wrong.prefix(10))")
    }

    /// Schema 10: the claim and the end of a run set the lease expiry in the same statement, after the
    /// fold's columns, its value just before the id.
    @Test func theLeaseExpiryComesAfterTheFoldsColumns() throws {
        let claimSet = (UInt32(1) << JobRecord.ChangingColumn.state.rawValue) | (UInt32(1) << JobRecord.ChangingColumn.version.rawValue)
        #expect(JobRecord.updateSQL(setting: claimSet | JobRecord.leaseExpiryBit)
            == "UPDATE jobs SET state = ?, version = ?, lease_expires_at_ms = ? WHERE id = ?")
        #expect(JobRecord.updateSQL(setting: claimSet) == "UPDATE jobs SET state = ?, version = ? WHERE id = ?")
    }
}
