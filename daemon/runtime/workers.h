/* workers.h — the threads that run a mesh's shard tasks: one per device beyond the first, created
 * with the mesh and joined when it is destroyed, so that no job starts or joins a thread.
 *
 * runtime_workers_run(w, base, n, size, fn) runs fn on each of the n items of `size` bytes at base,
 * in parallel, and returns once every one has returned. Item i goes to slot i mod (workers + 1):
 * slot 0 is the calling thread (a job with one shard never leaves it), slot s > 0 worker s - 1.
 * Items must not wait for one another: a slot's items run one after the other, in order.
 *
 * Threads: create and destroy on one thread, with no run in flight; runtime_workers_run from any
 * number of threads at once (each worker takes the items queued to it in order). A run that cannot
 * allocate its queue entries runs every item on the calling thread: slower, never wrong.
 */
#ifndef QDP_RUNTIME_WORKERS_H
#define QDP_RUNTIME_WORKERS_H

#include <stddef.h>

#include "error.h"

struct runtime_workers;

/* `count` worker threads (0: none, every item runs on the caller). When a thread cannot be started
 * none is left running: RESOURCE_EXHAUSTED (out of memory or threads) or QDP_ERR_SYSTEM, with the
 * errno. */
qdp_status runtime_workers_create(size_t count, struct runtime_workers **ret,
                                  struct qdp_error *reterr);
/* Joins every worker. NULL-safe. */
void runtime_workers_destroy(struct runtime_workers *w);

void runtime_workers_run(struct runtime_workers *w, void *base, size_t n, size_t size,
                         void *(*fn)(void *));

#endif /* QDP_RUNTIME_WORKERS_H */
