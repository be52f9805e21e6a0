#ifndef JOBCTL_CPOSTGRES_SHIM_H
#define JOBCTL_CPOSTGRES_SHIM_H

#if __has_include(<libpq-fe.h>)
#include <libpq-fe.h>
#else
#include <postgresql/libpq-fe.h>  /* Debian and Ubuntu keep it one level down */
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* libpq is loaded when the first PostgreSQL connection needs it (dlopen), not when jobctl starts:
   with its dependencies (OpenSSL, Kerberos, LDAP, …) it is a tree of shared objects whose mapping and
   relocation every command paid, and on SQLite nothing uses it. Swift calls only the `jobctl_PQ*`
   wrappers below, through the pointers `jobctl_pq_load` resolved (each loads on first use); callers
   check that `jobctl_pq_load` returned NULL before the first.

   Each list entry: return type, name, parameters, arguments. */
#define JOBCTL_PQ_FUNCTIONS(X) \
    X(PGconn *, PQconnectdbParams, (const char *const *keywords, const char *const *values, int expand), (keywords, values, expand)) \
    X(void, PQfinish, (PGconn *conn), (conn)) \
    X(PQconninfoOption *, PQconninfoParse, (const char *conninfo, char **errmsg), (conninfo, errmsg)) \
    X(void, PQconninfoFree, (PQconninfoOption *connOptions), (connOptions)) \
    X(void, PQfreemem, (void *ptr), (ptr)) \
    X(void, PQreset, (PGconn *conn), (conn)) \
    X(int, PQresetStart, (PGconn *conn), (conn)) \
    X(PostgresPollingStatusType, PQresetPoll, (PGconn *conn), (conn)) \
    X(ConnStatusType, PQstatus, (const PGconn *conn), (conn)) \
    X(PGTransactionStatusType, PQtransactionStatus, (const PGconn *conn), (conn)) \
    X(char *, PQerrorMessage, (const PGconn *conn), (conn)) \
    X(char *, PQpass, (const PGconn *conn), (conn)) \
    X(int, PQbackendPID, (const PGconn *conn), (conn)) \
    X(int, PQserverVersion, (const PGconn *conn), (conn)) \
    X(int, PQsocket, (const PGconn *conn), (conn)) \
    X(int, PQsetnonblocking, (PGconn *conn, int arg), (conn, arg)) \
    X(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn *conn, PQnoticeProcessor proc, void *arg), (conn, proc, arg)) \
    X(int, PQconsumeInput, (PGconn *conn), (conn)) \
    X(int, PQflush, (PGconn *conn), (conn)) \
    X(int, PQenterPipelineMode, (PGconn *conn), (conn)) \
    X(int, PQexitPipelineMode, (PGconn *conn), (conn)) \
    X(int, PQpipelineSync, (PGconn *conn), (conn)) \
    X(PGresult *, PQexec, (PGconn *conn, const char *query), (conn, query)) \
    X(PGresult *, PQexecParams, (PGconn *conn, const char *command, int count, const Oid *types, const char *const *values, \
                                 const int *lengths, const int *formats, int resultFormat), \
      (conn, command, count, types, values, lengths, formats, resultFormat)) \
    X(PGresult *, PQprepare, (PGconn *conn, const char *name, const char *query, int count, const Oid *types), \
      (conn, name, query, count, types)) \
    X(PGresult *, PQexecPrepared, (PGconn *conn, const char *name, int count, const char *const *values, const int *lengths, \
                                   const int *formats, int resultFormat), \
      (conn, name, count, values, lengths, formats, resultFormat)) \
    X(int, PQsendPrepare, (PGconn *conn, const char *name, const char *query, int count, const Oid *types), \
      (conn, name, query, count, types)) \
    X(int, PQsendQueryParams, (PGconn *conn, const char *command, int count, const Oid *types, const char *const *values, \
                               const int *lengths, const int *formats, int resultFormat), \
      (conn, command, count, types, values, lengths, formats, resultFormat)) \
    X(int, PQsendQueryPrepared, (PGconn *conn, const char *name, int count, const char *const *values, const int *lengths, \
                                 const int *formats, int resultFormat), \
      (conn, name, count, values, lengths, formats, resultFormat)) \
    X(PGresult *, PQgetResult, (PGconn *conn), (conn)) \
    X(void, PQclear, (PGresult *res), (res)) \
    X(ExecStatusType, PQresultStatus, (const PGresult *res), (res)) \
    X(char *, PQresStatus, (ExecStatusType status), (status)) \
    X(char *, PQresultErrorField, (const PGresult *res, int field), (res, field)) \
    X(char *, PQcmdStatus, (PGresult *res), (res)) \
    X(char *, PQcmdTuples, (PGresult *res), (res)) \
    X(int, PQntuples, (const PGresult *res), (res)) \
    X(int, PQnfields, (const PGresult *res), (res)) \
    X(char *, PQfname, (const PGresult *res, int field), (res, field)) \
    X(Oid, PQftype, (const PGresult *res, int field), (res, field)) \
    X(int, PQgetisnull, (const PGresult *res, int row, int field), (res, row, field)) \
    X(int, PQgetlength, (const PGresult *res, int row, int field), (res, row, field)) \
    X(char *, PQgetvalue, (const PGresult *res, int row, int field), (res, row, field))

struct jobctl_pq_api {
#define JOBCTL_PQ_POINTER(type, name, params, args) type (*name) params;
    JOBCTL_PQ_FUNCTIONS(JOBCTL_PQ_POINTER)
#undef JOBCTL_PQ_POINTER
    /* NULL once every pointer is set, else why libpq could not be used. */
    const char *failure;
    char failure_text[256];
};

/* The one table (a function's static: Swift's importer emits those with the function, not statics at
   file scope). */
static inline struct jobctl_pq_api *jobctl_pq_table(void) {
    static struct jobctl_pq_api table;
    return &table;
}

static inline void jobctl_pq_resolve(void *library, void **slot, const char *name, struct jobctl_pq_api *api) {
    *slot = dlsym(library, name);
    if (*slot == NULL && api->failure == NULL) {
        snprintf(api->failure_text, sizeof api->failure_text, "libpq.so.5 has no %s (libpq 14 or later is needed)", name);
        api->failure = api->failure_text;
    }
}

static inline void jobctl_pq_load_once(void) {
    struct jobctl_pq_api *api = jobctl_pq_table();
    /* RTLD_LOCAL: its symbols stay out of the global scope (nothing else links against them). */
    void *library = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(api->failure_text, sizeof api->failure_text, "%s", reason != NULL ? reason : "libpq.so.5 could not be loaded");
        api->failure = api->failure_text;
        return;
    }
#define JOBCTL_PQ_RESOLVE(type, name, params, args) jobctl_pq_resolve(library, (void **)&api->name, #name, api);
    JOBCTL_PQ_FUNCTIONS(JOBCTL_PQ_RESOLVE)
#undef JOBCTL_PQ_RESOLVE
}

/* Loads libpq once per process (any thread; later calls return at once). NULL when it is usable, else
   a sentence saying why not (the library missing, or a function missing from it). */
static inline const char *jobctl_pq_load(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, jobctl_pq_load_once);
    return jobctl_pq_table()->failure;
}

#define JOBCTL_PQ_WRAPPER(type, name, params, args) \
    static inline type jobctl_##name params { (void)jobctl_pq_load(); return jobctl_pq_table()->name args; }
JOBCTL_PQ_FUNCTIONS(JOBCTL_PQ_WRAPPER)
#undef JOBCTL_PQ_WRAPPER

// Typed values for libpq's character-literal macros, which Swift does not import.
// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQRESULTERRORFIELD

static inline int jobctl_pq_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
static inline int jobctl_pq_diag_severity(void) { return PG_DIAG_SEVERITY_NONLOCALIZED; }
static inline int jobctl_pq_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }
static inline int jobctl_pq_diag_message_detail(void) { return PG_DIAG_MESSAGE_DETAIL; }
static inline int jobctl_pq_diag_message_hint(void) { return PG_DIAG_MESSAGE_HINT; }
static inline int jobctl_pq_diag_constraint_name(void) { return PG_DIAG_CONSTRAINT_NAME; }

#endif
