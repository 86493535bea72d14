/* The NumPy .npy format, as far as qdp needs it: reading the header of an input file (float32,
 * float64 or int64, 1-D or 2-D, C order, little-endian) and writing the header of a fetched
 * state (complex64 or complex128). Format: the magic "\x93NUMPY", a major and minor version byte,
 * the header length (2 bytes in 1.0, 4 in 2.0 and 3.0), then a Python dict literal with 'descr',
 * 'fortran_order' and 'shape', padded with spaces and a newline. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libqdp_int.h"

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static qdp_status bad(const char *fmt, const char *what) {
  return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "npy", fmt, what);
}

/* A cursor over the header's dict literal. */
struct cur {
  const char *p, *end;
};

static void skip_ws(struct cur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) {
    c->p++;
  }
}

static int eat(struct cur *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* A quoted Python string without escapes (all that numpy writes for keys and descr). */
static int read_str(struct cur *c, char *out, size_t size) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) {
    return 0;
  }
  char q = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || n + 1 >= size) {
      return 0;
    }
    out[n++] = *c->p++;
  }
  if (c->p >= c->end) {
    return 0;
  }
  c->p++;
  out[n] = '\0';
  return 1;
}

static int read_word(struct cur *c, const char *w) {
  skip_ws(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
    c->p += n;
    return 1;
  }
  return 0;
}

static int read_u64(struct cur *c, uint64_t *ret) {
  skip_ws(c);
  uint64_t v = 0;
  const char *start = c->p;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    unsigned d = (unsigned)(*c->p - '0');
    if (v > (UINT64_MAX - d) / 10) {
      return 0;
    }
    v = v * 10 + d;
    c->p++;
  }
  if (c->p < c->end && *c->p == 'L') { /* Python 2 longs in old files */
    c->p++;
  }
  *ret = v;
  return c->p > start;
}

/* "(3,)", "(2, 4)", "()" ; at most 2 dimensions are accepted by the caller. */
static int read_shape(struct cur *c, uint64_t *dims, int *ndim) {
  if (!eat(c, '(')) {
    return 0;
  }
  *ndim = 0;
  for (;;) {
    if (eat(c, ')')) {
      return 1;
    }
    uint64_t v;
    if (!read_u64(c, &v)) {
      return 0;
    }
    if (*ndim < 8) {
      dims[*ndim] = v;
    }
    (*ndim)++;
    if (!eat(c, ',')) {
      return eat(c, ')');
    }
  }
}

qdp_status qdp__npy_parse(const void *buf, size_t len, struct qdp__npy *ret) {
  const unsigned char *b = buf;
  if (len < 10 || memcmp(b, magic, sizeof magic) != 0) {
    return bad("The file is not a .npy file (%s).", "no \\x93NUMPY magic at its start");
  }
  unsigned major = b[6];
  uint64_t hlen, pre;
  if (major == 1) {
    hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) {
      return bad("The .npy header is truncated (%s).", "fewer than 12 bytes");
    }
    hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
    pre = 12;
  } else {
    char v[16];
    snprintf(v, sizeof v, "%u.%u", major, b[7]);
    return bad("The .npy format version %s is not supported (1.0, 2.0 and 3.0 are).", v);
  }
  if (hlen > QDP__NPY_MAX_HEADER) {
    return bad("The .npy header is longer than %s bytes.", "1048576");
  }
  if (pre + hlen > len) {
    return bad("The .npy header is truncated (%s).", "the file ends inside it");
  }
  struct cur c = {(const char *)b + pre, (const char *)b + pre + hlen};
  char descr[32] = "";
  int fortran = -1, ndim = -1;
  uint64_t dims[8] = {0};
  if (!eat(&c, '{')) {
    return bad("The .npy header is not a dict literal (%s).", "no '{'");
  }
  while (!eat(&c, '}')) {
    char key[32];
    if (!read_str(&c, key, sizeof key) || !eat(&c, ':')) {
      return bad("The .npy header is not a dict literal (%s).", "bad key");
    }
    if (strcmp(key, "descr") == 0) {
      if (!read_str(&c, descr, sizeof descr)) {
        return bad("The .npy header's %s is not a simple type string.", "'descr'");
      }
    } else if (strcmp(key, "fortran_order") == 0) {
      if (read_word(&c, "True")) {
        fortran = 1;
      } else if (read_word(&c, "False")) {
        fortran = 0;
      } else {
        return bad("The .npy header's %s is neither True nor False.", "'fortran_order'");
      }
    } else if (strcmp(key, "shape") == 0) {
      if (!read_shape(&c, dims, &ndim)) {
        return bad("The .npy header's %s is not a tuple of integers.", "'shape'");
      }
    } else {
      return bad("The .npy header has an unexpected key '%s'.", key);
    }
    if (!eat(&c, ',')) {
      if (!eat(&c, '}')) {
        return bad("The .npy header is not a dict literal (%s).", "no ',' or '}'");
      }
      break;
    }
  }
  if (!descr[0] || fortran < 0 || ndim < 0) {
    return bad("The .npy header lacks %s.", !descr[0]     ? "'descr'"
                                            : fortran < 0 ? "'fortran_order'"
                                                          : "'shape'");
  }
  qdp_dtype t = QDP_DTYPE_UNSPECIFIED;
  /* '<' is little-endian, '=' native (little-endian on every machine qdp builds for); one-byte
   * types are not inputs qdp reads. */
  if (descr[0] == '<' || descr[0] == '=') {
    const char *s = descr + 1;
    if (strcmp(s, "f4") == 0) {
      t = QDP_DTYPE_FLOAT32;
    } else if (strcmp(s, "f8") == 0) {
      t = QDP_DTYPE_FLOAT64;
    } else if (strcmp(s, "i8") == 0) {
      t = QDP_DTYPE_INT64;
    } else if (strcmp(s, "c8") == 0) {
      t = QDP_DTYPE_COMPLEX64;
    } else if (strcmp(s, "c16") == 0) {
      t = QDP_DTYPE_COMPLEX128;
    }
  }
  if (t == QDP_DTYPE_UNSPECIFIED) {
    return bad("The .npy element type '%s' is not supported (use '<f4', '<f8' or '<i8').", descr);
  }
  if (ndim < 1 || ndim > 2) {
    char n[16];
    snprintf(n, sizeof n, "%d", ndim);
    return bad("The .npy array has %s dimensions; qdp reads 1-D (values) or 2-D (rows, cols).", n);
  }
  if (fortran == 1 && ndim == 2 && dims[0] > 1 && dims[1] > 1) {
    return bad("The .npy array is in %s order; write it in C order (np.ascontiguousarray).",
               "Fortran");
  }
  uint64_t rows = dims[0];
  uint64_t cols = ndim == 2 ? dims[1] : 1;
  if (cols && rows > UINT64_MAX / cols / 16) {
    return bad("The .npy shape %s overflows 64 bits of bytes.", "(rows x cols)");
  }
  ret->dtype = t;
  ret->ndim = ndim;
  ret->shape[0] = rows;
  ret->shape[1] = cols;
  ret->count = rows * cols;
  ret->data_offset = pre + hlen;
  return QDP_OK;
}

size_t qdp__npy_header(char *buf, size_t size, qdp_dtype dtype, int ndim, const uint64_t *shape) {
  const char *descr;
  switch (dtype) {
  case QDP_DTYPE_FLOAT32:
    descr = "<f4";
    break;
  case QDP_DTYPE_FLOAT64:
    descr = "<f8";
    break;
  case QDP_DTYPE_INT64:
    descr = "<i8";
    break;
  case QDP_DTYPE_COMPLEX64:
    descr = "<c8";
    break;
  case QDP_DTYPE_COMPLEX128:
    descr = "<c16";
    break;
  default:
    return 0;
  }
  char dict[256];
  int n;
  if (ndim == 1) {
    n = snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }", descr,
                 shape[0]);
  } else if (ndim == 2) {
    n = snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ", %" PRIu64 "), }",
                 descr, shape[0], shape[1]);
  } else {
    return 0;
  }
  if (n < 0 || (size_t)n >= sizeof dict) {
    return 0;
  }
  /* NumPy pads the preamble + dict + '\n' to a multiple of 64 bytes so that the data that follows
   * is aligned for any element type. */
  size_t total = 10 + (size_t)n + 1;
  total = (total + 63) / 64 * 64;
  if (total > size || total - 10 > 65535) {
    return 0;
  }
  memcpy(buf, magic, sizeof magic);
  buf[6] = 1;
  buf[7] = 0;
  buf[8] = (char)((total - 10) & 0xff);
  buf[9] = (char)((total - 10) >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
  buf[total - 1] = '\n';
  return total;
}

qdp_status qdp__input_file_open(const char *path, qdp_dtype dtype, uint64_t rows, uint64_t cols,
                                uint64_t offset, int *ret_fd, struct qdp__npy *ret) {
  *ret_fd = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return qdp__err_local(QDP_ERR_SYSTEM, errno, "input.path", "Cannot open '%s': %s.", path,
                          strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = errno;
    close(fd);
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, err, "input.path",
                          "'%s' is not a regular file.", path);
  }
  uint64_t fsize = (uint64_t)st.st_size;
  unsigned char head[4096];
  ssize_t got = pread(fd, head, sizeof head, 0);
  if (got < 0) {
    int err = errno;
    close(fd);
    return qdp__err_local(QDP_ERR_SYSTEM, err, "input.path", "Cannot read '%s': %s.", path,
                          strerror(err));
  }
  struct qdp__npy d;
  memset(&d, 0, sizeof d);
  if ((size_t)got >= sizeof magic && memcmp(head, magic, sizeof magic) == 0) {
    qdp_status rc = qdp__npy_parse(head, (size_t)got, &d);
    if (rc != QDP_OK && (size_t)got == sizeof head && fsize > sizeof head) {
      /* A header longer than the first read: read it whole (bounded by the format's limit). */
      size_t want = fsize < QDP__NPY_MAX_HEADER + 12 ? (size_t)fsize : QDP__NPY_MAX_HEADER + 12;
      unsigned char *big = malloc(want);
      if (!big) {
        close(fd);
        return qdp__err_nomem("reading a .npy header");
      }
      ssize_t g2 = pread(fd, big, want, 0);
      rc = g2 < 0 ? qdp__err_local(QDP_ERR_SYSTEM, errno, "input.path", "Cannot read '%s'.", path)
                  : qdp__npy_parse(big, (size_t)g2, &d);
      free(big);
    }
    if (rc != QDP_OK) {
      close(fd);
      struct qdp_errinfo *e = qdp__err();
      char old[sizeof e->msg];
      memcpy(old, e->msg, sizeof old);
      snprintf(e->msg, sizeof e->msg, "'%.200s': %.800s", path, old);
      return rc;
    }
    if (d.dtype != QDP_DTYPE_FLOAT32 && d.dtype != QDP_DTYPE_FLOAT64 &&
        d.dtype != QDP_DTYPE_INT64) {
      close(fd);
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                            "'%s' holds %s values; inputs are float32, float64 or int64.", path,
                            qdp_dtype_name(d.dtype));
    }
    if (dtype != QDP_DTYPE_UNSPECIFIED && dtype != d.dtype) {
      close(fd);
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                            "'%s' holds %s values but %s was asked for.", path,
                            qdp_dtype_name(d.dtype), qdp_dtype_name(dtype));
    }
  } else {
    if (dtype != QDP_DTYPE_FLOAT32 && dtype != QDP_DTYPE_FLOAT64 && dtype != QDP_DTYPE_INT64) {
      close(fd);
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                            "'%s' is a raw file (no .npy header): give its element type "
                            "(float32, float64 or int64).",
                            path);
    }
    if (offset > fsize) {
      close(fd);
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.offset",
                            "The offset %" PRIu64 " is past the end of '%s' (%" PRIu64 " bytes).",
                            offset, path, fsize);
    }
    unsigned es = qdp_dtype_size(dtype);
    if ((fsize - offset) % es != 0) {
      close(fd);
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                            "'%s' has %" PRIu64 " bytes after offset %" PRIu64
                            ", not a whole number of %u-byte %s values.",
                            path, fsize - offset, offset, es, qdp_dtype_name(dtype));
    }
    d.dtype = dtype;
    d.ndim = 1;
    d.count = (fsize - offset) / es;
    d.shape[0] = d.count;
    d.shape[1] = 1;
    d.data_offset = offset;
  }
  unsigned es = qdp_dtype_size(d.dtype);
  if (d.data_offset > fsize || (fsize - d.data_offset) / es < d.count) {
    close(fd);
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                          "'%s' is truncated: its header promises %" PRIu64 " values (%" PRIu64
                          " bytes) but %" PRIu64 " bytes follow it.",
                          path, d.count, d.count * es,
                          fsize > d.data_offset ? fsize - d.data_offset : 0);
  }
  /* Reshape: 1-D data is one sample of all its values unless rows/cols say otherwise. */
  if (rows || cols) {
    uint64_t r = rows, k = cols;
    if (!r) {
      r = k && d.count % k == 0 ? d.count / k : 0;
    }
    if (!k) {
      k = r && d.count % r == 0 ? d.count / r : 0;
    }
    if (!r || !k || r > UINT64_MAX / k || r * k != d.count) {
      close(fd);
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, rows ? "input.rows" : "input.cols",
                            "'%s' holds %" PRIu64 " values, which is not rows %" PRIu64
                            " x cols %" PRIu64 ".",
                            path, d.count, rows, cols);
    }
    d.shape[0] = r;
    d.shape[1] = k;
    d.ndim = 2;
  } else if (d.ndim == 1) {
    /* A 1-D array is one sample of all its values. */
    d.shape[1] = d.shape[0];
    d.shape[0] = 1;
  }
  *ret = d;
  *ret_fd = fd;
  return QDP_OK;
}
