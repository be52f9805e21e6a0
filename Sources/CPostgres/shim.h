#ifndef JOBCTL_CPOSTGRES_SHIM_H
#define JOBCTL_CPOSTGRES_SHIM_H

#include <libpq-fe.h>

// Typed values for libpq's character-literal macros, which Swift does not import.
// See https://www.postgresql.org/docs/current/libpq-exec.html#LIBPQ-PQRESULTERRORFIELD

static inline int jobctl_pq_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
static inline int jobctl_pq_diag_severity(void) { return PG_DIAG_SEVERITY_NONLOCALIZED; }
static inline int jobctl_pq_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }
static inline int jobctl_pq_diag_message_detail(void) { return PG_DIAG_MESSAGE_DETAIL; }
static inline int jobctl_pq_diag_message_hint(void) { return PG_DIAG_MESSAGE_HINT; }
static inline int jobctl_pq_diag_constraint_name(void) { return PG_DIAG_CONSTRAINT_NAME; }

#endif
