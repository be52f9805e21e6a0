import CPostgres
import Foundation
import JobModel

/// The environment variables libpq reads itself, for whatever a connection target leaves out, as
/// `jobctl config` shows them. Nothing of jobctl reads them: libpq does, in every command on PostgreSQL,
/// and one of them can move a command to another log without a word — `PGOPTIONS='-c search_path=team_b'`
/// with a URL that sets no `options` made `submit` create an empty log in schema team_b and put the job
/// there, where no worker looked (the URL's own parameters win over these: `conninfo_add_defaults` fills
/// only what the target left unset).
///
/// See https://www.postgresql.org/docs/current/libpq-envars.html
public enum LibpqEnvironment {
    /// One variable and the connection keyword it stands for (nil: a session setting libpq sends, or
    /// where it looks for files).
    public struct Variable: Sendable, Equatable {
        public let name: String
        public let keyword: String?
        /// Shown as `REDACTED`.
        public let isSecret: Bool

        init(_ name: String, _ keyword: String?, secret: Bool = false) {
            self.name = name
            self.keyword = keyword
            self.isSecret = secret
        }
    }

    /// Every variable libpq's documentation lists (PostgreSQL 18), in its order; a libpq that predates one
    /// does not read it, and showing it then only says it is set.
    public static let variables: [Variable] = [
        Variable("PGHOST", "host"), Variable("PGHOSTADDR", "hostaddr"), Variable("PGPORT", "port"),
        Variable("PGDATABASE", "dbname"), Variable("PGUSER", "user"), Variable("PGPASSWORD", "password", secret: true),
        Variable("PGPASSFILE", "passfile"), Variable("PGREQUIREAUTH", "require_auth"),
        Variable("PGCHANNELBINDING", "channel_binding"), Variable("PGSERVICE", "service"),
        Variable("PGSERVICEFILE", "servicefile"), Variable("PGOPTIONS", "options"), Variable("PGAPPNAME", "application_name"),
        Variable("PGSSLMODE", "sslmode"), Variable("PGREQUIRESSL", "requiressl"), Variable("PGSSLNEGOTIATION", "sslnegotiation"),
        Variable("PGSSLCOMPRESSION", "sslcompression"), Variable("PGSSLCERT", "sslcert"), Variable("PGSSLKEY", "sslkey"),
        Variable("PGSSLCERTMODE", "sslcertmode"), Variable("PGSSLROOTCERT", "sslrootcert"), Variable("PGSSLCRL", "sslcrl"),
        Variable("PGSSLCRLDIR", "sslcrldir"), Variable("PGSSLSNI", "sslsni"), Variable("PGREQUIREPEER", "requirepeer"),
        Variable("PGSSLMINPROTOCOLVERSION", "ssl_min_protocol_version"),
        Variable("PGSSLMAXPROTOCOLVERSION", "ssl_max_protocol_version"),
        Variable("PGMINPROTOCOLVERSION", "min_protocol_version"), Variable("PGMAXPROTOCOLVERSION", "max_protocol_version"),
        Variable("PGGSSENCMODE", "gssencmode"), Variable("PGKRBSRVNAME", "krbsrvname"), Variable("PGGSSLIB", "gsslib"),
        Variable("PGGSSDELEGATION", "gssdelegation"), Variable("PGCONNECT_TIMEOUT", "connect_timeout"),
        Variable("PGCLIENTENCODING", "client_encoding"), Variable("PGTARGETSESSIONATTRS", "target_session_attrs"),
        Variable("PGLOADBALANCEHOSTS", "load_balance_hosts"),
        Variable("PGDATESTYLE", nil), Variable("PGTZ", nil), Variable("PGGEQO", nil), Variable("PGSYSCONFDIR", nil),
    ]

    /// The keywords `PostgresConnection` always gives libpq itself, so their variables are never read:
    /// `connect_timeout` (which the URL may still set) and `client_encoding` (UTF8, whatever is asked).
    static let setByJobctl: [String: String] = [
        "connect_timeout": "jobctl sets connect_timeout itself (the URL may set it)",
        "client_encoding": "jobctl's sessions are always UTF8",
    ]

    /// One set variable as `jobctl config` shows it.
    public struct Shown: Sendable, Equatable {
        public let name: String
        /// Its value, or `REDACTED` for a secret.
        public let value: String
        /// What it does with `target` as the database: used, and as what; or not used, and why.
        public let effect: String
    }

    /// The variables of `environment` that are set (not empty), each with what it does when `target` (the
    /// database of the command, nil or an SQLite path: none) is opened.
    public static func shown(_ environment: [String: String], target: String?) -> [Shown] {
        let postgres = target.map(isPostgresURL) ?? false
        let keywordsOfTarget = postgres ? target.flatMap(keywordsSet) : nil
        return variables.compactMap { variable in
            guard let value = environment[variable.name], !value.isEmpty else { return nil }
            return Shown(name: variable.name, value: variable.isSecret ? "REDACTED" : value,
                         effect: effect(of: variable, postgres: postgres, keywordsOfTarget: keywordsOfTarget))
        }
    }

    /// What `variable` does: read by libpq as its keyword unless the URL (or jobctl) sets it.
    static func effect(of variable: Variable, postgres: Bool, keywordsOfTarget: Set<String>?) -> String {
        guard let keyword = variable.keyword else {
            return variable.name == "PGSYSCONFDIR" ? "where libpq looks for pg_service.conf" : "a session setting libpq sends the server"
        }
        guard postgres else { return "libpq's \(keyword) for a PostgreSQL database; not read here (the log is SQLite)" }
        if let reason = setByJobctl[keyword] { return "not used: \(reason)" }
        if keywordsOfTarget?.contains(keyword) == true { return "not used: the URL sets \(keyword)" }
        let unless = keywordsOfTarget == nil ? "unless the URL sets it" : "as the URL does not set it"
        let schema = keyword == "options" ? " — a search_path there chooses the schema of the log" : ""
        return "libpq's \(keyword), \(unless)\(schema)"
    }

    /// The keywords `target` gives a value (libpq's own parse of it), or nil when libpq cannot say (not
    /// loaded, or the target is one it cannot read, which the worker's start check names).
    static func keywordsSet(by target: String) -> Set<String>? {
        var keywords = Set<String>()
        guard parsedOptions(normalizedDatabaseURL(target), { keyword, option in
            if option.val != nil { keywords.insert(keyword) }
        }) else { return nil }
        return keywords
    }

    /// The variables the loaded libpq reads for its keywords (each option's `envvar`), with the keyword,
    /// or nil when it cannot be loaded: `variables` must hold every one of them.
    static func linkedLibraryVariables() -> [(name: String, keyword: String)]? {
        var found: [(name: String, keyword: String)] = []
        guard parsedOptions("", { keyword, option in
            if let variable = option.envvar { found.append((String(cString: variable), keyword)) }
        }) else { return nil }
        return found
    }

    /// Calls `body` with each option of libpq's parse of `conninfo` (`PQconninfoParse`: every keyword it
    /// knows, with the value `conninfo` gives it, and its variable); false when libpq cannot be loaded or
    /// cannot read `conninfo`.
    private static func parsedOptions(_ conninfo: String, _ body: (String, PQconninfoOption) -> Void) -> Bool {
        guard jobctl_pq_load() == nil else { return false }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = jobctl_PQconninfoParse(conninfo, &error) else {
            if let error { jobctl_PQfreemem(error) }
            return false
        }
        defer { jobctl_PQconninfoFree(options) }
        var option = options
        while let keyword = option.pointee.keyword {
            body(String(cString: keyword), option.pointee)
            option += 1
        }
        return true
    }
}
