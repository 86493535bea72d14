/* tickets.h — file descriptors that clients handed over, each held under a ticket until the call
 * that names it takes it.
 *
 * A client on the daemon's node opens its own file, shared memory or output file with its own
 * rights and passes the descriptor over the daemon's socket (SCM_RIGHTS); the daemon keeps it
 * here under a ticket and answers with the ticket, which the client then names in a request. So
 * the daemon never opens a node-local object on a caller's behalf: what it reads or writes is
 * exactly what the caller could itself (docs/trust-boundary.md).
 *
 * A ticket is "t" + 32 hex digits of getrandom(2), bound to the owner that handed the descriptor
 * over (the caller's identity key) and to the access it was opened for; it is taken at most once,
 * by the same owner, and lapses after ttl_ms unused. An unknown ticket, one of another owner and
 * one that lapsed give the same NOT_FOUND. Tickets are bounded in all and per owner, so handing
 * descriptors over cannot exhaust the daemon's.
 *
 * Thread-safe: one internal mutex. The table owns the descriptors it holds until taken.
 */
#ifndef QDP_STATE_TICKETS_H
#define QDP_STATE_TICKETS_H

#include <stdint.h>

#include "error.h"

#define FD_TICKET_LEN 34 /* "t" + 32 hex digits + NUL */

enum fd_access { FD_ACCESS_READ = 1, FD_ACCESS_WRITE = 2 };

struct fd_tickets;

/* max_total, max_per_owner: tickets held at once (0 = unlimited); ttl_ms: how long one waits. */
qdp_status fd_tickets_create(uint32_t max_total, uint32_t max_per_owner, uint64_t ttl_ms,
                             struct fd_tickets **ret, struct qdp_error *reterr);
/* Closes every descriptor still held. NULL-safe. */
void fd_tickets_destroy(struct fd_tickets *t);

/* Holds fd (taken in every case: closed on failure) for `owner` (at most 63 B) under a new
 * ticket written to ret_ticket (FD_TICKET_LEN bytes). RESOURCE_EXHAUSTED naming the count and the
 * limit when the owner or the table holds as many as it may; SYSTEM when getrandom fails. */
qdp_status fd_tickets_add(struct fd_tickets *t, const char *owner, int fd, enum fd_access access,
                          int64_t now_ms, char *ret_ticket, struct qdp_error *reterr);

/* Takes the descriptor of `ticket` for `owner`: *ret_fd is the caller's to close. NOT_FOUND
 * (field `field`) for an unknown, lapsed or foreign ticket; PERMISSION_DENIED when it was handed
 * over for another access (a file opened for reading named as an output, say). */
qdp_status fd_tickets_take(struct fd_tickets *t, const char *owner, const char *ticket,
                           enum fd_access access, int64_t now_ms, const char *field, int *ret_fd,
                           struct qdp_error *reterr);

/* Closes the descriptors of tickets older than ttl_ms as of now_ms; returns how many. */
uint32_t fd_tickets_expire(struct fd_tickets *t, int64_t now_ms);

/* Tickets held now. */
uint32_t fd_tickets_count(struct fd_tickets *t);

#endif /* QDP_STATE_TICKETS_H */
