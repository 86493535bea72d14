/* capability.h — what the state store and the region registry share to name things a client may
 * hold: random hex strings for handles and tokens, the constant-time token comparison, and the
 * wall clock their records carry. Any thread. */
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

int64_t capability_now_unix_ms(void);

#endif /* QDP_STATE_CAPABILITY_H */
