/* transport_mpi.c — the MPI family: a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, every
 * call cut into pieces of at most chunk_bytes (MPI counts are int), byte buffers only (host memory:
 * Open MPI here is not CUDA-aware).
 */
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "clock.h"
#include "transport_impl.h"

struct mpi_impl {
  MPI_Comm comm;
  int initialized_mpi; /* this transport called MPI_Init_thread, so it calls MPI_Finalize */
  /* Counts and displacements of the one-call MPI_Allgatherv, allocated with the transport so that
   * a gather never allocates between the ranks' agreement and the exchange. */
  int *counts, *displs;
};

static MPI_Comm comm_of(struct transport *t) {
  return ((struct mpi_impl *)t->impl)->comm;
}

/* Fills reterr from an MPI return code: what failed (formatted), MPI's error string and class. */
static qdp_status mpi_fail(struct transport *t, int mpirc, struct qdp_error *reterr,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static qdp_status mpi_fail(struct transport *t, int mpirc, struct qdp_error *reterr,
                           const char *fmt, ...) {
  char what[512], text[MPI_MAX_ERROR_STRING];
  int cls = 0, len = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (MPI_Error_class(mpirc, &cls) != MPI_SUCCESS) {
    cls = mpirc;
  }
  if (MPI_Error_string(mpirc, text, &len) != MPI_SUCCESS) {
    snprintf(text, sizeof text, "MPI error code %d", mpirc);
  }
  qdp_status rc = qdp_error_set_at(reterr, QDP_ERR_MPI, -1, cls,
                                   "%s failed on rank %d of %d: %s (MPI error class %d)", what,
                                   t->rank, t->size, text, cls);
  if (reterr) {
    reterr->rank = t->rank;
  }
  return rc;
}

static void mpi_destroy(struct transport *t) {
  struct mpi_impl *m = t->impl;
  if (!m) {
    return;
  }
  if (m->comm != MPI_COMM_NULL) {
    MPI_Comm_free(&m->comm);
  }
  if (m->initialized_mpi) {
    MPI_Finalize();
  }
  free(m->counts);
  free(m->displs);
  free(m);
  t->impl = NULL;
}

static qdp_status mpi_barrier(struct transport *t, struct qdp_error *reterr) {
  int mpirc = MPI_Barrier(comm_of(t));
  if (mpirc != MPI_SUCCESS) {
    return mpi_fail(t, mpirc, reterr, "MPI_Barrier");
  }
  return QDP_OK;
}

static qdp_status mpi_bcast(struct transport *t, void *buf, size_t bytes, int root,
                            struct qdp_error *reterr) {
  unsigned char *p = buf;
  size_t pieces = transport_chunk_count(bytes, t->chunk_bytes);
  for (size_t i = 0; i < pieces; i++) {
    size_t len = transport_chunk_len(bytes, t->chunk_bytes, i);
    int mpirc = MPI_Bcast(p + i * t->chunk_bytes, (int)len, MPI_BYTE, root, comm_of(t));
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Bcast of %zu B from rank %d (piece %zu of %zu)", bytes,
                      root, i + 1, pieces);
    }
  }
  return QDP_OK;
}

static qdp_status mpi_allgather(struct transport *t, const void *mine, size_t bytes, void *ret,
                                struct qdp_error *reterr) {
  const unsigned char *src = mine;
  unsigned char *dst = ret;
  if (bytes <= t->chunk_bytes) {
    int mpirc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, ret, (int)bytes, MPI_BYTE, comm_of(t));
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Allgather of %zu B per rank", bytes);
    }
    return QDP_OK;
  }
  /* Piece by piece: piece i of rank r lands at ret + r * bytes + i * chunk. A receive type of
   * `len` bytes whose extent is the whole block `bytes` puts each rank's piece at its place
   * directly, with no staging copy. */
  size_t pieces = transport_chunk_count(bytes, t->chunk_bytes);
  for (size_t i = 0; i < pieces; i++) {
    size_t off = i * t->chunk_bytes, len = transport_chunk_len(bytes, t->chunk_bytes, i);
    MPI_Datatype piece = MPI_DATATYPE_NULL, slot = MPI_DATATYPE_NULL;
    int mpirc = MPI_Type_contiguous((int)len, MPI_BYTE, &piece);
    if (mpirc == MPI_SUCCESS) {
      mpirc = MPI_Type_create_resized(piece, 0, (MPI_Aint)bytes, &slot);
    }
    if (mpirc == MPI_SUCCESS) {
      mpirc = MPI_Type_commit(&slot);
    }
    if (mpirc == MPI_SUCCESS) {
      mpirc = MPI_Allgather(src + off, (int)len, MPI_BYTE, dst + off, 1, slot, comm_of(t));
    }
    if (slot != MPI_DATATYPE_NULL) {
      MPI_Type_free(&slot);
    }
    if (piece != MPI_DATATYPE_NULL) {
      MPI_Type_free(&piece);
    }
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Allgather of %zu B per rank (piece %zu of %zu)", bytes,
                      i + 1, pieces);
    }
  }
  return QDP_OK;
}

static qdp_status mpi_allgatherv(struct transport *t, const void *mine,
                                 struct transport_gathered *g, struct qdp_error *reterr) {
  struct mpi_impl *m = t->impl;
  size_t my_len = g->lengths[t->rank];
  if (g->total <= t->chunk_bytes) {
    /* Every count and displacement fits an int: one call. */
    static const unsigned char none = 0;
    for (int r = 0; r < t->size; r++) {
      m->counts[r] = (int)g->lengths[r];
      m->displs[r] = (int)g->offsets[r];
    }
    int mpirc = MPI_Allgatherv(my_len ? mine : &none, (int)my_len, MPI_BYTE, g->data, m->counts,
                               m->displs, MPI_BYTE, comm_of(t));
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Allgatherv of %zu B in all (%zu B from rank %d)",
                      g->total, my_len, t->rank);
    }
    return QDP_OK;
  }
  /* Larger than one call can describe (int displacements): each rank broadcasts its blob in
   * turn, in pieces, straight into its place. */
  if (my_len > 0) {
    memcpy(g->data + g->offsets[t->rank], mine, my_len);
  }
  for (int r = 0; r < t->size; r++) {
    if (g->lengths[r] == 0) {
      continue;
    }
    qdp_status rc = mpi_bcast(t, g->data + g->offsets[r], g->lengths[r], r, reterr);
    if (rc != QDP_OK) {
      qdp_error_prefix(reterr, "variable-size gather of %zu B", g->total);
      return rc;
    }
  }
  return QDP_OK;
}

static qdp_status mpi_allreduce_u64(struct transport *t, const uint64_t *mine, size_t n,
                                    enum transport_op op, uint64_t *ret, struct qdp_error *reterr) {
  MPI_Op mop = op == TRANSPORT_SUM ? MPI_SUM : op == TRANSPORT_MIN ? MPI_MIN : MPI_MAX;
  size_t per = t->chunk_bytes / sizeof(uint64_t);
  if (per == 0) {
    per = 1;
  }
  size_t pieces = transport_chunk_count(n, per);
  for (size_t i = 0; i < pieces; i++) {
    size_t off = i * per, len = transport_chunk_len(n, per, i);
    const void *src = mine == ret ? MPI_IN_PLACE : (const void *)(mine + off);
    int mpirc = MPI_Allreduce(src, ret + off, (int)len, MPI_UINT64_T, mop, comm_of(t));
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Allreduce of %zu integers (piece %zu of %zu)", n,
                      i + 1, pieces);
    }
  }
  return QDP_OK;
}

static qdp_status mpi_send(struct transport *t, const void *buf, size_t bytes, int to, int tag,
                           struct qdp_error *reterr) {
  const unsigned char *p = buf;
  /* An empty message is still one message, so the matching receive completes. */
  size_t pieces = bytes ? transport_chunk_count(bytes, t->chunk_bytes) : 1;
  for (size_t i = 0; i < pieces; i++) {
    size_t len = transport_chunk_len(bytes, t->chunk_bytes, i);
    int mpirc =
        MPI_Send(len ? p + i * t->chunk_bytes : NULL, (int)len, MPI_BYTE, to, tag, comm_of(t));
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Send of %zu B to rank %d, tag %d (piece %zu of %zu)",
                      bytes, to, tag, i + 1, pieces);
    }
  }
  return QDP_OK;
}

static qdp_status mpi_recv(struct transport *t, void *buf, size_t bytes, int from, int tag,
                           struct qdp_error *reterr) {
  unsigned char *p = buf;
  size_t pieces = bytes ? transport_chunk_count(bytes, t->chunk_bytes) : 1;
  for (size_t i = 0; i < pieces; i++) {
    size_t len = transport_chunk_len(bytes, t->chunk_bytes, i);
    MPI_Status st;
    int mpirc = MPI_Recv(len ? p + i * t->chunk_bytes : NULL, (int)len, MPI_BYTE, from, tag,
                         comm_of(t), &st);
    if (mpirc != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(mpirc, &cls);
      if (cls == MPI_ERR_TRUNCATE) {
        return mpi_fail(t, mpirc, reterr,
                        "MPI_Recv of %zu B from rank %d, tag %d (piece %zu of %zu, %zu B): the "
                        "message is longer than expected, so",
                        bytes, from, tag, i + 1, pieces, len);
      }
      return mpi_fail(t, mpirc, reterr, "MPI_Recv of %zu B from rank %d, tag %d (piece %zu of %zu)",
                      bytes, from, tag, i + 1, pieces);
    }
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (got < 0 || (size_t)got != len) {
      qdp_status rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "bytes",
                                    "rank %d expected %zu B from rank %d, tag %d, but piece %zu of "
                                    "%zu had %d B where %zu B were due; the two ranks disagree on "
                                    "the size",
                                    t->rank, bytes, from, tag, i + 1, pieces, got, len);
      if (reterr) {
        reterr->rank = t->rank;
      }
      return rc;
    }
  }
  return QDP_OK;
}

/* After a timeout: cancel a pending request and give it a moment to settle. 1 when it completed
 * after all (a receive that matched meanwhile, status in *st), 0 when cancelled, -1 when it could
 * neither be cancelled nor completed (the request is freed; MPI may still use its buffer). */
static int settle_cancelled(MPI_Request *req, MPI_Status *st) {
  MPI_Cancel(req);
  /* Cancelling an unmatched message completes at once in ob1; 100 ms is generous. */
  uint64_t until = clock_mono_ns() + 100 * CLOCK_NS_PER_MS;
  int flag = 0;
  while (!flag) {
    if (MPI_Test(req, &flag, st) != MPI_SUCCESS) {
      break;
    }
    if (!flag && clock_mono_ns() >= until) {
      MPI_Request_free(req);
      return -1;
    }
  }
  if (!flag) {
    return -1;
  }
  int cancelled = 0;
  MPI_Test_cancelled(st, &cancelled);
  return cancelled ? 0 : 1;
}

/* The requests of one mpi_io_within: a request a piece, with the item it belongs to and its
 * length, and for each item how many of its pieces are not done. */
struct io_table {
  MPI_Request *reqs;
  size_t *owner;
  size_t *plen;
  size_t *left;
  size_t posted;
};

static qdp_status io_table_alloc(const struct transport *t, const struct transport_io *items,
                                 size_t n, struct io_table *tab, struct qdp_error *reterr) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += items[i].bytes ? transport_chunk_count(items[i].bytes, t->chunk_bytes) : 1;
  }
  tab->reqs = malloc(total * sizeof *tab->reqs);
  tab->owner = malloc(total * sizeof *tab->owner);
  tab->plen = malloc(total * sizeof *tab->plen);
  tab->left = calloc(n, sizeof *tab->left);
  tab->posted = 0;
  if (!tab->reqs || !tab->owner || !tab->plen || !tab->left) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate the request table of %zu messages", total);
  }
  return QDP_OK;
}

static void io_table_free(struct io_table *tab) {
  free(tab->reqs);
  free(tab->owner);
  free(tab->plen);
  free(tab->left);
}

/* Posts every piece of every item; on a failure, what was posted before it stays posted. */
static qdp_status post_all(struct transport *t, const struct transport_io *items, size_t n,
                           struct io_table *tab, struct qdp_error *reterr) {
  for (size_t i = 0; i < n; i++) {
    const struct transport_io *it = &items[i];
    size_t pieces = it->bytes ? transport_chunk_count(it->bytes, t->chunk_bytes) : 1;
    for (size_t k = 0; k < pieces; k++) {
      size_t len = transport_chunk_len(it->bytes, t->chunk_bytes, k);
      unsigned char *at = len ? (unsigned char *)it->buf + k * t->chunk_bytes : NULL;
      MPI_Request *req = &tab->reqs[tab->posted];
      int mpirc = it->send ? MPI_Isend(at, (int)len, MPI_BYTE, it->peer, it->tag, comm_of(t), req)
                           : MPI_Irecv(at, (int)len, MPI_BYTE, it->peer, it->tag, comm_of(t), req);
      if (mpirc != MPI_SUCCESS) {
        return mpi_fail(t, mpirc, reterr, "%s of %zu B %s rank %d, tag %d",
                        it->send ? "MPI_Isend" : "MPI_Irecv", it->bytes, it->send ? "to" : "from",
                        it->peer, it->tag);
      }
      tab->plen[tab->posted] = len;
      tab->owner[tab->posted++] = i;
      tab->left[i]++;
    }
  }
  return QDP_OK;
}

/* One pass of MPI_Test over the pending requests; returns how many are still pending. The first
 * failure (a test that failed, or a piece of the wrong size) goes to *rc. */
static size_t test_pass(struct transport *t, struct transport_io *items, struct io_table *tab,
                        size_t pending, qdp_status *rc, struct qdp_error *reterr) {
  for (size_t r = 0; r < tab->posted; r++) {
    if (tab->reqs[r] == MPI_REQUEST_NULL) {
      continue;
    }
    int flag = 0;
    MPI_Status st;
    int mpirc = MPI_Test(&tab->reqs[r], &flag, &st);
    if (mpirc != MPI_SUCCESS && *rc == QDP_OK) {
      *rc = mpi_fail(t, mpirc, reterr, "waiting for a message %s rank %d",
                     items[tab->owner[r]].send ? "to" : "from", items[tab->owner[r]].peer);
      tab->reqs[r] = MPI_REQUEST_NULL;
      pending--;
      continue;
    }
    if (!flag) {
      continue;
    }
    pending--;
    struct transport_io *it = &items[tab->owner[r]];
    int got = 0;
    if (!it->send && *rc == QDP_OK && MPI_Get_count(&st, MPI_BYTE, &got) == MPI_SUCCESS &&
        (got < 0 || (size_t)got != tab->plen[r])) {
      *rc = qdp_error_set_at(reterr, QDP_ERR_INVALID_ARGUMENT, -1, 0,
                             "rank %d expected a piece of %zu B from rank %d, tag %d, and got %d "
                             "B; the two ranks disagree on the size",
                             t->rank, tab->plen[r], it->peer, it->tag, got);
    }
    if (--tab->left[tab->owner[r]] == 0) {
      it->done = 1;
    }
  }
  return pending;
}

/* Tests until every request completed, one failed or timeout_ms (0: none) passed since start;
 * returns how many are still pending. */
static size_t wait_posted(struct transport *t, struct transport_io *items, struct io_table *tab,
                          uint64_t start, uint64_t timeout_ms, qdp_status *rc,
                          struct qdp_error *reterr) {
  size_t pending = tab->posted;
  unsigned idle = 0;
  while (pending > 0) {
    size_t before = pending;
    pending = test_pass(t, items, tab, pending, rc, reterr);
    if (pending == 0 || *rc != QDP_OK) {
      break;
    }
    if (timeout_ms && clock_mono_ns() - start >= timeout_ms * CLOCK_NS_PER_MS) {
      break;
    }
    /* Poll while messages are moving (a job's round trip is well under a millisecond), giving
     * the processor away between polls: where ranks share processors (several on one host, or
     * a busy node) the peer being waited for may need it, and spinning on it made a message
     * between two ranks wait a scheduler time slice, about 5 ms. Once nothing has moved for a
     * while, sleep 100 us between polls, so a long wait costs little CPU. */
    idle = pending == before ? idle + 1 : 0;
    if (idle > 2000) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    } else if (idle > 0) {
      sched_yield();
    }
  }
  return pending;
}

/* Cancels what is still pending after a wait that began at start; the first item left late is
 * named in the error (when rc is still OK), and *ret_pinned says whether MPI may still use a
 * buffer. Returns rc, or that error. */
static qdp_status cancel_late(const struct transport *t, struct transport_io *items, size_t n,
                              struct io_table *tab, uint64_t start, int *ret_pinned, qdp_status rc,
                              struct qdp_error *reterr) {
  int pinned = 0;
  size_t first_late = n;
  for (size_t r = 0; r < tab->posted; r++) {
    if (tab->reqs[r] == MPI_REQUEST_NULL) {
      continue;
    }
    MPI_Status st;
    int s = settle_cancelled(&tab->reqs[r], &st);
    if (s == 1) {
      if (--tab->left[tab->owner[r]] == 0) {
        items[tab->owner[r]].done = 1;
      }
      continue;
    }
    pinned |= s < 0;
    first_late = tab->owner[r] < first_late ? tab->owner[r] : first_late;
  }
  if (ret_pinned) {
    *ret_pinned = pinned;
  }
  if (rc == QDP_OK && first_late < n) {
    const struct transport_io *it = &items[first_late];
    rc = qdp_error_set_at(reterr, QDP_ERR_UNAVAILABLE, -1, 0,
                          "rank %d did not %s %zu B (tag %d) within %" PRIu64
                          " ms: it is dead, hung or unreachable (rank %d of %d waited)",
                          it->peer, it->send ? "take" : "send", it->bytes, it->tag,
                          (clock_mono_ns() - start) / CLOCK_NS_PER_MS, t->rank, t->size);
    if (reterr) {
      reterr->rank = it->peer;
    }
  }
  return rc;
}

static qdp_status mpi_io_within(struct transport *t, struct transport_io *items, size_t n,
                                uint64_t timeout_ms, int *ret_pinned, struct qdp_error *reterr) {
  struct io_table tab;
  qdp_status rc = io_table_alloc(t, items, n, &tab, reterr);
  if (rc == QDP_OK) {
    rc = post_all(t, items, n, &tab, reterr);
    if (rc != QDP_OK) {
      timeout_ms = 1; /* cancel what was posted */
    }
    uint64_t start = clock_mono_ns();
    if (wait_posted(t, items, &tab, start, timeout_ms, &rc, reterr) > 0) {
      rc = cancel_late(t, items, n, &tab, start, ret_pinned, rc, reterr);
    }
  }
  io_table_free(&tab);
  return rc;
}

static const struct transport_ops mpi_ops = {
    .destroy = mpi_destroy,
    .barrier = mpi_barrier,
    .bcast = mpi_bcast,
    .allgather = mpi_allgather,
    .allgatherv = mpi_allgatherv,
    .allreduce_u64 = mpi_allreduce_u64,
    .send = mpi_send,
    .recv = mpi_recv,
    .io_within = mpi_io_within,
};

static enum transport_threads threads_of(int provided) {
  /* The MPI constants are ordered but their values are the library's: map them by name. */
  if (provided == MPI_THREAD_MULTIPLE) {
    return TRANSPORT_THREADS_MULTIPLE;
  }
  if (provided == MPI_THREAD_SERIALIZED) {
    return TRANSPORT_THREADS_SERIALIZED;
  }
  if (provided == MPI_THREAD_FUNNELED) {
    return TRANSPORT_THREADS_FUNNELED;
  }
  return TRANSPORT_THREADS_SINGLE;
}

/* Initializes MPI unless something in the process already did, and records the threading granted.
 */
static qdp_status init_mpi(struct transport *t, struct mpi_impl *m, int *argc, char ***argv,
                           struct qdp_error *reterr) {
  int flag = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&flag);
  if (!flag) {
    /* MULTIPLE is asked for so that point-to-point may later come from device workers; the
     * daemon funnels everything through one thread when less is granted. */
    int mpirc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (mpirc != MPI_SUCCESS) {
      return mpi_fail(t, mpirc, reterr, "MPI_Init_thread");
    }
    m->initialized_mpi = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  t->threads = threads_of(provided);
  return QDP_OK;
}

/* The transport's own duplicate of the world communicator, its errors returned, and this rank's
 * place in it. */
static qdp_status dup_world(struct transport *t, struct mpi_impl *m, struct qdp_error *reterr) {
  /* Errors on the world communicator abort by default; the duplicate returns them instead, and
   * keeps qdpd's messages apart from any other user of MPI_COMM_WORLD in the process. */
  int mpirc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  if (mpirc != MPI_SUCCESS) {
    m->comm = MPI_COMM_NULL;
    return mpi_fail(t, mpirc, reterr, "MPI_Comm_dup of MPI_COMM_WORLD");
  }
  mpirc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  if (mpirc == MPI_SUCCESS) {
    mpirc = MPI_Comm_rank(m->comm, &t->rank);
  }
  if (mpirc == MPI_SUCCESS) {
    mpirc = MPI_Comm_size(m->comm, &t->size);
  }
  if (mpirc != MPI_SUCCESS) {
    return mpi_fail(t, mpirc, reterr, "setting up the duplicated world communicator");
  }
  return QDP_OK;
}

/* The host name (the processor's, else rankN) and the gather tables sized for the world. */
static qdp_status name_and_tables(struct transport *t, struct mpi_impl *m,
                                  struct qdp_error *reterr) {
  int len = 0;
  char name[MPI_MAX_PROCESSOR_NAME];
  if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS || len <= 0) {
    snprintf(name, sizeof name, "rank%d", t->rank);
  }
  snprintf(t->host, sizeof t->host, "%s", name);
  m->counts = calloc((size_t)t->size, sizeof(int));
  m->displs = calloc((size_t)t->size, sizeof(int));
  if (!m->counts || !m->displs) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate %zu B for the gather tables of %d ranks",
                         2 * (size_t)t->size * sizeof(int), t->size);
  }
  return QDP_OK;
}

qdp_status transport_mpi_create(int *argc, char ***argv, struct transport **ret,
                                struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct transport *t = NULL;
  struct mpi_impl *m = NULL;
  int flag = 0;
  MPI_Finalized(&flag);
  if (flag) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "MPI was already finalized in this process and cannot be initialized "
                         "again; create the MPI transport once");
  }
  t = calloc(1, sizeof *t);
  m = calloc(1, sizeof *m);
  if (!t || !m) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "cannot allocate %zu B for the MPI transport", sizeof *t + sizeof *m);
    goto out;
  }
  m->comm = MPI_COMM_NULL;
  t->ops = &mpi_ops;
  t->impl = m;
  t->kind = TRANSPORT_MPI;
  t->size = 1;
  t->chunk_bytes = TRANSPORT_CHUNK_DEFAULT;
  QDP_TRY(rc, init_mpi(t, m, argc, argv, reterr));
  QDP_TRY(rc, dup_world(t, m, reterr));
  QDP_TRY(rc, name_and_tables(t, m, reterr));
  *ret = t;
  t = NULL;
out:
  if (t) {
    /* Half-built: frees what was taken, finalizing MPI if this call initialized it. */
    if (!t->impl) {
      free(m);
    }
    transport_destroy(t);
  } else if (rc != QDP_OK) {
    free(m);
  }
  return rc;
}
