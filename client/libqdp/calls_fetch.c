/* calls_fetch.c — a state's amplitudes out of qdpd: Fetch streamed into memory or a local .npy
 * file (its header from common/qdp_npy.h), and Export (a .npy on qdpd's node). Any thread. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"
#include "qdp_npy.h"
#include "qdp_wire.h"

#define M_EXPORT "/qdp.Qdp/Export"
#define M_FETCH "/qdp.Qdp/Fetch"
#define M_FETCH_INTO "/qdp.Qdp/FetchInto"

/* ---- Fetch ---- */

/* Where fetched chunks go: the caller's buffer or a file descriptor (after a header). */
struct sink {
  unsigned char *dst;
  size_t dst_bytes;
  int fd;
  uint64_t fd_base;
  const char *path;
  qdp_dtype want_dtype; /* UNSPECIFIED: take the first chunk's */
  qdp_dtype dtype;
  uint64_t offset;   /* of the request */
  uint64_t total;    /* amplitudes, from the first chunk */
  uint64_t expect;   /* amplitudes the caller expects; 0 = any */
  uint64_t received; /* bytes */
};

/* One chunk's fields; its data is copied out by `copy` (from a parsed message or straight from the
 * received slices), so the bytes are moved once. */
struct chunk {
  uint64_t offset, total, len;
  int dtype;
  void (*copy)(void *arg, void *dst, uint64_t n);
  void *arg;
};

static qdp_status sink_put(struct sink *s, const struct chunk *ch) {
  if (s->dtype == QDP_DTYPE_UNSPECIFIED) {
    s->dtype = (qdp_dtype)ch->dtype;
    s->total = ch->total;
    unsigned es = qdp_dtype_size(s->dtype);
    if (!es) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                            "qdpd's fetch stream has an unknown dtype %d.", (int)ch->dtype);
    }
    if (s->want_dtype != QDP_DTYPE_UNSPECIFIED && s->dtype != s->want_dtype) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "qdpd streamed %s values for a %s state.",
                            qdp_dtype_name(s->dtype), qdp_dtype_name(s->want_dtype));
    }
    if (s->expect && s->total != s->expect) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                            "qdpd is streaming %" PRIu64 " amplitudes where %" PRIu64
                            " were asked for.",
                            s->total, s->expect);
    }
    if (s->dst && s->total > s->dst_bytes / es) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "dst_bytes",
                            "The fetch returns %" PRIu64 " amplitudes (%" PRIu64
                            " bytes) but the buffer holds %zu bytes.",
                            s->total, s->total * es, s->dst_bytes);
    }
  }
  unsigned es = qdp_dtype_size(s->dtype);
  uint64_t len = ch->len;
  if ((qdp_dtype)ch->dtype != s->dtype || ch->offset < s->offset || len % es != 0 ||
      ch->offset - s->offset > s->total || len / es > s->total - (ch->offset - s->offset)) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd sent a chunk outside the fetch: offset %" PRIu64 ", %" PRIu64
                          " bytes, for amplitudes [%" PRIu64 ", %" PRIu64 ").",
                          ch->offset, len, s->offset, s->offset + s->total);
  }
  uint64_t at = (ch->offset - s->offset) * es;
  if (s->dst) {
    ch->copy(ch->arg, s->dst + at, len);
  } else {
    /* A file: through a bounded buffer, pwrite'd in place. */
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes) {
      return qdp__err_local(QDP_ERR_RESOURCE_EXHAUSTED, ENOMEM, NULL,
                            "No memory for a fetch chunk of %" PRIu64 " bytes.", len);
    }
    ch->copy(ch->arg, bytes, len);
    size_t done = 0;
    while (done < len) {
      ssize_t n = pwrite(s->fd, bytes + done, len - done, (off_t)(s->fd_base + at + done));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        int err = n < 0 ? errno : ENOSPC;
        free(bytes);
        return qdp__err_local(QDP_ERR_SYSTEM, err, "path", "Writing '%s' failed: %s.", s->path,
                              strerror(err));
      }
      done += (size_t)n;
    }
    free(bytes);
  }
  s->received += len;
  return QDP_OK;
}

/* A read cursor over a received message's slices, so that a chunk's data is copied once, straight
 * to where it belongs, instead of joined, unpacked and copied again. */
static void binary_copy(void *arg, void *dst, uint64_t n) {
  /* A chunk without data has (NULL, 0) there, and memcpy wants valid pointers even for 0 bytes. */
  if (n) {
    memcpy(dst, ((const ProtobufCBinaryData *)arg)->data, n);
  }
}

/* Delivers one received FetchChunk to the sink. In qdpd's layout (common/qdp_wire.h) the data is
 * copied straight from the slices; any other layout, still valid protobuf, goes through the
 * generic unpack. */
static qdp_status read_chunk(grpc_byte_buffer *bb, struct sink *s) {
  struct qdp_wire_reader k;
  struct qdp_wire_chunk h;
  if (qdp_wire_fetch_chunk_open(bb, &k, &h)) {
    struct chunk ch = {.offset = h.offset,
                       .total = h.total,
                       .len = h.data_len,
                       .dtype = h.dtype,
                       .copy = qdp_wire_reader_copy,
                       .arg = &k};
    qdp_status rc = sink_put(s, &ch);
    qdp_wire_reader_close(&k);
    return rc;
  }
  qdp_wire_reader_close(&k);
  Qdp__FetchChunk *m = (Qdp__FetchChunk *)qdp__unpack(bb, &qdp__fetch_chunk__descriptor);
  if (!m) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd sent a fetch chunk that is not a valid FetchChunk message.");
  }
  struct chunk ch = {.offset = m->offset,
                     .total = m->total,
                     .len = m->data.len,
                     .dtype = m->dtype,
                     .copy = binary_copy,
                     .arg = &m->data};
  qdp_status rc = sink_put(s, &ch);
  qdp__fetch_chunk__free_unpacked(m, NULL);
  return rc;
}

/* A stream that ended with OK must have delivered every amplitude it announced. */
static qdp_status sink_end(const struct sink *s) {
  uint64_t want = s->total * qdp_dtype_size(s->dtype);
  if (s->dtype == QDP_DTYPE_UNSPECIFIED || s->received != want) {
    return qdp__err_local(QDP_ERR_DATA_LOSS, -1, NULL,
                          "The fetch stream ended after %" PRIu64 " of %" PRIu64 " bytes.",
                          s->received, want);
  }
  return QDP_OK;
}

static qdp_status fetch_stream(qdp_client *c, const char *handle, const char *token,
                               const struct qdp_fetch_opts *o, struct sink *s) {
  Qdp__StateRef ref = qdp__state_ref(handle, token);
  Qdp__FetchRequest req = QDP__FETCH_REQUEST__INIT;
  req.state = &ref;
  req.offset = o->offset;
  req.count = o->count;
  req.chunk_bytes = o->chunk_bytes;
  s->offset = o->offset;
  struct qdp__call k;
  qdp_status rc = qdp__call_begin(c, M_FETCH, 1, &k);
  if (rc != QDP_OK) {
    return qdp__call_end(&k, rc);
  }
  int ok = qdp__send_first(&k, &req.base, 1);
  while (ok) {
    grpc_byte_buffer *recv = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &recv;
    ok = qdp__call_batch(&k, &op, 1);
    if (!ok || !recv) {
      break; /* end of stream: the status says whether it is complete */
    }
    rc = read_chunk(recv, s);
    grpc_byte_buffer_destroy(recv);
    if (rc == QDP_OK && o->progress &&
        o->progress(o->progress_arg, s->received, s->total * qdp_dtype_size(s->dtype)) != 0) {
      rc = qdp__err_local(
          QDP_ERR_CANCELLED, -1, NULL,
          "The fetch was cancelled by its progress callback after %" PRIu64 " bytes.", s->received);
    }
    if (rc != QDP_OK) {
      qdp__call_cancel(&k);
      break;
    }
  }
  rc = qdp__call_end(&k, rc);
  return rc == QDP_OK ? sink_end(s) : rc;
}

static qdp_status fetch_opts(const struct qdp_fetch_opts *opts, struct qdp_fetch_opts *o) {
  *o = (struct qdp_fetch_opts)QDP_FETCH_OPTS_INIT;
  if (opts) {
    if (opts->struct_size < offsetof(struct qdp_fetch_opts, chunk_bytes)) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "opts",
                            "The fetch options are too short; initialise them with "
                            "QDP_FETCH_OPTS_INIT.");
    }
    memcpy(o, opts, opts->struct_size < sizeof *o ? opts->struct_size : sizeof *o);
  }
  return QDP_OK;
}

qdp_status qdp_fetch(qdp_client *c, const char *handle, const char *token,
                     const struct qdp_fetch_opts *opts, void *dst, size_t dst_bytes,
                     size_t *ret_bytes) {
  qdp__err_reset();
  struct qdp_fetch_opts o;
  qdp_status rc = qdp__check_ref(c, handle, token);
  if (rc == QDP_OK) {
    rc = fetch_opts(opts, &o);
  }
  if (rc == QDP_OK && !dst) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "dst", "The destination buffer is NULL.");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  struct sink s;
  memset(&s, 0, sizeof s);
  s.dst = dst;
  s.dst_bytes = dst_bytes;
  s.fd = -1;
  s.expect = o.count;
  rc = fetch_stream(c, handle, token, &o, &s);
  if (ret_bytes) {
    *ret_bytes = rc == QDP_OK ? (size_t)s.received : 0;
  }
  return rc;
}

qdp_status qdp_fetch_into(qdp_client *c, const char *handle, const char *token,
                          const struct qdp_fetch_opts *opts, const char *region,
                          const char *region_token, uint64_t region_offset, uint64_t *ret_bytes) {
  qdp__err_reset();
  struct qdp_fetch_opts o;
  qdp_status rc = qdp__check_ref(c, handle, token);
  if (rc == QDP_OK) {
    rc = fetch_opts(opts, &o);
  }
  if (rc == QDP_OK && (!region || !*region || !region_token)) {
    rc = qdp__err_local(
        QDP_ERR_INVALID_ARGUMENT, -1, "region",
        "FetchInto needs a region's handle and token (qdp_region_register_writable).");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__StateRef ref = QDP__STATE_REF__INIT;
  ref.handle = (char *)handle;
  ref.token = (char *)token;
  Qdp__RegionRef rr = QDP__REGION_REF__INIT;
  rr.handle = (char *)region;
  rr.token = (char *)region_token;
  Qdp__FetchIntoRequest req = QDP__FETCH_INTO_REQUEST__INIT;
  req.state = &ref;
  req.offset = o.offset;
  req.count = o.count;
  req.region = &rr;
  req.region_offset = region_offset;
  Qdp__FetchIntoReply *rep = NULL;
  rc = qdp__unary(c, M_FETCH_INTO, &req.base, &qdp__fetch_into_reply__descriptor,
                  (ProtobufCMessage **)&rep);
  if (ret_bytes) {
    *ret_bytes = rc == QDP_OK ? rep->bytes : 0;
  }
  if (rep) {
    qdp__fetch_into_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

/* A fresh name beside path for the partial file. */
static int open_temp(const char *path, char *tmp, size_t size) {
  static unsigned counter;
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    int w = snprintf(tmp, size, "%s.part-%ld-%u", path, (long)getpid(), n);
    if (w < 0 || (size_t)w >= size) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) {
      return fd;
    }
  }
  return -1;
}

/* The partial file beside path (its name in tmp), open for writing in *ret_fd. */
static qdp_status create_temp(const char *path, char *tmp, size_t size, int *ret_fd) {
  *ret_fd = open_temp(path, tmp, size);
  if (*ret_fd < 0) {
    int err = errno;
    return qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "path",
                          "Cannot create a file beside '%s': %s.", path, strerror(err));
  }
  return QDP_OK;
}

/* Flushes and closes the partial file fd (named tmp) and, when rc is OK, names it path: the file
 * appears complete or not at all. Returns rc, or the first failure here. */
static qdp_status finish_temp(int fd, const char *tmp, const char *path, int overwrite,
                              qdp_status rc) {
  if (rc == QDP_OK && fsync(fd) != 0) {
    rc = qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Flushing '%s' failed: %s.", tmp,
                        strerror(errno));
  }
  if (close(fd) != 0 && rc == QDP_OK) {
    rc = qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Closing '%s' failed: %s.", tmp,
                        strerror(errno));
  }
  if (rc == QDP_OK) {
    /* link() refuses an existing name atomically; rename() replaces it. */
    int r = overwrite ? rename(tmp, path) : link(tmp, path);
    if (r != 0) {
      int err = errno;
      rc = qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "path",
                          "Cannot create '%s': %s.", path, strerror(err));
    }
  }
  if (rc != QDP_OK || !overwrite) {
    (void)unlink(tmp);
  }
  return rc;
}

/* The .npy header of what a fetch of o (the range checked against the state) writes: the shape
 * needs the state's layout, and the header goes before the data. hdr holds QDP_NPY_HEADER_CAP. */
static qdp_status npy_layout(qdp_client *c, const char *handle, const char *token,
                             const struct qdp_fetch_opts *o, char *hdr, size_t *ret_hlen,
                             qdp_dtype *ret_dtype, uint64_t *ret_count) {
  struct qdp_state_info *st = NULL;
  qdp_status rc = qdp_describe(c, handle, token, &st);
  if (rc != QDP_OK) {
    return rc;
  }
  uint64_t per = st->qubits < 64 ? (uint64_t)1 << st->qubits : 0;
  uint64_t batch = st->batch ? st->batch : 1;
  uint64_t all = per && batch <= UINT64_MAX / per ? per * batch : 0;
  const qdp_dtype dtype = st->dtype;
  qdp_state_info_free(st);
  if (!all || o->offset >= all || o->count > all - o->offset) {
    return qdp__err_local(QDP_ERR_OUT_OF_RANGE, -1, "offset",
                          "Amplitudes [%" PRIu64 ", %" PRIu64 ") are outside the state's %" PRIu64
                          ".",
                          o->offset, o->offset + (o->count ? o->count : all - o->offset), all);
  }
  const uint64_t count = o->count ? o->count : all - o->offset;
  /* The whole of a batch is (batch, 2^n); anything else one vector. */
  const int whole = o->offset == 0 && count == all && batch > 1;
  struct qdp_npy_error ne;
  if (qdp_npy_format(dtype, whole ? 2 : 1, whole ? batch : 1, whole ? per : count, hdr,
                     QDP_NPY_HEADER_CAP, ret_hlen, &ne) != QDP_OK) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "The state has no .npy form: %s.", ne.msg);
  }
  *ret_dtype = dtype;
  *ret_count = count;
  return QDP_OK;
}

qdp_status qdp_fetch_npy(qdp_client *c, const char *handle, const char *token,
                         const struct qdp_fetch_opts *opts, const char *path, int overwrite) {
  qdp__err_reset();
  struct qdp_fetch_opts o;
  qdp_status rc = qdp__check_ref(c, handle, token);
  if (rc == QDP_OK) {
    rc = fetch_opts(opts, &o);
  }
  if (rc == QDP_OK && (!path || !*path)) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "The output path is empty.");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  if (!overwrite && access(path, F_OK) == 0) {
    return qdp__err_local(QDP_ERR_ALREADY_EXISTS, EEXIST, "path",
                          "'%s' exists (set overwrite to replace it).", path);
  }
  char hdr[QDP_NPY_HEADER_CAP];
  size_t hlen = 0;
  qdp_dtype dtype = QDP_DTYPE_UNSPECIFIED;
  uint64_t count = 0;
  rc = npy_layout(c, handle, token, &o, hdr, &hlen, &dtype, &count);
  if (rc != QDP_OK) {
    return rc;
  }
  char tmp[4096];
  int fd = -1;
  if ((rc = create_temp(path, tmp, sizeof tmp, &fd)) != QDP_OK) {
    return rc;
  }
  struct sink s;
  memset(&s, 0, sizeof s);
  s.fd = fd;
  s.fd_base = hlen;
  s.path = tmp;
  s.want_dtype = dtype;
  s.expect = count;
  if (pwrite(fd, hdr, hlen, 0) != (ssize_t)hlen) {
    rc = qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Writing '%s' failed: %s.", tmp,
                        strerror(errno));
  }
  if (rc == QDP_OK) {
    o.count = count;
    rc = fetch_stream(c, handle, token, &o, &s);
  }
  return finish_temp(fd, tmp, path, overwrite, rc);
}

qdp_status qdp__write_npy_file(const char *path, int overwrite, const void *hdr, size_t hlen,
                               const void *data, size_t len) {
  char tmp[4096];
  int fd = -1;
  qdp_status rc = create_temp(path, tmp, sizeof tmp, &fd);
  if (rc != QDP_OK) {
    return rc;
  }
  const struct {
    const void *p;
    size_t n;
  } parts[2] = {{hdr, hlen}, {data, len}};
  for (int i = 0; i < 2 && rc == QDP_OK; i++) {
    size_t done = 0;
    while (done < parts[i].n) {
      ssize_t n = write(fd, (const char *)parts[i].p + done, parts[i].n - done);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        int err = n < 0 ? errno : ENOSPC;
        rc = qdp__err_local(QDP_ERR_SYSTEM, err, "path", "Writing '%s' failed: %s.", tmp,
                            strerror(err));
        break;
      }
      done += (size_t)n;
    }
  }
  return finish_temp(fd, tmp, path, overwrite, rc);
}

/* Export from a client on the daemon's node: this process creates the file beside its target
 * with its own rights, hands it over for the daemon to fill, and names it once it is complete,
 * so the daemon writes nowhere this process could not and a failure leaves no partial file. */
static qdp_status export_local(qdp_client *c, Qdp__ExportRequest *req, const char *path,
                               int overwrite, Qdp__ExportReply **rep) {
  char tmp[PATH_MAX], ticket[64];
  const char *slash = strrchr(path, '/');
  const char *base = slash + 1;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "'%s' does not name a file.", path);
  }
  struct stat st;
  if (!overwrite && lstat(path, &st) == 0) {
    return qdp__err_local(QDP_ERR_ALREADY_EXISTS, -1, "path",
                          "'%s' exists; choose another path or ask to overwrite it.", path);
  }
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
      r ^= (uint32_t)getpid() * 2654435761u + (uint32_t)attempt;
    }
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.%08x", (int)(base - path), path, base, r) >=
        (int)sizeof tmp) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path",
                            "'%s' is too long for a temporary name beside it.", path);
    }
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 && errno != EEXIST) {
      int err = errno;
      return qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "path",
                            "Cannot create a file beside '%s': %s.", path, strerror(err));
    }
  }
  if (fd < 0) {
    return qdp__err_local(QDP_ERR_SYSTEM, EEXIST, "path",
                          "Cannot find a free temporary name beside '%s'.", path);
  }
  qdp_status rc = qdp__handoff(c, fd, 2, "path", ticket, sizeof ticket);
  close(fd);
  if (rc == QDP_OK) {
    req->path = tmp;
    req->fd_ticket = ticket;
    rc = qdp__unary(c, M_EXPORT, &req->base, &qdp__export_reply__descriptor,
                    (ProtobufCMessage **)rep);
  }
  if (rc == QDP_OK && renameat2(AT_FDCWD, tmp, AT_FDCWD, path, overwrite ? 0 : RENAME_NOREPLACE)) {
    int err = errno;
    rc = qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "path",
                        "Cannot name the exported file '%s': %s.", path, strerror(err));
  }
  if (rc != QDP_OK) {
    unlink(tmp);
  }
  return rc;
}

qdp_status qdp_export(qdp_client *c, const char *handle, const char *token, const char *path,
                      int overwrite, char **ret_path, uint64_t *ret_bytes) {
  qdp__err_reset();
  qdp_status rc = qdp__check_ref(c, handle, token);
  if (rc == QDP_OK && (!path || !*path)) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "The export path is empty.");
  }
  char abs[PATH_MAX];
  if (rc == QDP_OK) {
    rc = qdp__absolute(path, abs, "path");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  if (ret_path) {
    *ret_path = NULL;
  }
  Qdp__StateRef ref = qdp__state_ref(handle, token);
  Qdp__ExportRequest req = QDP__EXPORT_REQUEST__INIT;
  req.state = &ref;
  req.path = abs;
  req.overwrite = overwrite != 0;
  Qdp__ExportReply *rep = NULL;
  char sock[PATH_MAX];
  if (qdp__unix_path(c, sock, sizeof sock)) {
    rc = export_local(c, &req, abs, overwrite, &rep);
  } else {
    rc = qdp__unary(c, M_EXPORT, &req.base, &qdp__export_reply__descriptor,
                    (ProtobufCMessage **)&rep);
  }
  if (rc == QDP_OK) {
    if (ret_bytes) {
      *ret_bytes = rep->bytes;
    }
    if (ret_path) {
      *ret_path = strdup(abs);
      if (!*ret_path) {
        rc = qdp__err_nomem("copying the export reply");
      }
    }
  }
  if (rep) {
    qdp__export_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

qdp_status qdp__fetch_deliver(grpc_byte_buffer *const *msgs, size_t n, uint64_t offset,
                              uint64_t count, qdp_dtype want_dtype, void *dst, size_t dst_bytes,
                              int fd, uint64_t *ret_bytes) {
  struct sink s;
  memset(&s, 0, sizeof s);
  s.dst = dst;
  s.dst_bytes = dst_bytes;
  s.fd = dst ? -1 : fd;
  s.path = "the fetch's file";
  s.want_dtype = want_dtype;
  s.offset = offset;
  s.expect = count;
  qdp_status rc = QDP_OK;
  for (size_t i = 0; i < n && rc == QDP_OK; i++) {
    rc = read_chunk(msgs[i], &s);
  }
  if (rc == QDP_OK) {
    rc = sink_end(&s);
  }
  *ret_bytes = s.received;
  return rc;
}
