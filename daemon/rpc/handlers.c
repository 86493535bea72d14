/* The methods' handlers (handlers.h): each unpacks its request into job/'s plain structs (the
 * trust boundary is access.h's), calls the job and packs its result (reply.h). Every function
 * here runs on a worker thread, or on the completion-queue thread for the calls it runs inline,
 * unless it says otherwise. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "codec.h"
#include "handlers.h"
#include "identity.h"
#include "log.h"
#include "metrics.h"
#include "qdp_wire.h"
#include "reply.h"
#include "server_state.h"
#include "upload.h"

/* ---- Encode, Plan, EncodeUpload ----------------------------------------------------------------
 */

/* Counted in Status from here, whether it succeeds or not. */
static void count_job(struct rpc_call *c) {
  c->job_no = atomic_fetch_add(&c->calls->jobs_total, 1) + 1;
}

/* The bytes an input holds, as the metrics count them: the values', the shared memory's or
 * region's range, the .npy file's size, a CUDA input's declared shape. */
static uint64_t input_bytes(const struct job_input *in) {
  struct stat sb;
  switch (in->source) {
  case QDP_SOURCE_FILE:
    return fstat(in->fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
  case QDP_SOURCE_SHM:
  case QDP_SOURCE_REGION:
    return in->length;
  case QDP_SOURCE_CUDA_IPC:
    return in->rows * in->cols * qdp_dtype_size((qdp_dtype)in->dtype);
  default:
    return in->bytes;
  }
}

/* A job's end in the metrics: its encoding, status and times; on success its bytes in and out. */
static void count_job_end(struct rpc_call *c, const struct job_encode_request *req,
                          uint64_t in_bytes, qdp_status rc, const struct job_state_info *st) {
  struct metrics *m = c->calls->metrics;
  unsigned code = rc == QDP_OK ? 0 : (unsigned)rpc_codec_grpc_status(rc);
  metrics_job(m, (qdp_encoding)req->encoding, code, rpc_call_seconds(c),
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
    metrics_input(m, req->input.source, in_bytes);
    metrics_output(m, req->out ? METRICS_OUT_CUDA_IPC : METRICS_OUT_STATE, st->plan->total_bytes);
  }
}

/* Encodes req and answers the call; an upload (its buffer and its request, which req points
 * into) goes back to upload_budget as soon as the encode is over, not when the client reads the
 * reply. */
static void encode_and_answer(struct rpc_call *c, struct job_encode_request *req, bool amplitudes) {
  struct rpc_server *s = c->srv;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_state_info st;
  struct job_caller who = rpc_caller(c);
  uint64_t in_bytes = input_bytes(&req->input);
  qdp_status rc = job_encode(s->jobs, &who, req, &st, &err);
  if (req->input.source == QDP_SOURCE_UPLOAD) {
    rpc_upload_free(c);
  }
  count_job_end(c, req, in_bytes, rc, &st);
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
  grpc_byte_buffer *reply =
      amplitudes ? rpc_amplitudes_reply(s, &st, &err) : rpc_state_reply(c, &st, true, &err);
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
    const struct log_field f[] = {{"QDP_JOB", job},
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
               req->qubits, batch, state[0] ? state : "the caller's allocation", total_bytes,
               policy, nshards, nshards == 1 ? "" : "s", ms, phase[0], phase[1], phase[2], phase[3],
               phase[4]);
  }
  rpc_call_unref(c);
}

static void rpc_h_encode(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__EncodeRequest *r = (const Qdp__EncodeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_encode_request req;
  struct job_output out;
  char what[256];
  count_job(c);
  if (rpc_encode_request_of(c, r, &req, &out, &err) != QDP_OK ||
      rpc_input_of(c, r->input, "input", &req.input, what, sizeof what, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  encode_and_answer(c, &req, r->reply_amplitudes);
}

static void rpc_h_upload_encode(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  /* The upload's request and buffer stay alive until the encode is over (encode_and_answer). */
  const Qdp__EncodeRequest *r = c->up.req;
  const Qdp__Input *decl = r->input;
  struct job_encode_request req;
  struct job_output out;
  struct qdp_error err = QDP_ERROR_INIT;
  count_job(c);
  if (rpc_encode_request_of(c, r, &req, &out, &err) != QDP_OK) {
    rpc_upload_free(c);
    rpc_finish(c, NULL, &err);
    return;
  }
  req.input = (struct job_input){.source = QDP_SOURCE_UPLOAD,
                                 .field = "request.input",
                                 .dtype = decl->dtype,
                                 .rows = decl->rows,
                                 .cols = decl->cols,
                                 .values = c->up.buf,
                                 .bytes = c->up.len,
                                 .fd = -1};
  encode_and_answer(c, &req, r->reply_amplitudes);
}

static void rpc_h_plan(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__EncodeRequest *r = (const Qdp__EncodeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT, why = QDP_ERROR_INIT;
  struct job_encode_request req;
  struct plan *p = NULL;
  struct rpc_arena a = {0};
  grpc_byte_buffer *reply = NULL;
  char what[256];
  struct job_caller who = rpc_caller(c);
  struct job_output out;
  qdp_status rc = rpc_encode_request_of(c, r, &req, &out, &err);
  if (rc == QDP_OK) {
    rc = rpc_input_of(c, r->input, "input", &req.input, what, sizeof what, &err);
  }
  if (rc == QDP_OK) {
    rc = job_plan(c->srv->jobs, &who, &req, &p, &why, &err);
  }
  if (rc == QDP_OK) {
    reply = rpc_plan_reply(c->srv, &a, p, &why);
    rc = rpc_arena_check(&a, &err);
  }
  plan_destroy(p);
  rpc_arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

/* ---- states ------------------------------------------------------------------------------------
 */

static void rpc_h_describe(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__DescribeRequest *r = (const Qdp__DescribeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_state_info st;
  struct job_caller who = rpc_caller(c);
  grpc_byte_buffer *reply = NULL;
  if (r->writable && !r->views) {
    rpc_finish_status(c, QDP_ERR_INVALID_ARGUMENT, "writable",
                      "writable asks for writable views: set views too");
    return;
  }
  unsigned views = r->writable ? JOB_VIEWS_WRITE : (r->views ? JOB_VIEWS_READ : JOB_VIEWS_NONE);
  if (views && r->descriptors) {
    views |= JOB_VIEWS_FDS;
  }
  qdp_status rc =
      job_describe(c->srv->jobs, &who, r->handle, r->token, views, r->client_pid, &st, &err);
  if (rc == QDP_OK) {
    if (views & JOB_VIEWS_WRITE) {
      log_info("rpc", "Describe from %s: %s leased for writing (lease %" PRIu64 ", pid %d)",
               c->client, r->handle, st.lease, st.meta.writer_pid);
    }
    reply = rpc_state_reply(c, &st, false, &err);
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

static void rpc_h_close_view(struct rpc_job *j) {
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

static void rpc_h_gather(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__GatherRequest *r = (const Qdp__GatherRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_state_info st;
  struct job_caller who = rpc_caller(c);
  const Qdp__StateRef *ref = r->state;
  if (job_gather(c->srv->jobs, &who, ref ? ref->handle : NULL, ref ? ref->token : NULL, r->device,
                 r->ttl_seconds, r->label, &st, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "Gather from %s: %s -> %s on %s (%" PRIu64 " B)", c->client, ref->handle,
           st.meta.handle, r->device, st.plan->total_bytes);
  grpc_byte_buffer *reply = rpc_state_reply(c, &st, true, &err);
  rpc_finish(c, reply, reply ? NULL : &err);
}

static void rpc_h_list(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_arena a = {0};
  const Qdp__ListRequest *r = (const Qdp__ListRequest *)c->req;
  struct rpc_list l = {.s = c->srv, .a = &a};
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  grpc_byte_buffer *reply = NULL;
  qdp_status rc = job_list(c->srv->jobs, &who, r->all, rpc_list_one, &l, &err);
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
  rpc_arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

static void rpc_h_release(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__StateRef *ref = (const Qdp__StateRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
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
  rpc_pool_submit(&s->pool, &c->job);
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
  metrics_output(c->calls->metrics, METRICS_OUT_FETCH, n * f->esize);
  if (!rpc_send_message(c, bb, on_fetch_sent)) {
    qdp_error_set(&err, QDP_ERR_INTERNAL, NULL, "Fetch could not send a chunk");
    fetch_end(c, &err);
  }
}

static void rpc_h_fetch(struct rpc_job *j) {
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

static void rpc_h_export(struct rpc_job *j) {
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
    QDP_TRY(rc, rpc_check_tcp_path(c, &s->export_folder, "export_dir", "path", &err));
  } else {
    char what[CONFIG_STR_MAX + 16];
    snprintf(what, sizeof what, "Export path '%.200s'", r->path);
    QDP_TRY(rc, rpc_take_fd(c, r->fd_ticket, FD_ACCESS_WRITE, what, "fd_ticket", &req.fd, &err));
    if (s->export_folder.fd >= 0) {
      rc = io_folder_check_fd(&s->export_folder, r->path, req.fd, "path", &err);
      if (rc != QDP_OK) {
        close(req.fd);
        goto out;
      }
    }
  }
  QDP_TRY(rc, job_export(s->jobs, &req, &bytes, &err));
  metrics_output(c->calls->metrics, METRICS_OUT_EXPORT, bytes);
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

/* ---- Status ---- */

static void rpc_h_status(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_status st;
  grpc_byte_buffer *reply = NULL;
  qdp_status rc = job_status(c->srv->jobs, &st, &err);
  if (rc == QDP_OK) {
    reply = rpc_status_reply(c->srv, &st, &err);
    rc = reply ? QDP_OK : err.code;
  }
  job_status_free(&st);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

/* ---- registered regions
 * ---------------------------------------------------------------------- */

static void rpc_h_register_region(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__RegisterRegionRequest *r = (const Qdp__RegisterRegionRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  struct job_region_info ri;
  char what[256];
  int fd = -1;
  rpc_shm_what(r->name, r->pid, r->fd, what, sizeof what);
  /* A writable region is written by FetchInto: its descriptor must have been handed over for
   * writing, so the daemon writes only where the caller could. */
  enum fd_access access = r->writable ? FD_ACCESS_WRITE : FD_ACCESS_READ;
  if (rpc_take_fd(c, r->fd_ticket, access, what, "fd_ticket", &fd, &err) != QDP_OK) {
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
           ri.meta.bytes,
           ri.frozen   ? ", frozen"
           : ri.sealed ? ", sealed"
                       : "",
           ri.pinned ? ", pinned" : "", ri.writable ? ", writable" : "", r->keep ? ", kept" : "");
  Qdp__RegionInfo m = QDP__REGION_INFO__INIT;
  m.handle = ri.meta.handle;
  m.token = ri.token;
  m.bytes = ri.meta.bytes;
  m.owner = ri.meta.owner;
  m.sealed = ri.sealed;
  m.frozen = ri.frozen;
  m.pinned = ri.pinned;
  m.created_unix_ms = ri.meta.created_unix_ms;
  m.session = ri.meta.session;
  grpc_byte_buffer *reply = qdp_wire_pack(&m.base);
  if (!reply) {
    /* Registered but unanswerable: taken back rather than leaked. */
    job_unregister_region(s->jobs, NULL, ri.meta.handle, ri.token, NULL, NULL);
    qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the reply");
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

static void rpc_h_unregister_region(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__RegionRef *ref = (const Qdp__RegionRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t bytes = 0;
  struct job_caller who = rpc_caller(c);
  if (job_unregister_region(c->srv->jobs, &who, ref->handle, ref->token, &bytes, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "UnregisterRegion from %s: %s (%" PRIu64 " B)", c->client, ref->handle, bytes);
  Qdp__UnregisterRegionReply r = QDP__UNREGISTER_REGION_REPLY__INIT;
  r.bytes = bytes;
  rpc_finish(c, qdp_wire_pack(&r.base), NULL);
}

static void rpc_h_fetch_into(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__FetchIntoRequest *r = (const Qdp__FetchIntoRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
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
  metrics_output(c->calls->metrics, METRICS_OUT_FETCH_INTO, res.bytes);
  log_info("rpc", "FetchInto from %s: %s -> %s at %" PRIu64 " (%" PRIu64 " B)", c->client,
           req.handle, req.region, req.region_offset, res.bytes);
  Qdp__FetchIntoReply fr = QDP__FETCH_INTO_REPLY__INIT;
  fr.count = res.count;
  fr.dtype = (Qdp__DType)res.dtype;
  fr.bytes = res.bytes;
  rpc_finish(c, qdp_wire_pack(&fr.base), NULL);
}

/* The form from inputs: encode's fields and inputs into req. A descriptor handed over is taken
 * in every case (closed here when the other input is refused). */
static qdp_status kernel_inputs_of(const struct rpc_call *c, const Qdp__KernelRequest *r,
                                   struct job_kernel_request *req, struct job_encode_request *enc,
                                   struct job_input *in_b, struct job_output *out,
                                   struct qdp_error *err) {
  char what[256];
  qdp_status rc = rpc_encode_request_of(c, r->encode, enc, out, err);
  if (rc != QDP_OK) {
    return rc;
  }
  QDP_TRY(rc, rpc_input_of(c, r->encode->input, "encode.input", &enc->input, what, sizeof what,
                           err));
  req->encode = enc;
  if (r->input_b) {
    rc = rpc_input_of(c, r->input_b, "input_b", in_b, what, sizeof what, err);
    if (rc != QDP_OK) {
      if (enc->input.fd >= 0) {
        close(enc->input.fd);
      }
      return rc;
    }
    req->input_b = in_b;
  }
out:
  return rc;
}

static void rpc_h_kernel(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__KernelRequest *r = (const Qdp__KernelRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  struct job_kernel_result res;
  if (c->tcp && r->region) {
    qdp_error_set(&err, QDP_ERR_FAILED_PRECONDITION, "region",
                  "Kernel writes into a region registered on the daemon's node, which only "
                  "callers on its Unix socket have; over TCP leave the region out");
    rpc_finish(c, NULL, &err);
    return;
  }
  struct job_kernel_request req = {.a = r->a ? r->a->handle : NULL,
                                   .a_token = r->a ? r->a->token : NULL,
                                   .b = r->b ? r->b->handle : NULL,
                                   .b_token = r->b ? r->b->token : NULL,
                                   .overlaps = r->overlaps,
                                   .region = r->region ? r->region->handle : NULL,
                                   .region_token = r->region ? r->region->token : NULL,
                                   .region_offset = r->region_offset,
                                   .max_bytes = r->max_bytes};
  struct job_encode_request enc;
  struct job_input in_b;
  struct job_output unused, out;
  if (rpc_output_of(c, r->out, &out, &req.out, &err) != QDP_OK ||
      (r->encode && kernel_inputs_of(c, r, &req, &enc, &in_b, &unused, &err) != QDP_OK)) {
    rpc_finish(c, NULL, &err);
    return;
  }
  if (job_kernel(c->srv->jobs, &who, &req, RPC_REPLY_AMPLITUDES_MAX, &res, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "Kernel from %s: %s x %s -> %" PRIu64 " x %" PRIu64 " %s on %s in %.3f ms",
           c->client, req.encode ? "input" : req.a,
           req.encode ? (req.input_b ? "input_b" : "input") : req.b && req.b[0] ? req.b : req.a,
           res.rows, res.cols, r->overlaps ? "overlaps" : "fidelities", res.device,
           res.compute_ms);
  Qdp__KernelReply kr = QDP__KERNEL_REPLY__INIT;
  kr.rows = res.rows;
  kr.cols = res.cols;
  kr.dtype = (Qdp__DType)res.dtype;
  kr.bytes = res.bytes;
  if (res.values) {
    kr.values.data = res.values;
    kr.values.len = res.bytes;
  }
  kr.device = res.device;
  kr.compute_ms = res.compute_ms;
  grpc_byte_buffer *reply = qdp_wire_pack(&kr.base);
  free(res.values);
  if (!reply) {
    qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the reply");
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

static void rpc_h_measure(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__MeasureRequest *r = (const Qdp__MeasureRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  struct job_measure_result res;
  if (c->tcp && r->region) {
    qdp_error_set(&err, QDP_ERR_FAILED_PRECONDITION, "region",
                  "Measure writes into a region registered on the daemon's node, which only "
                  "callers on its Unix socket have; over TCP leave the region out");
    rpc_finish(c, NULL, &err);
    return;
  }
  struct job_measure_request req = {.handle = r->state ? r->state->handle : NULL,
                                    .token = r->state ? r->state->token : NULL,
                                    .measurement = (int)r->measurement,
                                    .qubits = r->qubits,
                                    .nqubits = r->n_qubits,
                                    .paulis = (const char *const *)r->paulis,
                                    .npaulis = r->n_paulis,
                                    .shots = r->shots,
                                    .seed = r->seed,
                                    .region = r->region ? r->region->handle : NULL,
                                    .region_token = r->region ? r->region->token : NULL,
                                    .region_offset = r->region_offset};
  if (job_measure(c->srv->jobs, &who, &req, RPC_REPLY_AMPLITUDES_MAX, &res, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "Measure from %s: %s -> %" PRIu64 " x %" PRIu64 " on %s in %.3f ms", c->client,
           req.handle, res.rows, res.cols, res.device, res.compute_ms);
  Qdp__MeasureReply mr = QDP__MEASURE_REPLY__INIT;
  mr.rows = res.rows;
  mr.cols = res.cols;
  mr.dtype = r->measurement == QDP__MEASUREMENT__MEASUREMENT_SAMPLES ? QDP__DTYPE__DTYPE_INT64
                                                                      : QDP__DTYPE__DTYPE_FLOAT64;
  mr.bytes = res.bytes;
  if (res.values) {
    mr.values.data = res.values;
    mr.values.len = res.bytes;
  }
  mr.device = res.device;
  mr.compute_ms = res.compute_ms;
  grpc_byte_buffer *reply = qdp_wire_pack(&mr.base);
  free(res.values);
  if (!reply) {
    qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the reply");
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

/* ---- sessions ---- */

static grpc_byte_buffer *session_reply(const struct session_info *si) {
  Qdp__SessionInfo r = QDP__SESSION_INFO__INIT;
  r.session = (char *)si->id;
  r.owner = (char *)si->owner;
  r.pid = si->pid;
  r.heartbeat_ms = si->heartbeat_ms;
  r.opened_unix_ms = si->opened_unix_ms;
  r.label = (char *)si->label;
  return qdp_wire_pack(&r.base);
}

static void finish_session(struct rpc_call *c, const struct session_info *si) {
  struct qdp_error err = QDP_ERROR_INIT;
  grpc_byte_buffer *reply = session_reply(si);
  if (!reply) {
    qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the reply");
  }
  rpc_finish(c, reply, reply ? NULL : &err);
}

static void rpc_h_open_session(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__OpenSessionRequest *r = (const Qdp__OpenSessionRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  struct session_info si;
  if (job_open_session(c->srv->jobs, &who, r->heartbeat_ms, r->label, &si, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "OpenSession from %s: %s (heartbeat %" PRIu64 " ms)", c->client, si.id,
           si.heartbeat_ms);
  finish_session(c, &si);
}

static void rpc_h_heartbeat(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__SessionRef *r = (const Qdp__SessionRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  struct session_info si;
  if (job_heartbeat(c->srv->jobs, &who, r->session, &si, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  finish_session(c, &si);
}

static void rpc_h_close_session(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__SessionRef *r = (const Qdp__SessionRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_caller who = rpc_caller(c);
  struct job_session_end e;
  if (job_close_session(c->srv->jobs, &who, r->session, &e, &err) != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "CloseSession from %s: %s; released %zu states (%" PRIu64 " B), %zu regions",
           c->client, r->session, e.states, e.bytes, e.regions);
  Qdp__CloseSessionReply cr = QDP__CLOSE_SESSION_REPLY__INIT;
  cr.states = (uint32_t)e.states;
  cr.regions = (uint32_t)e.regions;
  cr.freed_bytes = e.bytes;
  rpc_finish(c, qdp_wire_pack(&cr.base), NULL);
}

void (*const rpc_handlers[RPC_M_COUNT])(struct rpc_job *j) = {
    [RPC_M_ENCODE] = rpc_h_encode,
    [RPC_M_PLAN] = rpc_h_plan,
    [RPC_M_UPLOAD] = rpc_h_upload_encode,
    [RPC_M_DESCRIBE] = rpc_h_describe,
    [RPC_M_LIST] = rpc_h_list,
    [RPC_M_RELEASE] = rpc_h_release,
    [RPC_M_FETCH] = rpc_h_fetch,
    [RPC_M_EXPORT] = rpc_h_export,
    [RPC_M_STATUS] = rpc_h_status,
    [RPC_M_REGISTER_REGION] = rpc_h_register_region,
    [RPC_M_UNREGISTER_REGION] = rpc_h_unregister_region,
    [RPC_M_CLOSE_VIEW] = rpc_h_close_view,
    [RPC_M_GATHER] = rpc_h_gather,
    [RPC_M_FETCH_INTO] = rpc_h_fetch_into,
    [RPC_M_KERNEL] = rpc_h_kernel,
    [RPC_M_MEASURE] = rpc_h_measure,
    [RPC_M_OPEN_SESSION] = rpc_h_open_session,
    [RPC_M_HEARTBEAT] = rpc_h_heartbeat,
    [RPC_M_CLOSE_SESSION] = rpc_h_close_session,
};
