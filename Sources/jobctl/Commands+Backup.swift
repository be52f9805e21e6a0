import EventStore
import Foundation
import JobModel
import StorePort

extension Commands {
    static let backup = CommandSpec(
        name: "backup",
        abstract: "Copy the whole SQLite event log, consistently, into a new file while workers run.",
        arguments: [ArgumentSpec("file", completesFiles: true, help: "The new backup file (nothing may exist at that path).")],
        options: [Options.json.help("Print what was written as JSON.")],
        discussion: """
        A SQLite log is the database file and its -wal file, written at different times: a `cp` of
        them while a worker runs can miss or tear the last transactions. `jobctl backup FILE` writes every
        page of one snapshot (each commit before it, none after) into FILE as one compacted file that
        needs no -wal beside it, while workers and other commands go on. It only reads the log, and copies
        one an older jobctl wrote as it is (a backup before an upgrade: the copy is migrated when it is used).

        FILE gets the database's permission bits and group (the log holds the URLs its jobs name); it is
        written under a hidden name beside FILE, synced, read back (SQLite's quick_check and its counts)
        and only then given its name. Nothing that exists is ever replaced: a FILE that exists, or appears
        meanwhile, is refused. To restore, stop the workers and put the copy in the log's place (removing
        the old -wal and -shm files), or point --db at it; `jobctl replay --verify` checks it.

        PostgreSQL keeps its own backups: use pg_dump (or the server's base backups).
        """
    ) { arguments, context in
        if context.usesPostgres {
            throw CommandFailure("backup copies an SQLite log; the log '\(context.databaseDisplay)' is PostgreSQL: "
                                 + "back it up with pg_dump (jobctl's tables, or the whole database) or the server's base backups")
        }
        // Opened to be copied: a log at an older schema too (a backup before an upgrade), never migrated.
        let store = try EventStore(path: context.databasePath, mode: .copying)
        let written = try store.backup(to: arguments.positionals[0])
        if arguments[Options.json] {
            struct View: Encodable {
                let path: String; let size: Int64; let jobs: Int; let events: Int; let schema_version: Int
            }
            emit(try jsonText(View(path: written.path, size: written.size, jobs: written.jobs, events: written.events,
                                   schema_version: written.schemaVersion)))
        } else {
            emit(TerminalText.printable("backed up \(written.jobs) jobs and \(written.events) events (schema \(written.schemaVersion)) "
                                        + "to \(written.path): \(ByteSize.format(written.size))"))
        }
        return ExitCode.ok
    }
}
