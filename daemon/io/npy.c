/* npy.c — the .npy format: header parsing and writing, mapping, atomic export.
 *
 * The header is a Python dict literal, e.g. {'descr': '<f8', 'fortran_order': False,
 * 'shape': (3, 4), }. The parser accepts exactly that grammar (single or double quotes, any key
 * order, optional trailing commas, spaces) and nothing more: no escapes, no nested values except
 * the shape tuple, no unknown keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/internal.h"
#include "io/npy.h"

/* '<' descriptors are the host's own order: elements are copied, never swapped. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "qdp's .npy I/O assumes a little-endian host");

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Dimensions remembered for messages; more than this are counted but not kept. */
#define MAX_DIMS_KEPT 8

struct dtype_name {
  const char *descr;
  qdp_dtype dtype;
};

static const struct dtype_name dtype_names[] = {
    {"<f4", QDP_DTYPE_FLOAT32},   {"<f8", QDP_DTYPE_FLOAT64},     {"<i8", QDP_DTYPE_INT64},
    {"<c8", QDP_DTYPE_COMPLEX64}, {"<c16", QDP_DTYPE_COMPLEX128},
};

static const char *descr_of(qdp_dtype t) {
  for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++) {
    if (dtype_names[i].dtype == t) {
      return dtype_names[i].descr;
    }
  }
  return NULL;
}

/* ---- header parsing -------------------------------------------------------------------------- */

struct cursor {
  const char *p, *end;
};

static void skip_ws(struct cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) {
    c->p++;
  }
}

static bool take(struct cursor *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return true;
  }
  return false;
}

/* A quoted string without escapes: [*ret, *ret + *ret_len). */
static bool take_string(struct cursor *c, const char **ret, size_t *ret_len) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) {
    return false;
  }
  char q = *c->p++;
  const char *start = c->p;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || *c->p == '\n') {
      return false;
    }
    c->p++;
  }
  if (c->p >= c->end) {
    return false;
  }
  *ret = start;
  *ret_len = (size_t)(c->p - start);
  c->p++;
  return true;
}

static bool take_word(struct cursor *c, const char *w) {
  skip_ws(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
    c->p += n;
    return true;
  }
  return false;
}

/* Copies n bytes of header text for a message, quoted-safe. */
static void quote_n(char *dst, size_t cap, const char *src, size_t n) {
  char tmp[64];
  if (n >= sizeof tmp) {
    n = sizeof tmp - 1;
  }
  memcpy(tmp, src, n);
  tmp[n] = '\0';
  io_quote(dst, cap, tmp);
}

static qdp_status malformed(struct qdp_error *reterr, const char *what, size_t at) {
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                       "malformed .npy header: %s at header byte %zu", what, at);
}

qdp_status io_npy_parse(const void *buf, size_t len, struct io_npy *ret, struct qdp_error *reterr) {
  const unsigned char *b = buf;
  if (len < 10) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "truncated .npy header: the file has %zu B, a header needs at least 10 B",
                         len);
  }
  if (memcmp(b, npy_magic, sizeof npy_magic) != 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "bad magic: not a .npy file (it must start with \\x93NUMPY)");
  }
  unsigned major = b[6], minor = b[7];
  size_t pre;
  uint64_t hlen;
  if (major == 1 && minor == 0) {
    pre = 10;
    hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
  } else if ((major == 2 || major == 3) && minor == 0) {
    pre = 12;
    if (len < pre) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "truncated .npy header: the file has %zu B, a version %u.0 header "
                           "needs at least 12 B",
                           len, major);
    }
    hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
  } else {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         ".npy format version %u.%u is not supported; use 1.0, 2.0 or 3.0", major,
                         minor);
  }
  if (hlen > IO_NPY_HEADER_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         ".npy header of %" PRIu64 " B is longer than the %d B accepted", hlen,
                         IO_NPY_HEADER_MAX);
  }
  if (hlen > len - pre) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "truncated .npy header: it ends at byte %" PRIu64
                         " but the file has %zu B",
                         pre + hlen, len);
  }

  struct cursor c = {(const char *)b + pre, (const char *)b + pre + hlen};
  const char *hstart = c.p;
  const char *descr = NULL;
  size_t descr_len = 0;
  int fortran = -1;
  int ndim = -1;
  uint64_t dims[MAX_DIMS_KEPT] = {0};
  bool dim_overflow = false;

  if (!take(&c, '{')) {
    return malformed(reterr, "expected '{'", (size_t)(c.p - hstart));
  }
  for (;;) {
    if (take(&c, '}')) {
      break;
    }
    const char *key;
    size_t klen;
    if (!take_string(&c, &key, &klen)) {
      return malformed(reterr, "expected a quoted key or '}'", (size_t)(c.p - hstart));
    }
    if (!take(&c, ':')) {
      return malformed(reterr, "expected ':'", (size_t)(c.p - hstart));
    }
    if (klen == 5 && memcmp(key, "descr", 5) == 0 && !descr) {
      skip_ws(&c);
      if (c.p < c.end && *c.p == '[') {
        return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                             "dtype is a structured (record) type; use little-endian float32 or "
                             "float64 ('<f4', '<f8'; '<i8' for basis indices)");
      }
      if (!take_string(&c, &descr, &descr_len)) {
        return malformed(reterr, "expected a quoted 'descr'", (size_t)(c.p - hstart));
      }
    } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0 && fortran < 0) {
      if (take_word(&c, "True")) {
        fortran = 1;
      } else if (take_word(&c, "False")) {
        fortran = 0;
      } else {
        return malformed(reterr, "'fortran_order' is neither True nor False",
                         (size_t)(c.p - hstart));
      }
    } else if (klen == 5 && memcmp(key, "shape", 5) == 0 && ndim < 0) {
      if (!take(&c, '(')) {
        return malformed(reterr, "expected '(' after 'shape'", (size_t)(c.p - hstart));
      }
      ndim = 0;
      for (;;) {
        if (take(&c, ')')) {
          break;
        }
        skip_ws(&c);
        if (c.p >= c.end || *c.p < '0' || *c.p > '9') {
          return malformed(reterr, "expected a dimension in 'shape'", (size_t)(c.p - hstart));
        }
        uint64_t v = 0;
        while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
          unsigned d = (unsigned)(*c.p - '0');
          if (v > (UINT64_MAX - d) / 10) {
            dim_overflow = true; /* keep reading the digits; the shape is refused below */
          } else {
            v = v * 10 + d;
          }
          c.p++;
        }
        if (c.p < c.end && *c.p == 'L') {
          c.p++; /* Python 2 long literal, as old numpy versions wrote */
        }
        if (ndim < MAX_DIMS_KEPT) {
          dims[ndim] = v;
        }
        ndim++;
        if (take(&c, ')')) {
          break;
        }
        if (!take(&c, ',')) {
          return malformed(reterr, "expected ',' or ')' in 'shape'", (size_t)(c.p - hstart));
        }
      }
    } else {
      char q[80];
      quote_n(q, sizeof q, key, klen);
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "malformed .npy header: key '%s' is unknown or repeated at header "
                           "byte %zu",
                           q, (size_t)(key - hstart));
    }
    if (take(&c, '}')) {
      break;
    }
    if (!take(&c, ',')) {
      return malformed(reterr, "expected ',' or '}'", (size_t)(c.p - hstart));
    }
  }
  skip_ws(&c);
  if (c.p != c.end) {
    return malformed(reterr, "text after the closing '}'", (size_t)(c.p - hstart));
  }
  if (!descr || fortran < 0 || ndim < 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "malformed .npy header: the '%s' key is missing",
                         !descr        ? "descr"
                         : fortran < 0 ? "fortran_order"
                                       : "shape");
  }

  qdp_dtype dtype = QDP_DTYPE_UNSPECIFIED;
  for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++) {
    if (strlen(dtype_names[i].descr) == descr_len &&
        memcmp(dtype_names[i].descr, descr, descr_len) == 0) {
      dtype = dtype_names[i].dtype;
    }
  }
  if (dtype == QDP_DTYPE_UNSPECIFIED) {
    char q[80];
    quote_n(q, sizeof q, descr, descr_len);
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "dtype '%s' is not supported; use little-endian float32 or float64 "
                         "('<f4', '<f8'; '<i8' for basis indices)",
                         q);
  }
  if (fortran) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "fortran_order is True; only C-order arrays are supported (save "
                         "numpy.ascontiguousarray(a))");
  }
  if (ndim < 1 || ndim > 2) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "the array has %d dimensions; only 1-D or 2-D arrays are supported", ndim);
  }
  uint64_t rows = ndim == 1 ? 1 : dims[0];
  uint64_t cols = ndim == 1 ? dims[0] : dims[1];
  unsigned size = qdp_dtype_size(dtype);
  if (dim_overflow) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "a dimension in 'shape' is over %" PRIu64 " (64 bits)", UINT64_MAX);
  }
  if ((cols && rows > UINT64_MAX / cols) || rows * cols > UINT64_MAX / size) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "shape %" PRIu64 " x %" PRIu64
                         " of %u B elements overflows 64 bits of "
                         "bytes",
                         rows, cols, size);
  }
  uint64_t data_bytes = rows * cols * size;
  uint64_t data_offset = pre + hlen;
  if (data_bytes > len - data_offset) {
    char q[80];
    quote_n(q, sizeof q, descr, descr_len);
    qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                  "data is %" PRIu64 " B but shape %" PRIu64 " x %" PRIu64 " of '%s' needs %" PRIu64
                  " B",
                  (uint64_t)(len - data_offset), rows, cols, q, data_bytes);
    if (reterr) {
      reterr->need_bytes = data_bytes;
      reterr->free_bytes = len - data_offset;
    }
    return QDP_ERR_INVALID_ARGUMENT;
  }
  ret->dtype = dtype;
  ret->ndim = ndim;
  ret->rows = rows;
  ret->cols = cols;
  ret->data_offset = data_offset;
  ret->data_bytes = data_bytes;
  return QDP_OK;
}

/* ---- header writing -------------------------------------------------------------------------- */

/* Element count and byte count for a shape, or INVALID_ARGUMENT. */
static qdp_status shape_bytes(qdp_dtype dtype, int ndim, uint64_t rows, uint64_t cols,
                              uint64_t *ret_count, struct qdp_error *reterr) {
  unsigned size = qdp_dtype_size(dtype);
  if (!descr_of(dtype) || size == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "dtype",
                         "dtype %d has no .npy form here", (int)dtype);
  }
  if (ndim != 1 && ndim != 2) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "a .npy file here has 1 or 2 dimensions, not %d", ndim);
  }
  if (ndim == 1 && rows != 1) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "a 1-D .npy file has 1 row, not %" PRIu64, rows);
  }
  if ((cols && rows > UINT64_MAX / cols) || rows * cols > UINT64_MAX / size) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "%" PRIu64 " x %" PRIu64 " elements of %u B overflow 64 bits", rows, cols,
                         size);
  }
  *ret_count = rows * cols;
  return QDP_OK;
}

qdp_status io_npy_header(qdp_dtype dtype, int ndim, uint64_t rows, uint64_t cols, char *buf,
                         size_t cap, size_t *ret_len, struct qdp_error *reterr) {
  uint64_t count;
  qdp_status rc = shape_bytes(dtype, ndim, rows, cols, &count, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  char dict[160];
  int n;
  if (ndim == 1) {
    n = snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }",
                 descr_of(dtype), cols);
  } else {
    n = snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ", %" PRIu64 "), }",
                 descr_of(dtype), rows, cols);
  }
  /* magic (6) + version (2) + length (2) + dict + at least the '\n', rounded up to 64. */
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  if (cap < total) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         ".npy header needs %zu B but the buffer has %zu B", total, cap);
  }
  memcpy(buf, npy_magic, sizeof npy_magic);
  buf[6] = 1;
  buf[7] = 0;
  size_t hlen = total - 10;
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
  buf[total - 1] = '\n';
  *ret_len = total;
  return QDP_OK;
}

/* ---- mapping --------------------------------------------------------------------------------- */

qdp_status io_map_npy_fd(int fd, const char *what, struct io_mapping *ret, struct io_npy *ret_hdr,
                         struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct io_mapping m = IO_MAPPING_INIT;
  *ret = m;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err, "%s: fstat failed: %s", what,
                          strerror(err));
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "path", "%s is not a regular file", what);
    goto out;
  }
  uint64_t size = (uint64_t)st.st_size;
  struct io_npy hdr;
  if (size < 10) {
    /* Too short to map usefully (and an empty file cannot be mapped): let the parser word it. */
    char small[10];
    ssize_t got = pread(fd, small, sizeof small, 0);
    rc = io_npy_parse(small, got > 0 ? (size_t)got : 0, &hdr, reterr);
    if (rc == QDP_OK) {
      rc = qdp_error_set(reterr, QDP_ERR_DATA_LOSS, NULL, "the file shrank while it was read");
    }
    qdp_error_prefix(reterr, "%s", what);
    goto out;
  }
  QDP_TRY(rc, io_map_range(fd, 0, size, what, &m, reterr));
  fd = -1; /* the mapping's now */
  rc = io_npy_parse(m.data, (size_t)size, &hdr, reterr);
  if (rc != QDP_OK) {
    qdp_error_prefix(reterr, "%s", what);
    goto out;
  }
  madvise(m.base, m.map_len, MADV_SEQUENTIAL);
  *ret = m;
  ret->data = (const char *)m.base + hdr.data_offset;
  ret->bytes = hdr.data_bytes;
  ret->file_end = hdr.data_offset + hdr.data_bytes;
  m = (struct io_mapping)IO_MAPPING_INIT;
  if (ret_hdr) {
    *ret_hdr = hdr;
  }
out:
  io_unmap(&m);
  if (fd >= 0) {
    close(fd);
  }
  return rc;
}

/* ---- writing --------------------------------------------------------------------------------- */

static qdp_status write_all(int fd, const void *buf, size_t n, uint64_t at, const char *q,
                            struct qdp_error *reterr) {
  const char *p = buf;
  while (n) {
    ssize_t w = pwrite(fd, p, n, (off_t)at);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      int err = errno;
      qdp_status code = err == ENOSPC || err == EDQUOT ? QDP_ERR_RESOURCE_EXHAUSTED
                        : err == EBADF                 ? QDP_ERR_PERMISSION_DENIED
                                                       : QDP_ERR_SYSTEM;
      qdp_error_set(reterr, code, "path", "%s: write of %zu B at byte %" PRIu64 " failed: %s%s", q,
                    n, at, strerror(err),
                    err == EBADF ? " (the descriptor is not open for writing)" : "");
      if (reterr) {
        reterr->cause = err;
        reterr->need_bytes = n;
      }
      return code;
    }
    p += w;
    n -= (size_t)w;
    at += (uint64_t)w;
  }
  return QDP_OK;
}

static qdp_status sys_error(struct qdp_error *reterr, const char *q, const char *call, int err) {
  qdp_status code = QDP_ERR_SYSTEM;
  if (err == ENOENT || err == ENOTDIR) {
    code = QDP_ERR_NOT_FOUND;
  } else if (err == EACCES || err == EPERM || err == EROFS) {
    code = QDP_ERR_PERMISSION_DENIED;
  } else if (err == ENOSPC || err == EDQUOT) {
    code = QDP_ERR_RESOURCE_EXHAUSTED;
  } else if (err == EISDIR) {
    code = QDP_ERR_INVALID_ARGUMENT;
  }
  qdp_error_set(reterr, code, "path", "%s: %s failed: %s", q, call, strerror(err));
  if (reterr) {
    reterr->cause = err;
  }
  return code;
}

static qdp_status exists_error(struct qdp_error *reterr, const char *q) {
  return qdp_error_set(reterr, QDP_ERR_ALREADY_EXISTS, "path",
                       "%s exists; choose another path or ask to overwrite it", q);
}

qdp_status io_write_npy_fd(int fd, const char *what, qdp_dtype dtype, int ndim, uint64_t rows,
                           uint64_t cols, io_npy_reader read, void *arg, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  void *chunk = NULL;
  uint64_t count;
  QDP_TRY(rc, shape_bytes(dtype, ndim, rows, cols, &count, reterr));
  char hdr[IO_NPY_HEADER_CAP];
  size_t hlen;
  QDP_TRY(rc, io_npy_header(dtype, ndim, rows, cols, hdr, sizeof hdr, &hlen, reterr));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = sys_error(reterr, what, "fstat", errno);
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "path", "%s is not a regular file", what);
    goto out;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY || (fl & O_APPEND)) {
    rc = qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, "path",
                       "%s is not open for writing in place (read-only or append-only)", what);
    goto out;
  }
  /* Whatever the file held goes: what follows is exactly the .npy. */
  if (ftruncate(fd, 0) != 0) {
    rc = sys_error(reterr, what, "ftruncate", errno);
    goto out;
  }
  QDP_TRY(rc, write_all(fd, hdr, hlen, 0, what, reterr));
  unsigned size = qdp_dtype_size(dtype);
  uint64_t per_chunk = IO_WRITE_CHUNK_BYTES / size;
  uint64_t first = count < per_chunk ? count : per_chunk;
  if (first) {
    chunk = malloc((size_t)(first * size));
    if (!chunk) {
      rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "%s: no host memory for a %" PRIu64 " B write buffer", what, first * size);
      goto out;
    }
  }
  for (uint64_t off = 0; off < count;) {
    uint64_t n = count - off < per_chunk ? count - off : per_chunk;
    QDP_TRY(rc, read(arg, off, n, chunk, reterr));
    QDP_TRY(rc, write_all(fd, chunk, (size_t)(n * size), hlen + off * size, what, reterr));
    off += n;
  }
  /* Durable before its name is given to it: after a crash the name holds all of it or nothing. */
  if (fsync(fd) != 0) {
    rc = sys_error(reterr, what, "fsync", errno);
  }
out:
  free(chunk);
  return rc;
}

/* Moves tmp to base within the directory open on dir; without overwrite, refuses atomically if
 * base appeared meanwhile. */
static qdp_status place(int dir, const char *tmp, const char *base, int overwrite, const char *q,
                        struct qdp_error *reterr) {
  if (renameat2(dir, tmp, dir, base, overwrite ? 0 : RENAME_NOREPLACE) == 0) {
    return QDP_OK;
  }
  int err = errno;
  if (err == EEXIST) {
    return exists_error(reterr, q);
  }
  if (overwrite || (err != EINVAL && err != ENOSYS)) {
    return sys_error(reterr, q, "rename", err);
  }
  /* A file system without RENAME_NOREPLACE: link(2) refuses an existing name atomically too. */
  if (linkat(dir, tmp, dir, base, 0) != 0) {
    err = errno;
    return err == EEXIST ? exists_error(reterr, q) : sys_error(reterr, q, "link", err);
  }
  unlinkat(dir, tmp, 0);
  return QDP_OK;
}

qdp_status io_write_npy_beneath(const struct io_folder *f, const char *path, int overwrite,
                                const struct io_file_id *own, size_t nown, qdp_dtype dtype,
                                int ndim, uint64_t rows, uint64_t cols, io_npy_reader read,
                                void *arg, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  int dir = -1, fd = -1;
  bool created = false;
  char tmp[NAME_MAX + 1] = "";
  char name[IO_QUOTE_CAP];
  char q[IO_QUOTE_CAP + 2];
  io_quote(name, sizeof name, path);
  snprintf(q, sizeof q, "'%s'", name);

  char rel[PATH_MAX];
  QDP_TRY(rc, io_folder_relative(f, path, "path", rel, reterr));
  char *slash = strrchr(rel, '/');
  const char *base = slash ? slash + 1 : rel;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || strlen(base) > NAME_MAX - 12) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "path",
                       "%s does not name a file (or its name is too long for a temporary name "
                       "beside it)",
                       q);
    goto out;
  }
  /* The directory once, beneath the folder; the file is then made and named within it, so no
   * link swapped in above it can move the write elsewhere. */
  if (slash) {
    *slash = '\0';
    QDP_TRY(rc, io_folder_open_rel(f, rel, O_PATH | O_DIRECTORY, "path", q, &dir, reterr));
  } else {
    dir = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
    if (dir < 0) {
      rc = sys_error(reterr, q, "dup", errno);
      goto out;
    }
  }
  /* Fail fast before writing what may be gigabytes; the rename checks again atomically. */
  struct stat st;
  if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!overwrite) {
      rc = exists_error(reterr, q);
      goto out;
    }
    if (S_ISDIR(st.st_mode)) {
      rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "path", "%s is a directory", q);
      goto out;
    }
    for (size_t i = 0; i < nown; i++) {
      if (own[i].dev == (uint64_t)st.st_dev && own[i].ino == (uint64_t)st.st_ino) {
        rc = qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, "path",
                           "%s is one of the daemon's own files, which Export never replaces", q);
        goto out;
      }
    }
  }
  for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
    char hex[17];
    QDP_TRY(rc, io_random_hex(hex, reterr));
    snprintf(tmp, sizeof tmp, ".%s.%s", base, hex);
    fd = openat(dir, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno != EEXIST) {
      rc = sys_error(reterr, q, "creating a temporary file beside it", errno);
      goto out;
    }
  }
  if (fd < 0) {
    rc = sys_error(reterr, q, "creating a temporary file beside it", EEXIST);
    goto out;
  }
  created = true;
  /* The umask does not narrow an exported file: it is meant to be read by its requester too. */
  if (fchmod(fd, 0644) != 0) {
    rc = sys_error(reterr, q, "fchmod", errno);
    goto out;
  }
  QDP_TRY(rc, io_write_npy_fd(fd, q, dtype, ndim, rows, cols, read, arg, reterr));
  int cfd = fd;
  fd = -1;
  if (close(cfd) != 0) {
    rc = sys_error(reterr, q, "close", errno);
    goto out;
  }
  QDP_TRY(rc, place(dir, tmp, base, overwrite, q, reterr));
  created = false;
out:
  if (fd >= 0) {
    close(fd);
  }
  if (created) {
    unlinkat(dir, tmp, 0);
  }
  if (dir >= 0) {
    close(dir);
  }
  return rc;
}
