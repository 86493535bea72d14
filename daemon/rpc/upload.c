/* EncodeUpload's receiving side: the first message declares the request, the later ones append
 * data into one host buffer bounded by the declared size, max_upload_bytes and upload_budget. The
 * encode itself then runs as a worker job (rpc_h_upload_encode). Completion-queue thread, except
 * where noted.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "internal.h"
#include "log.h"
#include "request.h"

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

static bool recv_next(struct rpc_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->payload;
  c->ev_recv = (struct rpc_ev){.fn = on_recv, .prepare = prepare_recv, .call = c};
  return rpc_start(c, &op, 1, &c->ev_recv);
}

void rpc_upload_begin(struct rpc_call *c) {
  if (!recv_next(c)) {
    rpc_finish_status(c, QDP_ERR_INTERNAL, NULL, "EncodeUpload could not start receiving");
  }
}

/* Any thread. */
void rpc_upload_free(struct rpc_call *c) {
  struct rpc_upload *u = &c->up;
  free(u->buf);
  u->buf = NULL;
  if (u->reserved) {
    atomic_fetch_sub(&c->srv->upload_reserved, u->reserved);
    u->reserved = 0;
  }
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
  qdp_status rc = rpc_upload_limit(in->dtype, in->rows, in->cols, atomic_load(&s->max_upload_bytes),
                                   &c->up.limit, &c->up.exact, err);
  if (rc != QDP_OK) {
    return rc;
  }
  c->up.req = ch->request;
  ch->request = NULL; /* a separately allocated submessage: it now belongs to the upload */
  return QDP_OK;
}

static qdp_status append(struct rpc_call *c, const uint8_t *data, size_t n, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
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
                  "the upload passes max_upload_bytes = %" PRIu64
                  " B; send a .npy path or shared memory instead",
                  u->limit);
    e.need_bytes = u->len + n;
    e.free_bytes = u->limit;
    *err = e;
    return e.code;
  }
  if (u->len + n > u->cap) {
    /* A declared size is allocated once; an undeclared one doubles up to the limit. */
    uint64_t want = u->exact ? u->limit : (u->cap ? u->cap * 2 : UPLOAD_FIRST_CAP);
    if (want < u->len + n) {
      want = u->len + n;
    }
    if (want > u->limit) {
      want = u->limit;
    }
    uint64_t more = want - u->cap;
    uint64_t budget = atomic_load(&s->upload_budget);
    uint64_t held = atomic_fetch_add(&s->upload_reserved, more);
    if (held + more > budget) {
      atomic_fetch_sub(&s->upload_reserved, more);
      struct qdp_error e = QDP_ERROR_INIT;
      qdp_error_set(&e, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                    "uploads in flight hold %" PRIu64 " B of upload_budget = %" PRIu64
                    " B and this one needs %" PRIu64 " B more; retry later",
                    held, budget, more);
      e.need_bytes = more;
      e.free_bytes = held < budget ? budget - held : 0;
      *err = e;
      return e.code;
    }
    uint8_t *nb = realloc(u->buf, (size_t)want);
    if (!nb) {
      atomic_fetch_sub(&s->upload_reserved, more);
      return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                           "no host memory for a %" PRIu64 " B upload buffer", want);
    }
    u->buf = nb;
    u->cap = want;
    u->reserved += more;
  }
  memcpy(u->buf + u->len, data, n);
  u->len += n;
  return QDP_OK;
}

static void on_recv(struct rpc_server *s, struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  struct qdp_error err = QDP_ERROR_INIT;
  qdp_status rc = QDP_OK;
  if (!e->ok) {
    rpc_finish_status(c, QDP_ERR_CANCELLED, NULL, "the client left during the upload");
    goto drop;
  }
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    goto drop;
  }
  Qdp__UploadChunk *ch = (Qdp__UploadChunk *)c->chunk;
  if (!ch) {
    /* The end of the client's stream. */
    if (!c->up.req) {
      rpc_finish_status(c, QDP_ERR_INVALID_ARGUMENT, "request",
                        "EncodeUpload ended before its first message, which carries the request");
    } else if (c->up.exact && c->up.len != c->up.limit) {
      rpc_finish_status(c, QDP_ERR_INVALID_ARGUMENT, "data",
                        "the upload sent %" PRIu64 " bytes but request.input declares %" PRIu64
                        " (rows x cols x dtype size)",
                        c->up.len, c->up.limit);
    } else {
      c->job = (struct rpc_job){.fn = rpc_h_upload_encode, .call = c, .srv = s};
      rpc_submit(s, &c->job);
    }
    goto drop;
  }
  if (!c->up.req) {
    rc = declare(c, ch, &err);
  } else if (ch->request) {
    rc = qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, "request",
                       "only the first message of EncodeUpload may carry the request");
  }
  if (rc == QDP_OK) {
    rc = append(c, ch->data.data, ch->data.len, &err);
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
