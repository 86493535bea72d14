/* What the C tests share (tests/common.c, the qdp_test library): assertions that print the status
 * a call returned, reproducible random numbers, allocation that cannot hand back NULL, and the
 * runner every main() ends with. The runtime's fixtures (meshes, plans, encodes) are in
 * common_runtime.h.
 *
 * The assertions take `err`, any struct with a msg[] (the daemon's struct qdp_error, libqdp's
 * struct qdp_errinfo); it is read only after `expr` has returned, and only when the check fails.
 */
#ifndef QDP_TESTS_COMMON_H
#define QDP_TESTS_COMMON_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "qdp_defs.h"

/* expr must return QDP_OK; a failure prints the call, the status's name and err.msg. */
#define CK_OK(expr, err) \
  do { \
    qdp_status rc_ = (expr); \
    ck_assert_msg(rc_ == QDP_OK, "%s returned %s: %s", #expr, qdp_status_name(rc_), (err).msg); \
  } while (0)

/* CK_OK with a context in front of the message, for checks in loops or on behalf of a caller:
 * CK_OK_AT(f(x, &e), e, "iter %d", i) or CK_OK_AT(rc, e, "plan_compute"). fmt is a string
 * literal. */
#define CK_OK_AT(expr, err, fmt, ...) \
  do { \
    qdp_status rc_ = (expr); \
    ck_assert_msg(rc_ == QDP_OK, fmt ": %s returned %s: %s", ##__VA_ARGS__, #expr, \
                  qdp_status_name(rc_), (err).msg); \
  } while (0)

/* An expected failure: expr must return `want`; a failure prints both statuses' names and
 * err.msg. */
#define CK_STATUS(expr, want, err) \
  do { \
    qdp_status rc_ = (expr); \
    qdp_status want_ = (want); \
    ck_assert_msg(rc_ == want_, "%s returned %s, not %s: %s", #expr, qdp_status_name(rc_), \
                  qdp_status_name(want_), (err).msg); \
  } while (0)

/* The same for libqdp's calls, whose error is the calling thread's qdp_last_error() (qdp.h). */
#define CK_QDP(expr) CK_OK(expr, *qdp_last_error())
#define CK_QDP_STATUS(expr, want) CK_STATUS(expr, want, *qdp_last_error())

/* splitmix64, one stream a process: reproducible inputs without depending on the C library's
 * rand(). The stream starts at qdpt_rng_seed's seed (0 until one is given). */
void qdpt_rng_seed(uint64_t seed);
uint64_t qdpt_rng_next(void);
double qdpt_rng_uniform(double lo, double hi); /* in [lo, hi) */

/* malloc and calloc that fail the test instead of returning NULL; 0 bytes gives a 1-byte block. */
void *qdpt_xmalloc(size_t bytes);
void *qdpt_xcalloc(size_t n, size_t size);

/* A pid that existed and no longer does: a child that exited and was reaped (the sweeps of
 * exited clients' leases and regions). Forks: not for a process with gRPC or CUDA threads. */
int qdpt_dead_pid(void);

/* Runs every test of s with fork status `fork` (CK_FORK_GETENV: as CK_FORK says; CK_NOFORK where a
 * CUDA context or a daemon connection must not be forked) and frees it; returns main's exit
 * status: 1 when any test failed, else 0. */
int qdpt_run_suite(Suite *s, enum fork_status fork);

#endif
