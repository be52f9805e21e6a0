import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A real PostgreSQL server for the tests: Debian's binaries (`/usr/lib/postgresql/VERSION/bin`, the
/// newest installed), a cluster made by `initdb` in a fresh directory under /tmp, listening only on
/// 127.0.0.1 on a free port and on a unix socket inside that directory.
///
/// Started once per test process, on first use (`PostgresServer.shared()`), and shared. A supervising
/// shell stops the server and removes the directory when the test process exits — also when it
/// crashes or is killed. Each test makes its own database (`makeDatabase()`) or, much faster, its own
/// schema (`makeSchema()`).
///
/// `initdb` refuses to run as root (CI runs the tests as root), so as root the cluster belongs to the
/// unprivileged `postgres` user the Debian package creates, and every server program runs through
/// `setpriv` as that user; as any other user, as that user. The cluster is made with `initdb --no-sync` (nothing is lost by not syncing a
/// throw-away cluster's initial files, and it saves seconds); the server itself runs with `fsync=on`,
/// as production does.
public final class PostgresServer: Sendable {
    /// The superuser every test database belongs to.
    public let user = "jobctl_test"
    /// Its password (random per server); tests prove it never appears in an error.
    public let password: String
    public let port: Int
    /// The cluster's directory (data, socket, log); removed at exit.
    public let directory: String
    /// The directory holding `initdb`, `postgres`, `psql`.
    public let binaries: String
    private let socketDirectory: String
    private let runAs: [String]
    /// Whether `stop()` and `start()` work: the server runs under `pg_ctl` (private servers only).
    private let controllable: Bool
    /// The supervising shell of this server.
    private let supervisorBox = SupervisorPID()
    private var supervisorPID: Int32? { supervisorBox.get() }
    /// The supervising shell's pid (a child of this process), for a test that checks it is reaped.
    public var supervisorProcessID: pid_t? { supervisorPID }

    /// The server of this test process, started on first call. Throws (every time) when it cannot start.
    public static func shared() throws -> PostgresServer {
        try sharedServer.get()
    }

    private static let sharedServer: Result<PostgresServer, TestServerError> = Result { () throws(TestServerError) in
        try PostgresServer(controllable: false)
    }

    /// A server of the caller's own, for a test that stops and starts it (`stop()`, `start()`) while
    /// other tests use the shared one. Started under `pg_ctl`, so stopping it leaves the cluster in
    /// place; the supervisor stops it and removes the directory when the test process exits. Call
    /// `shutDown()` when done to free it sooner.
    public static func makePrivate() throws -> PostgresServer {
        try PostgresServer(controllable: true)
    }

    /// Stops a private server (`pg_ctl stop -m fast`: open sessions are terminated, their transactions
    /// rolled back) and waits until it is down. Clients see their connections fail until `start()`.
    public func stop() throws {
        guard controllable else { throw TestServerError("only a private server (makePrivate) can be stopped") }
        try pgctl(["stop", "-m", "fast", "-w", "-t", "30"])
    }

    /// Starts a private server stopped by `stop()` again, on the same port, and waits until it accepts
    /// connections.
    public func start() throws {
        guard controllable else { throw TestServerError("only a private server (makePrivate) can be started") }
        try pgctl(["start", "-w", "-t", "30", "-l", "\(directory)/server.log", "-o", serverOptions.joined(separator: " ")])
    }

    /// Stops a private server for good and removes its directory (the supervisor's exit path).
    public func shutDown() {
        guard controllable else { return }
        _ = try? pgctl(["stop", "-m", "immediate", "-w", "-t", "30"])
        if let pid = supervisorPID { Self.stopAndReap(pid) }
    }

    /// Sends SIGTERM to a supervisor (if it still runs) and reaps it — SIGKILL after `seconds` — so that
    /// it does not stay behind as a zombie. A zombie child costs the test process more than a slot:
    /// Swift Testing's exit-test monitor, once started, waits for any child (`waitid(P_ALL, WNOWAIT)`)
    /// and loops at once on one it did not start, so each zombie kept a core busy for the rest of the
    /// run and held up the exit tests behind it.
    private static func stopAndReap(_ pid: pid_t, seconds: Double = 60) {
        signalChildIfRunning(pid, SIGTERM)
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let reaped = waitpid(pid, nil, WNOHANG)
            if reaped == pid || (reaped == -1 && errno != EINTR) { return }
            if Date() > deadline {
                kill(pid, SIGKILL)
                while waitpid(pid, nil, 0) == -1 && errno == EINTR {}
                return
            }
            usleep(20_000)
        }
    }

    /// Runs `pg_ctl ARGS -D data` as the cluster's owner with clean signals and closed descriptors (the
    /// server it starts outlives the call and must not hold the test process's pipes).
    private func pgctl(_ arguments: [String]) throws {
        let command = (runAs + ["\(binaries)/pg_ctl", "-D", "\(directory)/data", "-s"] + arguments).map(Self.shellQuoted).joined(separator: " ")
        let script = """
            for fd in /proc/$$/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi; done
            \(command) >>\(Self.shellQuoted(directory))/pg_ctl.log 2>&1
            """
        let pid = try Self.spawnWithCleanSignals(["/bin/bash", "-c", script])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        // WIFEXITED && WEXITSTATUS == 0
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            let log = (try? String(contentsOfFile: "\(directory)/pg_ctl.log", encoding: .utf8)) ?? ""
            throw TestServerError("pg_ctl \(arguments.first ?? "") failed (status \(status)): \(log.suffix(2000))")
        }
    }

    /// `postgres://USER:PASSWORD@127.0.0.1:PORT/DATABASE?sslmode=disable`; `password` nil leaves it out.
    public func url(database: String, password: String? = nil, user: String? = nil) -> String {
        let credentials = (user ?? self.user) + (password.map { ":\($0)" } ?? "")
        return "postgres://\(credentials)@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    /// Creates a fresh, empty database with a unique name and returns its URL (with the password).
    ///
    /// With fsync on, `CREATE DATABASE` copies and syncs the template's ~7 MB: 0.3–0.6 s on a busy
    /// 2-core machine. Tests that need no more than their own tables use `makeSchema` (a few ms).
    public func makeDatabase(_ label: String = "test") throws -> String {
        let name = Self.uniqueName(label)
        try psql(database: "postgres", "CREATE DATABASE \(name)")
        return url(database: name, password: password)
    }

    /// Creates a fresh, empty schema with a unique name in the shared `postgres` database and returns
    /// a URL whose connections use it (`options=-c search_path=NAME`): every unqualified table,
    /// sequence and function a test creates or reads is its own. Database-wide things (advisory locks,
    /// `pg_stat_activity`) are shared with other tests; jobctl's own advisory locks are each schema's (`AdvisoryLockSpace`).
    public func makeSchema(_ label: String = "test") throws -> String {
        let name = Self.uniqueName(label)
        try psql(database: "postgres", "CREATE SCHEMA \(name)")
        return url(database: "postgres", password: password) + "&options=-c%20search_path%3D\(name)"
    }

    /// An owner role and a worker role, each a login role with its own password, and a schema the
    /// owner owns in the shared `postgres` database; as an operator sets up PostgreSQL for jobctl when
    /// the workers must not own the tables.
    public struct RoleSetup: Sendable {
        /// The role that owns the schema (and so every table `jobctl migrate` creates in it).
        public let owner: String
        /// The role workers and the CLI use; it has no privilege until the owner grants it some.
        public let worker: String
        /// The schema both roles' URLs use.
        public let schema: String
        /// The owner's URL (with its password) into the schema.
        public let ownerURL: String
        /// The worker role's URL (with its password) into the schema.
        public let workerURL: String
        /// The worker role's password; tests prove it never appears in an output.
        public let workerPassword: String
    }

    /// Creates two fresh login roles (`NAME_owner`, `NAME_worker`) and a schema owned by the first.
    /// Roles are cluster-wide, so each name has its own random suffix.
    public func makeRoles(_ label: String = "roles") throws -> RoleSetup {
        let base = Self.uniqueName(label)
        let owner = "\(base)_owner", worker = "\(base)_worker"
        let ownerPassword = "owner-" + UUID().uuidString.lowercased()
        let workerPassword = "worker-" + UUID().uuidString.lowercased()
        try psql(database: "postgres", """
            CREATE ROLE \(owner) LOGIN PASSWORD '\(ownerPassword)';
            CREATE ROLE \(worker) LOGIN PASSWORD '\(workerPassword)';
            CREATE SCHEMA \(base) AUTHORIZATION \(owner)
            """)
        let path = "&options=-c%20search_path%3D\(base)"
        return RoleSetup(owner: owner, worker: worker, schema: base,
                         ownerURL: url(database: "postgres", password: ownerPassword, user: owner) + path,
                         workerURL: url(database: "postgres", password: workerPassword, user: worker) + path,
                         workerPassword: workerPassword)
    }

    /// Runs `sql` with `psql` over the unix socket as `user` (no password: the socket trusts local
    /// users), with `schema` first on the search path; returns the exit status, output and error (with
    /// the SQLSTATE: `ERROR:  42501: …`).
    public func psql(database: String, user: String, schema: String, _ sql: String) throws -> ProcessOutput {
        try runProcess("\(binaries)/psql",
                       ["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-h", socketDirectory,
                        "-p", "\(port)", "-U", user, "-d", database, "-c", "SET search_path TO \(schema); \(sql)"])
    }

    /// `label` reduced to lower-case letters and digits, then a random suffix: a valid unquoted identifier.
    private static func uniqueName(_ label: String) -> String {
        let safe = String(label.lowercased().filter { $0.isASCII && ($0.isLetter || $0.isNumber) }.prefix(30))
        let suffix = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        return "\(safe.first?.isLetter == true ? safe : "t" + safe)_\(suffix)"
    }

    /// Starts a session (its own `psql`) that takes an ACCESS EXCLUSIVE lock on `table` (`schema.name`)
    /// and holds it `seconds`, and returns once the server shows the lock granted; the caller stops the
    /// process (or lets the time run out). Whatever needs the table meanwhile waits on the lock.
    public func holdingLock(on table: String, seconds: Int) throws -> Process {
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "\(binaries)/psql")
        holder.arguments = ["-X", "-q", "-h", "127.0.0.1", "-p", "\(port)", "-U", user, "-d", "postgres", "-c",
                            "BEGIN; LOCK TABLE \(table) IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(\(seconds)); COMMIT;"]
        holder.environment = ["PGPASSWORD": password, "PATH": "/usr/bin:/bin"]
        holder.standardOutput = FileHandle.nullDevice
        try holder.run()
        let (schema, name) = table.split(separator: ".").map(String.init).splitLast
        for _ in 0..<100 {
            let granted = try psql(database: "postgres", "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                                       + "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = '\(name)' "
                                       + (schema.map { "AND n.nspname = '\($0)' " } ?? "")
                                       + "AND l.mode = 'AccessExclusiveLock' AND l.granted")
            if granted == "1" { return holder }
            usleep(50_000)
        }
        holder.signalTree(SIGKILL)
        _ = holder.waitForExit(seconds: 10)
        throw TestServerError("the lock on \(table) was never granted")
    }

    /// Runs `sql` with `psql` over the unix socket as the superuser; returns its unaligned output.
    @discardableResult
    public func psql(database: String, _ sql: String) throws -> String {
        let output = try runProcess("\(binaries)/psql",
                                    ["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", socketDirectory, "-p", "\(port)",
                                     "-U", user, "-d", database, "-c", sql])
        guard output.status == 0 else {
            throw TestServerError("psql failed (\(output.status)) running `\(sql)`: \(output.stderr)")
        }
        return output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private init(controllable: Bool) throws(TestServerError) {
        self.controllable = controllable
        do {
            binaries = try Self.findBinaries()
            password = "pw-" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            port = freeLoopbackPort()
            // Under /tmp whatever TMPDIR says: the postgres user must be able to reach it, and the socket
            // path inside it must stay within the 107 bytes a unix socket address holds.
            var template = Array("/tmp/jobctl-pg-XXXXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else {
                throw TestServerError("cannot create a directory under /tmp: \(String(cString: strerror(errno)))")
            }
            directory = String(cString: made)
            chmod(directory, 0o755)
            socketDirectory = "\(directory)/socket"
            try FileManager.default.createDirectory(atPath: socketDirectory, withIntermediateDirectories: true)
            try Data("\(password)\n".utf8).write(to: URL(fileURLWithPath: "\(directory)/pwfile"))

            if getuid() == 0 {
                guard let account = getpwnam("postgres") else {
                    throw TestServerError("the tests run as root and initdb refuses root, but there is no `postgres` user "
                                          + "to run PostgreSQL as: install Debian's postgresql package (make test-deps)")
                }
                for path in [directory, socketDirectory, "\(directory)/pwfile"] {
                    guard chown(path, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
                        throw TestServerError("cannot hand \(path) to the postgres user: \(String(cString: strerror(errno)))")
                    }
                }
                runAs = ["/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
            } else {
                runAs = []
            }

            // Only this cluster's socket in there; not for other users.
            chmod(socketDirectory, 0o700)
            try boot()
        } catch let error as TestServerError {
            throw error
        } catch {
            throw TestServerError("cannot start PostgreSQL for the tests: \(error)")
        }
    }

    /// The newest `/usr/lib/postgresql/VERSION/bin` with `initdb`, or `JOBCTL_TEST_PG_BIN`.
    private static func findBinaries() throws -> String {
        if let explicit = ProcessInfo.processInfo.environment["JOBCTL_TEST_PG_BIN"] { return explicit }
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap { Int($0) }
            .filter { FileManager.default.isExecutableFile(atPath: "\(root)/\($0)/bin/initdb") }
            .sorted()
        guard let newest = versions.last else {
            throw TestServerError("no PostgreSQL server binaries under \(root)/*/bin: install Debian's postgresql package "
                                  + "(`make test-deps` does)")
        }
        return "\(root)/\(newest)/bin"
    }

    /// Makes the cluster and starts `postgres` under a supervising shell, which stops the server
    /// (immediate shutdown), waits for it and removes the directory once this test process is gone —
    /// also when it is killed while `initdb` still runs.
    private func boot() throws {
        let quoted = { (words: [String]) in words.map(Self.shellQuoted).joined(separator: " ") }
        let initdb = quoted(runAs + ["\(binaries)/initdb", "-D", "\(directory)/data", "-U", user,
                                     "--pwfile=\(directory)/pwfile",
                                     // Password checks over TCP (the URLs the tests use); trust for psql over
                                     // the socket, which only the cluster's owner and root can reach.
                                     "--auth-host=scram-sha-256", "--auth-local=trust",
                                     "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
        let dir = Self.shellQuoted(directory)
        // The shared server runs as the supervisor's child; a private one under pg_ctl, so that it can
        // be stopped and started again without the supervisor taking that for the end.
        let pgctl = quoted(runAs + ["\(binaries)/pg_ctl", "-D", "\(directory)/data", "-s"])
        let launch = controllable
            ? "\(pgctl) start -w -t 30 -l \(dir)/server.log -o \(Self.shellQuoted(serverOptions.joined(separator: " "))) >>\(dir)/pg_ctl.log 2>&1"
            : quoted(runAs + ["\(binaries)/postgres", "-D", "\(directory)/data"] + serverOptions) + " >>\(dir)/server.log 2>&1 &\n    server=$!"
        let shutdown = controllable ? "\(pgctl) stop -m immediate -w -t 30 >/dev/null 2>&1" : ":"
        let script = """
            # Close whatever this process inherited beyond 0-2 (pipes of other tests' child processes),
            # so their readers see end-of-file when their writers end.
            for fd in /proc/$$/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi; done
            server=
            stop() {
                if [ -n "$server" ]; then kill -QUIT "$server" 2>/dev/null; wait "$server"; fi
                \(shutdown)
                rm -rf \(dir); exit 0
            }
            trap stop TERM INT HUP
            # A killed test process stays a zombie until its parent reaps it, and `kill -0` counts zombies as alive.
            alive() { state=$(sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' /proc/$1/status 2>/dev/null); [ -n "$state" ] && [ "$state" != Z ]; }
            if \(initdb) >\(dir)/initdb.log 2>&1; then
                rm -f \(dir)/pwfile
                \(launch)
            else
                touch \(dir)/initdb.failed
            fi
            while alive \(getpid()) && { [ -z "$server" ] || alive "$server"; }; do sleep 1 & wait $!; done
            stop
            """
        let supervisor = try Self.spawnWithCleanSignals(["/bin/bash", "-c", script])
        supervisorBox.set(supervisor)
        if controllable { Self.registerPrivateStopAtExit(supervisor) } else { Self.registerStopAtExit(supervisor) }
        let supervisorRunning = { kill(supervisor, 0) == 0 && waitpid(supervisor, nil, WNOHANG) == 0 }

        // postmaster.pid's eighth line becomes "ready" once the server accepts connections.
        let deadline = Date().addingTimeInterval(30)
        while true {
            let pidFile = (try? String(contentsOfFile: "\(directory)/data/postmaster.pid", encoding: .utf8)) ?? ""
            if pidFile.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }).contains("ready") { return }
            if FileManager.default.fileExists(atPath: "\(directory)/initdb.failed") {
                let log = (try? String(contentsOfFile: "\(directory)/initdb.log", encoding: .utf8)) ?? ""
                Self.stopAndReap(supervisor)
                throw TestServerError("initdb failed: \(log.suffix(2000))")
            }
            if !supervisorRunning() || Date() > deadline {
                let log = (try? String(contentsOfFile: "\(directory)/server.log", encoding: .utf8)) ?? ""
                Self.stopAndReap(supervisor)
                throw TestServerError("PostgreSQL did not start on 127.0.0.1:\(port): \(log.suffix(2000))")
            }
            usleep(20_000)
        }
    }

    /// Starts `arguments` with no signal blocked and every signal at its default action, in its own
    /// process group, with /dev/null for standard input and output, and returns its pid.
    ///
    /// The test process's threads block most signals, and a child started with `Process` inherits that
    /// mask: a shell with SIGCHLD and SIGTERM blocked would never notice its `sleep` end nor its trap
    /// fire. And a child holding the test process's output pipes would keep `swift test` reading them,
    /// so it would never reap a crashed test process — which the supervisor waits for. (Other
    /// descriptors it inherits, the supervisor script closes first thing.)
    private static func spawnWithCleanSignals(_ arguments: [String]) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let cStrings = arguments.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var argv = cStrings + [nil]
        var pid: pid_t = 0
        let status = posix_spawn(&pid, arguments[0], &actions, &attributes, &argv, environ)
        guard status == 0 else {
            throw TestServerError("cannot start \(arguments[0]): \(String(cString: strerror(status)))")
        }
        return pid
    }

    /// Tells the supervisor to stop the server when this process exits normally; the supervisor's own
    /// watch covers crashes.
    private static func registerStopAtExit(_ pid: Int32) {
        supervisor.set(pid)
        atexit {
            if let pid = PostgresServer.supervisor.get() { signalChildIfRunning(pid, SIGTERM) }
        }
    }

    private static let supervisor = SupervisorPID()

    /// Private servers' supervisors, told to stop their servers when this process exits normally.
    private static let privateSupervisors = SupervisorPIDs()

    private static func registerPrivateStopAtExit(_ pid: Int32) {
        if privateSupervisors.add(pid) {
            atexit {
                for pid in PostgresServer.privateSupervisors.all() { signalChildIfRunning(pid, SIGTERM) }
            }
        }
    }

    /// Pids of private servers' supervisors.
    private final class SupervisorPIDs: @unchecked Sendable {
        // @unchecked: `pids` is only touched under `lock`.
        private let lock = NSLock()
        private var pids: [Int32] = []
        /// Adds `pid`; true the first time anything is added (register the exit handler once).
        func add(_ pid: Int32) -> Bool { lock.withLock { pids.append(pid); return pids.count == 1 } }
        func all() -> [Int32] { lock.withLock { pids } }
    }

    /// The server's settings (`-c name=value`), the same for every start.
    private var serverOptions: [String] {
        ["-c", "listen_addresses=127.0.0.1", "-c", "port=\(port)", "-c", "unix_socket_directories=\(socketDirectory)",
         "-c", "fsync=on", "-c", "max_connections=100", "-c", "shared_buffers=32MB",
         "-c", "logging_collector=off", "-c", "log_min_messages=warning"]
    }

    /// The supervising shell's pid, set once when the server starts, read at exit.
    private final class SupervisorPID: @unchecked Sendable {
        // @unchecked: `pid` is only touched under `lock`.
        private let lock = NSLock()
        private var pid: Int32?
        func set(_ value: Int32) { lock.withLock { pid = value } }
        func get() -> Int32? { lock.withLock { pid } }
    }

    private static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}

private extension Array where Element == String {
    /// A qualified name's schema (nil without one) and last part.
    var splitLast: (String?, String) { (count > 1 ? self[count - 2] : nil, last ?? "") }
}
