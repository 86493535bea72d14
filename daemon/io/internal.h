/* internal.h — helpers shared by map.c and npy.c; not for use outside daemon/io/. */
#ifndef QDP_IO_INTERNAL_H
#define QDP_IO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "error.h"
#include "io/map.h"

/* Enough for a quoted path in a 1024-byte message with room for the sentence around it. */
#define IO_QUOTE_CAP 512

/* Copies user text for quoting in a message: at most cap - 1 bytes ("..." marks a cut), control
 * characters and single quotes replaced by '?', so a message stays one line whose quotes match. */
void io_quote(char *dst, size_t cap, const char *src);

/* Maps [offset, offset + length) of the regular file open on fd, read-only or (writable) read
 * and write MAP_SHARED; on success the mapping holds fd (not closed on failure). The caller has
 * checked the bounds. errno-style failures are SYSTEM with `what` (already quoted) leading. */
qdp_status io_map_range(int fd, uint64_t offset, uint64_t length, bool writable, const char *what,
                        struct io_mapping *ret, struct qdp_error *reterr);

/* fstat(2) of fd into *ret; a failure is SYSTEM with `what` (already quoted) leading. */
qdp_status io_fstat(int fd, const char *what, struct stat *ret, struct qdp_error *reterr);

/* The status for a failed open(2) of `what` (already quoted): NOT_FOUND, PERMISSION_DENIED or
 * SYSTEM, cause = err. */
qdp_status io_open_error(int err, const char *what, const char *field, struct qdp_error *reterr);

/* 16 lowercase hex digits of getrandom(2) and a NUL into out (17 bytes): names of temporary
 * files. SYSTEM when the kernel gives no randomness. */
qdp_status io_random_hex(char *out, struct qdp_error *reterr);

/* io_folder_open_file for `rel`, already relative to the folder; `what` (quoted) leads the
 * messages. */
qdp_status io_folder_open_rel(const struct io_folder *f, const char *rel, int flags,
                              const char *field, const char *what, int *ret_fd,
                              struct qdp_error *reterr);

#endif /* QDP_IO_INTERNAL_H */
