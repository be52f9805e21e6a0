#ifndef JOBCTL_CSQLITE_SHIM_H
#define JOBCTL_CSQLITE_SHIM_H
#include <sqlite3.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>

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

// The writer lock's (`WriterLock`, beside the database): what Swift cannot say itself.

/// An atomic read of the 32-bit word at `word` (a robust mutex's owner word, in a shared mapping).
static inline int32_t jobctl_atomic_load_int32(int32_t *word) {
    return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

/// Atomically replaces the word at `word` with `desired` if it still holds `expected`: 1 when replaced.
static inline int jobctl_atomic_compare_exchange_int32(int32_t *word, int32_t expected, int32_t desired) {
    return __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ? 1 : 0;
}

#ifndef F_OFD_SETLK
#define F_OFD_SETLK 37
#endif

/// `fcntl(fd, F_OFD_SETLK)` of `type` (`F_RDLCK`, `F_WRLCK`, `F_UNLCK`) on the file's first byte, never
/// waiting: 0, or -1 with errno (EAGAIN or EACCES: another open file description holds a lock that
/// conflicts; EINVAL where the filesystem has no such locks). The lock belongs to the open file
/// description and goes with its last descriptor, however the process ended.
/// https://man7.org/linux/man-pages/man2/fcntl.2.html ("Open file description locks")
static inline int jobctl_open_file_lock_first_byte(int fd, short type) {
    struct flock lock = {0};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = 0;
    lock.l_len = 1;
    lock.l_pid = 0;
    return fcntl(fd, F_OFD_SETLK, &lock);
}

/// Whether another process holds a POSIX (`fcntl`) lock on byte `offset` of `fd`'s file that a write
/// lock there would conflict with (`F_GETLK`, which changes nothing): 1 held, 0 not, -1 with errno.
static inline int jobctl_posix_write_lock_held(int fd, long offset) {
    struct flock lock = {0};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = offset;
    lock.l_len = 1;
    if (fcntl(fd, F_GETLK, &lock) != 0) return -1;
    return lock.l_type != F_UNLCK ? 1 : 0;
}

#endif
