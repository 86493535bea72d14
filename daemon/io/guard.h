/* guard.h — survives an input shrinking under the daemon, in whichever process maps it (the
 * coordinator's jobs, and each rank reading its window of an input file).
 *
 * Inputs mapped from a client's shared memory or from a .npy file are read in place, and output
 * regions (FetchInto) written in place. If the object is truncated while a job reads or writes it, the kernel raises SIGBUS on the lost pages, which
 * would kill the daemon. A guarded range is registered here for the life of the job; the SIGBUS
 * handler replaces the pages of a faulting guarded range with anonymous zero pages (so the read
 * completes) and marks every job guarding it (several may read one region at once) as lost; each
 * then fails with DATA_LOSS instead of encoding zeros. A SIGBUS outside every guarded range gets
 * the default action (a core dump, as before).
 *
 * Any thread; async-signal-safe where it matters (the handler touches only atomics and mmap).
 */
#ifndef QDP_IO_GUARD_H
#define QDP_IO_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Installs the SIGBUS handler once (idempotent). QDP_ERR_SYSTEM when sigaction fails. */
qdp_status io_guard_install(struct qdp_error *reterr);

/* Guards [base, base + len) (page-aligned base, as mmap returns). Returns a slot >= 0, or -1 when
 * every slot is taken (the caller then refuses the job with RESOURCE_EXHAUSTED). */
int io_guard_add(void *base, size_t len);

/* Ends the guard of a slot from io_guard_add; true when the range faulted while guarded (its
 * content is then partly zeros and must not be used). Slot -1 is ignored (returns false). */
bool io_guard_remove(int slot);

#endif /* QDP_IO_GUARD_H */
