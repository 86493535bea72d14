/* npy.h — NumPy .npy files on the daemon's node: parse one held in memory, write a header, map a
 * file for reading, write a file atomically from a reader callback. Pure POSIX; no gRPC.
 *
 * Contract:
 *  - What is accepted and refused is common/qdp_npy.h's (versions 1.0-3.0, the five little-endian
 *    dtypes, C order, 1-D or 2-D); messages and codes are its messages as INVALID_ARGUMENT, and
 *    data shorter than the shape is refused too (need_bytes / free_bytes: the bytes it needs and
 *    the bytes there). Extra bytes after the data are ignored. Which dtype suits which use
 *    (encoder input, basis indices, an exported state read back) is the caller's decision.
 *  - Writing produces version 1.0 with the header padded to a multiple of 64 bytes (so the data of
 *    a mapped file is aligned for any element type), exactly as numpy.save writes it.
 *  - Any thread. Messages quote user input in single quotes and start with the quoted path.
 */
#ifndef QDP_IO_NPY_H
#define QDP_IO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "io/map.h"
#include "qdp_npy.h"

/* Buffer size that always holds a header written by io_npy_header. */
#define IO_NPY_HEADER_CAP QDP_NPY_HEADER_CAP

/* Parses the .npy file held in buf[0..len) (at least the header; the data is checked to be all
 * there) into the header common/qdp_npy.h describes. */
qdp_status io_npy_parse(const void *buf, size_t len, struct qdp_npy *ret, struct qdp_error *reterr);

/* Writes a version 1.0 header for (dtype, ndim, rows, cols) into buf; *ret_len = its length, a
 * multiple of 64. ndim 1 needs rows 1. INVALID_ARGUMENT for an unknown dtype, ndim other than 1
 * or 2, or a byte count that overflows; cap below the length needed is INVALID_ARGUMENT too. */
qdp_status io_npy_header(qdp_dtype dtype, int ndim, uint64_t rows, uint64_t cols, char *buf,
                         size_t cap, size_t *ret_len, struct qdp_error *reterr);

/* Maps the .npy file open on fd (taken in every case) read-only and parses it: ret->data /
 * ret->bytes are the elements, *ret_hdr the header. `what` names the file in messages.
 * INVALID_ARGUMENT (not a regular file, or a header io_npy_parse refuses), PERMISSION_DENIED (not
 * open for reading) or SYSTEM. */
qdp_status io_map_npy_fd(int fd, const char *what, struct io_mapping *ret, struct qdp_npy *ret_hdr,
                         struct qdp_error *reterr);

/* Pulls elements for io_write_npy: writes `n` elements starting at element `offset` (elements of
 * the file's dtype, row-major) into dst. Returns QDP_OK or a status with reterr filled. */
typedef qdp_status (*io_npy_reader)(void *arg, uint64_t offset, uint64_t n, void *dst,
                                    struct qdp_error *reterr);

/* Writes a .npy file of rows * cols elements into the regular file open for writing on fd (not
 * closed): whatever it held is truncated, then the header and the elements pulled through `read`
 * in chunks of at most IO_WRITE_CHUNK_BYTES, then fsync. A reader's failure is returned as the
 * reader reported it. PERMISSION_DENIED when fd is read-only or append-only. */
qdp_status io_write_npy_fd(int fd, const char *what, qdp_dtype dtype, int ndim, uint64_t rows,
                           uint64_t cols, io_npy_reader read, void *arg, struct qdp_error *reterr);

/* Writes the same to absolute `path` beneath folder f (map.h): into a temporary file made in the
 * target's directory (opened once beneath the folder), flushed, then renamed over the name, so a
 * failure at any point (the reader's included) leaves no partial file and an overwritten file
 * intact, and no link swapped in meanwhile can move the write out of the folder. An existing
 * path is ALREADY_EXISTS unless `overwrite` (checked again atomically at the rename); one of the
 * nown files in own (the daemon's) is never replaced. The file gets mode 0644. */
qdp_status io_write_npy_beneath(const struct io_folder *f, const char *path, int overwrite,
                                const struct io_file_id *own, size_t nown, qdp_dtype dtype,
                                int ndim, uint64_t rows, uint64_t cols, io_npy_reader read,
                                void *arg, struct qdp_error *reterr);

/* 4 MiB: large enough that the write(2) and reader overheads vanish, small enough to stay a
 * modest host buffer whatever the state's size. */
#define IO_WRITE_CHUNK_BYTES (4u << 20)

#endif /* QDP_IO_NPY_H */
