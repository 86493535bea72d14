/* capability.h — what the state store and the region registry share to name things a client may
 * hold: random hex strings for handles and tokens, the constant-time token comparison, the check of
 * the texts their records keep, and the test their sweeps make of a client's process. Any
 * thread. */
#ifndef QDP_STATE_CAPABILITY_H
#define QDP_STATE_CAPABILITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define SESSION_ID_LEN 34 /* "c" + 32 hex digits + NUL (sessions.h) */

/* Writes 2 * nbytes lowercase hex digits of getrandom(2) bytes and a NUL to out; nbytes <= 32.
 * QDP_ERR_SYSTEM (cause errno) when the kernel gives no randomness. */
qdp_status capability_random_hex(char *out, size_t nbytes, struct qdp_error *reterr);

/* Whether `given` is exactly the `len` characters of `want`. The time taken depends only on the
 * given string's length (public), never on where the first differing character is. */
bool capability_equal(const char *want, const char *given, size_t len);

/* *text (NULL becomes "") as the value of `field`, kept in a record's array of cap bytes: its
 * length in *ret_len, or INVALID_ARGUMENT ("<what> of N B is too long; at most cap - 1 B"). */
qdp_status capability_text_len(const char **text, size_t cap, const char *field, const char *what,
                               size_t *ret_len, struct qdp_error *reterr);

/* A client's process as the sweeps test it (view leases, regions, sessions). By the pidfd the
 * listener took when the client connected (rpc/listener.h), which names that process and no
 * later one given its pid, and works across PID namespaces; else by pid, in the daemon's PID
 * namespace (kill(pid, 0): ESRCH is gone, EPERM exists as another user's, a zombie exists until
 * it is reaped). No pid and no pidfd: no process known, never gone. */
struct client_process {
  int pid;               /* in the daemon's PID namespace; 0: unknown */
  int pidfd;             /* owned; -1: none */
  int64_t gone_since_ms; /* when a test first found it gone; 0 while it runs */
};

/* *p for process pid (0: unknown) and a duplicate of pidfd (the caller's; -1, or 0 to 2, which
 * are the standard streams and never a pidfd: none). A pidfd that cannot be duplicated (the
 * daemon out of descriptors) leaves the test by pid. */
void client_process_init(struct client_process *p, int pid, int pidfd);
/* Closes p's pidfd. Idempotent. */
void client_process_end(struct client_process *p);
/* Whether p has been gone for grace_ms as of now_unix_ms: the first test that finds it gone
 * starts the grace, and one that finds it again (by pid: a pid that came back) clears it. A
 * pidfd's process, once gone, stays gone. */
bool client_process_gone(struct client_process *p, int64_t now_unix_ms, uint64_t grace_ms);

#endif /* QDP_STATE_CAPABILITY_H */
