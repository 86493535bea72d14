/* map.h — read-only mappings of inputs on the daemon's node: a client's POSIX shared memory (by
 * name, or by pid + fd through /proc) and, through npy.h, .npy files. Pure POSIX; no gRPC.
 *
 * Contract:
 *  - Every function may be called from any thread; a mapping belongs to its caller, who gives it
 *    back with io_unmap (NULL-safe, and safe on a zeroed or already unmapped mapping).
 *  - Every file descriptor is opened with O_CLOEXEC and closed before the function returns: the
 *    mapping alone keeps the object alive.
 *  - Only regular files (which includes POSIX shm objects and memfds) are mapped; a pipe, socket
 *    or device reached through /proc/<pid>/fd is refused before it is read.
 *  - Statuses: INVALID_ARGUMENT (a malformed name, path or length), NOT_FOUND (no such name, file,
 *    process or fd), PERMISSION_DENIED, OUT_OF_RANGE (offset + length past the region's end),
 *    SYSTEM (any other failed system call; cause = errno). Messages quote user input in single
 *    quotes and carry the sizes.
 *  - A mapping reads the client's memory in place. If the client shrinks the object afterwards,
 *    reading the lost pages raises SIGBUS; `sealed` says the object cannot shrink (a memfd with
 *    F_SEAL_SHRINK), otherwise callers copy out promptly and may prefer to trust only sealed input.
 *  - Opening /proc/<pid>/fd/<fd> succeeds whenever the daemon may ptrace that process: the caller
 *    must first check that `pid` is the peer it is talking to (SO_PEERCRED).
 */
#ifndef QDP_IO_MAP_H
#define QDP_IO_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct io_mapping {
  const void *data; /* the first byte asked for */
  uint64_t bytes;   /* bytes readable at data */
  int sealed;       /* 1: the object can no longer shrink (F_SEAL_SHRINK) */
  /* private: */
  void *base;
  size_t map_len;
};

#define IO_MAPPING_INIT \
  { NULL, 0, 0, NULL, 0 }

/* OK when `path` is absolute, not empty and shorter than PATH_MAX; INVALID_ARGUMENT naming
 * `field` otherwise. Server-side files are always named absolutely: the daemon's working
 * directory is nobody's business. */
qdp_status io_check_path(const char *path, const char *field, struct qdp_error *reterr);

/* Maps `length` bytes at `offset` of a shared-memory region, read-only. The region is named by
 * `name` (shm_open, "/name", no other '/') when it is non-empty, else by pid > 0 and fd >= 0
 * (/proc/<pid>/fd/<fd>). length 0 is refused; offset + length is checked against the object's
 * size without overflow. The mapping starts at offset rounded down to the page size. */
qdp_status io_map_shm(const char *name, int pid, int fd, uint64_t offset, uint64_t length,
                      struct io_mapping *ret, struct qdp_error *reterr);

/* The whole object, named as for io_map_shm, for registering a region once; an empty object is
 * INVALID_ARGUMENT. */
qdp_status io_map_shm_whole(const char *name, int pid, int fd, struct io_mapping *ret,
                            struct qdp_error *reterr);

/* Unmaps and zeroes *m. NULL-safe. */
void io_unmap(struct io_mapping *m);

#endif /* QDP_IO_MAP_H */
