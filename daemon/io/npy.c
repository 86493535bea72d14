/* npy.c — .npy files on the daemon's node: mapping one for reading and atomic export. The header
 * itself is common/qdp_npy.c's; this file adds the descriptors, mappings and writes around it.
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

/* The codec's refusal as the daemon's error record. */
static qdp_status npy_refused(qdp_status rc, const struct qdp_npy_error *e,
                              struct qdp_error *reterr) {
  qdp_error_set(reterr, rc, e->field, "%s", e->msg);
  if (reterr && e->need_bytes) {
    reterr->need_bytes = e->need_bytes;
    reterr->free_bytes = e->have_bytes;
  }
  return rc;
}

qdp_status io_npy_parse(const void *buf, size_t len, struct qdp_npy *ret,
                        struct qdp_error *reterr) {
  struct qdp_npy h;
  struct qdp_npy_error e;
  qdp_status rc = qdp_npy_parse(buf, len, &h, &e);
  if (rc == QDP_OK) {
    rc = qdp_npy_check_data(&h, len, &e);
  }
  if (rc != QDP_OK) {
    return npy_refused(rc, &e, reterr);
  }
  *ret = h;
  return QDP_OK;
}

qdp_status io_npy_header(qdp_dtype dtype, int ndim, uint64_t rows, uint64_t cols, char *buf,
                         size_t cap, size_t *ret_len, struct qdp_error *reterr) {
  struct qdp_npy_error e;
  qdp_status rc = qdp_npy_format(dtype, ndim, rows, cols, buf, cap, ret_len, &e);
  return rc == QDP_OK ? QDP_OK : npy_refused(rc, &e, reterr);
}

/* ---- mapping --------------------------------------------------------------------------------- */

qdp_status io_map_npy_fd(int fd, const char *what, struct io_mapping *ret, struct qdp_npy *ret_hdr,
                         struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct io_mapping m = IO_MAPPING_INIT;
  *ret = m;
  struct stat st;
  QDP_TRY(rc, io_fstat(fd, what, &st, reterr));
  if (!S_ISREG(st.st_mode)) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "path", "%s is not a regular file", what);
    goto out;
  }
  uint64_t size = (uint64_t)st.st_size;
  struct qdp_npy hdr;
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
  QDP_TRY(rc, io_map_range(fd, 0, size, false, what, &m, reterr));
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
  char hdr[IO_NPY_HEADER_CAP];
  size_t hlen;
  QDP_TRY(rc, io_npy_header(dtype, ndim, rows, cols, hdr, sizeof hdr, &hlen, reterr));
  const uint64_t count = rows * cols; /* the header was written: it does not overflow */
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

/* Whether base (in dir) may be replaced, failing fast before writing what may be gigabytes; the
 * rename checks again atomically. */
static qdp_status may_replace(int dir, const char *base, int overwrite,
                              const struct io_file_id *own, size_t nown, const char *q,
                              struct qdp_error *reterr) {
  struct stat st;
  if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return QDP_OK;
  }
  if (!overwrite) {
    return exists_error(reterr, q);
  }
  if (S_ISDIR(st.st_mode)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "path", "%s is a directory", q);
  }
  for (size_t i = 0; i < nown; i++) {
    if (own[i].dev == (uint64_t)st.st_dev && own[i].ino == (uint64_t)st.st_ino) {
      return qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, "path",
                           "%s is one of the daemon's own files, which Export never replaces", q);
    }
  }
  return QDP_OK;
}

/* A new temporary file ".BASE.RANDOM" beside base in dir: its name in tmp (NAME_MAX + 1), its
 * descriptor in *ret_fd. */
static qdp_status create_temp(int dir, const char *base, const char *q, char *tmp, int *ret_fd,
                              struct qdp_error *reterr) {
  for (int attempt = 0; attempt < 16; attempt++) {
    char hex[17];
    qdp_status rc = io_random_hex(hex, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
    snprintf(tmp, NAME_MAX + 1, ".%s.%s", base, hex);
    int fd = openat(dir, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
      *ret_fd = fd;
      return QDP_OK;
    }
    if (errno != EEXIST) {
      return sys_error(reterr, q, "creating a temporary file beside it", errno);
    }
  }
  return sys_error(reterr, q, "creating a temporary file beside it", EEXIST);
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
  QDP_TRY(rc, may_replace(dir, base, overwrite, own, nown, q, reterr));
  QDP_TRY(rc, create_temp(dir, base, q, tmp, &fd, reterr));
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
