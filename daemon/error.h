/* error.h — the error record every fallible daemon function fills, and the cleanup macros.
 *
 * Contract: a fallible function takes `struct qdp_error *reterr` as its last parameter; it may be
 * NULL, and it is written only on failure. Filling it never allocates (the failure being reported
 * may be out-of-memory). `msg` is one complete sentence that carries the numbers a user needs; the
 * other fields repeat them for machines (they travel as the error detail on the wire).
 * Any thread.
 */
#ifndef QDP_DAEMON_ERROR_H
#define QDP_DAEMON_ERROR_H

#include <stddef.h>
#include <stdint.h>

#include "qdp_defs.h"

struct qdp_error {
  size_t struct_size;
  qdp_status code;
  int rank, device, cause;  /* -1 if n/a; cause = cudaError_t, ncclResult_t or errno */
  uint64_t need_bytes, free_bytes;
  char field[48]; /* request field, e.g. "input.values" */
  char msg[1024];  /* one line, a complete sentence */
};

#define QDP_ERROR_INIT {sizeof(struct qdp_error), QDP_OK, -1, -1, -1, 0, 0, {0}, {0}}

/* Resets *e to QDP_ERROR_INIT. */
void qdp_error_clear(struct qdp_error *e);

/* Sets code, field (may be NULL) and the formatted message; returns `code` so a caller can write
 * `return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "qubits", "...", ...);`.
 * Leaves rank/device/cause/bytes as they were: set them with the helpers below. */
qdp_status qdp_error_set(struct qdp_error *e, qdp_status code, const char *field, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

/* As qdp_error_set, also recording where and why: device (-1 n/a), cause (errno, cudaError_t...). */
qdp_status qdp_error_set_at(struct qdp_error *e, qdp_status code, int device, int cause,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Prepends "prefix: " to an already filled message (context added by a caller), keeping the code. */
void qdp_error_prefix(struct qdp_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* QDP_TRY(rc, expr): evaluate expr (a qdp_status); on failure store it in rc and jump forward to the
 * function's single `out:` label. Never hides a return. */
#define QDP_TRY(rc, expr)    \
  do {                       \
    (rc) = (expr);           \
    if ((rc) != QDP_OK) {    \
      goto out;              \
    }                        \
  } while (0)

#endif /* QDP_DAEMON_ERROR_H */
