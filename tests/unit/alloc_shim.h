/* alloc_shim.h — the allocation-failure sweep, as curl's torture mode: an operation is run again
 * and again, failing its first allocation, then its second, and so on until it succeeds with
 * nothing failed. Every run must end in success or in RESOURCE_EXHAUSTED with a message, and must
 * leave no allocation made during it live.
 *
 * The allocator is wrapped at link time (-Wl,--wrap of malloc, calloc, realloc, free,
 * posix_memalign, aligned_alloc, strdup, strndup and pthread_create; tests/unit/meson.build): the
 * daemon's libraries linked into a test call the __wrap_ functions, which count only while a run
 * is armed and fail the one call they were told to. Test code only.
 */
#ifndef QDP_TEST_ALLOC_SHIM_H
#define QDP_TEST_ALLOC_SHIM_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Counts from now, failing counted call fail_at (1-based; 0 none). */
void shim_arm(unsigned long fail_at);
/* Stops counting; returns whether the call to fail was reached. */
bool shim_disarm(void);
/* Allocations made while armed that are still live. */
size_t shim_live_count(void);

/* op runs one whole operation, cleanup included, and returns its status with *e filled on
 * failure; check (may be NULL) asserts what must hold afterwards whatever the status. The sweep
 * returns the number of counted calls the operation makes when nothing fails. */
typedef qdp_status (*op_fn)(void *arg, struct qdp_error *e);
typedef void (*check_fn)(void *arg, qdp_status rc);
unsigned long shim_sweep(const char *what, op_fn op, check_fn check, void *arg);

#endif /* QDP_TEST_ALLOC_SHIM_H */
