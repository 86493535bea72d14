/* map.c — mappings of node-local inputs, confinement folders, and the helpers npy.c shares. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "io/internal.h"
#include "io/map.h"

#ifndef F_SEAL_FUTURE_WRITE
#define QDP_F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#else
#define QDP_F_SEAL_FUTURE_WRITE F_SEAL_FUTURE_WRITE
#endif
#ifndef MADV_POPULATE_WRITE
#define QDP_MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#else
#define QDP_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#endif

void io_quote(char *dst, size_t cap, const char *src) {
  if (cap == 0) {
    return;
  }
  if (!src) {
    src = "";
  }
  size_t n = strlen(src);
  size_t keep = n < cap ? n : cap - 1;
  int cut = keep < n && cap > 4;
  if (cut) {
    keep = cap - 4;
  }
  for (size_t i = 0; i < keep; i++) {
    unsigned char c = (unsigned char)src[i];
    dst[i] = (c < 0x20 || c == 0x7f || c == '\'') ? '?' : (char)c;
  }
  if (cut) {
    memcpy(dst + keep, "...", 3);
    keep += 3;
  }
  dst[keep] = '\0';
}

qdp_status io_check_path(const char *path, const char *field, struct qdp_error *reterr) {
  if (!path || !*path) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "'%s' is empty; give an absolute path on the daemon's node",
                         field ? field : "path");
  }
  char q[IO_QUOTE_CAP];
  io_quote(q, sizeof q, path);
  size_t len = strlen(path);
  if (path[0] != '/') {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "'%s' is a relative path; give an absolute path on the daemon's node", q);
  }
  if (len >= PATH_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "'%s' is %zu B long; paths are at most %d B", q, len, PATH_MAX - 1);
  }
  return QDP_OK;
}

qdp_status io_open_error(int err, const char *what, const char *field, struct qdp_error *reterr) {
  qdp_status code = QDP_ERR_SYSTEM;
  const char *hint = "";
  if (err == ENOENT || err == ENOTDIR) {
    code = QDP_ERR_NOT_FOUND;
    hint = " (no such file)";
  } else if (err == EACCES || err == EPERM) {
    code = QDP_ERR_PERMISSION_DENIED;
    hint = " (the daemon's user may not read it)";
  }
  qdp_error_set(reterr, code, field, "%s: cannot open: %s%s", what, strerror(err), hint);
  if (reterr) {
    reterr->cause = err;
  }
  return code;
}

qdp_status io_random_hex(char *out, struct qdp_error *reterr) {
  unsigned char b[8];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno != EINTR) {
      int err = errno;
      return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err, "getrandom failed: %s",
                              strerror(err));
    }
    got += n > 0 ? (size_t)n : 0;
  }
  for (size_t i = 0; i < sizeof b; i++) {
    snprintf(out + 2 * i, 3, "%02x", b[i]);
  }
  return QDP_OK;
}

qdp_status io_map_range(int fd, uint64_t offset, uint64_t length, bool writable, const char *what,
                        struct io_mapping *ret, struct qdp_error *reterr) {
  long ps = sysconf(_SC_PAGESIZE);
  uint64_t page = ps > 0 ? (uint64_t)ps : 4096;
  uint64_t aligned = offset - offset % page;
  uint64_t delta = offset - aligned;
  if (length > SIZE_MAX - delta || aligned > (uint64_t)INT64_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "%s: %" PRIu64 " B at offset %" PRIu64
                         " cannot be mapped in this address space",
                         what, length, offset);
  }
  size_t map_len = (size_t)(length + delta);
  int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void *base = mmap(NULL, map_len, prot, MAP_SHARED, fd, (off_t)aligned);
  if (base == MAP_FAILED) {
    int err = errno;
    /* A memfd sealed against writing cannot be mapped for writing (EPERM). */
    bool write_sealed = err == EPERM && writable;
    qdp_status code = err == ENOMEM   ? QDP_ERR_RESOURCE_EXHAUSTED
                      : err == EACCES ? QDP_ERR_PERMISSION_DENIED
                      : write_sealed  ? QDP_ERR_FAILED_PRECONDITION
                                      : QDP_ERR_SYSTEM;
    qdp_error_set(reterr, code, NULL, "%s: mmap of %zu B at offset %" PRIu64 " failed: %s%s", what,
                  map_len, aligned, strerror(err),
                  err == EACCES  ? (writable ? " (the descriptor is not open for reading and "
                                               "writing, O_RDWR)"
                                             : " (the descriptor is not open for reading)")
                  : write_sealed ? " (it is sealed against writing, F_SEAL_WRITE or "
                                   "F_SEAL_FUTURE_WRITE: register it read-only)"
                                 : "");
    if (reterr) {
      reterr->cause = err;
      reterr->need_bytes = map_len;
    }
    return code;
  }
  ret->base = base;
  ret->map_len = map_len;
  ret->data = (const char *)base + delta;
  ret->bytes = length;
  ret->fd = fd;
  ret->file_end = offset + length;
#ifdef F_GET_SEALS
  int seals = fcntl(fd, F_GET_SEALS);
  ret->sealed = seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
  ret->frozen = ret->sealed && (seals & (F_SEAL_WRITE | QDP_F_SEAL_FUTURE_WRITE)) != 0;
#else
  ret->sealed = 0;
  ret->frozen = 0;
#endif
  return QDP_OK;
}

bool io_mapping_generation(const struct io_mapping *m, int64_t *ret_ns) {
  struct stat st;
  if (!m || !m->base || fstat(m->fd, &st) != 0) {
    return false;
  }
  *ret_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
  return true;
}

bool io_mapping_changed(const struct io_mapping *m, int64_t since_ns) {
  int64_t now = 0;
  if (!m || !m->base) {
    return false;
  }
  return !io_mapping_generation(m, &now) || now != since_ns || io_mapping_shrunk(m);
}

qdp_status io_mapping_populate_write(struct io_mapping *m, struct qdp_error *reterr) {
  if (madvise(m->base, m->map_len, QDP_MADV_POPULATE_WRITE) == 0) {
    return QDP_OK;
  }
  int err = errno;
  if (err == EINVAL) {
    /* No MADV_POPULATE_WRITE (Linux < 5.14): a write fault on each page, changing no byte. */
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    for (size_t at = 0; at < m->map_len; at += page) {
      __atomic_fetch_add((unsigned char *)m->base + at, 0, __ATOMIC_RELAXED);
    }
    return QDP_OK;
  }
  qdp_status code = err == ENOMEM ? QDP_ERR_RESOURCE_EXHAUSTED : QDP_ERR_SYSTEM;
  qdp_error_set(reterr, code, NULL, "making the %zu B of a writable region present failed: %s",
                m->map_len, strerror(err));
  if (reterr) {
    reterr->cause = err;
    reterr->need_bytes = m->map_len;
  }
  return code;
}

bool io_mapping_shrunk(const struct io_mapping *m) {
  struct stat st;
  if (!m || !m->base) {
    return false;
  }
  /* A descriptor fstat cannot read says nothing good about the object either. */
  return fstat(m->fd, &st) != 0 || (uint64_t)st.st_size < m->file_end;
}

int io_mapping_resident(const struct io_mapping *m) {
  if (!m || !m->base) {
    return -1;
  }
  long ps = sysconf(_SC_PAGESIZE);
  uint64_t page = ps > 0 ? (uint64_t)ps : 4096;
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -1;
  }
  uint64_t first = (uint64_t)(uintptr_t)m->base / page;
  uint64_t pages = (m->map_len + page - 1) / page;
  uint64_t buf[4096];
  int all = 1;
  for (uint64_t at = 0; at < pages && all == 1;) {
    uint64_t n = pages - at < 4096 ? pages - at : 4096;
    ssize_t got = pread(fd, buf, n * sizeof *buf, (off_t)((first + at) * sizeof *buf));
    if (got <= 0 || got % (ssize_t)sizeof *buf) {
      all = -1;
      break;
    }
    for (uint64_t i = 0; i < (uint64_t)got / sizeof *buf; i++) {
      if (!(buf[i] >> 63)) { /* bit 63: present */
        all = 0;
        break;
      }
    }
    at += (uint64_t)got / sizeof *buf;
  }
  close(fd);
  return all;
}

void io_unmap(struct io_mapping *m) {
  if (!m) {
    return;
  }
  if (m->base) {
    munmap(m->base, m->map_len);
    close(m->fd);
  }
  *m = (struct io_mapping)IO_MAPPING_INIT;
}

qdp_status io_fstat(int fd, const char *what, struct stat *ret, struct qdp_error *reterr) {
  if (fstat(fd, ret) != 0) {
    int err = errno;
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err, "%s: fstat failed: %s", what,
                            strerror(err));
  }
  return QDP_OK;
}

qdp_status io_map_fd(int fd, const char *what, uint64_t offset, uint64_t length, unsigned flags,
                     struct io_mapping *ret, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  bool whole = (flags & IO_MAP_WHOLE) != 0;
  *ret = (struct io_mapping)IO_MAPPING_INIT;
  struct stat st;
  QDP_TRY(rc, io_fstat(fd, what, &st, reterr));
  if (!S_ISREG(st.st_mode)) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "shm",
                       "%s is not shared memory or a regular file (mode 0%o)", what,
                       (unsigned)(st.st_mode & S_IFMT));
    goto out;
  }
  uint64_t size = (uint64_t)st.st_size;
  if (whole && size == 0) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "shm",
                       "%s is empty (0 B); give it its size before registering it", what);
    goto out;
  }
  if (whole) {
    offset = 0;
    length = size;
  }
  if (length == 0) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "shm.length",
                       "%s: length is 0 B; give the bytes to read (the region has %" PRIu64 " B)",
                       what, size);
    goto out;
  }
  /* Compare without forming offset + length, which may overflow. */
  if (offset > size || length > size - offset) {
    rc = qdp_error_set(reterr, QDP_ERR_OUT_OF_RANGE, offset > size ? "shm.offset" : "shm.length",
                       "%s: offset %" PRIu64 " B + length %" PRIu64
                       " B passes the end of the region, which has %" PRIu64 " B",
                       what, offset, length, size);
    if (reterr) {
      reterr->need_bytes = length;
      reterr->free_bytes = offset > size ? 0 : size - offset;
    }
    goto out;
  }
  rc = io_map_range(fd, offset, length, (flags & IO_MAP_WRITABLE) != 0, what, ret, reterr);
out:
  if (rc != QDP_OK) {
    close(fd);
  }
  return rc;
}

/* ---- file identities and folders ----------------------------------------------------------- */

qdp_status io_file_id_of(int fd, struct io_file_id *ret, struct qdp_error *reterr) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err, "fstat of a descriptor failed: %s",
                            strerror(err));
  }
  *ret = (struct io_file_id){.dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino};
  return QDP_OK;
}

qdp_status io_check_not_own(int fd, const struct io_file_id *own, size_t n, const char *field,
                            struct qdp_error *reterr) {
  struct io_file_id id;
  qdp_status rc = io_file_id_of(fd, &id, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    if (own[i].dev == id.dev && own[i].ino == id.ino) {
      return qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, field,
                           "%s names one of the daemon's own files (its socket, lock, "
                           "configuration or token file), which it neither reads nor writes "
                           "for a caller",
                           field);
    }
  }
  return QDP_OK;
}

qdp_status io_folder_open(const char *path, const char *option, struct io_folder *f,
                          struct qdp_error *reterr) {
  *f = (struct io_folder)IO_FOLDER_INIT;
  if (!path || !path[0]) {
    return QDP_OK;
  }
  char q[IO_QUOTE_CAP];
  io_quote(q, sizeof q, path);
  if (path[0] != '/' || strlen(path) >= sizeof f->path) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, option,
                         "%s = '%s' is not an absolute path shorter than %zu B", option, q,
                         sizeof f->path);
  }
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    char what[IO_QUOTE_CAP + 64];
    snprintf(what, sizeof what, "%s = '%s'", option, q);
    return io_open_error(errno, what, option, reterr);
  }
  char *real = realpath(path, NULL);
  snprintf(f->path, sizeof f->path, "%s", path);
  snprintf(f->real, sizeof f->real, "%s", real ? real : path);
  free(real);
  /* "/data/" and "/data" name the same folder. */
  for (char *p = f->path; strlen(p) > 1 && p[strlen(p) - 1] == '/';) {
    p[strlen(p) - 1] = '\0';
  }
  f->fd = fd;
  return QDP_OK;
}

void io_folder_close(struct io_folder *f) {
  if (f && f->fd >= 0) {
    close(f->fd);
    f->fd = -1;
  }
}

/* The rest of path after folder prefix dir, or NULL when path is not strictly below it. */
static const char *below(const char *path, const char *dir) {
  size_t n = strlen(dir);
  if (n == 1 && dir[0] == '/') {
    return path[0] == '/' && path[1] ? path + 1 : NULL;
  }
  if (strncmp(path, dir, n) != 0 || path[n] != '/') {
    return NULL;
  }
  const char *rest = path + n;
  while (*rest == '/') {
    rest++;
  }
  return *rest ? rest : NULL;
}

qdp_status io_folder_relative(const struct io_folder *f, const char *path, const char *field,
                              char *rel, struct qdp_error *reterr) {
  qdp_status rc = io_check_path(path, field, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  const char *rest = below(path, f->path);
  if (!rest) {
    rest = below(path, f->real);
  }
  if (!rest) {
    char q[IO_QUOTE_CAP], d[IO_QUOTE_CAP];
    io_quote(q, sizeof q, path);
    io_quote(d, sizeof d, f->path);
    return qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, field,
                         "%s = '%s' is outside '%s', the only folder this daemon allows for it",
                         field, q, d);
  }
  snprintf(rel, PATH_MAX, "%s", rest);
  return QDP_OK;
}

qdp_status io_folder_open_rel(const struct io_folder *f, const char *rel, int flags,
                              const char *field, const char *what, int *ret_fd,
                              struct qdp_error *reterr) {
  /* openat2 refuses O_PATH with any flag but O_CLOEXEC, O_DIRECTORY and O_NOFOLLOW. */
  struct open_how how = {
      .flags = (uint64_t)(flags | O_CLOEXEC | (flags & O_PATH ? 0 : O_NOCTTY)),
      .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
  };
  long fd;
  do {
    fd = syscall(SYS_openat2, f->fd, rel, &how, sizeof how);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  if (fd < 0) {
    int err = errno;
    if (err == EXDEV) {
      qdp_error_set_at(reterr, QDP_ERR_PERMISSION_DENIED, -1, err,
                       "%s: a '..' or a symbolic link leads out of the folder it must stay in "
                       "(links inside it must be relative and stay inside)",
                       what);
      if (reterr) {
        snprintf(reterr->field, sizeof reterr->field, "%s", field);
      }
      return QDP_ERR_PERMISSION_DENIED;
    }
    if (err == ENOSYS) {
      return qdp_error_set_at(reterr, QDP_ERR_FAILED_PRECONDITION, -1, err,
                              "%s: this kernel has no openat2(2) (Linux 5.6 or later is needed "
                              "to open files beneath a folder safely)",
                              what);
    }
    return io_open_error(err, what, field, reterr);
  }
  *ret_fd = (int)fd;
  return QDP_OK;
}

qdp_status io_folder_open_file(const struct io_folder *f, const char *path, int flags,
                               const char *field, int *ret_fd, struct qdp_error *reterr) {
  char rel[PATH_MAX];
  qdp_status rc = io_folder_relative(f, path, field, rel, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  char q[IO_QUOTE_CAP + 2];
  char name[IO_QUOTE_CAP];
  io_quote(name, sizeof name, path);
  snprintf(q, sizeof q, "'%s'", name);
  return io_folder_open_rel(f, rel, flags, field, q, ret_fd, reterr);
}

qdp_status io_folder_check_fd(const struct io_folder *f, const char *path, int fd,
                              const char *field, struct qdp_error *reterr) {
  int there = -1;
  qdp_status rc = io_folder_open_file(f, path, O_PATH, field, &there, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  struct io_file_id a, b;
  rc = io_file_id_of(fd, &a, reterr);
  if (rc == QDP_OK) {
    rc = io_file_id_of(there, &b, reterr);
  }
  close(there);
  if (rc == QDP_OK && (a.dev != b.dev || a.ino != b.ino)) {
    char q[IO_QUOTE_CAP];
    io_quote(q, sizeof q, path);
    rc = qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, field,
                       "the descriptor handed over for %s is not the file '%s' names in the "
                       "folder",
                       field, q);
  }
  return rc;
}
