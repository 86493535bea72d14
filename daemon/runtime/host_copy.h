/* host_copy.h — one host-to-host copy cut over a few threads: the packing of host input that is
 * not page-locked (a mapped .npy file, a client's shared memory) into a device's pinned staging.
 * One thread's memcpy out of the page cache moves about 10 GB/s; a GPU's link takes about 55.
 *
 * Contract:
 *  - a pool of `threads` helpers copies `threads + 1` ways: the caller takes the first slice;
 *  - host_copy_rows returns once every byte is copied; one call at a time per pool (the CUDA
 *    device calls it under its staging lock), from any thread;
 *  - copies of less than HOST_COPY_MIN_SLICE per way take fewer ways (a pool of 0 threads, or a
 *    NULL pool, copies on the caller alone);
 *  - a source that faults (a mapping that shrank: io/guard.h) faults in whichever thread reads
 *    the page, as it would in the caller: the guard is process-wide.
 * No CUDA here: the module is pure POSIX threads.
 */
#ifndef QDP_RUNTIME_HOST_COPY_H
#define QDP_RUNTIME_HOST_COPY_H

#include <stdint.h>

#include "error.h"

/* Below this many bytes per way a slice costs more to hand over than to copy. */
#define HOST_COPY_MIN_SLICE (UINT64_C(1) << 20)
/* The most helper threads a pool takes. */
#define HOST_COPY_THREADS_MAX 31u

struct host_copy;

/* SYSTEM when a thread cannot be started (cause = its error); INVALID_ARGUMENT past
 * HOST_COPY_THREADS_MAX. Nothing is left behind on failure. */
qdp_status host_copy_create(unsigned threads, struct host_copy **ret_pool,
                            struct qdp_error *reterr);
/* NULL-safe; joins the helpers. No copy may be running. */
void host_copy_destroy(struct host_copy *pool);
/* Ways a copy can take: helpers + 1 (1 for NULL). */
unsigned host_copy_ways(const struct host_copy *pool);

/* nrows rows of row_bytes, src_stride apart, to dst packed (dst + r * row_bytes). */
void host_copy_rows(struct host_copy *pool, void *dst, const void *src, uint64_t src_stride,
                    uint64_t row_bytes, uint64_t nrows);

#endif /* QDP_RUNTIME_HOST_COPY_H */
