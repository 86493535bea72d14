/* Local input files for libqdp: a .npy file (its header read by the shared codec,
 * common/qdp_npy.h) or a raw file of one element type, described for an upload or a handoff. The
 * writing side of .npy (a fetched state) formats its header with the same codec (calls_fetch.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
                          "'%s' is a raw file (no .npy header): give its element type "
                          "(float32, float64 or int64).",
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
  const uint64_t fsize = (uint64_t)st.st_size;
  unsigned char head[HEAD_READ];
  ssize_t got = pread(fd, head, sizeof head, 0);
  if (got < 0) {
    int err = errno;
    close(fd);
    return qdp__err_local(QDP_ERR_SYSTEM, err, "input.path", "Cannot read '%s': %s.", path,
                          strerror(err));
  }
  /* A file that starts with the magic is a .npy, whatever else is wrong with it. */
  struct qdp__npy d;
  qdp_status rc = (size_t)got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0
                      ? npy_input(fd, path, dtype, fsize, head, (size_t)got, &d)
                      : raw_input(path, dtype, offset, fsize, &d);
  if (rc == QDP_OK && (rows || cols)) {
    rc = reshape(path, rows, cols, &d);
  }
  if (rc != QDP_OK) {
    close(fd);
    return rc;
  }
  *ret = d;
  *ret_fd = fd;
  return QDP_OK;
}
