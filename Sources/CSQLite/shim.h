#ifndef JOBCTL_CSQLITE_SHIM_H
#define JOBCTL_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a destructor pointer, which Swift cannot import.
static inline int jobctl_sqlite3_bind_text_transient(sqlite3_stmt *stmt, int index, const char *text, int length) {
    return sqlite3_bind_text(stmt, index, text, length, SQLITE_TRANSIENT);
}

static inline int jobctl_sqlite3_bind_blob_transient(sqlite3_stmt *stmt, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(stmt, index, bytes, length, SQLITE_TRANSIENT);
}

/// sqlite3_db_config is variadic; these are the options we use.
static inline int jobctl_sqlite3_enable_defensive(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
}

/// sqlite3_config is variadic: the size up to which a statement journal (a savepoint's undo pages)
/// stays in memory before it spills to a temporary file. Process-wide; only before sqlite3_initialize.
static inline int jobctl_sqlite3_config_statement_journal_spill(int bytes) {
    return sqlite3_config(SQLITE_CONFIG_STMTJRNL_SPILL, bytes);
}

/// sqlite3_file_control(SQLITE_FCNTL_DATA_VERSION) is not needed: PRAGMA data_version is used instead.

#endif
