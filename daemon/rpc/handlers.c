/* The handlers: each unpacks its request into job/'s plain structs, resolves what a caller handed
 * over into descriptors (the trust boundary), calls the job and packs its result. Every function
 * here runs on a worker thread unless it says otherwise. */
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "codec.h"
#include "qdp_wire.h"
#include "internal.h"
#include "io/map.h"
#include "job/job.h"
#include "log.h"
#include "qdp_build_config.h"
#include "state/tickets.h"

/* ---- a reply's memory: everything a reply message points to, freed at once after packing -------
 */

struct arena_blk {
  struct arena_blk *next;
  max_align_t data[];
};

struct arena {
  struct arena_blk *head;
  bool failed;
};

static void *arena_alloc(struct arena *a, size_t n) {
  struct arena_blk *b = calloc(1, sizeof *b + (n ? n : 1));
  if (!b) {
    a->failed = true;
    return NULL;
  }
  b->next = a->head;
  a->head = b;
  return b->data;
}

static char *arena_str(struct arena *a, const char *s) {
  size_t n = strlen(s);
  char *p = arena_alloc(a, n + 1);
  if (p) {
    memcpy(p, s, n + 1);
  }
  return p ? p : (char *)"";
}

static void arena_free(struct arena *a) {
  while (a->head) {
    struct arena_blk *b = a->head;
    a->head = b->next;
    free(b);
  }
}

static qdp_status arena_check(const struct arena *a, struct qdp_error *err) {
  if (a->failed) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory to build the reply");
  }
  return QDP_OK;
}


/* ---- the caller, as job/ sees it ---------------------------------------------------------------
 */

static unsigned call_gone(const void *arg) {
  const struct rpc_call *c = arg;
  unsigned gone = atomic_load(&c->cancel_seen) ? JOB_CALLER_LEFT : 0;
  if (gpr_time_cmp(c->deadline, gpr_now(c->deadline.clock_type)) <= 0) {
    gone |= JOB_CALLER_LATE;
  }
  return gone;
}

static struct job_caller caller_of(const struct rpc_call *c) {
  return (struct job_caller){
      .owner = c->owner,
      .pid = c->tcp ? 0 : (int)c->ucred.pid,
      .operator= !c->tcp && (c->ucred.uid == 0 || c->ucred.uid == c->srv->euid),
      .gone = call_gone,
      .arg = c};
}

/* ---- states into replies ------------------------------------------------------------------------
 */

static void fill_shards(struct rpc_server *s, struct arena *a, const struct plan *p, size_t *ret_n,
                        Qdp__Shard ***ret) {
  Qdp__Shard **arr = arena_alloc(a, p->nshards * sizeof *arr);
  Qdp__Shard *sh = arena_alloc(a, p->nshards * sizeof *sh);
  if (!arr || !sh) {
    *ret_n = 0;
    *ret = NULL;
    return;
  }
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *ps = &p->shards[i];
    qdp__shard__init(&sh[i]);
    const struct runtime_device_info *d = job_device(s->jobs, ps->device);
    sh[i].rank = ps->rank;
    sh[i].device = d ? (char *)d->name : (char *)"";
    sh[i].ordinal = ps->ordinal;
    sh[i].uuid = d ? (char *)d->uuid : (char *)"";
    sh[i].first = ps->first;
    sh[i].count = ps->count;
    sh[i].row_first = ps->row_first;
    sh[i].rows = ps->rows;
    sh[i].bytes = ps->bytes;
    sh[i].host = (char *)job_rank_host(s->jobs, ps->rank);
    arr[i] = &sh[i];
  }
  *ret_n = p->nshards;
  *ret = arr;
}

/* A StateInfo of a live state, its token and views when the info has them. */
static Qdp__StateInfo *state_info(struct rpc_server *s, struct arena *a,
                                  const struct job_state_info *st) {
  Qdp__StateInfo *info = arena_alloc(a, sizeof *info);
  if (!info) {
    return NULL;
  }
  qdp__state_info__init(info);
  const struct plan *p = st->plan;
  info->handle = arena_str(a, st->meta.handle);
  info->token = arena_str(a, st->token);
  info->encoding = (Qdp__Encoding)p->encoding;
  info->qubits = p->qubits;
  info->batch = p->batch;
  info->dtype = (Qdp__DType)p->out_dtype;
  info->bytes = p->total_bytes;
  info->policy = (char *)plan_policy_name(p->policy);
  info->global_bits = p->global_bits;
  fill_shards(s, a, p, &info->n_shards, &info->shards);
  info->collective = (char *)st->collective;
  info->created_unix_ms = st->meta.created_unix_ms;
  info->expires_unix_ms = st->meta.expires_unix_ms;
  info->ttl_seconds = st->meta.ttl_ms / 1000; /* ttls are asked for in whole seconds */
  info->ttl_capped = st->meta.ttl_capped;
  info->label = arena_str(a, st->meta.label);
  info->owner = arena_str(a, st->meta.owner);
  info->encode_ms = st->encode_ms;
  info->leases = st->meta.leases;
  for (size_t i = 0; st->ipc && i < info->n_shards; i++) {
    uint8_t *h = arena_alloc(a, sizeof st->ipc[i].handle);
    if (h) {
      memcpy(h, st->ipc[i].handle, sizeof st->ipc[i].handle);
      info->shards[i]->ipc_handle = (ProtobufCBinaryData){sizeof st->ipc[i].handle, h};
    }
    info->shards[i]->ipc_offset = st->ipc[i].offset;
    info->shards[i]->lease_id = st->lease;
  }
  return info;
}

/* Packs a state's info as a StateInfo (Describe) or inside an EncodeReply (Encode, Gather), then
 * ends the info: a new state whose reply could not be built is released. */
static grpc_byte_buffer *state_reply(struct rpc_server *s, struct job_state_info *st, bool encode,
                                     struct qdp_error *err) {
  struct arena a = {0};
  grpc_byte_buffer *reply = NULL;
  Qdp__StateInfo *info = state_info(s, &a, st);
  if (arena_check(&a, err) == QDP_OK) {
    Qdp__EncodeReply er = QDP__ENCODE_REPLY__INIT;
    er.state = info;
    reply = qdp_wire_pack(encode ? &er.base : &info->base);
  }
  job_state_info_end(s->jobs, st, !a.failed);
  arena_free(&a);
  return reply;
}

/* ---- inputs: what the request names, resolved to descriptors the caller may hand over ----------
 */

/* A TCP caller may name node-local files only where the operator said so: beneath `folder`
 * with tcp_node_paths on. */
static qdp_status check_tcp_path(const struct rpc_call *c, const struct io_folder *folder,
                                 const char *option, const char *field, struct qdp_error *err) {
  if (!c->srv->tcp_node_paths) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s names a file on the daemon's node, which TCP clients may not do "
                         "(tcp_node_paths = no); use inline data or EncodeUpload",
                         field);
  }
  if (folder->fd < 0) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s names a file on the daemon's node, but TCP clients may name files "
                         "only beneath %s, which is not set",
                         field, option);
  }
  return QDP_OK;
}

/* The descriptor a Unix caller handed over under `ticket` (rpc/listener.h) for `access`; the
 * daemon opens nothing on a caller's behalf, so an object named without one is refused. */
static qdp_status take_fd(const struct rpc_call *c, const char *ticket, enum fd_access access,
                          const char *what, const char *field, int *ret_fd, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  qdp_status rc = QDP_OK;
  if (c->tcp) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s is for callers on the daemon's node (its Unix socket), which hand "
                         "over what they opened; TCP callers send their data inline or upload it",
                         what);
  }
  if (!ticket || !ticket[0]) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s is on the daemon's node, which never opens it for a caller: open it "
                         "yourself, hand the descriptor over on the socket and name the ticket "
                         "in %s (libqdp, qdpctl and the Python package do this)",
                         what, field);
  }
  int fd = -1;
  QDP_TRY(rc, fd_tickets_take(s->tickets, c->owner, ticket, access, (int64_t)rpc_mono_ms(), field,
                              &fd, err));
  rc = io_check_not_own(fd, s->own, s->nown, field, err);
  if (rc != QDP_OK) {
    close(fd);
    return rc;
  }
  *ret_fd = fd;
out:
  return rc;
}

/* How messages name a client's shared memory: by what the caller says it opened. */
static void shm_what(const char *name, int pid, int fd, char *buf, size_t len) {
  if (name && name[0]) {
    snprintf(buf, len, "shared memory '%.200s'", name);
  } else if (pid > 0) {
    snprintf(buf, len, "fd %d of process %d", fd, pid);
  } else {
    snprintf(buf, len, "the handed-over shared memory");
  }
  for (char *p = buf; *p; p++) {
    if ((unsigned char)*p < 0x20) {
      *p = '?';
    }
  }
}


/* The .npy file a request names: for a Unix caller the descriptor it handed over (which must also
 * be the file beneath input_dir, when set); for a TCP caller the file opened beneath input_dir. */
static qdp_status input_file_fd(struct rpc_call *c, const Qdp__Input *in, int *ret_fd,
                                struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  int fd = -1;
  qdp_status rc;
  QDP_TRY(rc, io_check_path(in->path, "input.path", err));
  if (c->tcp) {
    QDP_TRY(rc, check_tcp_path(c, &s->input_folder, "input_dir", "input.path", err));
    QDP_TRY(rc, io_folder_open_file(&s->input_folder, in->path, O_RDONLY | O_NONBLOCK,
                                    "input.path", &fd, err));
    rc = io_check_not_own(fd, s->own, s->nown, "input.path", err);
  } else {
    char what[CONFIG_STR_MAX + 16];
    snprintf(what, sizeof what, "input.path '%.200s'", in->path);
    QDP_TRY(rc, take_fd(c, in->fd_ticket, FD_ACCESS_READ, what, "input.fd_ticket", &fd, err));
    if (s->input_folder.fd >= 0) {
      rc = io_folder_check_fd(&s->input_folder, in->path, fd, "input.path", err);
    }
  }
  if (rc != QDP_OK) {
    close(fd);
    goto out;
  }
  *ret_fd = fd;
out:
  return rc;
}

/* A request's input as job/ takes it; `what` holds how messages name shared memory. */
static qdp_status input_of(struct rpc_call *c, const Qdp__Input *in, struct job_input *ret,
                           char *what, size_t what_len, struct qdp_error *err) {
  if (!in) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "input", "input is missing");
  }
  *ret = (struct job_input){.field = "input",
                            .dtype = in->dtype,
                            .rows = in->rows,
                            .cols = in->cols,
                            .fd = -1};
  const Qdp__SharedMemory *sh = in->shm;
  switch (in->source_case) {
  case QDP__INPUT__SOURCE_DATA:
    ret->source = JOB_INPUT_VALUES;
    ret->values = in->data.data;
    ret->bytes = in->data.len;
    return QDP_OK;
  case QDP__INPUT__SOURCE_PATH:
    ret->source = JOB_INPUT_FILE;
    ret->path = in->path;
    return input_file_fd(c, in, &ret->fd, err);
  case QDP__INPUT__SOURCE_SHM:
    if (!sh) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "input.shm", "input.shm is empty");
    }
    ret->offset = sh->offset;
    ret->length = sh->length;
    if (sh->region && sh->region[0]) {
      ret->source = JOB_INPUT_REGION;
      ret->region = sh->region;
      ret->region_token = sh->region_token;
      return QDP_OK;
    }
    ret->source = JOB_INPUT_SHM;
    shm_what(sh->name, sh->pid, sh->fd, what, what_len);
    ret->what = what;
    return take_fd(c, sh->fd_ticket, FD_ACCESS_READ, what, "input.shm.fd_ticket", &ret->fd, err);
  case QDP__INPUT__SOURCE_CUDA_IPC:
    if (c->tcp) {
      /* An IPC handle opens only on the node it came from, for a process of that node. */
      return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "input.cuda_ipc",
                           "input.cuda_ipc is for callers on the daemon's node (its Unix socket); "
                           "TCP callers send their data inline or upload it");
    }
    ret->source = JOB_INPUT_CUDA_IPC;
    ret->offset = in->cuda_ipc ? in->cuda_ipc->offset : 0;
    ret->ipc_handle = in->cuda_ipc ? in->cuda_ipc->ipc_handle.data : NULL;
    ret->ipc_handle_len = in->cuda_ipc ? in->cuda_ipc->ipc_handle.len : 0;
    ret->device_uuid = in->cuda_ipc ? in->cuda_ipc->device_uuid : NULL;
    return QDP_OK;
  default:
    ret->source = JOB_INPUT_SHAPE; /* a plan of data still to be streamed; an encode refuses it */
    return QDP_OK;
  }
}

/* Where a request asks its state written instead of kept, into *ret (req->out then points to it):
 * a CUDA allocation of a caller on this node, like input.cuda_ipc. */
static qdp_status output_of(const struct rpc_call *c, const Qdp__CudaIpcOutput *o,
                            struct job_output *ret, struct job_encode_request *req,
                            struct qdp_error *err) {
  if (!o) {
    return QDP_OK;
  }
  if (c->tcp) {
    /* An IPC handle opens only on the node it came from, for a process of that node. */
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "out",
                         "out is for callers on the daemon's node (its Unix socket); TCP callers "
                         "fetch the state instead");
  }
  *ret = (struct job_output){.ipc_handle = o->ipc_handle.data,
                             .ipc_handle_len = o->ipc_handle.len,
                             .offset = o->offset,
                             .bytes = o->bytes,
                             .device_uuid = o->device_uuid};
  req->out = ret;
  return QDP_OK;
}

/* The request's fields as job/ takes them, but its input; out into *out. */
static qdp_status encode_request_of(const struct rpc_call *c, const Qdp__EncodeRequest *r,
                                    struct job_encode_request *ret, struct job_output *out,
                                    struct qdp_error *err) {
  const Qdp__Placement *pl = r->placement;
  *ret = (struct job_encode_request){
      .encoding = (int)r->encoding,
      .qubits = r->qubits,
      .output_dtype = (int)r->output_dtype,
      .placement = {.policy = pl ? (int)pl->policy : 0,
                    .devices = pl ? (const char *const *)pl->devices : NULL,
                    .ndevices = pl ? pl->n_devices : 0},
      .ttl_seconds = r->ttl_seconds,
      .label = r->label,
      .views = r->views,
      .client_pid = r->client_pid};
  return output_of(c, r->out, out, ret, err);
}

/* ---- Encode, Plan, EncodeUpload ----------------------------------------------------------------
 */

/* Counted in Status from here, whether it succeeds or not. */
static void count_job(struct rpc_call *c) {
  c->job_no = atomic_fetch_add(&c->srv->jobs_total, 1) + 1;
}

/* Encodes req and answers the call; an upload (its buffer and its request, which req points
 * into) goes back to upload_budget as soon as the encode is over, not when the client reads the
 * reply. */
/* The metrics' source of an input and its bytes: the values', the shared memory's or region's
 * range, the .npy file's size, a CUDA input's declared shape. */
static enum metrics_source input_source(const struct job_input *in, bool uploaded,
                                        uint64_t *ret_bytes) {
  struct stat sb;
  switch (in->source) {
  case JOB_INPUT_FILE:
    *ret_bytes = fstat(in->fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    return METRICS_IN_FILE;
  case JOB_INPUT_SHM:
    *ret_bytes = in->length;
    return METRICS_IN_SHM;
  case JOB_INPUT_REGION:
    *ret_bytes = in->length;
    return METRICS_IN_REGION;
  case JOB_INPUT_CUDA_IPC:
    *ret_bytes = in->rows * in->cols * qdp_dtype_size((qdp_dtype)in->dtype);
    return METRICS_IN_CUDA_IPC;
  default:
    *ret_bytes = in->bytes;
    return uploaded ? METRICS_IN_UPLOAD : METRICS_IN_VALUES;
  }
}

/* A job's end in the metrics: its encoding, status and times; on success its bytes in and out. */
static void count_job_end(struct rpc_call *c, const struct job_encode_request *req,
                          enum metrics_source src, uint64_t in_bytes, qdp_status rc,
                          const struct job_state_info *st) {
  struct metrics *m = c->srv->metrics;
  unsigned code = rc == QDP_OK ? 0 : (unsigned)rpc_codec_grpc_status(rc);
  metrics_job(m, (size_t)req->encoding - 1, code, rpc_call_seconds(c),
              rc == QDP_OK ? st->encode_ms / 1e3 : -1);
  if (rc == QDP_OK) {
    metrics_phase(m, METRICS_PHASE_INGEST, st->ingest_ms / 1e3);
    metrics_phase(m, METRICS_PHASE_PLAN, st->plan_ms / 1e3);
    metrics_phase(m, METRICS_PHASE_ENCODE, st->encode_ms / 1e3);
    if (st->collective_ms > 0) {
      metrics_phase(m, METRICS_PHASE_COLLECTIVE, st->collective_ms / 1e3);
    }
    if (!req->out) {
      metrics_phase(m, METRICS_PHASE_COMMIT, st->commit_ms / 1e3);
    }
    metrics_input(m, src, in_bytes);
    metrics_output(m, req->out ? METRICS_OUT_CUDA_IPC : METRICS_OUT_STATE,
                   st->plan->total_bytes);
  }
}

static void encode_and_answer(struct rpc_call *c, struct job_encode_request *req, bool uploaded) {
  struct rpc_server *s = c->srv;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_state_info st;
  struct job_caller who = caller_of(c);
  uint64_t in_bytes = 0;
  enum metrics_source src = input_source(&req->input, uploaded, &in_bytes);
  qdp_status rc = job_encode(s->jobs, &who, req, &st, &err);
  if (uploaded) {
    rpc_upload_free(c);
  }
  count_job_end(c, req, src, in_bytes, rc, &st);
  if (rc != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  /* The reply goes first and the job's line after it, off the caller's round trip. The reply
   * unpins the state (whose plan a Release may then free) and hands the call over, so the line's
   * figures are copied out before and the call is held until the line is written. */
  const struct plan *p = st.plan;
  const uint64_t total_bytes = p->total_bytes, batch = p->batch;
  const char *policy = plan_policy_name(p->policy);
  const size_t nshards = p->nshards;
  const double ms = rpc_call_seconds(c) * 1e3;
  const double phase_ms[5] = {st.ingest_ms, st.plan_ms, st.encode_ms, st.collective_ms,
                              st.commit_ms};
  char state[sizeof st.meta.handle];
  memcpy(state, st.meta.handle, sizeof state);
  rpc_call_ref(c);
  grpc_byte_buffer *reply = state_reply(s, &st, true, &err);
  rpc_finish(c, reply, reply ? NULL : &err);
  if (reply && log_enabled(LOG_LEVEL_INFO, "rpc")) {
    char job[24], qubits[16], bytes[24], total[32], phase[5][32];
    snprintf(job, sizeof job, "%" PRIu64, c->job_no);
    snprintf(qubits, sizeof qubits, "%u", req->qubits);
    snprintf(bytes, sizeof bytes, "%" PRIu64, total_bytes);
    snprintf(total, sizeof total, "%.3f", ms);
    for (int i = 0; i < 5; i++) {
      snprintf(phase[i], sizeof phase[i], "%.3f", phase_ms[i]);
    }
    const struct log_field f[] = {
        {"QDP_JOB", job},
        {"QDP_METHOD", rpc_method_name(c)},
        {"QDP_STATUS", "OK"},
        {"QDP_CLIENT", c->client},
        {"QDP_OWNER", c->owner[0] ? c->owner : NULL},
        {"QDP_ENCODING", qdp_encoding_name((qdp_encoding)req->encoding)},
        {"QDP_QUBITS", qubits},
        {"QDP_BYTES", bytes},
        {"QDP_POLICY", policy},
        {"QDP_STATE", state[0] ? state : NULL},
        {"QDP_MS", total},
        {"QDP_INGEST_MS", phase[0]},
        {"QDP_PLAN_MS", phase[1]},
        {"QDP_ENCODE_MS", phase[2]},
        {"QDP_COLLECTIVE_MS", phase[3]},
        {"QDP_COMMIT_MS", phase[4]}};
    log_fields(LOG_LEVEL_INFO, "rpc", NULL, f, sizeof f / sizeof f[0],
               "job %s: %s from %s: %s %u qubits x %" PRIu64 " -> %s (%" PRIu64
               " B, %s, %zu shard%s): OK in %.3f ms (ingest %s, plan %s, encode %s, collective "
               "%s, commit %s)",
               job, rpc_method_name(c), c->client, qdp_encoding_name((qdp_encoding)req->encoding),
               req->qubits, batch, state[0] ? state : "the caller's allocation", total_bytes, policy,
               nshards, nshards == 1 ? "" : "s", ms, phase[0], phase[1], phase[2], phase[3],
               phase[4]);
  }
  rpc_call_unref(c);
}

void rpc_h_encode(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__EncodeRequest *r = (const Qdp__EncodeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_encode_request req;
  struct job_output out;
  char what[256];
  count_job(c);
  if (encode_request_of(c, r, &req, &out, &err) != QDP_OK ||
      input_of(c, r->input, &req.input, what, sizeof what, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  encode_and_answer(c, &req, false);
}

void rpc_h_upload_encode(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  /* The upload's request and buffer stay alive until the encode is over (encode_and_answer). */
  const Qdp__EncodeRequest *r = c->up.req;
  const Qdp__Input *decl = r->input;
  struct job_encode_request req;
  struct job_output out;
  struct qdp_error err = QDP_ERROR_INIT;
  count_job(c);
  if (encode_request_of(c, r, &req, &out, &err) != QDP_OK) {
    rpc_upload_free(c);
    rpc_finish(c, NULL, &err);
    return;
  }
  req.input = (struct job_input){.source = JOB_INPUT_VALUES,
                                 .field = "request.input",
                                 .dtype = decl->dtype,
                                 .rows = decl->rows,
                                 .cols = decl->cols,
                                 .values = c->up.buf,
                                 .bytes = c->up.len,
                                 .fd = -1};
  encode_and_answer(c, &req, true);
}

static grpc_byte_buffer *plan_reply(struct rpc_server *s, struct arena *a, const struct plan *p,
                                    const struct qdp_error *why) {
  Qdp__PlanReply r = QDP__PLAN_REPLY__INIT;
  r.feasible = p->feasible != 0;
  r.policy = (char *)plan_policy_name(p->policy);
  r.global_bits = p->global_bits;
  r.total_bytes = p->total_bytes;
  fill_shards(s, a, p, &r.n_shards, &r.shards);
  Qdp__DeviceNeed **needs = arena_alloc(a, p->nneeds * sizeof *needs);
  Qdp__DeviceNeed *nd = arena_alloc(a, p->nneeds * sizeof *nd);
  if (needs && nd) {
    for (size_t i = 0; i < p->nneeds; i++) {
      const struct plan_need *pn = &p->needs[i];
      qdp__device_need__init(&nd[i]);
      nd[i].rank = pn->rank;
      nd[i].device = arena_str(a, pn->name);
      nd[i].shard_bytes = pn->shard_bytes;
      nd[i].staging_bytes = pn->staging_bytes;
      nd[i].workspace_bytes = pn->workspace_bytes;
      nd[i].need_bytes = pn->need_bytes;
      nd[i].budget_bytes = pn->budget_bytes;
      nd[i].fits = pn->fits != 0;
      needs[i] = &nd[i];
    }
    r.n_needs = p->nneeds;
    r.needs = needs;
  }
  if (why->code != QDP_OK) {
    r.message = (char *)why->msg;
  }
  return a->failed ? NULL : qdp_wire_pack(&r.base);
}

void rpc_h_plan(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__EncodeRequest *r = (const Qdp__EncodeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT, why = QDP_ERROR_INIT;
  struct job_encode_request req;
  struct plan *p = NULL;
  struct arena a = {0};
  grpc_byte_buffer *reply = NULL;
  char what[256];
  struct job_caller who = caller_of(c);
  struct job_output out;
  qdp_status rc = encode_request_of(c, r, &req, &out, &err);
  if (rc == QDP_OK) {
    rc = input_of(c, r->input, &req.input, what, sizeof what, &err);
  }
  if (rc == QDP_OK) {
    rc = job_plan(c->srv->jobs, &who, &req, &p, &why, &err);
  }
  if (rc == QDP_OK) {
    reply = plan_reply(c->srv, &a, p, &why);
    rc = arena_check(&a, &err);
  }
  plan_destroy(p);
  arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

/* ---- states ------------------------------------------------------------------------------------
 */

void rpc_h_describe(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__DescribeRequest *r = (const Qdp__DescribeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_state_info st;
  struct job_caller who = caller_of(c);
  grpc_byte_buffer *reply = NULL;
  qdp_status rc =
      job_describe(c->srv->jobs, &who, r->handle, r->token, r->views, r->client_pid, &st, &err);
  if (rc == QDP_OK) {
    reply = state_reply(c->srv, &st, false, &err);
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

void rpc_h_close_view(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__CloseViewRequest *r = (const Qdp__CloseViewRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t freed = 0;
  if (job_close_view(c->srv->jobs, r->handle, r->token, r->lease_id, &freed, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "CloseView from %s: %s lease %" PRIu64 " (%" PRIu64 " B freed)", c->client,
           r->handle, r->lease_id, freed);
  Qdp__CloseViewReply cr = QDP__CLOSE_VIEW_REPLY__INIT;
  cr.freed_bytes = freed;
  rpc_finish(c, qdp_wire_pack(&cr.base), NULL);
}

void rpc_h_gather(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__GatherRequest *r = (const Qdp__GatherRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_state_info st;
  struct job_caller who = caller_of(c);
  const Qdp__StateRef *ref = r->state;
  if (job_gather(c->srv->jobs, &who, ref ? ref->handle : NULL, ref ? ref->token : NULL, r->device,
                 r->ttl_seconds, r->label, &st, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "Gather from %s: %s -> %s on %s (%" PRIu64 " B)", c->client, ref->handle,
           st.meta.handle, r->device, st.plan->total_bytes);
  grpc_byte_buffer *reply = state_reply(c->srv, &st, true, &err);
  rpc_finish(c, reply, reply ? NULL : &err);
}

struct list_ctx {
  struct rpc_server *s;
  struct arena *a;
  Qdp__StateInfo **items;
  size_t n, cap;
  bool failed;
};

/* Under the store's lock: it only copies. */
static void list_one(const struct job_state_info *st, void *arg) {
  struct list_ctx *l = arg;
  if (l->failed) {
    return;
  }
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    Qdp__StateInfo **items = realloc(l->items, cap * sizeof *items);
    if (!items) {
      l->failed = true;
      return;
    }
    l->items = items;
    l->cap = cap;
  }
  Qdp__StateInfo *info = state_info(l->s, l->a, st);
  if (!info) {
    l->failed = true;
    return;
  }
  l->items[l->n++] = info;
}

void rpc_h_list(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct arena a = {0};
  const Qdp__ListRequest *r = (const Qdp__ListRequest *)c->req;
  struct list_ctx l = {.s = c->srv, .a = &a};
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = caller_of(c);
  grpc_byte_buffer *reply = NULL;
  qdp_status rc = job_list(c->srv->jobs, &who, r->all, list_one, &l, &err);
  if (rc == QDP_OK && (l.failed || a.failed)) {
    rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory to list %zu states",
                       l.n);
  } else if (rc == QDP_OK) {
    Qdp__ListReply lr = QDP__LIST_REPLY__INIT;
    lr.n_states = l.n;
    lr.states = l.items;
    reply = qdp_wire_pack(&lr.base);
  }
  free(l.items);
  arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

void rpc_h_release(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__StateRef *ref = (const Qdp__StateRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = caller_of(c);
  uint64_t freed = 0;
  if (job_release(c->srv->jobs, &who, ref->handle, ref->token, &freed, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "Release from %s: %s (%" PRIu64 " B)", c->client, ref->handle, freed);
  Qdp__ReleaseReply r = QDP__RELEASE_REPLY__INIT;
  r.freed_bytes = freed;
  rpc_finish(c, qdp_wire_pack(&r.base), NULL);
}

/* ---- Fetch: a server stream, one chunk in flight
 * ---------------------------------------------------- */

static void fetch_step(struct rpc_job *j);

static void fetch_end(struct rpc_call *c, const struct qdp_error *err) {
  job_fetch_close(c->srv->jobs, &c->fetch.read);
  rpc_finish(c, NULL, err);
}

/* Completion-queue thread. */
static void on_fetch_sent(struct rpc_server *s, struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  grpc_byte_buffer_destroy(c->sending);
  c->sending = NULL;
  if (!e->ok) {
    c->fetch.send_failed = true;
  }
  c->job = (struct rpc_job){.fn = fetch_step, .call = c, .srv = s};
  rpc_submit(s, &c->job);
  rpc_call_unref(c); /* the send batch's reference */
}

static void fetch_step(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct job_fetch *f = &c->fetch.read;
  struct qdp_error err = QDP_ERROR_INIT;
  if (c->fetch.send_failed || atomic_load(&c->cancel_seen)) {
    qdp_error_set(&err, QDP_ERR_CANCELLED, NULL,
                  "the client left after %" PRIu64 " of %" PRIu64 " amplitudes",
                  f->next - (f->end - f->total), f->total);
    fetch_end(c, &err);
    return;
  }
  if (f->next >= f->end) {
    fetch_end(c, NULL);
    return;
  }
  uint64_t n = f->end - f->next < c->fetch.chunk ? f->end - f->next : c->fetch.chunk;
  uint8_t *data = NULL;
  grpc_byte_buffer *bb =
      qdp_wire_fetch_chunk(f->next, (int)f->dtype, f->total, (size_t)(n * f->esize), &data);
  if (job_fetch_read(f, n, data, &err) != QDP_OK) {
    grpc_byte_buffer_destroy(bb);
    fetch_end(c, &err);
    return;
  }
  metrics_output(c->srv->metrics, METRICS_OUT_FETCH, n * f->esize);
  if (!rpc_send_message(c, bb, on_fetch_sent)) {
    qdp_error_set(&err, QDP_ERR_INTERNAL, NULL, "Fetch could not send a chunk");
    fetch_end(c, &err);
  }
}

void rpc_h_fetch(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__FetchRequest *r = (const Qdp__FetchRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_fetch *f = &c->fetch.read;
  if (job_fetch_open(s->jobs, r->state ? r->state->handle : NULL, r->state ? r->state->token : NULL,
                     r->offset, r->count, f, &err) != QDP_OK) {
    fetch_end(c, &err);
    return;
  }
  /* Chunks are bounded by what one message may carry. */
  uint64_t chunk_bytes = r->chunk_bytes ? r->chunk_bytes : atomic_load(&s->fetch_chunk);
  uint64_t cap = s->max_message_bytes - QDP_WIRE_FETCH_CHUNK_HEADER_MAX;
  if (chunk_bytes > cap) {
    chunk_bytes = cap;
  }
  c->fetch.chunk = chunk_bytes / f->esize ? chunk_bytes / f->esize : 1;

  /* Learn at once when the client leaves, not only at the next send. */
  rpc_watch_close(c);
  fetch_step(j);
}

/* ---- Export
 * ------------------------------------------------------------------------------------------- */

void rpc_h_export(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__ExportRequest *r = (const Qdp__ExportRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_export_request req = {.handle = r->state ? r->state->handle : NULL,
                                   .token = r->state ? r->state->token : NULL,
                                   .path = r->path,
                                   .fd = -1,
                                   .folder = &s->export_folder,
                                   .overwrite = r->overwrite};
  uint64_t bytes = 0;
  qdp_status rc;
  QDP_TRY(rc, io_check_path(r->path, "path", &err));
  if (c->tcp) {
    QDP_TRY(rc, check_tcp_path(c, &s->export_folder, "export_dir", "path", &err));
  } else {
    char what[CONFIG_STR_MAX + 16];
    snprintf(what, sizeof what, "Export path '%.200s'", r->path);
    QDP_TRY(rc, take_fd(c, r->fd_ticket, FD_ACCESS_WRITE, what, "fd_ticket", &req.fd, &err));
    if (s->export_folder.fd >= 0) {
      rc = io_folder_check_fd(&s->export_folder, r->path, req.fd, "path", &err);
      if (rc != QDP_OK) {
        close(req.fd);
        goto out;
      }
    }
  }
  QDP_TRY(rc, job_export(s->jobs, &req, &bytes, &err));
  metrics_output(s->metrics, METRICS_OUT_EXPORT, bytes);
  log_info("rpc", "Export from %s: %s -> %s (%" PRIu64 " B)", c->client, req.handle, r->path,
           bytes);
  Qdp__ExportReply er = QDP__EXPORT_REPLY__INIT;
  er.path = r->path;
  er.bytes = bytes;
  rpc_finish(c, qdp_wire_pack(&er.base), NULL);
  return;
out:
  rpc_finish(c, NULL, &err);
}

/* ---- Status
 * --------------------------------------------------------------------------------------------- */

/* The world's part of Status: every rank, whether it is lost, and how the ranks talk. */
static void status_world(const struct job_status *st, struct arena *a, Qdp__StatusReply *r) {
  bool mpi = strcmp(st->transport, "mpi") == 0;
  r->transport = mpi ? "mpi" : "local";
  r->host_collectives = mpi ? "mpi (point to point, host memory)" : "in-process";
  r->mpi_threads = mpi ? (char *)st->threads : "";
  r->rank_timeout_ms = st->rank_timeout_ms;
  r->device_collectives = (char *)st->device_collectives;
  Qdp__RankInfo **arr = arena_alloc(a, (size_t)st->ranks * sizeof *arr);
  Qdp__RankInfo *ri = arena_alloc(a, (size_t)st->ranks * sizeof *ri);
  if (!arr || !ri) {
    return;
  }
  for (int i = 0; i < st->ranks; i++) {
    qdp__rank_info__init(&ri[i]);
    ri[i].rank = i;
    ri[i].host = (char *)st->rank_info[i].host;
    ri[i].devices = st->rank_info[i].devices;
    ri[i].lost = st->rank_info[i].lost;
    ri[i].reason = (char *)st->rank_info[i].reason;
    arr[i] = &ri[i];
  }
  r->n_rank_info = (size_t)st->ranks;
  r->rank_info = arr;
}

static void status_devices(const struct job_status *st, struct arena *a, Qdp__StatusReply *r) {
  Qdp__Device **devs = arena_alloc(a, st->ndevices * sizeof *devs);
  Qdp__Device *d = arena_alloc(a, st->ndevices * sizeof *d);
  if (!devs || !d) {
    return;
  }
  for (size_t i = 0; i < st->ndevices; i++) {
    const struct runtime_device_info *info = &st->devices[i].info;
    qdp__device__init(&d[i]);
    d[i].name = (char *)info->name;
    d[i].kind = info->kind == RUNTIME_DEVICE_CUDA ? "cuda" : "cpu";
    d[i].rank = st->devices[i].rank;
    d[i].ordinal = info->ordinal;
    d[i].uuid = (char *)info->uuid;
    d[i].model = (char *)info->model;
    d[i].total_bytes = info->total_bytes;
    d[i].free_bytes = info->free_bytes;
    d[i].budget_bytes = info->budget_bytes;
    d[i].used_bytes = info->used_bytes;
    d[i].cc_major = info->cc_major;
    d[i].cc_minor = info->cc_minor;
    d[i].host = (char *)st->devices[i].host;
    d[i].numa_node = info->numa_node;
    devs[i] = &d[i];
  }
  r->n_devices = st->ndevices;
  r->devices = devs;
}

static void status_links(const struct job_status *st, struct arena *a, Qdp__StatusReply *r) {
  size_t nl = st->nlocal * st->nlocal;
  Qdp__Link **links = arena_alloc(a, nl * sizeof *links);
  Qdp__Link *l = arena_alloc(a, nl * sizeof *l);
  if (!links || !l) {
    return;
  }
  for (size_t k = 0; k < nl; k++) {
    const struct runtime_link *rl = &st->links[k];
    qdp__link__init(&l[k]);
    l[k].from = (uint32_t)(k / st->nlocal);
    l[k].to = (uint32_t)(k % st->nlocal);
    l[k].kind = (char *)runtime_link_kind_name(rl->kind);
    l[k].nvlinks = rl->nvlinks;
    l[k].peer = rl->peer;
    l[k].perf_rank = rl->perf_rank;
    links[k] = &l[k];
  }
  r->n_links = nl;
  r->links = links;
}

void rpc_h_status(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  struct arena a = {0};
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_status st;
  grpc_byte_buffer *reply = NULL;
  qdp_status rc = job_status(s->jobs, &st, &err);
  if (rc == QDP_OK) {
    Qdp__StatusReply r = QDP__STATUS_REPLY__INIT;
    r.version = QDP_VERSION;
    r.uptime_ms = rpc_mono_ms() - s->start_mono_ms;
    r.backend = (char *)st.backend;
    r.ranks = st.ranks;
    status_devices(&st, &a, &r);
    r.topology_source = (char *)st.topology_source;
    r.collectives = (char *)st.collectives;
    status_links(&st, &a, &r);
    r.budget_bytes = s->store_budget;
    r.used_bytes = st.used_bytes;
    r.states = st.states;
    r.jobs_total = atomic_load(&s->jobs_total);
    r.jobs_failed = atomic_load(&s->jobs_failed);
    r.max_qubits = st.max_qubits;
    r.regions = st.regions;
    r.region_bytes = st.region_bytes;
    status_world(&st, &a, &r);
    rc = arena_check(&a, &err);
    if (rc == QDP_OK) {
      reply = qdp_wire_pack(&r.base);
    }
  }
  job_status_free(&st);
  arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

/* ---- registered regions
 * ---------------------------------------------------------------------- */

void rpc_h_register_region(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__RegisterRegionRequest *r = (const Qdp__RegisterRegionRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = caller_of(c);
  struct job_region_info ri;
  char what[256];
  int fd = -1;
  shm_what(r->name, r->pid, r->fd, what, sizeof what);
  /* A writable region is written by FetchInto: its descriptor must have been handed over for
   * writing, so the daemon writes only where the caller could. */
  enum fd_access access = r->writable ? FD_ACCESS_WRITE : FD_ACCESS_READ;
  if (take_fd(c, r->fd_ticket, access, what, "fd_ticket", &fd, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  struct job_region_request req = {
      .fd = fd, .what = what, .writable = r->writable, .keep = r->keep};
  if (job_register_region(s->jobs, &who, &req, &ri, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "RegisterRegion from %s: %s (%" PRIu64 " B%s%s%s%s)", c->client, ri.meta.handle,
           ri.meta.bytes, ri.sealed ? ", sealed" : "", ri.pinned ? ", pinned" : "",
           ri.writable ? ", writable" : "", r->keep ? ", kept" : "");
  Qdp__RegionInfo m = QDP__REGION_INFO__INIT;
  m.handle = ri.meta.handle;
  m.token = ri.token;
  m.bytes = ri.meta.bytes;
  m.owner = ri.meta.owner;
  m.sealed = ri.sealed;
  m.pinned = ri.pinned;
  m.created_unix_ms = ri.meta.created_unix_ms;
  grpc_byte_buffer *reply = qdp_wire_pack(&m.base);
  if (!reply) {
    /* Registered but unanswerable: taken back rather than leaked. */
    job_unregister_region(s->jobs, ri.meta.handle, ri.token, NULL, NULL);
    qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the reply");
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

void rpc_h_unregister_region(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__RegionRef *ref = (const Qdp__RegionRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t bytes = 0;
  if (job_unregister_region(c->srv->jobs, ref->handle, ref->token, &bytes, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "UnregisterRegion from %s: %s (%" PRIu64 " B)", c->client, ref->handle, bytes);
  Qdp__UnregisterRegionReply r = QDP__UNREGISTER_REGION_REPLY__INIT;
  r.bytes = bytes;
  rpc_finish(c, qdp_wire_pack(&r.base), NULL);
}

void rpc_h_fetch_into(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__FetchIntoRequest *r = (const Qdp__FetchIntoRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = caller_of(c);
  struct job_fetch_into_result res;
  if (c->tcp) {
    /* A region is memory of a process on the daemon's node; TCP callers have none. */
    qdp_error_set(&err, QDP_ERR_FAILED_PRECONDITION, "region",
                  "FetchInto writes into a region registered on the daemon's node, which only "
                  "callers on its Unix socket have; over TCP read the state with Fetch");
    rpc_finish(c, NULL, &err);
    return;
  }
  struct job_fetch_into_request req = {.handle = r->state ? r->state->handle : NULL,
                                       .token = r->state ? r->state->token : NULL,
                                       .offset = r->offset,
                                       .count = r->count,
                                       .region = r->region ? r->region->handle : NULL,
                                       .region_token = r->region ? r->region->token : NULL,
                                       .region_offset = r->region_offset};
  if (job_fetch_into(c->srv->jobs, &who, &req, &res, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  metrics_output(c->srv->metrics, METRICS_OUT_FETCH_INTO, res.bytes);
  log_info("rpc", "FetchInto from %s: %s -> %s at %" PRIu64 " (%" PRIu64 " B)", c->client,
           req.handle, req.region, req.region_offset, res.bytes);
  Qdp__FetchIntoReply fr = QDP__FETCH_INTO_REPLY__INIT;
  fr.count = res.count;
  fr.dtype = (Qdp__DType)res.dtype;
  fr.bytes = res.bytes;
  rpc_finish(c, qdp_wire_pack(&fr.base), NULL);
}
