/* The gRPC server (server.h): its setup, the completion-queue thread that runs every completed
 * operation, the loop's timers (expiry, uploads' idleness, the drain) and shutdown. A call's life
 * is call.h's; who it is from identity.h's; the answers health.h's, handlers.h's, upload.h's and
 * reflection.h's; the worker threads pool.h's. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "call.h"
#include "clock.h"
#include "handlers.h"
#include "health.h"
#include "http.h"
#include "identity.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "qdp_build_config.h"
#include "reflection.h"
#include "server.h"
#include "server_state.h"
#include "state/tickets.h"
#include "tls.h"
#include "upload.h"

/* Requests armed per method: a new one is armed as each arrives, so this only covers bursts that
 * arrive before the completion-queue thread gets to re-arm. */
#define ARMED_PER_METHOD 4

/* Handed-over descriptors (state/tickets.h): a ticket waits this long to be named, and a caller
 * may have this many waiting (the table this many in all). */
#define RPC_TICKET_TTL_MS 60000
#define RPC_TICKETS_PER_CALLER 64
#define RPC_TICKETS_MAX 1024

/* ---- the loop's inbox ---- */

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

/* ---- arriving calls ---- */

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
  case RPC_M_OPEN_SESSION:
  case RPC_M_HEARTBEAT:
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

/* A call that arrived (rpc_calls.arrived), its request unpacked: who it is from, then the
 * answer here (unknown methods, health, what the token refuses, a bad request), a stream's
 * module, or its handler, inline or on a worker. */
static void on_new(struct rpc_server *s, struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  if (!e->ok) {
    /* An armed request handed back at shutdown. */
    rpc_call_unref(c);
    return;
  }
  c->live = true;
  atomic_fetch_add(&s->calls.live, 1);
  if (!s->shutting_down) {
    rpc_call_arm(&s->calls, c->method);
  }
  c->start_ns = clock_mono_ns();
  rpc_identify(c, s->listener, s->euid);
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
    rpc_health_check(c); /* a probe carries no token: it learns only whether we serve */
    return;
  }
  if (c->method == RPC_M_GRPC_HEALTH_WATCH) {
    rpc_health_watch(c); /* as Check: no token */
    return;
  }
  if (rpc_authorize(c, &s->tokens, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    return;
  }
  if (c->method == RPC_M_HEALTH) {
    rpc_health_answer(c);
    return;
  }
  if (m->kind == RPC_BIDI_STREAM) {
    rpc_reflection_begin(c);
    return;
  }
  c->job = (struct rpc_job){.fn = rpc_handlers[c->method], .call = c, .srv = s};
  if (m->kind == RPC_CLIENT_STREAM) {
    rpc_upload_begin(c); /* its job runs once the upload is complete */
    return;
  }
  if (runs_inline(c)) {
    c->job.fn(&c->job);
    return;
  }
  if (c->method == RPC_M_ENCODE || c->method == RPC_M_GATHER) {
    rpc_watch_close(c); /* a job that outlives its caller commits nothing */
  }
  rpc_pool_submit(&s->pool, &c->job);
}

/* ---- the completion-queue thread ---- */

static void on_cq_done(struct rpc_server *s, struct rpc_ev *e);

static void cq_main(void *arg) {
  struct rpc_server *s = arg;
  for (;;) {
    grpc_event ev =
        grpc_completion_queue_next(s->calls.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
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

/* ---- expiry ---- */

/* One line per region swept: whose it was and what it held, as UnregisterRegion logs. */
static void log_swept_region(const struct region_meta *m, void *arg) {
  (void)arg;
  log_info("rpc", "unregistered region %s of %s (%" PRIu64 " B): its process %d has exited",
           m->handle, m->owner, m->bytes, m->pid);
}

/* One line per session ended: whose, why, and what went with it. */
static void log_ended_session(const struct session_info *s, const char *why,
                              const struct job_session_end *e, void *arg) {
  (void)arg;
  log_info("rpc",
           "session %s of %s (pid %d%s%s) ended: %s; released %zu state%s (%" PRIu64
           " B) and %zu region%s",
           s->id, s->owner, s->pid, s->label[0] ? ", " : "", s->label, why, e->states,
           e->states == 1 ? "" : "s", e->bytes, e->regions, e->regions == 1 ? "" : "s");
}

static void expire_run(struct rpc_job *j) {
  struct rpc_server *s = j->srv;
  /* Releasing states frees device memory: a worker's job, never the loop's. */
  struct job_expiry ex;
  static const struct job_expire_report report = {.region = log_swept_region,
                                                  .session = log_ended_session};
  job_expire(s->jobs, clock_unix_ms(), &report, &ex);
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
  rpc_health_sweep(t->data);
}

static void on_expire_timer(uv_timer_t *t) {
  struct rpc_server *s = t->data;
  if (s->shutting_down || atomic_exchange(&s->expire_busy, 1)) {
    return;
  }
  s->expire_job = (struct rpc_job){.fn = expire_run, .srv = s};
  rpc_pool_submit(&s->pool, &s->expire_job);
}

/* ---- lifecycle ---- */

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

void rpc_server_reload_tls(struct rpc_server *s, const struct config *cfg) {
  if (!s->tls) {
    return;
  }
  struct qdp_error err = QDP_ERROR_INIT;
  if (rpc_tls_reload(s->tls, cfg, &err) != QDP_OK) {
    log_err("rpc", "SIGHUP: TLS certificates not reloaded, the ones in use stay: %s", err.msg);
    return;
  }
  log_notice("rpc", "SIGHUP: TLS certificates re-read from %s%s%s; new connections get them",
             cfg->tcp_tls_cert, s->tokens.x509 ? " and client CAs from " : "",
             s->tokens.x509 ? cfg->tcp_tls_client_ca : "");
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
  s->calls.server = grpc_server_create(&ch_args, NULL);
  s->calls.cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->calls.server, s->calls.cq, NULL);
  for (int i = 0; i < RPC_M_COUNT; i++) {
    grpc_server_register_method_payload_handling ph =
        rpc_methods[i].kind == RPC_CLIENT_STREAM || rpc_methods[i].kind == RPC_BIDI_STREAM
            ? GRPC_SRM_PAYLOAD_NONE
            : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER;
    s->calls.registered[i] =
        grpc_server_register_method(s->calls.server, rpc_methods[i].path, NULL, ph, 0);
  }
}

/* ---- metrics ---- */

/* The scrape: what job_status and the server say now, which daemon/metrics renders with its
 * counters. The HTTP thread. */
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
      d[i] = (struct metrics_device){.name = in->name,
                                     .rank = st.devices[i].rank,
                                     .total_bytes = in->total_bytes,
                                     .budget_bytes = in->budget_bytes,
                                     .used_bytes = in->used_bytes,
                                     .free_bytes = in->free_bytes};
    }
    for (int r = 0; r < st.ranks; r++) {
      lost[r] = st.rank_info[r].lost;
    }
    uint64_t uploads = 0;
    job_upload_usage(s->jobs, NULL, &uploads, NULL);
    struct metrics_sample sm = {
        .version = QDP_VERSION,
        .backend = st.backend,
        .transport = strcmp(st.transport, "mpi") == 0 ? "mpi" : "local",
        .serving = s->started && !atomic_load(&s->shutting_down),
        .uptime_seconds = (double)(clock_mono_ns() - s->start_ns) / CLOCK_NS_PER_S,
        .states = st.states,
        .leases = st.leases,
        .regions = st.regions,
        .region_bytes = st.region_bytes,
        .uploads = rpc_upload_receiving(s),
        .store_budget_bytes = s->store_budget,
        .store_used_bytes = st.used_bytes,
        .upload_bytes = uploads,
        .upload_budget_bytes = atomic_load(&s->upload_budget),
        .devices = d,
        .ndevices = st.ndevices,
        .rank_lost = lost,
        .nranks = (size_t)st.ranks};
    metrics_render(s->calls.metrics, &sm, t, &err);
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
  struct metrics_names names = {s->method_names, RPC_M_COUNT};
  qdp_status rc = metrics_create(&names, &s->calls.metrics, reterr);
  if (rc != QDP_OK || !cfg->metrics_listen[0]) {
    return rc;
  }
  struct metrics_http_ops ops = {render_metrics, metrics_ready, s};
  return metrics_http_start(cfg->metrics_listen, &ops, &s->metrics_http, &s->metrics_port, reterr);
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
  s->start_ns = clock_mono_ns();
  s->store_budget = cfg->store_budget;
  s->tcp_node_paths = cfg->tcp_node_paths;
  s->euid = geteuid();
  s->input_folder = (struct io_folder)IO_FOLDER_INIT;
  s->export_folder = (struct io_folder)IO_FOLDER_INIT;
  s->nown = deps->nown < QDP_OWN_FILES_MAX ? deps->nown : QDP_OWN_FILES_MAX;
  if (s->nown) {
    memcpy(s->own, deps->own_files, s->nown * sizeof *s->own);
  }
  s->max_message_bytes = cfg->max_message_bytes;
  s->nworkers = (size_t)cfg->workers;
  s->expire_interval_ms = cfg->expire_interval * 1000;
  s->shutdown_timeout_ms = cfg->shutdown_timeout * 1000;
  uv_mutex_init(&s->inbox_mu);
  uv_mutex_init(&s->uploads_mu);
  uv_mutex_init(&s->watch_mu);
  rpc_pool_init(&s->pool);
  s->sync_inited = true;
  s->calls.srv = s;
  s->calls.arrived = on_new;

  struct job_deps jd = {.mesh = deps->mesh,
                        .world = deps->world,
                        .store = deps->store,
                        .max_regions = (uint32_t)cfg->max_regions,
                        .max_client_regions = (uint32_t)cfg->max_client_regions,
                        .lease_grace_ms = cfg->lease_grace * 1000,
                        .sessions = {.max_sessions = (uint32_t)cfg->max_sessions,
                                     .max_client_sessions = (uint32_t)cfg->max_client_sessions,
                                     .max_heartbeat_ms = cfg->session_max_heartbeat * 1000},
                        .own_files = s->own,
                        .nown = s->nown};
  QDP_TRY(rc, job_pipeline_create(&jd, &s->jobs, reterr));
  rpc_server_apply_config(s, cfg);
  QDP_TRY(rc, fd_tickets_create(RPC_TICKETS_MAX, RPC_TICKETS_PER_CALLER, RPC_TICKET_TTL_MS,
                                &s->tickets, reterr));
  QDP_TRY(rc, fd_tickets_create(RPC_TICKETS_MAX, RPC_TICKETS_PER_CALLER, RPC_TICKET_TTL_MS,
                                &s->view_tickets, reterr));
  QDP_TRY(rc, rpc_tokens_load(cfg, &s->tokens, reterr));
  QDP_TRY(rc, io_folder_open(cfg->input_dir, "input_dir", &s->input_folder, reterr));
  QDP_TRY(rc, io_folder_open(cfg->export_dir, "export_dir", &s->export_folder, reterr));

  QDP_TRY(rc, start_metrics(s, cfg, reterr));
  create_grpc_server(s, cfg);

  if (unix_path && unix_path[0]) {
    struct rpc_listener_opts lo = {
        .path = unix_path, .mode = (unsigned)cfg->socket_mode, .group = cfg->socket_group};
    QDP_TRY(rc,
            rpc_listener_create(s->loop, &lo, s->calls.server, s->tickets, s->view_tickets,
                                &s->listener, reterr));
  }
  int tcp_port = 0;
  if (cfg->tcp[0]) {
    grpc_server_credentials *creds;
    if (cfg->tcp_tls_cert[0]) {
      QDP_TRY(rc, rpc_tls_create(cfg, &s->tls, reterr));
      s->tokens.x509 = rpc_tls_mutual(s->tls);
      creds = rpc_tls_credentials(s->tls);
      log_info(
          "rpc", "TCP on %s speaks TLS (certificate %s)%s", cfg->tcp, cfg->tcp_tls_cert,
          s->tokens.x509 ? "; clients present certificates that chain to tcp_tls_client_ca" : "");
    } else {
      /* config_check let it through only with tcp_plaintext = yes. */
      log_warning("rpc",
                  "TCP on %s is clear text (tcp_plaintext = yes): bearer tokens and data cross "
                  "the network unencrypted; set tcp_tls_cert and tcp_tls_key to encrypt them",
                  cfg->tcp);
      creds = grpc_insecure_server_credentials_create();
    }
    tcp_port = grpc_server_add_http2_port(s->calls.server, cfg->tcp, creds);
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

  rc = rpc_pool_start(&s->pool, s->nworkers, reterr);
  if (rc != QDP_OK) {
    return rc;
  }

  grpc_server_start(s->calls.server);
  s->started = true;
  for (int i = 0; i < RPC_M_COUNT; i++) {
    for (int k = 0; k < ARMED_PER_METHOD; k++) {
      rpc_call_arm(&s->calls, i);
    }
  }
  for (int k = 0; k < ARMED_PER_METHOD; k++) {
    rpc_call_arm(&s->calls, -1);
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
  rpc_pool_stop(&s->pool);
  close_handles(s);
}

static void on_shutdown_notified(struct rpc_server *s, struct rpc_ev *e) {
  (void)e;
  log_info("rpc", "the server has stopped taking calls; finishing the last ones");
  atomic_store(&s->calls.shutdown_notified, 1);
  if (atomic_load(&s->calls.live) == 0) {
    rpc_calls_shutdown_queue(&s->calls);
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
    grpc_server_cancel_all_calls(s->calls.server);
    uv_timer_start(&s->drain_timer, on_drain_timeout, RPC_EXIT_GRACE_MS, 0);
    return;
  }
  log_warning("rpc", "%d calls still running %d ms after they were cancelled",
              atomic_load(&s->calls.live), RPC_EXIT_GRACE_MS);
  if (s->overdue) {
    s->overdue(s->done_arg);
  }
}

void rpc_server_shutdown(struct rpc_server *s, void (*done)(void *arg), void (*overdue)(void *arg),
                         void *arg) {
  if (s->shutting_down) {
    log_notice("rpc", "second stop request: cancelling every call in flight");
    grpc_server_cancel_all_calls(s->calls.server);
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
  rpc_health_sweep(s); /* watchers hear NOT_SERVING now, and their streams end */
  s->ev_shutdown = (struct rpc_ev){.fn = on_shutdown_notified};
  grpc_server_shutdown_and_notify(s->calls.server, s->calls.cq, &s->ev_shutdown);
}

void rpc_server_destroy(struct rpc_server *s) {
  if (!s) {
    return;
  }
  metrics_http_stop(s->metrics_http); /* before the jobs its scrapes read go */
  s->metrics_http = NULL;
  if (s->calls.server && !s->cq_drained) {
    /* Never served (a failed start): shut down here and hand back what was armed. */
    s->ev_shutdown = (struct rpc_ev){.fn = NULL};
    grpc_server_shutdown_and_notify(s->calls.server, s->calls.cq, &s->ev_shutdown);
    grpc_server_cancel_all_calls(s->calls.server);
    grpc_completion_queue_shutdown(s->calls.cq);
    for (;;) {
      grpc_event ev =
          grpc_completion_queue_next(s->calls.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN) {
        break;
      }
      struct rpc_ev *e = ev.tag;
      if (ev.type == GRPC_OP_COMPLETE && e && e->call && e == &e->call->ev_new) {
        rpc_call_unref(e->call);
      }
    }
  }
  rpc_pool_stop(&s->pool);
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
  fd_tickets_destroy(s->view_tickets);
  rpc_tokens_free(&s->tokens);
  io_folder_close(&s->input_folder);
  io_folder_close(&s->export_folder);
  if (s->calls.server) {
    grpc_server_destroy(s->calls.server);
  }
  if (s->calls.cq) {
    grpc_completion_queue_destroy(s->calls.cq);
  }
  rpc_tls_destroy(s->tls); /* its fetcher went with the server */
  /* Every job is over (the workers have stopped). */
  job_pipeline_destroy(s->jobs);
  metrics_destroy(s->calls.metrics);
  rpc_pool_destroy(&s->pool);
  if (s->sync_inited) {
    uv_mutex_destroy(&s->inbox_mu);
    uv_mutex_destroy(&s->uploads_mu);
    uv_mutex_destroy(&s->watch_mu);
  }
  if (s->grpc_inited) {
    grpc_shutdown();
  }
  free(s);
}
