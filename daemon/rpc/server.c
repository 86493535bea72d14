/* The gRPC server: the completion-queue thread, the worker pool, the life of a call, and the
 * answer of a call. The handlers live in handlers.c. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "codec.h"
#include "http.h"
#include "qdp_build_config.h"
#include "qdp_wire.h"
#include "internal.h"
#include "log.h"
#include "listener.h"
#include "state/tickets.h"

/* Requests armed per method: a new one is armed as each arrives, so this only covers bursts that
 * arrive before the completion-queue thread gets to re-arm. */
#define ARMED_PER_METHOD 4

const struct rpc_method rpc_methods[RPC_M_COUNT] = {
    [RPC_M_ENCODE] = {"/qdp.Qdp/Encode", "Encode", RPC_UNARY, &qdp__encode_request__descriptor,
                      rpc_h_encode},
    [RPC_M_PLAN] = {"/qdp.Qdp/Plan", "Plan", RPC_UNARY, &qdp__encode_request__descriptor,
                    rpc_h_plan},
    [RPC_M_UPLOAD] = {"/qdp.Qdp/EncodeUpload", "EncodeUpload", RPC_CLIENT_STREAM,
                      &qdp__upload_chunk__descriptor, rpc_h_upload_encode},
    [RPC_M_DESCRIBE] = {"/qdp.Qdp/Describe", "Describe", RPC_UNARY,
                        &qdp__describe_request__descriptor, rpc_h_describe},
    [RPC_M_LIST] = {"/qdp.Qdp/List", "List", RPC_UNARY, &qdp__list_request__descriptor, rpc_h_list},
    [RPC_M_RELEASE] = {"/qdp.Qdp/Release", "Release", RPC_UNARY, &qdp__state_ref__descriptor,
                       rpc_h_release},
    [RPC_M_FETCH] = {"/qdp.Qdp/Fetch", "Fetch", RPC_SERVER_STREAM, &qdp__fetch_request__descriptor,
                     rpc_h_fetch},
    [RPC_M_EXPORT] = {"/qdp.Qdp/Export", "Export", RPC_UNARY, &qdp__export_request__descriptor,
                      rpc_h_export},
    [RPC_M_STATUS] = {"/qdp.Qdp/Status", "Status", RPC_UNARY, &qdp__status_request__descriptor,
                      rpc_h_status},
    [RPC_M_HEALTH] = {"/qdp.Qdp/Health", "Health", RPC_UNARY, &qdp__health_request__descriptor,
                      NULL /* answered on the completion-queue thread */},
    [RPC_M_REGISTER_REGION] = {"/qdp.Qdp/RegisterRegion", "RegisterRegion", RPC_UNARY,
                               &qdp__register_region_request__descriptor, rpc_h_register_region},
    [RPC_M_UNREGISTER_REGION] = {"/qdp.Qdp/UnregisterRegion", "UnregisterRegion", RPC_UNARY,
                                 &qdp__region_ref__descriptor, rpc_h_unregister_region},
    [RPC_M_CLOSE_VIEW] = {"/qdp.Qdp/CloseView", "CloseView", RPC_UNARY,
                          &qdp__close_view_request__descriptor, rpc_h_close_view},
    [RPC_M_GATHER] = {"/qdp.Qdp/Gather", "Gather", RPC_UNARY, &qdp__gather_request__descriptor,
                      rpc_h_gather},
    [RPC_M_FETCH_INTO] = {"/qdp.Qdp/FetchInto", "FetchInto", RPC_UNARY,
                          &qdp__fetch_into_request__descriptor, rpc_h_fetch_into},
    [RPC_M_GRPC_HEALTH_CHECK] = {"/grpc.health.v1.Health/Check", "grpc.health.v1.Check", RPC_UNARY,
                                 &grpc__health__v1__health_check_request__descriptor,
                                 NULL /* answered on the completion-queue thread */},
    [RPC_M_GRPC_HEALTH_WATCH] = {"/grpc.health.v1.Health/Watch", "grpc.health.v1.Watch",
                                 RPC_SERVER_STREAM,
                                 &grpc__health__v1__health_check_request__descriptor,
                                 NULL /* streamed from watch.c */},
    [RPC_M_REFLECTION] = {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                          "grpc.reflection.v1.ServerReflectionInfo", RPC_BIDI_STREAM, NULL,
                          NULL /* reflection.c */},
    [RPC_M_REFLECTION_ALPHA] = {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                "grpc.reflection.v1alpha.ServerReflectionInfo", RPC_BIDI_STREAM,
                                NULL, NULL /* reflection.c, as v1: the same messages */},
};

/* ---- time
 * ---------------------------------------------------------------------------------------- */

int64_t rpc_now_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the loop's inbox
 * ----------------------------------------------------------------------------- */

/* Any thread (the completion-queue thread in practice). */
static void inbox_push(struct rpc_server *s, struct rpc_ev *e) {
  e->next = NULL;
  uv_mutex_lock(&s->inbox_mu);
  if (s->inbox_tail) {
    s->inbox_tail->next = e;
  } else {
    s->inbox_head = e;
  }
  s->inbox_tail = e;
  uv_mutex_unlock(&s->inbox_mu);
  uv_async_send(&s->async);
}

/* Loop thread. Sends coalesce, so one wake-up drains everything pushed so far, in order. */
static void on_async(uv_async_t *a) {
  struct rpc_server *s = a->data;
  for (;;) {
    uv_mutex_lock(&s->inbox_mu);
    struct rpc_ev *e = s->inbox_head;
    s->inbox_head = s->inbox_tail = NULL;
    uv_mutex_unlock(&s->inbox_mu);
    if (!e) {
      break;
    }
    while (e) {
      struct rpc_ev *next = e->next;
      e->fn(s, e);
      e = next;
    }
  }
}

/* ---- worker pool
 * ---------------------------------------------------------------------------------- */

/* Any thread. */
void rpc_submit(struct rpc_server *s, struct rpc_job *j) {
  j->next = NULL;
  uv_mutex_lock(&s->pool_mu);
  if (s->pool_tail) {
    s->pool_tail->next = j;
  } else {
    s->pool_head = j;
  }
  s->pool_tail = j;
  uv_cond_signal(&s->pool_cv);
  uv_mutex_unlock(&s->pool_mu);
}

static void worker_main(void *arg) {
  struct rpc_server *s = arg;
  for (;;) {
    uv_mutex_lock(&s->pool_mu);
    while (!s->pool_head && !s->pool_stop) {
      uv_cond_wait(&s->pool_cv, &s->pool_mu);
    }
    struct rpc_job *j = s->pool_head;
    if (!j) {
      uv_mutex_unlock(&s->pool_mu);
      break; /* stopping, and nothing left to run */
    }
    s->pool_head = j->next;
    if (!s->pool_head) {
      s->pool_tail = NULL;
    }
    uv_mutex_unlock(&s->pool_mu);
    j->fn(j);
  }
}

static void pool_stop(struct rpc_server *s) {
  uv_mutex_lock(&s->pool_mu);
  s->pool_stop = true;
  uv_cond_broadcast(&s->pool_cv);
  uv_mutex_unlock(&s->pool_mu);
  for (size_t i = 0; i < s->nworkers; i++) {
    uv_thread_join(&s->workers[i]);
  }
  s->nworkers = 0;
}

/* ---- calls
 * ---------------------------------------------------------------------------------------- */

static void try_shutdown_cq(struct rpc_server *s) {
  if (!atomic_exchange(&s->cq_shut, 1)) {
    grpc_completion_queue_shutdown(s->cq);
  }
}

static void call_free(struct rpc_call *c) {
  struct rpc_server *s = c->srv;
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
  rpc_upload_free(c);
  free(c);
  /* The queue may shut down only once no call can start another batch on it. */
  if (live && atomic_fetch_sub(&s->live_calls, 1) == 1 && atomic_load(&s->shutdown_notified)) {
    try_shutdown_cq(s);
  }
}

/* Any thread. */
void rpc_call_ref(struct rpc_call *c) {
  atomic_fetch_add(&c->refs, 1);
}

/* Any thread; the last reference frees the call. */
void rpc_call_unref(struct rpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) {
    call_free(c);
  }
}

static void on_new(struct rpc_server *s, struct rpc_ev *e);

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

/* Arms one request for method `mid` (-1: any unregistered method). Any thread (the loop at start,
 * the completion-queue thread as calls arrive). */
static void arm(struct rpc_server *s, int mid) {
  struct rpc_call *c = calloc(1, sizeof *c);
  if (!c) {
    log_err("rpc",
            "no memory to accept a call (%zu bytes); the daemon keeps the requests it has "
            "armed",
            sizeof *c);
    return;
  }
  c->srv = s;
  c->method = mid;
  atomic_init(&c->refs, 1);
  atomic_init(&c->cancel_seen, 0);
  c->err = (struct qdp_error)QDP_ERROR_INIT;
  grpc_metadata_array_init(&c->md);
  grpc_call_details_init(&c->details);
  c->ev_new = (struct rpc_ev){.fn = on_new, .prepare = prepare_new, .call = c};
  grpc_call_error ce;
  if (mid >= 0) {
    bool payload = rpc_methods[mid].kind == RPC_UNARY || rpc_methods[mid].kind == RPC_SERVER_STREAM;
    ce = grpc_server_request_registered_call(s->server, s->registered[mid], &c->call, &c->deadline,
                                             &c->md, payload ? &c->payload : NULL, s->cq, s->cq,
                                             &c->ev_new);
  } else {
    ce = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq,
                                  &c->ev_new);
  }
  if (ce != GRPC_CALL_OK) {
    log_err("rpc", "cannot arm a request for %s: grpc_call_error %d",
            mid >= 0 ? rpc_methods[mid].path : "unregistered methods", (int)ce);
    call_free(c);
  }
}

/* Finds request metadata `key`; NULL when absent. */
static const grpc_slice *md_find(const grpc_metadata_array *md, const char *key) {
  for (size_t i = 0; i < md->count; i++) {
    if (grpc_slice_str_cmp(md->metadata[i].key, key) == 0) {
      return &md->metadata[i].value;
    }
  }
  return NULL;
}

/* The principal whose token the bearer value v (after "Bearer ") is, or NULL. Every token is
 * compared over its full length in constant time, and all of them always, so neither timing nor
 * order says which (or how much of one) matched. */
static const char *token_principal(const struct rpc_server *s, const grpc_slice *v) {
  static const char prefix[] = "Bearer ";
  size_t pl = sizeof prefix - 1;
  size_t n = GRPC_SLICE_LENGTH(*v);
  const uint8_t *p = GRPC_SLICE_START_PTR(*v);
  if (n <= pl || memcmp(p, prefix, pl) != 0) {
    return NULL;
  }
  p += pl;
  n -= pl;
  const char *found = NULL;
  for (size_t t = 0; t < s->ntokens; t++) {
    const char *want = s->tokens[t].token;
    size_t wl = strlen(want);
    unsigned diff = n != wl;
    for (size_t i = 0; i < wl; i++) {
      diff |= (unsigned)((uint8_t)want[i] ^ (i < n ? p[i] : 0));
    }
    if (diff == 0) {
      found = s->tokens[t].principal;
    }
  }
  return found;
}

/* The call's label for logs: its identity, its process, and what it calls itself. */
static void label_call(struct rpc_call *c) {
  char label[64] = "";
  const grpc_slice *id = md_find(&c->md, "qdp-client");
  if (id) {
    size_t n =
        GRPC_SLICE_LENGTH(*id) < sizeof label - 1 ? GRPC_SLICE_LENGTH(*id) : sizeof label - 1;
    memcpy(label, GRPC_SLICE_START_PTR(*id), n);
    label[n] = '\0';
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)label[i];
      if (ch < 0x20 || ch == 0x7f || ch == '\'') {
        label[i] = '?'; /* it appears in log lines */
      }
    }
  }
  int k = c->tcp
              ? snprintf(c->client, sizeof c->client, "%s", c->owner[0] ? c->owner : c->peer)
              : snprintf(c->client, sizeof c->client, "%s pid %ld", c->owner, (long)c->ucred.pid);
  if (label[0] && k > 0 && (size_t)k < sizeof c->client) {
    snprintf(c->client + k, sizeof c->client - (size_t)k, " '%s'", label);
  }
}

/* Who the call is from: the Unix socket's record of its connection, else TCP (whose principal
 * on_new settles from its token). */
static void identify(struct rpc_call *c) {
  char *peer = grpc_call_get_peer(c->call);
  snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "unknown");
  gpr_free(peer);
  c->tcp = !rpc_listener_peer(c->srv->listener, c->peer, &c->ucred);
  if (!c->tcp) {
    rpc_peer_key(&c->ucred, c->owner, sizeof c->owner);
  }
  label_call(c);
}

/* Whether a call is cheap enough to serve on the completion-queue thread itself: calls that only
 * read the store or the mesh, and encodes of small states from inline input. The hand-over to a
 * worker alone costs about as much as such a call's own work; anything that may take long (large
 * states, mapped files and shared memory, releases, streams) goes to the workers, so the
 * completion-queue thread is never held for more than a few hundred microseconds. */
#define RPC_INLINE_QUBITS 16
#define RPC_INLINE_STATE_BYTES (UINT64_C(1) << 20) /* about 0.2 ms of CPU-backend work */

static bool runs_inline(const struct rpc_call *c) {
  switch (c->method) {
  case RPC_M_PLAN:
  case RPC_M_LIST:
  case RPC_M_STATUS:
    return true;
  case RPC_M_DESCRIBE: /* views call into the driver: a worker's job */
    return !((const Qdp__DescribeRequest *)c->req)->views;
  case RPC_M_ENCODE: {
    const Qdp__EncodeRequest *r = (const Qdp__EncodeRequest *)c->req;
    if (job_world_ranks(c->srv->jobs) > 1) {
      return false; /* it waits on other ranks, up to the rank timeout */
    }
    /* An output into the caller's allocation opens its IPC handle: a driver call. */
    if (!r->input || r->input->source_case != QDP__INPUT__SOURCE_DATA || r->out) {
      return false;
    }
    uint64_t rows = r->input->rows ? r->input->rows : 1;
    /* Both bounds keep the product below 2^64: rows <= 2^20, 2^qubits <= 2^16, 16 B each. */
    return r->qubits <= RPC_INLINE_QUBITS && rows <= (UINT64_C(1) << 20) &&
           (rows << r->qubits) * 16 <= RPC_INLINE_STATE_BYTES;
  }
  default:
    return false;
  }
}

/* grpc.health.v1.Health/Check: the daemon ("") and its service "qdp.Qdp" serve until the drain on
 * SIGTERM, and not while a rank of the world is lost (its jobs fail until a restart); other names
 * are NOT_FOUND, as the standard asks. */
static void answer_health_check(struct rpc_server *s, struct rpc_call *c) {
  struct qdp_error err = QDP_ERROR_INIT;
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    return;
  }
  const Grpc__Health__V1__HealthCheckRequest *req =
      (const Grpc__Health__V1__HealthCheckRequest *)c->req;
  const char *service = req && req->service ? req->service : "";
  if (service[0] && strcmp(service, "qdp.Qdp") != 0) {
    qdp_error_set(&err, QDP_ERR_NOT_FOUND, "service",
                  "no service '%.64s' here: ask for \"\" (the daemon) or \"qdp.Qdp\"", service);
    rpc_finish(c, NULL, &err);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)rpc_serving_status(s, "");
  rpc_finish(c, qdp_wire_pack(&r.base), NULL);
}

static void on_new(struct rpc_server *s, struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  if (!e->ok) {
    /* An armed request handed back at shutdown. */
    rpc_call_unref(c);
    return;
  }
  c->live = true;
  atomic_fetch_add(&s->live_calls, 1);
  if (!s->shutting_down) {
    arm(s, c->method);
  }
  c->start_ms = rpc_mono_ms();
  c->start_ns = uv_hrtime();
  identify(c);
  struct qdp_error err = QDP_ERROR_INIT;
  if (c->method < 0) {
    char method[128];
    size_t n = GRPC_SLICE_LENGTH(c->details.method);
    snprintf(method, sizeof method, "%.*s", (int)(n < 100 ? n : 100),
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    qdp_error_set(&err, QDP_ERR_UNIMPLEMENTED, NULL,
                  "method '%s' is not part of this daemon's service qdp.Qdp", method);
    rpc_finish(c, NULL, &err);
    return;
  }
  const struct rpc_method *m = &rpc_methods[c->method];
  if (c->method == RPC_M_GRPC_HEALTH_CHECK) {
    answer_health_check(s, c); /* a probe carries no token: it learns only whether we serve */
    return;
  }
  if (c->method == RPC_M_GRPC_HEALTH_WATCH) {
    rpc_watch_begin(c); /* as Check: no token */
    return;
  }
  if (c->tcp) {
    const grpc_slice *auth = md_find(&c->md, "authorization");
    const char *principal = auth ? token_principal(s, auth) : NULL;
    if (!principal) {
      qdp_error_set(&err, QDP_ERR_UNAUTHENTICATED, "authorization",
                    "%s over TCP needs the metadata 'authorization: Bearer <token>' with a token "
                    "this daemon knows (tcp_token, tcp_tokens_file)",
                    m->name);
      rpc_finish(c, NULL, &err);
      return;
    }
    snprintf(c->owner, sizeof c->owner, "tcp:%s", principal);
    label_call(c);
  }
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    return;
  }
  if (c->method == RPC_M_HEALTH) {
    Qdp__HealthReply r = QDP__HEALTH_REPLY__INIT;
    r.status = s->shutting_down ? QDP__HEALTH_REPLY__SERVING_STATUS__NOT_SERVING
                                : QDP__HEALTH_REPLY__SERVING_STATUS__SERVING;
    rpc_finish(c, qdp_wire_pack(&r.base), NULL);
    return;
  }
  if (m->kind == RPC_BIDI_STREAM) {
    rpc_reflection_begin(c);
    return;
  }
  if (m->kind == RPC_CLIENT_STREAM) {
    rpc_upload_begin(c);
    return;
  }
  c->job.fn = m->run;
  c->job.call = c;
  c->job.srv = s;
  if (runs_inline(c)) {
    m->run(&c->job);
    return;
  }
  if (c->method == RPC_M_ENCODE || c->method == RPC_M_GATHER) {
    rpc_watch_close(c); /* a job that outlives its caller commits nothing */
  }
  rpc_submit(s, &c->job);
}

/* ---- answering
 * ------------------------------------------------------------------------------------ */

static void on_done(struct rpc_server *s, struct rpc_ev *e) {
  (void)s;
  struct rpc_call *c = e->call;
  if (!e->ok) {
    log_debug("rpc", "%s from %s: the final batch did not complete (client gone)",
              rpc_method_name(c), c->client);
  }
  rpc_call_unref(c);
}

double rpc_call_seconds(const struct rpc_call *c) {
  return (double)(uv_hrtime() - c->start_ns) / 1e9;
}

const char *rpc_method_name(const struct rpc_call *c) {
  return c->method >= 0 ? rpc_methods[c->method].name : "(unregistered)";
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
      atomic_fetch_add(&c->srv->jobs_failed, 1);
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
            (int)code, rpc_mono_ms() - c->start_ms);
  if (c->method >= 0) {
    metrics_rpc(c->srv->metrics, (size_t)c->method, (unsigned)code, rpc_call_seconds(c));
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

/* Starts a batch that is not the last one; the batch holds a reference until `e` comes back to
 * the loop (whose handler drops it). False when it could not start (the call is then cancelled
 * and no event will come). Any thread, but never concurrently with another batch of the call. */
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
    if (c->method == RPC_M_UPLOAD) {
      rpc_upload_closed(c);
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

/* ---- the completion-queue thread
 * ------------------------------------------------------------------ */

static void on_cq_done(struct rpc_server *s, struct rpc_ev *e);

static void cq_main(void *arg) {
  struct rpc_server *s = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) {
      break;
    }
    if (ev.type != GRPC_OP_COMPLETE) {
      continue;
    }
    struct rpc_ev *e = ev.tag;
    e->ok = ev.success;
    if (e->prepare) {
      e->prepare(e);
    }
    e->fn(s, e);
  }
  /* The loop learns that the queue is drained through its inbox: the one event it still gets. */
  s->ev_cq_done = (struct rpc_ev){.fn = on_cq_done};
  inbox_push(s, &s->ev_cq_done);
}

/* ---- expiry
 * --------------------------------------------------------------------------------------- */

/* One line per region swept: whose it was and what it held, as UnregisterRegion logs. */
static void log_swept_region(const struct region_meta *m, void *arg) {
  (void)arg;
  log_info("rpc", "unregistered region %s of %s (%" PRIu64 " B): its process %d has exited",
           m->handle, m->owner, m->bytes, m->pid);
}

static void expire_run(struct rpc_job *j) {
  struct rpc_server *s = j->srv;
  /* Releasing states frees device memory: a worker's job, never the loop's. */
  struct job_expiry ex;
  job_expire(s->jobs, rpc_now_unix_ms(), log_swept_region, NULL, &ex);
  size_t n = ex.states;
  if (n > 0) {
    log_info("rpc", "released %zu state%s past %s lifetime", n, n == 1 ? "" : "s",
             n == 1 ? "its" : "their");
  }
  n = ex.leases;
  if (n > 0) {
    log_info("rpc", "ended %zu view lease%s of exited clients", n, n == 1 ? "" : "s");
  }
  atomic_store(&s->expire_busy, 0);
}

/* How often uploads are checked for idleness: upload_idle_timeout is honoured to within this. */
#define UPLOAD_SWEEP_MS 1000

static void on_upload_timer(uv_timer_t *t) {
  rpc_upload_sweep(t->data);
  rpc_watch_sweep(t->data);
}

static void on_expire_timer(uv_timer_t *t) {
  struct rpc_server *s = t->data;
  if (s->shutting_down || atomic_exchange(&s->expire_busy, 1)) {
    return;
  }
  s->expire_job = (struct rpc_job){.fn = expire_run, .srv = s};
  rpc_submit(s, &s->expire_job);
}

/* ---- lifecycle
 * ------------------------------------------------------------------------------------ */

static void grpc_log_fn(gpr_log_func_args *a) {
  /* gRPC's errors are mostly about one connection (a client gone, a bad handshake): warnings
   * for the daemon. Its info lines are internals: debug. */
  int level = a->severity == GPR_LOG_SEVERITY_ERROR ? LOG_LEVEL_WARNING : LOG_LEVEL_DEBUG;
  const char *file = strrchr(a->file, '/');
  log_write(level, "grpc", NULL, "%s (%s:%d)", a->message, file ? file + 1 : a->file, a->line);
}

void rpc_route_grpc_logs(void) {
  gpr_set_log_function(grpc_log_fn);
  /* gRPC filters before our function sees a line: let through what our level would show. */
  int l = log_get_level();
  gpr_set_log_verbosity(l >= LOG_LEVEL_DEBUG ? GPR_LOG_SEVERITY_DEBUG : GPR_LOG_SEVERITY_ERROR);
}

void rpc_server_apply_config(struct rpc_server *s, const struct config *cfg) {
  job_set_limits(s->jobs, (uint32_t)cfg->max_qubits, cfg->max_batch);
  job_set_upload_budgets(s->jobs, cfg->upload_budget, cfg->client_upload_budget);
  atomic_store(&s->upload_budget, cfg->upload_budget);
  atomic_store(&s->max_upload_bytes, cfg->max_upload_bytes);
  atomic_store(&s->fetch_chunk, cfg->fetch_chunk);
  atomic_store(&s->upload_idle_ms, cfg->upload_idle_timeout * 1000);
}

/* Principals are identities in logs and in state owners: a short name, nothing to escape. */
static bool principal_ok(const char *p, size_t n) {
  if (n == 0 || n > 48) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (!(isalnum(ch) || ch == '.' || ch == '_' || ch == '-' || ch == '@')) {
      return false;
    }
  }
  return true;
}

static qdp_status add_token(struct rpc_server *s, const char *principal, size_t pl,
                            const char *token, size_t tl, struct qdp_error *err) {
  struct rpc_token *t = realloc(s->tokens, (s->ntokens + 1) * sizeof *t);
  if (!t) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for TCP tokens");
  }
  s->tokens = t;
  t = &s->tokens[s->ntokens];
  memcpy(t->principal, principal, pl);
  t->principal[pl] = '\0';
  t->token = strndup(token, tl);
  if (!t->token) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for TCP tokens");
  }
  s->ntokens++;
  if (tl < 16) {
    log_warning("rpc",
                "the TCP token of principal '%s' has %zu characters; 16 or more random "
                "ones are advised",
                t->principal, tl);
  }
  return QDP_OK;
}

/* tcp_token (principal "tcp") and every "PRINCIPAL TOKEN" line of tcp_tokens_file ('#'
 * comments and blank lines skipped). The file must not be writable by others: whoever can
 * change it can make themselves any principal. */
static qdp_status load_tokens(struct rpc_server *s, const struct config *cfg,
                              struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  if (cfg->tcp_token[0]) {
    rc = add_token(s, "tcp", 3, cfg->tcp_token, strlen(cfg->tcp_token), err);
  }
  if (rc != QDP_OK || !cfg->tcp_tokens_file[0]) {
    return rc;
  }
  const char *path = cfg->tcp_tokens_file;
  FILE *f = fopen(path, "re");
  if (!f) {
    int e = errno;
    return qdp_error_set_at(err, e == ENOENT ? QDP_ERR_NOT_FOUND : QDP_ERR_PERMISSION_DENIED, -1, e,
                            "tcp_tokens_file = '%s' cannot be read: %s", path, strerror(e));
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & 022)) {
    rc = qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "tcp_tokens_file",
                       "tcp_tokens_file = '%s' is writable by its group or others (mode %04o); "
                       "make it 0600 or 0640",
                       path, (unsigned)(st.st_mode & 07777));
    goto out;
  }
  char line[CONFIG_STR_MAX * 2];
  unsigned lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t n = strcspn(line, "\r\n");
    line[n] = '\0';
    char *p = line + strspn(line, " \t");
    if (!*p || *p == '#') {
      continue;
    }
    size_t pl = strcspn(p, " \t");
    char *tok = p + pl + strspn(p + pl, " \t");
    size_t tl = strcspn(tok, " \t");
    if (!principal_ok(p, pl) || tl == 0 || tok[tl + strspn(tok + tl, " \t")] != '\0') {
      rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "tcp_tokens_file",
                         "%s:%u is not 'PRINCIPAL TOKEN' (a principal is 1 to 48 of "
                         "A-Z a-z 0-9 . _ - @; the token has no spaces)",
                         path, lineno);
      goto out;
    }
    for (size_t i = 0; i < s->ntokens; i++) {
      if (strlen(s->tokens[i].principal) == pl && memcmp(s->tokens[i].principal, p, pl) == 0) {
        rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "tcp_tokens_file",
                           "%s:%u names principal '%.*s' a second time", path, lineno, (int)pl, p);
        goto out;
      }
    }
    QDP_TRY(rc, add_token(s, p, pl, tok, tl, err));
  }
out:
  fclose(f);
  return rc;
}

/* The gRPC server and its completion queue, every method registered. */
static void create_grpc_server(struct rpc_server *s, const struct config *cfg) {
  grpc_arg args[3];
  args[0] = (grpc_arg){.type = GRPC_ARG_INTEGER,
                       .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                       .value.integer = (int)cfg->max_message_bytes};
  /* Replies are bounded by the server itself (Fetch chunks, List); the client's own receive
   * limit is what matters for them. */
  args[1] = (grpc_arg){
      .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, .value.integer = -1};
  /* Without this a second daemon could bind the same port and share its connections. */
  args[2] =
      (grpc_arg){.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT, .value.integer = 0};
  grpc_channel_args ch_args = {.num_args = 3, .args = args};
  s->server = grpc_server_create(&ch_args, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  for (int i = 0; i < RPC_M_COUNT; i++) {
    grpc_server_register_method_payload_handling ph =
        rpc_methods[i].kind == RPC_CLIENT_STREAM || rpc_methods[i].kind == RPC_BIDI_STREAM
            ? GRPC_SRM_PAYLOAD_NONE
            : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER;
    s->registered[i] = grpc_server_register_method(s->server, rpc_methods[i].path, NULL, ph, 0);
  }
}

/* ---- metrics ---- */

static const char *const encoding_names[] = {"amplitude", "angle", "basis", "iqp", "iqp-z",
                                             "phase"};

/* The scrape: the counters, and what job_status says now. The HTTP thread. */
static void render_metrics(void *arg, struct metrics_text *t) {
  struct rpc_server *s = arg;
  struct job_status st;
  struct qdp_error err = QDP_ERROR_INIT;
  if (job_status(s->jobs, &st, &err) != QDP_OK) {
    job_status_free(&st);
    t->failed = true;
    return;
  }
  struct metrics_device *d = calloc(st.ndevices ? st.ndevices : 1, sizeof *d);
  bool *lost = calloc(st.ranks > 0 ? (size_t)st.ranks : 1, sizeof *lost);
  if (d && lost) {
    for (size_t i = 0; i < st.ndevices; i++) {
      const struct runtime_device_info *in = &st.devices[i].info;
      d[i] = (struct metrics_device){.name = in->name, .rank = st.devices[i].rank,
                                     .total_bytes = in->total_bytes,
                                     .budget_bytes = in->budget_bytes,
                                     .used_bytes = in->used_bytes, .free_bytes = in->free_bytes};
    }
    for (int r = 0; r < st.ranks; r++) {
      lost[r] = st.rank_info[r].lost;
    }
    uint64_t uploads = 0, receiving = 0;
    job_upload_usage(s->jobs, NULL, &uploads, NULL);
    uv_mutex_lock(&s->uploads_mu);
    for (struct rpc_call *c = s->uploads; c; c = c->up.next) {
      receiving++;
    }
    uv_mutex_unlock(&s->uploads_mu);
    struct metrics_sample sm = {
        .version = QDP_VERSION, .backend = st.backend,
        .transport = strcmp(st.transport, "mpi") == 0 ? "mpi" : "local",
        .serving = s->started && !atomic_load(&s->shutting_down),
        .uptime_seconds = (double)(rpc_mono_ms() - s->start_mono_ms) / 1e3,
        .states = st.states, .leases = st.leases, .regions = st.regions,
        .region_bytes = st.region_bytes, .uploads = receiving,
        .store_budget_bytes = s->store_budget, .store_used_bytes = st.used_bytes,
        .upload_bytes = uploads, .upload_budget_bytes = atomic_load(&s->upload_budget),
        .devices = d, .ndevices = st.ndevices, .rank_lost = lost, .nranks = (size_t)st.ranks};
    metrics_render(s->metrics, &sm, t, &err);
  } else {
    t->failed = true;
  }
  free(d);
  free(lost);
  job_status_free(&st);
}

/* Ready: serving, not draining, and no rank of the world lost. The HTTP thread. */
static bool metrics_ready(void *arg) {
  struct rpc_server *s = arg;
  return s->started && !atomic_load(&s->shutting_down) && job_ranks_lost(s->jobs) == 0;
}

static qdp_status start_metrics(struct rpc_server *s, const struct config *cfg,
                                struct qdp_error *reterr) {
  for (int i = 0; i < RPC_M_COUNT; i++) {
    s->method_names[i] = rpc_methods[i].name;
  }
  struct metrics_names names = {s->method_names, RPC_M_COUNT, encoding_names,
                                sizeof encoding_names / sizeof encoding_names[0]};
  qdp_status rc = metrics_create(&names, &s->metrics, reterr);
  if (rc != QDP_OK || !cfg->metrics_listen[0]) {
    return rc;
  }
  struct metrics_http_ops ops = {render_metrics, metrics_ready, s};
  return metrics_http_start(cfg->metrics_listen, &ops, &s->metrics_http, &s->metrics_port,
                            reterr);
}

int rpc_server_metrics_port(const struct rpc_server *s) {
  return s->metrics_http ? s->metrics_port : 0;
}

qdp_status rpc_server_create(const struct rpc_server_deps *deps, const char *unix_path,
                             struct rpc_server **ret_server, int *ret_tcp_port,
                             struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  const struct config *cfg = deps->cfg;
  struct rpc_server *s = calloc(1, sizeof *s);
  if (!s) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory for the server (%zu bytes)", sizeof *s);
  }
  grpc_init();
  s->grpc_inited = true;
  s->loop = deps->loop;
  s->start_unix_ms = rpc_now_unix_ms();
  s->start_mono_ms = rpc_mono_ms();
  s->store_budget = cfg->store_budget;
  s->tcp_node_paths = cfg->tcp_node_paths;
  s->euid = geteuid();
  s->input_folder = (struct io_folder)IO_FOLDER_INIT;
  s->export_folder = (struct io_folder)IO_FOLDER_INIT;
  s->nown = deps->nown < RPC_OWN_FILES_MAX ? deps->nown : RPC_OWN_FILES_MAX;
  if (s->nown) {
    memcpy(s->own, deps->own_files, s->nown * sizeof *s->own);
  }
  s->max_message_bytes = cfg->max_message_bytes;
  s->nworkers_cfg = (size_t)cfg->workers;
  s->expire_interval_ms = cfg->expire_interval * 1000;
  s->shutdown_timeout_ms = cfg->shutdown_timeout * 1000;
  uv_mutex_init(&s->inbox_mu);
  uv_mutex_init(&s->uploads_mu);
  uv_mutex_init(&s->watch_mu);
  uv_mutex_init(&s->pool_mu);
  uv_cond_init(&s->pool_cv);
  s->sync_inited = true;

  struct job_deps jd = {.mesh = deps->mesh,
                        .world = deps->world,
                        .store = deps->store,
                        .max_regions = (uint32_t)cfg->max_regions,
                        .lease_grace_ms = cfg->lease_grace * 1000,
                        .own_files = s->own,
                        .nown = s->nown};
  QDP_TRY(rc, job_pipeline_create(&jd, &s->jobs, reterr));
  rpc_server_apply_config(s, cfg);
  QDP_TRY(rc, fd_tickets_create(RPC_TICKETS_MAX, RPC_TICKETS_PER_CALLER, RPC_TICKET_TTL_MS,
                                &s->tickets, reterr));
  QDP_TRY(rc, load_tokens(s, cfg, reterr));
  QDP_TRY(rc, io_folder_open(cfg->input_dir, "input_dir", &s->input_folder, reterr));
  QDP_TRY(rc, io_folder_open(cfg->export_dir, "export_dir", &s->export_folder, reterr));

  QDP_TRY(rc, start_metrics(s, cfg, reterr));
  create_grpc_server(s, cfg);

  if (unix_path && unix_path[0]) {
    struct rpc_listener_opts lo = {
        .path = unix_path, .mode = (unsigned)cfg->socket_mode, .group = cfg->socket_group};
    QDP_TRY(rc, rpc_listener_create(s->loop, &lo, s->server, s->tickets, &s->listener, reterr));
  }
  int tcp_port = 0;
  if (cfg->tcp[0]) {
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    tcp_port = grpc_server_add_http2_port(s->server, cfg->tcp, creds);
    grpc_server_credentials_release(creds);
    if (tcp_port == 0) {
      rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, "tcp",
                         "cannot listen on %s (address in use, or not an address of this host)",
                         cfg->tcp);
      goto out;
    }
  }
  if (ret_tcp_port) {
    *ret_tcp_port = tcp_port;
  }
  *ret_server = s;
  s = NULL;
out:
  rpc_server_destroy(s);
  return rc;
}

qdp_status rpc_server_start(struct rpc_server *s, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  if (uv_async_init(s->loop, &s->async, on_async) != 0) {
    return qdp_error_set(reterr, QDP_ERR_SYSTEM, NULL, "cannot create the loop's async handle");
  }
  s->async.data = s;
  s->async_inited = true;
  uv_timer_init(s->loop, &s->expire_timer);
  s->expire_timer.data = s;
  uv_timer_init(s->loop, &s->drain_timer);
  s->drain_timer.data = s;
  uv_timer_init(s->loop, &s->upload_timer);
  s->upload_timer.data = s;
  s->timers_inited = true;
  s->open_handles = 4; /* the async handle and the timers, closed when the queue drains */

  s->workers = calloc(s->nworkers_cfg, sizeof *s->workers);
  if (!s->workers) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, "workers",
                         "no memory for %zu worker threads", s->nworkers_cfg);
  }
  for (size_t i = 0; i < s->nworkers_cfg; i++) {
    int e = uv_thread_create(&s->workers[i], worker_main, s);
    if (e != 0) {
      rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, -e,
                            "cannot start worker thread %zu of %zu: %s", i + 1, s->nworkers_cfg,
                            uv_strerror(e));
      return rc;
    }
    s->nworkers++;
  }

  grpc_server_start(s->server);
  s->started = true;
  for (int i = 0; i < RPC_M_COUNT; i++) {
    for (int k = 0; k < ARMED_PER_METHOD; k++) {
      arm(s, i);
    }
  }
  for (int k = 0; k < ARMED_PER_METHOD; k++) {
    arm(s, -1);
  }
  int e = uv_thread_create(&s->cq_thread, cq_main, s);
  if (e != 0) {
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, -e,
                            "cannot start the completion-queue thread: %s", uv_strerror(e));
  }
  s->cq_thread_started = true;
  uv_timer_start(&s->expire_timer, on_expire_timer, s->expire_interval_ms, s->expire_interval_ms);
  uv_timer_start(&s->upload_timer, on_upload_timer, UPLOAD_SWEEP_MS, UPLOAD_SWEEP_MS);
  if (s->listener) {
    s->open_handles++; /* the listener's handles, closed at shutdown */
    s->listener_started = true;
    QDP_TRY(rc, rpc_listener_start(s->listener, reterr));
  }
  return QDP_OK;
out:
  return rc;
}

static void handle_closed(struct rpc_server *s) {
  if (--s->open_handles == 0 && s->done) {
    void (*done)(void *) = s->done;
    s->done = NULL;
    done(s->done_arg);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  handle_closed(h->data);
}

static void on_listener_stopped(void *arg) {
  handle_closed(arg);
}

/* Closes the loop handles start made (a failed start, or the queue drained); they are closed
 * once every handle's callback has run. Loop thread. */
static void close_handles(struct rpc_server *s) {
  if (s->handles_closing) {
    return;
  }
  s->handles_closing = true;
  if (s->listener_started) {
    s->listener_started = false;
    rpc_listener_stop(s->listener, on_listener_stopped, s);
  }
  if (s->async_inited) {
    uv_close((uv_handle_t *)&s->async, on_handle_closed);
  }
  if (s->timers_inited) {
    uv_close((uv_handle_t *)&s->expire_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->drain_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->upload_timer, on_handle_closed);
  }
}

/* Loop thread: every call and armed request is gone, the queue is empty. */
static void on_cq_done(struct rpc_server *s, struct rpc_ev *e) {
  (void)e;
  uv_thread_join(&s->cq_thread);
  s->cq_thread_started = false;
  s->cq_drained = true;
  pool_stop(s);
  close_handles(s);
}

static void on_shutdown_notified(struct rpc_server *s, struct rpc_ev *e) {
  (void)e;
  log_info("rpc", "the server has stopped taking calls; finishing the last ones");
  atomic_store(&s->shutdown_notified, 1);
  if (atomic_load(&s->live_calls) == 0) {
    try_shutdown_cq(s);
  }
}

/* After shutdown_timeout the calls in flight are cancelled; a job that does not notice (an encode
 * deep in a kernel) has this much longer before the daemon gives up on it. */
#define RPC_EXIT_GRACE_MS 1000

static void on_drain_timeout(uv_timer_t *t) {
  struct rpc_server *s = t->data;
  if (!s->drain_cancelled) {
    log_warning("rpc", "calls still running %" PRIu64 " s after shutdown began; cancelling them",
                s->shutdown_timeout_ms / 1000);
    s->drain_cancelled = true;
    grpc_server_cancel_all_calls(s->server);
    uv_timer_start(&s->drain_timer, on_drain_timeout, RPC_EXIT_GRACE_MS, 0);
    return;
  }
  log_warning("rpc", "%d calls still running %d ms after they were cancelled",
              atomic_load(&s->live_calls), RPC_EXIT_GRACE_MS);
  if (s->overdue) {
    s->overdue(s->done_arg);
  }
}

void rpc_server_shutdown(struct rpc_server *s, void (*done)(void *arg), void (*overdue)(void *arg),
                         void *arg) {
  if (s->shutting_down) {
    log_notice("rpc", "second stop request: cancelling every call in flight");
    grpc_server_cancel_all_calls(s->server);
    return;
  }
  s->shutting_down = true;
  s->done = done;
  s->overdue = overdue;
  s->done_arg = arg;
  /* No new connections; the ones gRPC has drain with their calls. */
  if (s->listener_started) {
    s->listener_started = false;
    rpc_listener_stop(s->listener, on_listener_stopped, s);
  }
  uv_timer_stop(&s->expire_timer);
  if (s->shutdown_timeout_ms > 0) {
    uv_timer_start(&s->drain_timer, on_drain_timeout, s->shutdown_timeout_ms, 0);
  }
  rpc_watch_sweep(s); /* watchers hear NOT_SERVING now, and their streams end */
  s->ev_shutdown = (struct rpc_ev){.fn = on_shutdown_notified};
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->ev_shutdown);
}

void rpc_server_destroy(struct rpc_server *s) {
  if (!s) {
    return;
  }
  metrics_http_stop(s->metrics_http); /* before the jobs its scrapes read go */
  s->metrics_http = NULL;
  if (s->server && !s->cq_drained) {
    /* Never served (a failed start): shut down here and hand back what was armed. */
    s->ev_shutdown = (struct rpc_ev){.fn = NULL};
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->ev_shutdown);
    grpc_server_cancel_all_calls(s->server);
    grpc_completion_queue_shutdown(s->cq);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN) {
        break;
      }
      struct rpc_ev *e = ev.tag;
      if (ev.type == GRPC_OP_COMPLETE && e && e->call && e == &e->call->ev_new) {
        rpc_call_unref(e->call);
      }
    }
  }
  if (s->nworkers > 0) {
    pool_stop(s);
  }
  /* A start that failed half way left handles on the loop: close them and let the loop run
   * their callbacks, so nothing on it points into this server once it is freed. */
  if (s->open_handles > 0) {
    s->done = NULL;
    close_handles(s);
    while (s->open_handles > 0 && uv_run(s->loop, UV_RUN_NOWAIT) >= 0) {
      if (s->open_handles > 0) {
        uv_sleep(1);
      }
    }
  }
  rpc_listener_destroy(s->listener);
  fd_tickets_destroy(s->tickets);
  for (size_t i = 0; i < s->ntokens; i++) {
    free(s->tokens[i].token);
  }
  free(s->tokens);
  io_folder_close(&s->input_folder);
  io_folder_close(&s->export_folder);
  if (s->server) {
    grpc_server_destroy(s->server);
  }
  if (s->cq) {
    grpc_completion_queue_destroy(s->cq);
  }
  free(s->workers);
  /* Every job is over (the workers have stopped). */
  job_pipeline_destroy(s->jobs);
  metrics_destroy(s->metrics);
  if (s->sync_inited) {
    uv_mutex_destroy(&s->inbox_mu);
    uv_mutex_destroy(&s->uploads_mu);
    uv_mutex_destroy(&s->watch_mu);
    uv_mutex_destroy(&s->pool_mu);
    uv_cond_destroy(&s->pool_cv);
  }
  if (s->grpc_inited) {
    grpc_shutdown();
  }
  free(s);
}
