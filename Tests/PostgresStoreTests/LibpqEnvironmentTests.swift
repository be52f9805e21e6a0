import Foundation
import Testing
@testable import PostgresStore

@Suite("libpq's environment variables", .onTestThreads)
struct LibpqEnvironmentTests {
    /// `jobctl config` shows the set variables of `LibpqEnvironment.variables`: one the linked libpq reads
    /// that the list lacks would move a command to another server or schema unseen, as `PGOPTIONS` did.
    @Test("every variable the linked libpq reads for a connection keyword is in the list config shows, with that keyword")
    func listCoversTheLinkedLibrary() throws {
        let linked = try #require(LibpqEnvironment.linkedLibraryVariables(), "libpq could not be loaded")
        #expect(linked.count > 20, "\(linked)")
        for (name, keyword) in linked {
            #expect(LibpqEnvironment.variables.first { $0.name == name }?.keyword == keyword, "libpq reads \(name) for \(keyword)")
        }
        #expect(LibpqEnvironment.variables.filter(\.isSecret).map(\.name) == ["PGPASSWORD"])
    }
}
