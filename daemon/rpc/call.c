/* A call's life and its answer (call.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "clock.h"
#include "codec.h"
#include "health.pb-c.h"
#include "log.h"
#include "metrics.h"

const struct rpc_method rpc_methods[RPC_M_COUNT] = {
    [RPC_M_ENCODE] = {"/qdp.Qdp/Encode", "Encode", RPC_UNARY, &qdp__encode_request__descriptor},
    [RPC_M_PLAN] = {"/qdp.Qdp/Plan", "Plan", RPC_UNARY, &qdp__encode_request__descriptor},
    [RPC_M_UPLOAD] = {"/qdp.Qdp/EncodeUpload", "EncodeUpload", RPC_CLIENT_STREAM,
                      &qdp__upload_chunk__descriptor},
    [RPC_M_DESCRIBE] = {"/qdp.Qdp/Describe", "Describe", RPC_UNARY,
                        &qdp__describe_request__descriptor},
    [RPC_M_LIST] = {"/qdp.Qdp/List", "List", RPC_UNARY, &qdp__list_request__descriptor},
    [RPC_M_RELEASE] = {"/qdp.Qdp/Release", "Release", RPC_UNARY, &qdp__state_ref__descriptor},
    [RPC_M_FETCH] = {"/qdp.Qdp/Fetch", "Fetch", RPC_SERVER_STREAM, &qdp__fetch_request__descriptor},
    [RPC_M_EXPORT] = {"/qdp.Qdp/Export", "Export", RPC_UNARY, &qdp__export_request__descriptor},
    [RPC_M_STATUS] = {"/qdp.Qdp/Status", "Status", RPC_UNARY, &qdp__status_request__descriptor},
    [RPC_M_HEALTH] = {"/qdp.Qdp/Health", "Health", RPC_UNARY, &qdp__health_request__descriptor},
    [RPC_M_REGISTER_REGION] = {"/qdp.Qdp/RegisterRegion", "RegisterRegion", RPC_UNARY,
                               &qdp__register_region_request__descriptor},
    [RPC_M_UNREGISTER_REGION] = {"/qdp.Qdp/UnregisterRegion", "UnregisterRegion", RPC_UNARY,
                                 &qdp__region_ref__descriptor},
    [RPC_M_CLOSE_VIEW] = {"/qdp.Qdp/CloseView", "CloseView", RPC_UNARY,
                          &qdp__close_view_request__descriptor},
    [RPC_M_GATHER] = {"/qdp.Qdp/Gather", "Gather", RPC_UNARY, &qdp__gather_request__descriptor},
    [RPC_M_FETCH_INTO] = {"/qdp.Qdp/FetchInto", "FetchInto", RPC_UNARY,
                          &qdp__fetch_into_request__descriptor},
    [RPC_M_KERNEL] = {"/qdp.Qdp/Kernel", "Kernel", RPC_UNARY, &qdp__kernel_request__descriptor},
    [RPC_M_MEASURE] = {"/qdp.Qdp/Measure", "Measure", RPC_UNARY,
                       &qdp__measure_request__descriptor},
    [RPC_M_OPEN_SESSION] = {"/qdp.Qdp/OpenSession", "OpenSession", RPC_UNARY,
                            &qdp__open_session_request__descriptor},
    [RPC_M_HEARTBEAT] = {"/qdp.Qdp/Heartbeat", "Heartbeat", RPC_UNARY,
                         &qdp__session_ref__descriptor},
    [RPC_M_CLOSE_SESSION] = {"/qdp.Qdp/CloseSession", "CloseSession", RPC_UNARY,
                             &qdp__session_ref__descriptor},
    [RPC_M_GRPC_HEALTH_CHECK] = {"/grpc.health.v1.Health/Check", "grpc.health.v1.Check", RPC_UNARY,
                                 &grpc__health__v1__health_check_request__descriptor},
    [RPC_M_GRPC_HEALTH_WATCH] = {"/grpc.health.v1.Health/Watch", "grpc.health.v1.Watch",
                                 RPC_SERVER_STREAM,
                                 &grpc__health__v1__health_check_request__descriptor},
    [RPC_M_REFLECTION] = {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                          "grpc.reflection.v1.ServerReflectionInfo", RPC_BIDI_STREAM, NULL},
    /* The same messages as v1. */
    [RPC_M_REFLECTION_ALPHA] = {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                "grpc.reflection.v1alpha.ServerReflectionInfo", RPC_BIDI_STREAM,
                                NULL},
};

void rpc_calls_shutdown_queue(struct rpc_calls *calls) {
  if (!atomic_exchange(&calls->cq_shut, 1)) {
    grpc_completion_queue_shutdown(calls->cq);
  }
}

static void call_free(struct rpc_call *c) {
  struct rpc_calls *calls = c->calls;
  bool live = c->live;
  if (c->call) {
    grpc_call_unref(c->call);
  }
  grpc_metadata_array_destroy(&c->md);
  grpc_call_details_destroy(&c->details);
  if (c->payload) {
    grpc_byte_buffer_destroy(c->payload);
  }
  if (c->reply) {
    grpc_byte_buffer_destroy(c->reply);
  }
  if (c->sending) {
    grpc_byte_buffer_destroy(c->sending);
  }
  rpc_codec_free(c->req);
  rpc_codec_free(c->chunk);
  if (c->have_details) {
    grpc_slice_unref(c->status_details);
  }
  if (c->have_trailing) {
    grpc_slice_unref(c->trailing.key);
    grpc_slice_unref(c->trailing.value);
  }
  if (c->release) {
    c->release(c);
  }
  free(c);
  /* The queue may shut down only once no call can start another batch on it. */
  if (live && atomic_fetch_sub(&calls->live, 1) == 1 && atomic_load(&calls->shutdown_notified)) {
    rpc_calls_shutdown_queue(calls);
  }
}

void rpc_call_ref(struct rpc_call *c) {
  atomic_fetch_add(&c->refs, 1);
}

void rpc_call_unref(struct rpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) {
    call_free(c);
  }
}

/* The completion-queue thread's share of a new call: unpack its request message. */
static void prepare_new(struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  if (!e->ok || c->method < 0) {
    return;
  }
  const struct rpc_method *m = &rpc_methods[c->method];
  if (m->kind == RPC_CLIENT_STREAM || m->kind == RPC_BIDI_STREAM) {
    return; /* their messages come one by one */
  }
  c->unpack_rc = rpc_codec_unpack(c->payload, m->req, &c->req, &c->err);
  if (c->payload) {
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
  }
}

void rpc_call_arm(struct rpc_calls *calls, int mid) {
  struct rpc_call *c = calloc(1, sizeof *c);
  if (!c) {
    log_err("rpc",
            "no memory to accept a call (%zu bytes); the daemon keeps the requests it has "
            "armed",
            sizeof *c);
    return;
  }
  c->calls = calls;
  c->srv = calls->srv;
  c->method = mid;
  atomic_init(&c->refs, 1);
  atomic_init(&c->cancel_seen, 0);
  c->err = (struct qdp_error)QDP_ERROR_INIT;
  grpc_metadata_array_init(&c->md);
  grpc_call_details_init(&c->details);
  c->ev_new = (struct rpc_ev){.fn = calls->arrived, .prepare = prepare_new, .call = c};
  grpc_call_error ce;
  if (mid >= 0) {
    bool payload = rpc_methods[mid].kind == RPC_UNARY || rpc_methods[mid].kind == RPC_SERVER_STREAM;
    ce = grpc_server_request_registered_call(calls->server, calls->registered[mid], &c->call,
                                             &c->deadline, &c->md, payload ? &c->payload : NULL,
                                             calls->cq, calls->cq, &c->ev_new);
  } else {
    ce = grpc_server_request_call(calls->server, &c->call, &c->details, &c->md, calls->cq,
                                  calls->cq, &c->ev_new);
  }
  if (ce != GRPC_CALL_OK) {
    log_err("rpc", "cannot arm a request for %s: grpc_call_error %d",
            mid >= 0 ? rpc_methods[mid].path : "unregistered methods", (int)ce);
    call_free(c);
  }
}

double rpc_call_seconds(const struct rpc_call *c) {
  return (double)(clock_mono_ns() - c->start_ns) / CLOCK_NS_PER_S;
}

const char *rpc_method_name(const struct rpc_call *c) {
  return c->method >= 0 ? rpc_methods[c->method].name : "(unregistered)";
}

static void on_done(struct rpc_server *s, struct rpc_ev *e) {
  (void)s;
  struct rpc_call *c = e->call;
  if (!e->ok) {
    log_debug("rpc", "%s from %s: the final batch did not complete (client gone)",
              rpc_method_name(c), c->client);
  }
  rpc_call_unref(c);
}

static void log_failure(const struct rpc_call *c, const struct qdp_error *err) {
  int level;
  switch (err->code) {
  case QDP_ERR_INTERNAL:
  case QDP_ERR_UNKNOWN:
    level = LOG_LEVEL_ERR;
    break;
  case QDP_ERR_DATA_LOSS:
    level = LOG_LEVEL_WARNING; /* an input that shrank under the daemon: the client's doing */
    break;
  default:
    level = (int)err->code >= 100 ? LOG_LEVEL_ERR : LOG_LEVEL_INFO;
  }
  const char *status = qdp_status_name(err->code);
  status += strncmp(status, "QDP_ERR_", 8) == 0 ? 8 : 0; /* RESOURCE_EXHAUSTED, as gRPC's */
  char job[24] = "";
  if (c->job_no) {
    snprintf(job, sizeof job, "%" PRIu64, c->job_no);
  }
  const struct log_field f[] = {{"QDP_JOB", job[0] ? job : NULL},
                                {"QDP_METHOD", rpc_method_name(c)},
                                {"QDP_STATUS", status},
                                {"QDP_CLIENT", c->client},
                                {"QDP_OWNER", c->owner[0] ? c->owner : NULL},
                                {"QDP_FIELD", err->field[0] ? err->field : NULL}};
  log_fields(level, "rpc", NULL, f, sizeof f / sizeof f[0], "%s%s%s%s from %s failed: %s: %s",
             job[0] ? "job " : "", job, job[0] ? ": " : "", rpc_method_name(c), c->client,
             qdp_status_name(err->code), err->msg);
}

void rpc_finish(struct rpc_call *c, grpc_byte_buffer *reply, const struct qdp_error *err) {
  grpc_op ops[5];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (!c->md_sent) {
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    n++;
    c->md_sent = true;
  }
  grpc_status_code code = GRPC_STATUS_OK;
  if (err && err->code != QDP_OK) {
    if (reply) {
      grpc_byte_buffer_destroy(reply);
      reply = NULL;
    }
    log_failure(c, err);
    code = rpc_codec_grpc_status(err->code);
    c->status_details = grpc_slice_from_copied_string(err->msg);
    c->have_details = true;
    c->trailing.key = grpc_slice_from_static_string(RPC_ERROR_DETAIL_KEY);
    c->trailing.value = rpc_codec_error_detail(err);
    c->have_trailing = true;
    if (c->job_no) {
      atomic_fetch_add(&c->calls->jobs_failed, 1);
    }
  }
  if (reply) {
    c->reply = reply;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = reply;
    n++;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  ops[n].data.send_status_from_server.status_details = c->have_details ? &c->status_details : NULL;
  ops[n].data.send_status_from_server.trailing_metadata_count = c->have_trailing ? 1 : 0;
  ops[n].data.send_status_from_server.trailing_metadata = c->have_trailing ? &c->trailing : NULL;
  n++;
  if (!c->close_armed) {
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
    n++;
    c->close_armed = true;
  }
  log_debug("rpc", "%s from %s: status %d after %" PRIu64 " ms", rpc_method_name(c), c->client,
            (int)code, (clock_mono_ns() - c->start_ns) / CLOCK_NS_PER_MS);
  if (c->method >= 0) {
    metrics_rpc(c->calls->metrics, (size_t)c->method, (unsigned)code, rpc_call_seconds(c));
  }
  c->ev_done = (struct rpc_ev){.fn = on_done, .call = c};
  /* The caller's reference passes to this batch; on_done drops it. */
  grpc_call_error ce = grpc_call_start_batch(c->call, ops, n, &c->ev_done, NULL);
  if (ce != GRPC_CALL_OK) {
    log_err("rpc", "%s from %s: cannot start the final batch: grpc_call_error %d",
            rpc_method_name(c), c->client, (int)ce);
    grpc_call_cancel(c->call, NULL);
    rpc_call_unref(c);
  }
}

void rpc_finish_status(struct rpc_call *c, qdp_status rc, const char *field, const char *fmt, ...) {
  struct qdp_error e = QDP_ERROR_INIT;
  va_list ap;
  va_start(ap, fmt);
  e.code = rc;
  snprintf(e.field, sizeof e.field, "%s", field ? field : "");
  vsnprintf(e.msg, sizeof e.msg, fmt, ap);
  va_end(ap);
  rpc_finish(c, NULL, &e);
}

bool rpc_start(struct rpc_call *c, grpc_op *ops, size_t n, struct rpc_ev *e) {
  rpc_call_ref(c);
  grpc_call_error ce = grpc_call_start_batch(c->call, ops, n, e, NULL);
  if (ce != GRPC_CALL_OK) {
    log_err("rpc", "%s from %s: cannot start a batch: grpc_call_error %d", rpc_method_name(c),
            c->client, (int)ce);
    grpc_call_cancel(c->call, NULL);
    rpc_call_unref(c);
    return false;
  }
  return true;
}

bool rpc_send_message(struct rpc_call *c, grpc_byte_buffer *bb,
                      void (*fn)(struct rpc_server *s, struct rpc_ev *e)) {
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!c->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->md_sent = true;
  }
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = bb;
  c->sending = bb;
  c->ev_send = (struct rpc_ev){.fn = fn, .call = c};
  if (!rpc_start(c, ops, n, &c->ev_send)) {
    grpc_byte_buffer_destroy(bb);
    c->sending = NULL;
    return false;
  }
  return true;
}

/* Completion-queue thread. */
static void on_close(struct rpc_server *s, struct rpc_ev *e) {
  (void)s;
  struct rpc_call *c = e->call;
  if (!e->ok || c->cancelled) {
    atomic_store(&c->cancel_seen, 1);
    if (c->closed) {
      c->closed(c);
    }
  }
  rpc_call_unref(c);
}

void rpc_watch_close(struct rpc_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  c->ev_close = (struct rpc_ev){.fn = on_close, .call = c};
  c->close_armed = true;
  if (!rpc_start(c, &op, 1, &c->ev_close)) {
    c->close_armed = false;
  }
}
