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

/* Whether process pid has been gone for grace_ms as of now_unix_ms: what ends a view lease and a
 * registered region of a client that exited without closing them. Gone means kill(pid, 0) fails
 * with ESRCH (EPERM: it exists, as another user's; a zombie exists until it is reaped).
 * *gone_since_ms is the caller's record for this pid, 0 while the process exists: the first call
 * that finds it gone sets it to now_unix_ms, from which the grace counts, and a call that finds it
 * again clears it. pid 0 (no process known) is never gone. */
bool capability_pid_gone(int pid, int64_t now_unix_ms, uint64_t grace_ms, int64_t *gone_since_ms);

#endif /* QDP_STATE_CAPABILITY_H */
