#ifndef JOBCTL_CSQLITE_SHIM_H
#define JOBCTL_CSQLITE_SHIM_H
#include <sqlite3.h>

/// sqlite3_db_config is variadic; these are the options we use.
static inline int jobctl_sqlite3_enable_defensive(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
}

/// sqlite3_config is variadic: the size up to which a statement journal (a savepoint's undo pages)
/// stays in memory before it spills to a temporary file. Process-wide; only before sqlite3_initialize.
static inline int jobctl_sqlite3_config_statement_journal_spill(int bytes) {
    return sqlite3_config(SQLITE_CONFIG_STMTJRNL_SPILL, bytes);
}

/// sqlite3_config is variadic: whether SQLite keeps memory statistics. Kept, every allocation SQLite
/// makes takes a process-wide mutex to count itself. Process-wide; only before sqlite3_initialize.
static inline int jobctl_sqlite3_config_memory_statistics(int on) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, on);
}

/// SQLITE_STATIC: the text stays valid and unchanged until the statement is reset or rebound, so
/// SQLite uses it where it is instead of copying it.
static inline int jobctl_sqlite3_bind_text_static(sqlite3_stmt *stmt, int index, const char *text, int length) {
    return sqlite3_bind_text(stmt, index, text, length, SQLITE_STATIC);
}

static inline int jobctl_sqlite3_bind_blob_static(sqlite3_stmt *stmt, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(stmt, index, bytes, length, SQLITE_STATIC);
}

/// sqlite3_file_control(SQLITE_FCNTL_DATA_VERSION) is not needed: PRAGMA data_version is used instead.

#endif
