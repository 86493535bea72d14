/* qdp_npy.h — the NumPy .npy header codec the daemon and libqdp share: parse the header at the
 * start of a buffer, check that a file holds the data it promises, format a header for a dtype and
 * shape. Pure functions over caller-owned bytes: no I/O, no allocation, no globals; any thread.
 * Mapping, descriptors and writes stay with each caller (daemon/io/npy.c, client/libqdp/npy.c).
 *
 * Contract:
 *  - Accepted: format versions 1.0, 2.0 and 3.0; descr '<f4' (FLOAT32), '<f8' (FLOAT64), '<i8'
 *    (INT64), '<c8' (COMPLEX64), '<c16' (COMPLEX128); fortran_order False; 1-D (rows 1, cols =
 *    shape[0]) or 2-D (rows, cols) shapes. Which dtype suits which use is the caller's decision.
 *  - The header is a Python dict literal, e.g. {'descr': '<f8', 'fortran_order': False,
 *    'shape': (3, 4), }: single or double quotes, any key order, optional trailing commas,
 *    spaces, Python 2 'L' suffixes on dimensions; nothing more (no escapes, no unknown or repeated
 *    keys, no text after the '}').
 *  - Refused with INVALID_ARGUMENT and a one-line message naming what is wrong, the value at
 *    fault (quoted) and, for syntax, the header byte: bad magic, another version, a truncated
 *    header or one over QDP_NPY_HEADER_MAX, any other descr (big-endian, '=' native order,
 *    structured), fortran_order True (the layout of a 1-D array would not change, but numpy never
 *    writes True for one, so such a header is hand-made and refused like any other), 0-D or 3-D
 *    and more, a shape whose byte count overflows 64 bits.
 *  - Formatting writes version 1.0 padded to a multiple of 64 bytes with a final '\n' (so mapped
 *    data is aligned for any element type), byte for byte as numpy.save writes it.
 */
#ifndef QDP_NPY_H
#define QDP_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "qdp_defs.h"

/* The longest header text accepted: numpy itself refuses headers over 10000 bytes by default; a
 * real 2-D header is under 128 bytes, so anything longer is malformed or hostile. */
#define QDP_NPY_HEADER_MAX 65536

/* The most bytes a header can take before its data: the version 2.0 preamble and the longest
 * header text. Reading this much from the start of a file always lets qdp_npy_parse decide. */
#define QDP_NPY_PREFIX_MAX (12 + QDP_NPY_HEADER_MAX)

/* Buffer size that always holds a header written by qdp_npy_format. */
#define QDP_NPY_HEADER_CAP 256

struct qdp_npy {
  qdp_dtype dtype;
  int ndim;             /* 1 or 2, as in the file */
  uint64_t rows, cols;  /* a 1-D array has rows 1 */
  uint64_t data_offset; /* bytes from the start of the file to the first element */
  uint64_t data_bytes;  /* rows * cols * element size */
};

/* Why a header was refused. */
struct qdp_npy_error {
  const char *field;   /* static request field at fault ("dtype"), or NULL */
  uint64_t need_bytes; /* qdp_npy_check_data: bytes the shape needs */
  uint64_t have_bytes; /* qdp_npy_check_data: bytes after the header */
  char msg[320];       /* one line, no trailing period */
};

/* Parses the header at the start of buf[0..len): len covers at least the header (the data is
 * not looked at). QDP_OK, or INVALID_ARGUMENT with *reterr filled (reterr may be NULL). */
qdp_status qdp_npy_parse(const void *buf, size_t len, struct qdp_npy *ret,
                         struct qdp_npy_error *reterr);

/* Checks that a file of file_bytes holds all the data of h; extra bytes after it are fine.
 * INVALID_ARGUMENT ("truncated .npy file: ...") with need_bytes / have_bytes otherwise. */
qdp_status qdp_npy_check_data(const struct qdp_npy *h, uint64_t file_bytes,
                              struct qdp_npy_error *reterr);

/* Writes the version 1.0 header of a C-order (dtype, ndim, rows, cols) array into buf[0..cap);
 * *ret_len = its length, a multiple of 64. ndim 1 needs rows 1. INVALID_ARGUMENT for a dtype with
 * no .npy form (field "dtype"), ndim other than 1 or 2, a byte count over 64 bits, or cap below
 * the length needed. */
qdp_status qdp_npy_format(qdp_dtype dtype, int ndim, uint64_t rows, uint64_t cols, char *buf,
                          size_t cap, size_t *ret_len, struct qdp_npy_error *reterr);

#endif /* QDP_NPY_H */
