import Storage
import Testing
import Worker

/// Which workers make themselves undumpable: those holding any credential, a proxy's password included.
@Suite struct CoreDumpRuleTests {
    @Test func aProxyPasswordIsASecretHeld() {
        let storage = StorageConfiguration()
        #expect(!CoreDumps.holdsSecrets(storage, postgres: false, environment: [:]))
        #expect(!CoreDumps.holdsSecrets(storage, postgres: false, environment: ["https_proxy": "http://proxy:3128"]))
        #expect(CoreDumps.holdsSecrets(storage, postgres: false, environment: ["HTTPS_PROXY": "http://u:pw@proxy:3128"]))
        #expect(CoreDumps.holdsSecrets(storage, postgres: true, environment: [:]))
        var token = storage
        token.accessToken = "ya29.probe"
        #expect(CoreDumps.holdsSecrets(token, postgres: false, environment: [:]))
    }
}
