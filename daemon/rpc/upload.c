/* EncodeUpload's receiving side: the first message declares the request, the later ones append
 * data into one host buffer bounded by the declared size, max_upload_bytes, upload_budget and the
 * caller's client_upload_budget (the budgets are admission: job_upload_admit, job/upload.c).
 * Memory is taken as data arrives (doubling), never for a size
 * only declared, so uploads that declare much and send little hold little. An upload that sends
 * nothing for upload_idle_timeout is cancelled; one that ends before its declared size, or
 * without its last chunk marked when it declares none, fails with DATA_LOSS (CANCELLED when its
 * client is gone) and is never encoded. The encode itself then runs as the call's worker job,
 * which the server set to the method's handler. Completion-queue thread, except where noted.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "clock.h"
#include "codec.h"
#include "log.h"
#include "qdp_size.h"
#include "server_state.h"
#include "upload.h"

/* The first allocation of an upload whose size is not declared; it doubles from there. */
#define UPLOAD_FIRST_CAP (1u << 20)

static void on_recv(struct rpc_server *s, struct rpc_ev *e);

/* Completion-queue thread: unpack the message just received. */
static void prepare_recv(struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  c->unpack_rc = QDP_OK;
  if (e->ok && c->payload) {
    c->unpack_rc = rpc_codec_unpack(c->payload, &qdp__upload_chunk__descriptor, &c->chunk, &c->err);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
  }
}

/* ---- the uploads in flight: their memory (admitted by job/) and idle times (uploads_mu) ----
 */

/* Takes `more` bytes of upload memory for c's caller (job_upload_admit: upload_budget and the
 * caller's client_upload_budget). */
static qdp_status reserve(struct rpc_call *c, uint64_t more, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  qdp_status rc = job_upload_admit(s->jobs, c->owner, more, err);
  if (rc == QDP_OK) {
    uv_mutex_lock(&s->uploads_mu);
    c->up.reserved += more;
    uv_mutex_unlock(&s->uploads_mu);
  }
  return rc;
}

/* Gives back everything c holds and stops watching it for idleness. Any thread. */
static void untrack(struct rpc_call *c) {
  struct rpc_server *s = c->srv;
  struct rpc_upload *u = &c->up;
  uv_mutex_lock(&s->uploads_mu);
  if (u->tracked) {
    *u->prev_next = u->next;
    if (u->next) {
      u->next->up.prev_next = u->prev_next;
    }
    u->tracked = false;
  }
  uint64_t held = u->reserved;
  u->reserved = 0;
  uv_mutex_unlock(&s->uploads_mu);
  job_upload_release(s->jobs, c->owner, held);
}

/* An upload whose stream ended short: a client that died ends its stream too, and its cancel
 * arrives a moment later, so the verdict waits for it (rpc_upload_closed) up to SHORT_WAIT_MS,
 * then says DATA_LOSS. Whoever takes `short_ns` answers; any thread. */
#define SHORT_WAIT_MS 200

static void short_verdict(struct rpc_call *c, bool cancelled) {
  uint64_t len = c->up.len;
  if (cancelled) {
    rpc_finish_status(c, QDP_ERR_CANCELLED, NULL,
                      "the client left after %" PRIu64 " B of the upload; nothing was encoded",
                      len);
  } else if (c->up.exact) {
    rpc_finish_status(c, QDP_ERR_DATA_LOSS, "data",
                      "the upload ended after %" PRIu64 " of the %" PRIu64
                      " bytes request.input declares (rows x cols x dtype size): the client "
                      "closed its stream early; nothing was encoded",
                      len, c->up.limit);
  } else {
    rpc_finish_status(c, QDP_ERR_DATA_LOSS, "last",
                      "the upload ended after %" PRIu64
                      " B without its last chunk marked "
                      "(UploadChunk.last): the client closed its stream early; nothing was "
                      "encoded",
                      len);
  }
}

void rpc_upload_closed(struct rpc_call *c) {
  if (atomic_exchange(&c->up.short_ns, 0) != 0) {
    untrack(c);
    short_verdict(c, true);
  }
}

size_t rpc_upload_receiving(struct rpc_server *s) {
  size_t n = 0;
  uv_mutex_lock(&s->uploads_mu);
  for (struct rpc_call *c = s->uploads; c; c = c->up.next) {
    n++;
  }
  uv_mutex_unlock(&s->uploads_mu);
  return n;
}

/* Loop thread, every second: cancels the uploads that sent nothing for upload_idle_timeout, and
 * gives the verdict on short ones whose client showed no sign of leaving. */
void rpc_upload_sweep(struct rpc_server *s) {
  uint64_t idle = atomic_load(&s->upload_idle_ms), now = clock_mono_ns();
  struct rpc_call *done = NULL;
  uv_mutex_lock(&s->uploads_mu);
  for (struct rpc_call *c = s->uploads; c; c = c->up.next) {
    struct rpc_upload *u = &c->up;
    uint64_t since = atomic_load(&u->short_ns);
    if (since && now - since >= SHORT_WAIT_MS * CLOCK_NS_PER_MS &&
        atomic_exchange(&u->short_ns, 0) == since) {
      u->verdict_next = done; /* answered below, outside the lock */
      done = c;
      continue;
    }
    if (!since && !u->idle && now - atomic_load(&u->last_ns) >= idle * CLOCK_NS_PER_MS) {
      u->idle = true;
      char msg[160];
      snprintf(msg, sizeof msg, "the upload sent nothing for %" PRIu64 " s (upload_idle_timeout)",
               idle / 1000);
      grpc_call_cancel_with_status(c->call, GRPC_STATUS_CANCELLED, msg, NULL);
    }
  }
  uv_mutex_unlock(&s->uploads_mu);
  while (done) {
    struct rpc_call *c = done;
    done = c->up.verdict_next;
    untrack(c);
    short_verdict(c, atomic_load(&c->cancel_seen) != 0);
  }
}

static bool recv_next(struct rpc_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->payload;
  c->ev_recv = (struct rpc_ev){.fn = on_recv, .prepare = prepare_recv, .call = c};
  return rpc_start(c, &op, 1, &c->ev_recv);
}

void rpc_upload_begin(struct rpc_call *c) {
  struct rpc_server *s = c->srv;
  struct rpc_upload *u = &c->up;
  c->closed = rpc_upload_closed;
  c->release = rpc_upload_free;
  atomic_store(&u->last_ns, clock_mono_ns());
  uv_mutex_lock(&s->uploads_mu);
  u->next = s->uploads;
  if (u->next) {
    u->next->up.prev_next = &u->next;
  }
  u->prev_next = &s->uploads;
  s->uploads = c;
  u->tracked = true;
  uv_mutex_unlock(&s->uploads_mu);
  /* A client that dies mid-stream shows as a cancel, not as an end of its stream. */
  rpc_watch_close(c);
  if (!recv_next(c)) {
    rpc_finish_status(c, QDP_ERR_INTERNAL, NULL, "EncodeUpload could not start receiving");
  }
}

/* Any thread. */
void rpc_upload_free(struct rpc_call *c) {
  struct rpc_upload *u = &c->up;
  untrack(c);
  free(u->buf);
  u->buf = NULL;
  u->len = u->cap = 0;
  rpc_codec_free(u->req ? &u->req->base : NULL);
  u->req = NULL;
}

/* Takes the first message's request: the upload's dtype and shape, and so its limit. */
static qdp_status declare(struct rpc_call *c, Qdp__UploadChunk *ch, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  if (!ch->request) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "request",
                         "the first message of EncodeUpload must carry the request");
  }
  const Qdp__Input *in = ch->request->input;
  if (!in) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "request.input",
                         "request.input must give the upload's dtype, rows and cols");
  }
  if (in->source_case != QDP__INPUT__SOURCE__NOT_SET) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "request.input",
                         "request.input of an upload must name no data, path or shm: the "
                         "values follow in the next messages");
  }
  qdp_status rc = job_upload_limit(in->dtype, in->rows, in->cols, atomic_load(&s->max_upload_bytes),
                                   &c->up.limit, &c->up.exact, err);
  if (rc != QDP_OK) {
    return rc;
  }
  c->up.req = ch->request;
  ch->request = NULL; /* a separately allocated submessage: it now belongs to the upload */
  return QDP_OK;
}

static qdp_status append(struct rpc_call *c, const uint8_t *data, size_t n, struct qdp_error *err) {
  struct rpc_upload *u = &c->up;
  if (n == 0) {
    return QDP_OK;
  }
  if (n > u->limit - u->len) {
    if (u->exact) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "data",
                           "the upload sends more than the %" PRIu64
                           " bytes request.input declares (rows x cols x dtype size)",
                           u->limit);
    }
    struct qdp_error e = QDP_ERROR_INIT;
    qdp_error_set(&e, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                  "the upload passes max_upload_bytes = %s; send a .npy path or shared memory "
                  "instead",
                  QDP_SIZE_STR(u->limit));
    e.need_bytes = u->len + n;
    e.free_bytes = u->limit;
    *err = e;
    return e.code;
  }
  if (u->len + n > u->cap) {
    /* Memory follows the data: doubling up to the limit, whatever size was declared. */
    uint64_t want = u->cap ? u->cap * 2 : UPLOAD_FIRST_CAP;
    if (want < u->len + n) {
      want = u->len + n;
    }
    if (want > u->limit) {
      want = u->limit;
    }
    uint64_t more = want - u->cap;
    qdp_status rc = reserve(c, more, err);
    if (rc != QDP_OK) {
      return rc;
    }
    uint8_t *nb = realloc(u->buf, (size_t)want);
    if (!nb) {
      return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                           "no host memory for a %" PRIu64 " B upload buffer", want);
    }
    u->buf = nb;
    u->cap = want;
  }
  memcpy(u->buf + u->len, data, n);
  u->len += n;
  return QDP_OK;
}

static void on_recv(struct rpc_server *s, struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  struct qdp_error err = QDP_ERROR_INIT;
  qdp_status rc = QDP_OK;
  atomic_store(&c->up.last_ns, clock_mono_ns());
  if (!e->ok || c->up.idle) {
    rpc_finish_status(c, QDP_ERR_CANCELLED, NULL,
                      c->up.idle ? "the upload sent nothing for %" PRIu64
                                   " s (upload_idle_timeout) and was cancelled; nothing was kept"
                                 : "the client left after %" PRIu64 " B of the upload",
                      c->up.idle ? atomic_load(&s->upload_idle_ms) / 1000 : c->up.len);
    goto drop;
  }
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    goto drop;
  }
  Qdp__UploadChunk *ch = (Qdp__UploadChunk *)c->chunk;
  if (!ch) {
    /* The end of the client's stream; a client that died also ends it, so only a complete one
     * is encoded. */
    if (atomic_load(&c->cancel_seen)) {
      untrack(c);
      rpc_finish_status(c, QDP_ERR_CANCELLED, NULL,
                        "the client left after %" PRIu64 " B of the upload; nothing was encoded",
                        c->up.len);
    } else if (!c->up.req) {
      untrack(c);
      rpc_finish_status(c, QDP_ERR_INVALID_ARGUMENT, "request",
                        "EncodeUpload ended before its first message, which carries the request");
    } else if (c->up.exact ? c->up.len != c->up.limit : !c->up.last) {
      /* Short: the verdict waits a moment for the client's cancel (rpc_upload_closed). */
      atomic_store(&c->up.short_ns, clock_mono_ns());
      goto drop;
    } else {
      untrack(c);
      rpc_pool_submit(&s->pool, &c->job);
    }
    goto drop;
  }
  if (!c->up.req) {
    rc = declare(c, ch, &err);
  } else if (ch->request) {
    rc = qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, "request",
                       "only the first message of EncodeUpload may carry the request");
  } else if (c->up.last) {
    rc = qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, "last",
                       "a message followed the one marked last");
  }
  if (rc == QDP_OK) {
    rc = append(c, ch->data.data, ch->data.len, &err);
    c->up.last = ch->last;
  }
  rpc_codec_free(c->chunk);
  c->chunk = NULL;
  if (rc != QDP_OK) {
    rpc_finish(c, NULL, &err);
  } else if (!recv_next(c)) {
    rpc_finish_status(c, QDP_ERR_INTERNAL, NULL, "EncodeUpload could not receive its next message");
  }
drop:
  rpc_call_unref(c); /* the receive batch's reference */
}
