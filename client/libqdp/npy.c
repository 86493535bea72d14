/* Local input files for libqdp: a .npy file (its header read by the shared codec,
 * common/qdp_npy.h), a CSV file (parsed by csv.c) or a raw file of one element type, described
 * for an upload. The writing side of .npy (a fetched state) formats its header with the same codec
 * (calls_fetch.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libqdp_int.h"
#include "qdp_npy.h"

/* The first read of a file: enough for any header numpy writes; a longer one is read again whole
 * (up to QDP_NPY_PREFIX_MAX). */
#define HEAD_READ 4096

qdp_status qdp__npy_parse(const void *buf, size_t len, struct qdp__npy *ret) {
  struct qdp_npy h;
  struct qdp_npy_error e;
  if (qdp_npy_parse(buf, len, &h, &e) != QDP_OK) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "npy", "%s.", e.msg);
  }
  *ret = (struct qdp__npy){.dtype = h.dtype,
                           .ndim = h.ndim,
                           .shape = {h.rows, h.cols},
                           .count = h.rows * h.cols,
                           .data_offset = h.data_offset};
  return QDP_OK;
}

/* Prefixes the message of the error just recorded with the quoted path. */
static qdp_status with_path(qdp_status rc, const char *path) {
  struct qdp_errinfo *e = qdp__err();
  char old[sizeof e->msg];
  memcpy(old, e->msg, sizeof old);
  snprintf(e->msg, sizeof e->msg, "'%.200s': %.800s", path, old);
  return rc;
}

/* The header of the .npy file open on fd, whose first `got` bytes are in head. */
static qdp_status npy_header(int fd, const char *path, uint64_t fsize, const unsigned char *head,
                             size_t got, struct qdp__npy *d) {
  qdp_status rc = qdp__npy_parse(head, got, d);
  if (rc != QDP_OK && got == HEAD_READ && fsize > HEAD_READ) {
    /* A header longer than the first read: read it whole (bounded by the format's limit). */
    size_t want = fsize < QDP_NPY_PREFIX_MAX ? (size_t)fsize : QDP_NPY_PREFIX_MAX;
    unsigned char *big = malloc(want);
    if (!big) {
      return qdp__err_nomem("reading a .npy header");
    }
    ssize_t g2 = pread(fd, big, want, 0);
    rc = g2 < 0 ? qdp__err_local(QDP_ERR_SYSTEM, errno, "input.path", "Cannot read '%s'.", path)
                : qdp__npy_parse(big, (size_t)g2, d);
    free(big);
  }
  return rc == QDP_OK ? QDP_OK : with_path(rc, path);
}

/* A .npy input: its header, an input dtype that matches the one asked for (if any), and all of
 * its data in the file. */
static qdp_status npy_input(int fd, const char *path, qdp_dtype dtype, uint64_t fsize,
                            const unsigned char *head, size_t got, struct qdp__npy *d) {
  qdp_status rc = npy_header(fd, path, fsize, head, got, d);
  if (rc != QDP_OK) {
    return rc;
  }
  if (d->dtype != QDP_DTYPE_FLOAT32 && d->dtype != QDP_DTYPE_FLOAT64 &&
      d->dtype != QDP_DTYPE_INT64) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                          "'%s' holds %s values; inputs are float32, float64 or int64.", path,
                          qdp_dtype_name(d->dtype));
  }
  if (dtype != QDP_DTYPE_UNSPECIFIED && dtype != d->dtype) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                          "'%s' holds %s values but %s was asked for.", path,
                          qdp_dtype_name(d->dtype), qdp_dtype_name(dtype));
  }
  const unsigned es = qdp_dtype_size(d->dtype);
  struct qdp_npy h = {d->dtype, d->ndim, d->shape[0], d->shape[1], d->data_offset, d->count * es};
  struct qdp_npy_error e;
  if (qdp_npy_check_data(&h, fsize, &e) != QDP_OK) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path", "'%s': %s.", path, e.msg);
  }
  return QDP_OK;
}

/* A raw input: elements of `dtype` from offset to the end of the file, one sample of them. */
static qdp_status raw_input(const char *path, qdp_dtype dtype, uint64_t offset, uint64_t fsize,
                            struct qdp__npy *d) {
  if (dtype != QDP_DTYPE_FLOAT32 && dtype != QDP_DTYPE_FLOAT64 && dtype != QDP_DTYPE_INT64) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                          "'%s' is neither .npy nor text (CSV), so it is read as raw values: "
                          "give their element type (float32, float64 or int64).",
                          path);
  }
  if (offset > fsize) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.offset",
                          "The offset %" PRIu64 " is past the end of '%s' (%" PRIu64 " bytes).",
                          offset, path, fsize);
  }
  const unsigned es = qdp_dtype_size(dtype);
  if ((fsize - offset) % es != 0) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                          "'%s' has %" PRIu64 " bytes after offset %" PRIu64
                          ", not a whole number of %u-byte %s values.",
                          path, fsize - offset, offset, es, qdp_dtype_name(dtype));
  }
  const uint64_t count = (fsize - offset) / es;
  *d = (struct qdp__npy){
      .dtype = dtype, .ndim = 1, .shape = {1, count}, .count = count, .data_offset = offset};
  return QDP_OK;
}

qdp_status qdp__read_at(int fd, const char *path, void *buf, size_t n, uint64_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      int err = errno;
      return qdp__err_local(QDP_ERR_SYSTEM, err, "input.path",
                            "Reading '%s' at byte %" PRIu64 " failed: %s.", path, off + done,
                            strerror(err));
    }
    if (r == 0) {
      return qdp__err_local(QDP_ERR_DATA_LOSS, -1, "input.path",
                            "'%s' ended at byte %" PRIu64
                            " while it was read, short of the %" PRIu64
                            " it had: it changed under the read; nothing was encoded.",
                            path, off + done, off + n);
    }
    done += (size_t)r;
  }
  return QDP_OK;
}

/* Reshape by rows and/or cols (nonzero): either one alone takes the other from the count. */
static qdp_status reshape(const char *path, uint64_t rows, uint64_t cols, struct qdp__npy *d) {
  uint64_t r = rows, k = cols;
  if (!r) {
    r = k && d->count % k == 0 ? d->count / k : 0;
  }
  if (!k) {
    k = r && d->count % r == 0 ? d->count / r : 0;
  }
  if (!r || !k || r > UINT64_MAX / k || r * k != d->count) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, rows ? "input.rows" : "input.cols",
                          "'%s' holds %" PRIu64 " values, which is not rows %" PRIu64
                          " x cols %" PRIu64 ".",
                          path, d->count, rows, cols);
  }
  d->shape[0] = r;
  d->shape[1] = k;
  d->ndim = 2;
  return QDP_OK;
}

/* Adds to the CSV error just recorded why the file was read as CSV and what else to do, and names
 * raw as the field: the file was taken for CSV only because its bytes are text. */
static qdp_status sniffed_csv(qdp_status rc) {
  struct qdp_errinfo *e = qdp__err();
  char old[sizeof e->msg];
  memcpy(old, e->msg, sizeof old);
  snprintf(e->msg, sizeof e->msg,
           "%.700s The file is text, so it was read as CSV: make it CSV (one sample per row, "
           "numbers between commas), convert it to .npy (numpy.save), or set raw to read its "
           "bytes as values.",
           old);
  snprintf(e->field, sizeof e->field, "input.raw");
  return rc;
}

/* A CSV input: the whole file read and parsed into values (f->values). */
static qdp_status csv_input(int fd, const char *path, qdp_dtype dtype, uint64_t fsize,
                            struct qdp__input_file *f) {
  if (fsize >= SIZE_MAX) {
    return qdp__err_nomem("reading a CSV file");
  }
  char *text = malloc((size_t)fsize + 1);
  if (!text) {
    return qdp__err_nomem("reading a CSV file");
  }
  struct qdp__csv t;
  qdp_status rc = qdp__read_at(fd, path, text, (size_t)fsize, 0);
  if (rc == QDP_OK) {
    rc = qdp__csv_parse(path, text, (size_t)fsize, dtype, &t);
  }
  free(text);
  if (rc != QDP_OK) {
    return rc;
  }
  f->d = (struct qdp__npy){.dtype = t.dtype,
                           .ndim = 2,
                           .shape = {t.rows, t.cols},
                           .count = t.rows * t.cols,
                           .data_offset = 0};
  f->values = t.values;
  f->csv = true;
  return QDP_OK;
}

/* Whether path's name ends in ".csv" (any case). */
static bool csv_name(const char *path) {
  size_t n = strlen(path);
  return n >= 4 && strcasecmp(path + n - 4, ".csv") == 0;
}

/* What the file on fd is and its data's description: raw when asked, else .npy by its magic, CSV
 * by its name or text, raw otherwise. */
static qdp_status describe_file(int fd, const struct qdp_input *in, bool raw, uint64_t fsize,
                                struct qdp__input_file *f) {
  if (raw) {
    return raw_input(in->path, in->dtype, in->offset, fsize, &f->d);
  }
  unsigned char head[HEAD_READ];
  ssize_t got;
  do {
    got = pread(fd, head, sizeof head, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    int err = errno;
    return qdp__err_local(QDP_ERR_SYSTEM, err, "input.path", "Cannot read '%s': %s.", in->path,
                          strerror(err));
  }
  /* A file that starts with the magic is a .npy, whatever else is wrong with it. */
  bool npy = (size_t)got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0;
  bool named = !npy && csv_name(in->path);
  bool text = !npy && !named && qdp__looks_like_text(head, (size_t)got, (uint64_t)got == fsize);
  if ((npy || named || text) && in->offset) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.offset",
                          "'%s' is %s, which says where its values are; offset %" PRIu64
                          " is for raw files.",
                          in->path, npy ? "a .npy file" : "CSV", in->offset);
  }
  if (npy) {
    return npy_input(fd, in->path, in->dtype, fsize, head, (size_t)got, &f->d);
  }
  if (named || text) {
    qdp_status rc = csv_input(fd, in->path, in->dtype, fsize, f);
    return rc == QDP_ERR_INVALID_ARGUMENT && text ? sniffed_csv(rc) : rc;
  }
  return raw_input(in->path, in->dtype, in->offset, fsize, &f->d);
}

qdp_status qdp__input_file_open(const struct qdp_input *in, struct qdp__input_file *ret) {
  *ret = (struct qdp__input_file){.fd = -1};
  const bool raw = in->struct_size >= offsetof(struct qdp_input, raw) + sizeof in->raw && in->raw;
  /* O_NONBLOCK: a FIFO named by mistake is refused below instead of blocking the open. */
  int fd = open(in->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    return qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "input.path",
                          "Cannot open '%s': %s.", in->path, strerror(err));
  }
  struct stat st;
  qdp_status rc = QDP_OK;
  struct qdp__input_file f = {.fd = -1};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path", "'%s' is not a regular file.",
                        in->path);
  } else {
    rc = describe_file(fd, in, raw, (uint64_t)st.st_size, &f);
  }
  if (rc == QDP_OK && (in->rows || in->cols)) {
    rc = reshape(in->path, in->rows, in->cols, &f.d);
  }
  if (rc != QDP_OK || f.csv) {
    close(fd); /* CSV: its values are parsed */
  }
  if (rc != QDP_OK) {
    free(f.values);
    return rc;
  }
  f.fd = f.csv ? -1 : fd;
  *ret = f;
  return QDP_OK;
}
