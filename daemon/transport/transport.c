/* transport.c — argument checks, the collectives composed from a family's primitives
 * (bcast_bytes, allgatherv, agree), and the local family: a world of one rank, where every
 * collective is a copy.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport_impl.h"

/* Lengths travel as uint64_t and land in size_t arrays; both are 8 bytes on every target qdp
 * supports, which the gathers below rely on. */
_Static_assert(sizeof(size_t) == sizeof(uint64_t), "size_t must be 64 bits");

/* The fixed-size image of a qdp_error that transport_agree broadcasts from the failing rank: plain
 * integers and char arrays, identical on every rank because every rank runs the same binary. */
struct agree_record {
  int32_t code, device, cause, pad;
  uint64_t need_bytes, free_bytes;
  char field[sizeof((struct qdp_error *)0)->field];
  char msg[sizeof((struct qdp_error *)0)->msg];
};

/* ---- chunking arithmetic ---- */

size_t transport_chunk_count(size_t bytes, size_t chunk) {
  if (chunk == 0) {
    return 0;
  }
  /* bytes / chunk rounded up without forming bytes + chunk - 1, which could wrap. */
  return bytes / chunk + (bytes % chunk != 0);
}

size_t transport_chunk_len(size_t bytes, size_t chunk, size_t i) {
  if (i >= transport_chunk_count(bytes, chunk)) {
    return 0;
  }
  /* i < count, so i * chunk < bytes and cannot wrap. */
  size_t left = bytes - i * chunk;
  return left < chunk ? left : chunk;
}

/* ---- accessors ---- */

int transport_rank(const struct transport *t) {
  return t->rank;
}

int transport_size(const struct transport *t) {
  return t->size;
}

enum transport_kind transport_kind(const struct transport *t) {
  return t->kind;
}

const char *transport_kind_name(const struct transport *t) {
  return t->kind == TRANSPORT_MPI ? "mpi" : "local";
}

const char *transport_host(const struct transport *t) {
  return t->host;
}

enum transport_threads transport_threads(const struct transport *t) {
  return t->threads;
}

const char *transport_threads_name(enum transport_threads level) {
  switch (level) {
  case TRANSPORT_THREADS_SINGLE:
    return "single";
  case TRANSPORT_THREADS_FUNNELED:
    return "funneled";
  case TRANSPORT_THREADS_SERIALIZED:
    return "serialized";
  case TRANSPORT_THREADS_MULTIPLE:
    return "multiple";
  }
  return "unknown";
}

size_t transport_chunk_bytes(const struct transport *t) {
  return t->chunk_bytes;
}

qdp_status transport_set_chunk_bytes(struct transport *t, size_t bytes, struct qdp_error *reterr) {
  if (bytes == 0 || bytes > INT_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "chunk_bytes",
                         "chunk_bytes %zu is outside 1..%d (an MPI count is an int)", bytes,
                         INT_MAX);
  }
  t->chunk_bytes = bytes;
  return QDP_OK;
}

void transport_destroy(struct transport *t) {
  if (!t) {
    return;
  }
  if (t->ops && t->ops->destroy) {
    t->ops->destroy(t);
  }
  free(t);
}

/* ---- argument checks ---- */

static qdp_status invalid(struct transport *t, struct qdp_error *reterr, const char *field,
                          const char *what, long long value) {
  qdp_status rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                                "transport (%s, rank %d of %d): %s (%lld)", transport_kind_name(t),
                                t->rank, t->size, what, value);
  if (reterr) {
    reterr->rank = t->rank;
  }
  return rc;
}

static qdp_status check_root(struct transport *t, int root, struct qdp_error *reterr) {
  if (root < 0 || root >= t->size) {
    return invalid(t, reterr, "root", "the root is not a rank of the world", root);
  }
  return QDP_OK;
}

static qdp_status check_buf(struct transport *t, const void *buf, size_t bytes,
                            struct qdp_error *reterr) {
  if (bytes > 0 && !buf) {
    return invalid(t, reterr, "buf", "a NULL buffer was given for bytes",
                   (long long)(bytes > LLONG_MAX ? LLONG_MAX : bytes));
  }
  return QDP_OK;
}

static qdp_status check_peer(struct transport *t, int peer, int tag, struct qdp_error *reterr) {
  if (peer < 0 || peer >= t->size) {
    return invalid(t, reterr, "peer", "the peer is not a rank of the world", peer);
  }
  if (peer == t->rank) {
    return invalid(t, reterr, "peer", "a rank does not send to itself (copy instead); peer", peer);
  }
  if (tag < 0 || tag > TRANSPORT_TAG_MAX) {
    return invalid(t, reterr, "tag", "the tag is outside 0..32767", tag);
  }
  return QDP_OK;
}

/* ---- collectives ---- */

qdp_status transport_barrier(struct transport *t, struct qdp_error *reterr) {
  return t->ops->barrier(t, reterr);
}

qdp_status transport_bcast(struct transport *t, void *buf, size_t bytes, int root,
                           struct qdp_error *reterr) {
  qdp_status rc;
  QDP_TRY(rc, check_root(t, root, reterr));
  QDP_TRY(rc, check_buf(t, buf, bytes, reterr));
  if (bytes > 0) {
    rc = t->ops->bcast(t, buf, bytes, root, reterr);
  }
out:
  return rc;
}

qdp_status transport_allgather(struct transport *t, const void *mine, size_t bytes, void *ret,
                               struct qdp_error *reterr) {
  qdp_status rc;
  QDP_TRY(rc, check_buf(t, mine, bytes, reterr));
  QDP_TRY(rc, check_buf(t, ret, bytes, reterr));
  if (bytes > 0) {
    rc = t->ops->allgather(t, mine, bytes, ret, reterr);
  }
out:
  return rc;
}

qdp_status transport_allgather_f64(struct transport *t, const double *mine, size_t n, double *ret,
                                   struct qdp_error *reterr) {
  if (n > SIZE_MAX / sizeof(double) / (size_t)t->size) {
    return invalid(t, reterr, "n", "too many doubles to gather in host memory",
                   (long long)(n > LLONG_MAX ? LLONG_MAX : n));
  }
  return transport_allgather(t, mine, n * sizeof(double), ret, reterr);
}

qdp_status transport_allreduce_u64(struct transport *t, const uint64_t *mine, size_t n,
                                   enum transport_op op, uint64_t *ret, struct qdp_error *reterr) {
  qdp_status rc;
  if (op != TRANSPORT_SUM && op != TRANSPORT_MIN && op != TRANSPORT_MAX) {
    return invalid(t, reterr, "op", "unknown reduction", (long long)op);
  }
  if (n > SIZE_MAX / sizeof(uint64_t)) {
    return invalid(t, reterr, "n", "too many integers to reduce",
                   (long long)(n > LLONG_MAX ? LLONG_MAX : n));
  }
  QDP_TRY(rc, check_buf(t, mine, n, reterr));
  QDP_TRY(rc, check_buf(t, ret, n, reterr));
  if (n > 0) {
    rc = t->ops->allreduce_u64(t, mine, n, op, ret, reterr);
  }
out:
  return rc;
}

qdp_status transport_agree(struct transport *t, qdp_status mine, const struct qdp_error *my_err,
                           struct qdp_error *reterr) {
  /* Two small exchanges and no allocation (the failure being agreed on may be out-of-memory):
   * the smallest failing rank by an exact integer minimum, then that rank's error by broadcast. */
  qdp_status rc;
  uint64_t first = mine != QDP_OK ? (uint64_t)t->rank : (uint64_t)t->size;
  QDP_TRY(rc, t->ops->allreduce_u64(t, &first, 1, TRANSPORT_MIN, &first, reterr));
  if (first >= (uint64_t)t->size) {
    return QDP_OK;
  }
  int root = (int)first;
  struct agree_record rec;
  memset(&rec, 0, sizeof rec);
  if (root == t->rank) {
    rec.code = (int32_t)mine;
    rec.device = my_err ? my_err->device : -1;
    rec.cause = my_err ? my_err->cause : -1;
    rec.need_bytes = my_err ? my_err->need_bytes : 0;
    rec.free_bytes = my_err ? my_err->free_bytes : 0;
    if (my_err && my_err->msg[0]) {
      memcpy(rec.field, my_err->field, sizeof rec.field);
      memcpy(rec.msg, my_err->msg, sizeof rec.msg);
      rec.field[sizeof rec.field - 1] = '\0';
      rec.msg[sizeof rec.msg - 1] = '\0';
    } else {
      snprintf(rec.msg, sizeof rec.msg, "failed with %s (%s), no detail given",
               qdp_status_name(mine), qdp_strerror(mine));
    }
  }
  if (t->size > 1) {
    QDP_TRY(rc, t->ops->bcast(t, &rec, sizeof rec, root, reterr));
  }
  rc = (qdp_status)rec.code;
  if (reterr) {
    qdp_error_clear(reterr);
    qdp_error_set(reterr, rc, rec.field[0] ? rec.field : NULL, "%s", rec.msg);
    reterr->rank = root;
    reterr->device = rec.device;
    reterr->cause = rec.cause;
    reterr->need_bytes = rec.need_bytes;
    reterr->free_bytes = rec.free_bytes;
    if (t->size > 1) {
      qdp_error_prefix(reterr, "rank %d", root);
    }
  }
out:
  return rc;
}

/* The status of a local allocation for transport_agree, with the numbers. */
static qdp_status alloc_failed(struct transport *t, struct qdp_error *e, const char *what,
                               size_t bytes) {
  qdp_status rc = qdp_error_set(e, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                                "cannot allocate %zu B of host memory for %s", bytes, what);
  e->rank = t->rank;
  e->need_bytes = bytes;
  return rc;
}

qdp_status transport_bcast_bytes(struct transport *t, void **buf, size_t *bytes, int root,
                                 struct qdp_error *reterr) {
  qdp_status rc, mine = QDP_OK;
  struct qdp_error my_err = QDP_ERROR_INIT;
  unsigned char *p = NULL;
  if (!buf || !bytes) {
    return invalid(t, reterr, "buf", "bcast_bytes needs both buf and bytes; NULL given", 0);
  }
  QDP_TRY(rc, check_root(t, root, reterr));
  int is_root = t->rank == root;
  if (!is_root) {
    *buf = NULL;
    *bytes = 0;
  } else {
    QDP_TRY(rc, check_buf(t, *buf, *bytes, reterr));
  }
  /* Length first, so the receivers can allocate; then agree on the allocation so a rank short of
   * memory fails every rank rather than leaving the root broadcasting to nobody. */
  uint64_t len = is_root ? (uint64_t)*bytes : 0;
  QDP_TRY(rc, t->ops->bcast(t, &len, sizeof len, root, reterr));
  if (!is_root) {
    p = malloc(len ? (size_t)len : 1);
    if (!p) {
      mine = alloc_failed(t, &my_err, "a broadcast message", (size_t)len);
    }
  }
  QDP_TRY(rc, transport_agree(t, mine, &my_err, reterr));
  if (len > 0) {
    QDP_TRY(rc, t->ops->bcast(t, is_root ? *buf : p, (size_t)len, root, reterr));
  }
  if (!is_root) {
    *buf = p;
    *bytes = (size_t)len;
    p = NULL;
  }
out:
  free(p);
  return rc;
}

void transport_gathered_fini(struct transport_gathered *g) {
  if (!g) {
    return;
  }
  free(g->offsets); /* lengths live in the same block */
  free(g->data);
  memset(g, 0, sizeof *g);
}

qdp_status transport_allgatherv(struct transport *t, const void *mine, size_t bytes,
                                struct transport_gathered *ret, struct qdp_error *reterr) {
  qdp_status rc, ok;
  struct qdp_error my_err = QDP_ERROR_INIT;
  struct transport_gathered g = {0};
  if (!ret) {
    return invalid(t, reterr, "ret", "allgatherv needs a result; NULL given", 0);
  }
  memset(ret, 0, sizeof *ret);
  /* Every check that could differ between ranks is agreed on, so no rank enters an exchange the
   * others skip. */
  ok = check_buf(t, mine, bytes, &my_err);
  size_t n = (size_t)t->size;
  if (ok == QDP_OK) {
    g.count = t->size;
    g.offsets = calloc(2 * n, sizeof(size_t));
    if (!g.offsets) {
      ok = alloc_failed(t, &my_err, "the offsets of a gather", 2 * n * sizeof(size_t));
    } else {
      g.lengths = g.offsets + n;
    }
  }
  QDP_TRY(rc, transport_agree(t, ok, &my_err, reterr));
  uint64_t len = bytes;
  QDP_TRY(rc, t->ops->allgather(t, &len, sizeof len, g.lengths, reterr));
  for (size_t r = 0; r < n; r++) {
    g.offsets[r] = g.total;
    if (g.lengths[r] > SIZE_MAX - g.total) {
      /* The same sum on every rank, so every rank refuses here. */
      rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "bytes",
                         "the blobs of %d ranks add up to more than %zu B (rank %zu gives %zu B)",
                         t->size, (size_t)SIZE_MAX, r, g.lengths[r]);
      goto out;
    }
    g.total += g.lengths[r];
  }
  g.data = malloc(g.total ? g.total : 1);
  ok = g.data ? QDP_OK : alloc_failed(t, &my_err, "a variable-size gather", g.total);
  QDP_TRY(rc, transport_agree(t, ok, &my_err, reterr));
  QDP_TRY(rc, t->ops->allgatherv(t, mine, &g, reterr));
  *ret = g;
  memset(&g, 0, sizeof g);
out:
  transport_gathered_fini(&g);
  return rc;
}

/* ---- point to point ---- */

qdp_status transport_send(struct transport *t, const void *buf, size_t bytes, int to, int tag,
                          struct qdp_error *reterr) {
  qdp_status rc;
  QDP_TRY(rc, check_peer(t, to, tag, reterr));
  QDP_TRY(rc, check_buf(t, buf, bytes, reterr));
  rc = t->ops->send(t, buf, bytes, to, tag, reterr);
out:
  return rc;
}

qdp_status transport_recv(struct transport *t, void *buf, size_t bytes, int from, int tag,
                          struct qdp_error *reterr) {
  qdp_status rc;
  QDP_TRY(rc, check_peer(t, from, tag, reterr));
  QDP_TRY(rc, check_buf(t, buf, bytes, reterr));
  rc = t->ops->recv(t, buf, bytes, from, tag, reterr);
out:
  return rc;
}

qdp_status transport_io_within(struct transport *t, struct transport_io *items, size_t n,
                               uint64_t timeout_ms, int *ret_pinned, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  if (ret_pinned) {
    *ret_pinned = 0;
  }
  for (size_t i = 0; i < n; i++) {
    items[i].done = 0;
    QDP_TRY(rc, check_peer(t, items[i].peer, items[i].tag, reterr));
    QDP_TRY(rc, check_buf(t, items[i].buf, items[i].bytes, reterr));
  }
  if (n > 0) {
    rc = t->ops->io_within(t, items, n, timeout_ms, ret_pinned, reterr);
  }
out:
  return rc;
}

/* ---- the local family: one rank, so every collective is a copy ---- */

static void local_destroy(struct transport *t) {
  (void)t;
}

static qdp_status local_barrier(struct transport *t, struct qdp_error *reterr) {
  (void)t;
  (void)reterr;
  return QDP_OK;
}

static qdp_status local_bcast(struct transport *t, void *buf, size_t bytes, int root,
                              struct qdp_error *reterr) {
  /* The root is the only rank: its buffer already holds the message. */
  (void)t;
  (void)buf;
  (void)bytes;
  (void)root;
  (void)reterr;
  return QDP_OK;
}

static qdp_status local_allgather(struct transport *t, const void *mine, size_t bytes, void *ret,
                                  struct qdp_error *reterr) {
  (void)t;
  (void)reterr;
  memmove(ret, mine, bytes);
  return QDP_OK;
}

static qdp_status local_allgatherv(struct transport *t, const void *mine,
                                   struct transport_gathered *g, struct qdp_error *reterr) {
  (void)t;
  (void)reterr;
  if (g->lengths[0] > 0) {
    memcpy(g->data, mine, g->lengths[0]);
  }
  return QDP_OK;
}

static qdp_status local_allreduce_u64(struct transport *t, const uint64_t *mine, size_t n,
                                      enum transport_op op, uint64_t *ret,
                                      struct qdp_error *reterr) {
  (void)t;
  (void)op;
  (void)reterr;
  memmove(ret, mine, n * sizeof *ret);
  return QDP_OK;
}

static qdp_status local_p2p(struct transport *t, struct qdp_error *reterr) {
  /* check_peer refuses every peer of a world of one before this is reached. */
  return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                       "point-to-point reached the local transport of rank %d", t->rank);
}

static qdp_status local_send(struct transport *t, const void *buf, size_t bytes, int to, int tag,
                             struct qdp_error *reterr) {
  (void)buf;
  (void)bytes;
  (void)to;
  (void)tag;
  return local_p2p(t, reterr);
}

static qdp_status local_recv(struct transport *t, void *buf, size_t bytes, int from, int tag,
                             struct qdp_error *reterr) {
  (void)buf;
  (void)bytes;
  (void)from;
  (void)tag;
  return local_p2p(t, reterr);
}

static qdp_status local_io_within(struct transport *t, struct transport_io *items, size_t n,
                                  uint64_t timeout_ms, int *ret_pinned, struct qdp_error *reterr) {
  (void)items;
  (void)n;
  (void)timeout_ms;
  (void)ret_pinned;
  return local_p2p(t, reterr);
}

static const struct transport_ops local_ops = {
    .destroy = local_destroy,
    .barrier = local_barrier,
    .bcast = local_bcast,
    .allgather = local_allgather,
    .allgatherv = local_allgatherv,
    .allreduce_u64 = local_allreduce_u64,
    .send = local_send,
    .recv = local_recv,
    .io_within = local_io_within,
};

qdp_status transport_local_create(struct transport **ret, struct qdp_error *reterr) {
  struct transport *t = calloc(1, sizeof *t);
  if (!t) {
    qdp_status rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                                  "cannot allocate %zu B for the local transport", sizeof *t);
    if (reterr) {
      reterr->need_bytes = sizeof *t;
    }
    return rc;
  }
  t->ops = &local_ops;
  t->kind = TRANSPORT_LOCAL;
  t->rank = 0;
  t->size = 1;
  t->threads = TRANSPORT_THREADS_MULTIPLE;
  t->chunk_bytes = TRANSPORT_CHUNK_DEFAULT;
  if (gethostname(t->host, sizeof t->host - 1) != 0) {
    snprintf(t->host, sizeof t->host, "localhost");
  }
  t->host[sizeof t->host - 1] = '\0';
  *ret = t;
  return QDP_OK;
}

#if !QDP_TRANSPORT_HAVE_MPI
qdp_status transport_mpi_create(int *argc, char ***argv, struct transport **ret,
                                struct qdp_error *reterr) {
  (void)argc;
  (void)argv;
  (void)ret;
  return qdp_error_set(reterr, QDP_ERR_UNIMPLEMENTED, NULL,
                       "this qdpd was built without MPI (no 'mpi' dependency at configure time); "
                       "only the local transport is available");
}
#endif
