/* map.c — shared-memory mappings and the helpers npy.c shares. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/internal.h"
#include "io/map.h"

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

qdp_status io_map_fd(int fd, uint64_t offset, uint64_t length, const char *what,
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
  void *base = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, (off_t)aligned);
  if (base == MAP_FAILED) {
    int err = errno;
    qdp_status code = err == ENOMEM ? QDP_ERR_RESOURCE_EXHAUSTED : QDP_ERR_SYSTEM;
    qdp_error_set(reterr, code, NULL, "%s: mmap of %zu B at offset %" PRIu64 " failed: %s", what,
                  map_len, aligned, strerror(err));
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
#ifdef F_GET_SEALS
  int seals = fcntl(fd, F_GET_SEALS);
  ret->sealed = seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
#else
  ret->sealed = 0;
#endif
  return QDP_OK;
}

void io_unmap(struct io_mapping *m) {
  if (!m) {
    return;
  }
  if (m->base) {
    munmap(m->base, m->map_len);
  }
  *m = (struct io_mapping)IO_MAPPING_INIT;
}

/* Opens the region read-only; *ret_fd on success, with `what` describing it for messages. */
static qdp_status open_region(const char *name, int pid, int fd, char *what, size_t what_cap,
                              int *ret_fd, struct qdp_error *reterr) {
  if (name && *name) {
    char q[IO_QUOTE_CAP];
    io_quote(q, sizeof q, name);
    snprintf(what, what_cap, "shared memory '%s'", q);
    size_t len = strlen(name);
    if (name[0] != '/' || strchr(name + 1, '/') || len < 2 || len > NAME_MAX) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "shm.name",
                           "%s: a shared-memory name is '/' then 1 to %d characters with no "
                           "other '/'",
                           what, NAME_MAX - 1);
    }
    /* shm_open always sets FD_CLOEXEC (POSIX, and glibc passes O_CLOEXEC itself). */
    int f = shm_open(name, O_RDONLY, 0);
    if (f < 0) {
      return io_open_error(errno, what, "shm.name", reterr);
    }
    *ret_fd = f;
    return QDP_OK;
  }
  if (pid <= 0 || fd < 0) {
    snprintf(what, what_cap, "shared memory");
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, pid <= 0 ? "shm.pid" : "shm.fd",
                         "shared memory needs a name, or a pid > 0 and an fd >= 0 (got pid %d, "
                         "fd %d)",
                         pid, fd);
  }
  snprintf(what, what_cap, "fd %d of process %d", fd, pid);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  /* stat before open: opening a FIFO would block and opening a device may have side effects, so
   * anything but a regular file is refused before it is touched. */
  struct stat st;
  if (stat(path, &st) != 0) {
    int err = errno;
    if (err == ENOENT) {
      return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "shm.fd",
                           "%s: no such process or no such open fd", what);
    }
    return io_open_error(err, what, "shm.fd", reterr);
  }
  if (!S_ISREG(st.st_mode)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "shm.fd",
                         "%s is not shared memory or a regular file (mode 0%o)", what,
                         (unsigned)(st.st_mode & S_IFMT));
  }
  int f = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (f < 0) {
    return io_open_error(errno, what, "shm.fd", reterr);
  }
  *ret_fd = f;
  return QDP_OK;
}

/* io_map_shm, or with `whole` the entire object (offset and length ignored). */
static qdp_status map_shm(const char *name, int pid, int fd, uint64_t offset, uint64_t length,
                          bool whole, struct io_mapping *ret, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  char what[IO_QUOTE_CAP + 32];
  int f = -1;
  *ret = (struct io_mapping)IO_MAPPING_INIT;
  QDP_TRY(rc, open_region(name, pid, fd, what, sizeof what, &f, reterr));
  struct stat st;
  if (fstat(f, &st) != 0) {
    int err = errno;
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err, "%s: fstat failed: %s", what,
                          strerror(err));
    goto out;
  }
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
  QDP_TRY(rc, io_map_fd(f, offset, length, what, ret, reterr));
out:
  if (f >= 0) {
    close(f);
  }
  return rc;
}

qdp_status io_map_shm(const char *name, int pid, int fd, uint64_t offset, uint64_t length,
                      struct io_mapping *ret, struct qdp_error *reterr) {
  return map_shm(name, pid, fd, offset, length, false, ret, reterr);
}

qdp_status io_map_shm_whole(const char *name, int pid, int fd, struct io_mapping *ret,
                            struct qdp_error *reterr) {
  return map_shm(name, pid, fd, 0, 0, true, ret, reterr);
}
