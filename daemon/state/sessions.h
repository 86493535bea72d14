/* sessions.h — sessions: what a client opens so that the states and regions it makes end with it.
 *
 * A session is one identity's (its owner's), named by an id ("c" + 32 hex digits of getrandom(2))
 * that only its owner may use: another identity's id answers as an unknown one does. It ends
 * when its owner closes it, when the process that opened it has exited (a Unix caller: by the
 * pidfd the listener took at accept, capability.h), or when no call naming it came for its
 * heartbeat timeout (a session opened with one; a TCP caller's must be: it has no process here).
 * The table only keeps sessions and says which ended: the states and regions made in one record
 * its id (store.h, regions.h), and whoever ends a session releases them (job/).
 *
 * Thread-safe: one internal mutex.
 */
#ifndef QDP_STATE_SESSIONS_H
#define QDP_STATE_SESSIONS_H

#include <stdint.h>

#include "error.h"
#include "state/capability.h"

struct session_limits {
  uint32_t max_sessions;        /* open at once; 0 = unlimited */
  uint32_t max_client_sessions; /* per owner; 0 = unlimited */
  uint64_t max_heartbeat_ms;    /* the longest heartbeat timeout a session may ask for */
};

struct session_info {
  char id[SESSION_ID_LEN];
  char owner[64];
  char label[64];
  int pid;               /* the opening process in the daemon's PID namespace; 0: none (TCP) */
  uint64_t heartbeat_ms; /* ends after this long without a call naming it; 0: with its process */
  int64_t opened_unix_ms;
  int64_t seen_unix_ms; /* the last call that named it */
};

struct session_table;

qdp_status session_table_create(const struct session_limits *lim, struct session_table **ret,
                                struct qdp_error *reterr);
/* Forgets every session (nothing is released: the daemon is stopping). NULL-safe. */
void session_table_destroy(struct session_table *t);

/* Opens a session for `owner` (at most 63 B) from process pid named by pidfd (borrowed,
 * duplicated; -1: tested by pid; pid 0 and no pidfd: no process on this node) with a heartbeat
 * timeout (0: none) and a label (at most 63 B). INVALID_ARGUMENT ("heartbeat_ms") for a session
 * that could never end but by its close (no process and no heartbeat) and for a timeout above
 * max_heartbeat_ms, ("label") for a long label; RESOURCE_EXHAUSTED naming the count and the
 * limit past max_sessions or the owner's max_client_sessions; SYSTEM when getrandom fails. */
qdp_status session_open(struct session_table *t, const char *owner, int pid, int pidfd,
                        uint64_t heartbeat_ms, const char *label, int64_t now_unix_ms,
                        struct session_info *ret, struct qdp_error *reterr);

/* The open session `id` of `owner`, marked seen now (a heartbeat): *ret (may be NULL) gets its
 * record. NOT_FOUND (field `field`) for an unknown id, another owner's, or one that ended. */
qdp_status session_touch(struct session_table *t, const char *owner, const char *id,
                         const char *field, int64_t now_unix_ms, struct session_info *ret,
                         struct qdp_error *reterr);

/* Ends owner's session `id` now; *ret (may be NULL) gets its record. NOT_FOUND as touch. */
qdp_status session_close(struct session_table *t, const char *owner, const char *id,
                         struct session_info *ret, struct qdp_error *reterr);

/* Ends every session whose process has exited or whose heartbeat timeout passed as of
 * now_unix_ms, then calls ended(record, why, arg) for each, outside the lock; returns how many. */
size_t session_sweep(struct session_table *t, int64_t now_unix_ms,
                     void (*ended)(const struct session_info *s, const char *why, void *arg),
                     void *arg);

/* Sessions open now. */
uint32_t session_count(struct session_table *t);

#endif /* QDP_STATE_SESSIONS_H */
