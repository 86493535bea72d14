/* qdp_npy.c — the .npy header codec (qdp_npy.h). The parser is cut along the format: the fixed
 * preamble, the dict literal (one small reader per key, found through a table), then the checks of
 * what the keys said. Each step refuses with the value and the header byte at fault.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "qdp_npy.h"

/* '<' descriptors are the host's own order: callers copy elements, never swap them. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "qdp's .npy codec assumes a little-endian host");

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Dimensions remembered for messages; more than this are counted but not kept. */
#define MAX_DIMS_KEPT 8

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
  const char *descr;
  qdp_dtype dtype;
} descrs[] = {
    {"<f4", QDP_DTYPE_FLOAT32},   {"<f8", QDP_DTYPE_FLOAT64},     {"<i8", QDP_DTYPE_INT64},
    {"<c8", QDP_DTYPE_COMPLEX64}, {"<c16", QDP_DTYPE_COMPLEX128},
};

static const char *descr_of(qdp_dtype t) {
  for (size_t i = 0; i < COUNT(descrs); i++) {
    if (descrs[i].dtype == t) {
      return descrs[i].descr;
    }
  }
  return NULL;
}

static qdp_status fail(struct qdp_npy_error *e, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static qdp_status fail(struct qdp_npy_error *e, const char *field, const char *fmt, ...) {
  if (e) {
    e->field = field;
    e->need_bytes = e->have_bytes = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return QDP_ERR_INVALID_ARGUMENT;
}

/* Header text quoted in a message: at most 60 bytes ("..." marks a cut), control characters and
 * single quotes replaced by '?', so the message stays one line whose quotes match. */
#define QUOTE_CAP 64
static void quote(char dst[QUOTE_CAP], const char *src, size_t n) {
  size_t keep = n > QUOTE_CAP - 4 ? QUOTE_CAP - 4 : n;
  for (size_t i = 0; i < keep; i++) {
    unsigned char ch = (unsigned char)src[i];
    dst[i] = ch < 0x20 || ch == 0x7f || ch == '\'' ? '?' : (char)ch;
  }
  strcpy(dst + keep, keep < n ? "..." : "");
}

/* rows * cols * size in *ret, or false when it overflows 64 bits. */
static bool shape_bytes(uint64_t rows, uint64_t cols, unsigned size, uint64_t *ret) {
  uint64_t count;
  return !__builtin_mul_overflow(rows, cols, &count) &&
         !__builtin_mul_overflow(count, (uint64_t)size, ret);
}

/* ---- the preamble: magic, version, header length ------------------------------------------- */

static qdp_status parse_preamble(const unsigned char *b, size_t len, size_t *ret_pre,
                                 uint64_t *ret_hlen, struct qdp_npy_error *e) {
  if (len < 10) {
    return fail(e, NULL, "truncated .npy header: the file has %zu B, a header needs at least 10 B",
                len);
  }
  if (memcmp(b, npy_magic, sizeof npy_magic) != 0) {
    return fail(e, NULL, "bad magic: not a .npy file (it must start with \\x93NUMPY)");
  }
  unsigned major = b[6], minor = b[7];
  uint64_t hlen;
  if (major == 1 && minor == 0) {
    *ret_pre = 10;
    hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
  } else if ((major == 2 || major == 3) && minor == 0) {
    *ret_pre = 12;
    if (len < 12) {
      return fail(e, NULL,
                  "truncated .npy header: the file has %zu B, a version %u.0 header needs at "
                  "least 12 B",
                  len, major);
    }
    hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
  } else {
    return fail(e, NULL, ".npy format version %u.%u is not supported; use 1.0, 2.0 or 3.0", major,
                minor);
  }
  if (hlen > QDP_NPY_HEADER_MAX) {
    return fail(e, NULL, ".npy header of %" PRIu64 " B is longer than the %d B accepted", hlen,
                QDP_NPY_HEADER_MAX);
  }
  if (hlen > len - *ret_pre) {
    return fail(e, NULL,
                "truncated .npy header: it ends at byte %" PRIu64 " but the file has %zu B",
                *ret_pre + hlen, len);
  }
  *ret_hlen = hlen;
  return QDP_OK;
}

/* ---- the dict literal: tokens ---------------------------------------------------------------- */

struct cursor {
  const char *p, *start, *end; /* start: the header text's first byte, for offsets */
};

static size_t at(const struct cursor *c) {
  return (size_t)(c->p - c->start);
}

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
  const char q = *c->p++;
  const char *s = c->p;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || *c->p == '\n') {
      return false;
    }
    c->p++;
  }
  if (c->p >= c->end) {
    return false;
  }
  *ret = s;
  *ret_len = (size_t)(c->p - s);
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

static qdp_status malformed(struct qdp_npy_error *e, const char *what, const struct cursor *c) {
  return fail(e, NULL, "malformed .npy header: %s at header byte %zu", what, at(c));
}

struct fields; /* what the keys said: below */
typedef qdp_status (*read_fn)(struct cursor *c, struct fields *f, struct qdp_npy_error *e);

/* Items read by `item`, separated by ',' up to `close` (a trailing ',' allowed, as Python
 * writes a 1-tuple); `what` is the complaint when neither follows an item. */
static qdp_status read_list(struct cursor *c, char close, const char *what, read_fn item,
                            struct fields *f, struct qdp_npy_error *e) {
  while (!take(c, close)) {
    qdp_status rc = item(c, f, e);
    if (rc != QDP_OK) {
      return rc;
    }
    if (take(c, close)) {
      break;
    }
    if (!take(c, ',')) {
      return malformed(e, what, c);
    }
  }
  return QDP_OK;
}

/* ---- the dict literal: one reader per key ---------------------------------------------------- */

/* What the keys said, before it is checked. */
struct fields {
  const char *descr;
  size_t descr_len;
  int fortran;                  /* 0 or 1 */
  int ndim;                     /* dimensions in 'shape', all counted */
  uint64_t dims[MAX_DIMS_KEPT]; /* the first MAX_DIMS_KEPT of them */
  bool dim_overflow;            /* a dimension over 64 bits (refused once the keys are read) */
  unsigned seen;                /* bit i: keys[i] was read */
};

static qdp_status read_descr(struct cursor *c, struct fields *f, struct qdp_npy_error *e) {
  skip_ws(c);
  if (c->p < c->end && *c->p == '[') {
    return fail(e, NULL,
                "dtype is a structured (record) type; use little-endian float32 or float64 "
                "('<f4', '<f8'; '<i8' for basis indices)");
  }
  if (!take_string(c, &f->descr, &f->descr_len)) {
    return malformed(e, "expected a quoted 'descr'", c);
  }
  return QDP_OK;
}

static qdp_status read_fortran_order(struct cursor *c, struct fields *f, struct qdp_npy_error *e) {
  if (take_word(c, "True")) {
    f->fortran = 1;
  } else if (take_word(c, "False")) {
    f->fortran = 0;
  } else {
    return malformed(e, "'fortran_order' is neither True nor False", c);
  }
  return QDP_OK;
}

/* One decimal dimension, with Python 2's 'L' suffix as old numpy versions wrote it. */
static qdp_status read_dim(struct cursor *c, struct fields *f, struct qdp_npy_error *e) {
  skip_ws(c);
  if (c->p >= c->end || *c->p < '0' || *c->p > '9') {
    return malformed(e, "expected a dimension in 'shape'", c);
  }
  uint64_t v = 0;
  for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
    unsigned d = (unsigned)(*c->p - '0');
    if (v > (UINT64_MAX - d) / 10) {
      f->dim_overflow = true; /* keep reading the digits; the shape is refused later */
    } else {
      v = v * 10 + d;
    }
  }
  if (c->p < c->end && *c->p == 'L') {
    c->p++;
  }
  if (f->ndim < MAX_DIMS_KEPT) {
    f->dims[f->ndim] = v;
  }
  f->ndim++;
  return QDP_OK;
}

static qdp_status read_shape(struct cursor *c, struct fields *f, struct qdp_npy_error *e) {
  if (!take(c, '(')) {
    return malformed(e, "expected '(' after 'shape'", c);
  }
  f->ndim = 0;
  return read_list(c, ')', "expected ',' or ')' in 'shape'", read_dim, f, e);
}

static const struct key {
  const char *name;
  qdp_status (*read)(struct cursor *c, struct fields *f, struct qdp_npy_error *e);
} keys[] = {
    {"descr", read_descr},
    {"fortran_order", read_fortran_order},
    {"shape", read_shape},
};

/* One `'key': value`. */
static qdp_status read_entry(struct cursor *c, struct fields *f, struct qdp_npy_error *e) {
  const char *name;
  size_t n;
  if (!take_string(c, &name, &n)) {
    return malformed(e, "expected a quoted key or '}'", c);
  }
  const size_t name_at = (size_t)(name - c->start);
  if (!take(c, ':')) {
    return malformed(e, "expected ':'", c);
  }
  for (unsigned i = 0; i < COUNT(keys); i++) {
    if (strlen(keys[i].name) == n && memcmp(keys[i].name, name, n) == 0 && !(f->seen & 1u << i)) {
      f->seen |= 1u << i;
      return keys[i].read(c, f, e);
    }
  }
  char q[QUOTE_CAP];
  quote(q, name, n);
  return fail(e, NULL, "malformed .npy header: key '%s' is unknown or repeated at header byte %zu",
              q, name_at);
}

static qdp_status read_dict(struct cursor *c, struct fields *f, struct qdp_npy_error *e) {
  if (!take(c, '{')) {
    return malformed(e, "expected '{'", c);
  }
  qdp_status rc = read_list(c, '}', "expected ',' or '}'", read_entry, f, e);
  if (rc != QDP_OK) {
    return rc;
  }
  skip_ws(c);
  if (c->p != c->end) {
    return malformed(e, "text after the closing '}'", c);
  }
  for (unsigned i = 0; i < COUNT(keys); i++) {
    if (!(f->seen & 1u << i)) {
      return fail(e, NULL, "malformed .npy header: the '%s' key is missing", keys[i].name);
    }
  }
  return QDP_OK;
}

/* ---- what the keys said ---------------------------------------------------------------------- */

static qdp_status check_fields(const struct fields *f, struct qdp_npy *ret,
                               struct qdp_npy_error *e) {
  qdp_dtype dtype = QDP_DTYPE_UNSPECIFIED;
  for (size_t i = 0; i < COUNT(descrs); i++) {
    if (strlen(descrs[i].descr) == f->descr_len &&
        memcmp(descrs[i].descr, f->descr, f->descr_len) == 0) {
      dtype = descrs[i].dtype;
    }
  }
  if (dtype == QDP_DTYPE_UNSPECIFIED) {
    char q[QUOTE_CAP];
    quote(q, f->descr, f->descr_len);
    return fail(e, NULL,
                "dtype '%s' is not supported; use little-endian float32 or float64 ('<f4', "
                "'<f8'; '<i8' for basis indices)",
                q);
  }
  if (f->fortran) {
    return fail(e, NULL,
                "fortran_order is True; only C-order arrays are supported (save "
                "numpy.ascontiguousarray(a))");
  }
  if (f->ndim < 1 || f->ndim > 2) {
    return fail(e, NULL, "the array has %d dimensions; only 1-D or 2-D arrays are supported",
                f->ndim);
  }
  if (f->dim_overflow) {
    return fail(e, NULL, "a dimension in 'shape' is over %" PRIu64 " (64 bits)", UINT64_MAX);
  }
  ret->dtype = dtype;
  ret->ndim = f->ndim;
  ret->rows = f->ndim == 1 ? 1 : f->dims[0];
  ret->cols = f->ndim == 1 ? f->dims[0] : f->dims[1];
  unsigned size = qdp_dtype_size(dtype);
  if (!shape_bytes(ret->rows, ret->cols, size, &ret->data_bytes)) {
    return fail(e, NULL,
                "shape %" PRIu64 " x %" PRIu64 " of %u B elements overflows 64 bits of bytes",
                ret->rows, ret->cols, size);
  }
  return QDP_OK;
}

qdp_status qdp_npy_parse(const void *buf, size_t len, struct qdp_npy *ret,
                         struct qdp_npy_error *reterr) {
  const unsigned char *b = buf;
  size_t pre = 0;
  uint64_t hlen = 0;
  qdp_status rc = parse_preamble(b, len, &pre, &hlen, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  const char *text = (const char *)b + pre;
  struct cursor c = {text, text, text + hlen};
  struct fields f = {0};
  struct qdp_npy h;
  if ((rc = read_dict(&c, &f, reterr)) != QDP_OK || (rc = check_fields(&f, &h, reterr)) != QDP_OK) {
    return rc;
  }
  h.data_offset = pre + hlen;
  *ret = h;
  return QDP_OK;
}

qdp_status qdp_npy_check_data(const struct qdp_npy *h, uint64_t file_bytes,
                              struct qdp_npy_error *reterr) {
  uint64_t have = file_bytes > h->data_offset ? file_bytes - h->data_offset : 0;
  if (h->data_bytes <= have) {
    return QDP_OK;
  }
  fail(reterr, NULL,
       "truncated .npy file: data is %" PRIu64 " B but shape %" PRIu64 " x %" PRIu64
       " of '%s' needs %" PRIu64 " B",
       have, h->rows, h->cols, descr_of(h->dtype), h->data_bytes);
  if (reterr) {
    reterr->need_bytes = h->data_bytes;
    reterr->have_bytes = have;
  }
  return QDP_ERR_INVALID_ARGUMENT;
}

/* ---- formatting ------------------------------------------------------------------------------ */

qdp_status qdp_npy_format(qdp_dtype dtype, int ndim, uint64_t rows, uint64_t cols, char *buf,
                          size_t cap, size_t *ret_len, struct qdp_npy_error *reterr) {
  const char *descr = descr_of(dtype);
  uint64_t bytes;
  if (!descr) {
    return fail(reterr, "dtype", "dtype %d has no .npy form here", (int)dtype);
  }
  if (ndim != 1 && ndim != 2) {
    return fail(reterr, NULL, "a .npy file here has 1 or 2 dimensions, not %d", ndim);
  }
  if (ndim == 1 && rows != 1) {
    return fail(reterr, NULL, "a 1-D .npy file has 1 row, not %" PRIu64, rows);
  }
  if (!shape_bytes(rows, cols, qdp_dtype_size(dtype), &bytes)) {
    return fail(reterr, NULL, "%" PRIu64 " x %" PRIu64 " elements of %u B overflow 64 bits", rows,
                cols, qdp_dtype_size(dtype));
  }
  char dict[160];
  int n = ndim == 1 ? snprintf(dict, sizeof dict,
                               "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }",
                               descr, cols)
                    : snprintf(dict, sizeof dict,
                               "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64
                               ", %" PRIu64 "), }",
                               descr, rows, cols);
  /* magic (6) + version (2) + length (2) + dict + at least the '\n', rounded up to 64. */
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  if (cap < total) {
    return fail(reterr, NULL, ".npy header needs %zu B but the buffer has %zu B", total, cap);
  }
  memcpy(buf, npy_magic, sizeof npy_magic);
  buf[6] = 1;
  buf[7] = 0;
  buf[8] = (char)((total - 10) & 0xff);
  buf[9] = (char)((total - 10) >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
  buf[total - 1] = '\n';
  *ret_len = total;
  return QDP_OK;
}
