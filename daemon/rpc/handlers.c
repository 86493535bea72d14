/* The handlers: each translates its request, delegates to the planner, the store, io/ and the
 * runtime, and answers. Every function here runs on a worker thread unless it says otherwise. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "codec.h"
#include "io/guard.h"
#include "internal.h"
#include "io/map.h"
#include "io/npy.h"
#include "log.h"
#include "plan/plan.h"
#include "qdp_build_config.h"
#include "request.h"
#include "runtime/runtime.h"
#include "state/regions.h"
#include "state/store.h"
#include "state/tickets.h"
#include "world/world.h"

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

/* ---- pieces shared by the handlers
 * --------------------------------------------------------------- */

static qdp_status check_deadline(const struct rpc_call *c, struct qdp_error *err) {
  gpr_timespec now = gpr_now(c->deadline.clock_type);
  if (gpr_time_cmp(c->deadline, now) <= 0) {
    return qdp_error_set(err, QDP_ERR_DEADLINE_EXCEEDED, NULL,
                         "the call's deadline passed before its job could start");
  }
  return QDP_OK;
}

/* Before a new state is committed: is anyone still waiting for its handle? A caller gone
 * (cancelled, its connection closed) or past its deadline never receives the token. */
static qdp_status check_caller_waits(const struct rpc_call *c, struct qdp_error *err) {
  if (atomic_load(&c->cancel_seen)) {
    return qdp_error_set(err, QDP_ERR_CANCELLED, NULL,
                         "the caller left before the state was ready; nothing was kept");
  }
  if (gpr_time_cmp(c->deadline, gpr_now(c->deadline.clock_type)) <= 0) {
    return qdp_error_set(err, QDP_ERR_DEADLINE_EXCEEDED, NULL,
                         "the call's deadline passed before the state was ready; nothing was kept");
  }
  return QDP_OK;
}

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

static qdp_status check_ref(const Qdp__StateRef *ref, const char *field, struct qdp_error *err) {
  if (!ref || !ref->handle || !ref->handle[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, field, "%s.handle is missing", field);
  }
  return QDP_OK;
}

static void destroy_state(void *payload) {
  runtime_state_destroy(payload);
}

/* A registered region: the whole object mapped once, page-locked for the devices when the backend
 * wants that, read by every Encode that names it. */
struct rpc_region {
  struct io_mapping map;
  struct runtime_mesh *mesh;
  bool pinned;
  atomic_bool lost; /* it shrank under a job: its pages are zeros now, never to be read again */
};

static void region_end(void *payload) {
  struct rpc_region *g = payload;
  if (g->pinned) {
    runtime_mesh_unregister_host(g->mesh, g->map.base);
  }
  io_unmap(&g->map);
  free(g);
}

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
    const struct runtime_device_info *d = ps->device < s->ndev ? &s->devs[ps->device] : NULL;
    sh[i].rank = ps->rank;
    sh[i].device = d ? (char *)d->name : (char *)"";
    sh[i].ordinal = ps->ordinal;
    sh[i].uuid = d ? (char *)d->uuid : (char *)"";
    sh[i].first = ps->first;
    sh[i].count = ps->count;
    sh[i].row_first = ps->row_first;
    sh[i].rows = ps->rows;
    sh[i].bytes = ps->bytes;
    sh[i].host = (char *)world_host(s->world, ps->rank);
    arr[i] = &sh[i];
  }
  *ret_n = p->nshards;
  *ret = arr;
}

/* A StateInfo of a live state; token NULL leaves it empty (everything but Encode's reply). */
static Qdp__StateInfo *state_info(struct rpc_server *s, struct arena *a,
                                  const struct state_meta *meta, const struct runtime_state *st,
                                  const char *token) {
  Qdp__StateInfo *info = arena_alloc(a, sizeof *info);
  if (!info) {
    return NULL;
  }
  qdp__state_info__init(info);
  const struct plan *p = runtime_state_plan(st);
  info->handle = arena_str(a, meta->handle);
  info->token = token ? arena_str(a, token) : (char *)"";
  info->encoding = (Qdp__Encoding)p->encoding;
  info->qubits = p->qubits;
  info->batch = p->batch;
  info->dtype = (Qdp__DType)p->out_dtype;
  info->bytes = p->total_bytes;
  info->policy = (char *)plan_policy_name(p->policy);
  info->global_bits = p->global_bits;
  fill_shards(s, a, p, &info->n_shards, &info->shards);
  info->collective = (char *)runtime_state_collective(st);
  info->created_unix_ms = meta->created_unix_ms;
  info->expires_unix_ms = meta->expires_unix_ms;
  info->label = arena_str(a, meta->label);
  info->owner = arena_str(a, meta->owner);
  info->encode_ms = runtime_state_encode_ms(st);
  info->leases = meta->leases;
  return info;
}

/* Opens zero-copy views of every shard of st (pinned by the caller) into info's shards, under one
 * new lease of the calling client's process `pid`: the IPC handles first, so that a refusal
 * (FAILED_PRECONDITION on the CPU backend) leaves no lease behind. */
static qdp_status open_views(struct rpc_call *c, struct arena *a, struct runtime_state *st,
                             int32_t pid, Qdp__StateInfo *info, struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, arena_check(a, err));
  for (size_t i = 0; i < info->n_shards; i++) {
    struct runtime_ipc ipc;
    QDP_TRY(rc, runtime_state_export_ipc(st, i, &ipc, err));
    uint8_t *h = arena_alloc(a, sizeof ipc.handle);
    QDP_TRY(rc, arena_check(a, err));
    memcpy(h, ipc.handle, sizeof ipc.handle);
    info->shards[i]->ipc_handle = (ProtobufCBinaryData){sizeof ipc.handle, h};
    info->shards[i]->ipc_offset = ipc.offset;
  }
  uint64_t lease = 0;
  /* The views' process: the one the client names, else the caller itself, as the kernel says. */
  if (pid == 0 && !c->tcp) {
    pid = (int32_t)c->ucred.pid;
  }
  QDP_TRY(rc, state_store_lease_open(c->srv->store, st, c->owner, pid, &lease, err));
  for (size_t i = 0; i < info->n_shards; i++) {
    info->shards[i]->lease_id = lease;
  }
  info->leases++;
out:
  return rc;
}

/* Commits a new state (Encode, Gather) and packs the reply that hands over its handle and token,
 * with views when asked. st is the store's from here in every case (destroyed on failure). The
 * state is released again when its reply cannot be built, since no one else could. */
static qdp_status commit_state(struct rpc_call *c, struct state_reservation *res,
                               struct runtime_state *st, uint64_t ttl_seconds, const char *label,
                               bool views, int32_t pid, grpc_byte_buffer **ret_reply,
                               char *ret_handle, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  struct arena a = {0};
  char token[STATE_TOKEN_LEN] = "";
  qdp_status rc = state_store_commit(s->store, res, st, destroy_state, rpc_ttl_ms(ttl_seconds),
                                     label, ret_handle, token, err);
  if (rc != QDP_OK) {
    runtime_state_destroy(st);
    return rc;
  }
  struct runtime_state *kept = st;
  struct state_meta meta;
  void *payload = NULL;
  if (state_store_get(s->store, ret_handle, token, &payload, &meta, NULL) != QDP_OK) {
    /* Released or expired already (a TTL shorter than this reply): describe it from here. */
    memset(&meta, 0, sizeof meta);
    snprintf(meta.handle, sizeof meta.handle, "%s", ret_handle);
    snprintf(meta.owner, sizeof meta.owner, "%s", c->owner);
    snprintf(meta.label, sizeof meta.label, "%s", label ? label : "");
    meta.created_unix_ms = rpc_now_unix_ms();
    payload = NULL;
    if (views) {
      return qdp_error_set(err, QDP_ERR_NOT_FOUND, "ttl_seconds",
                           "state '%s' expired before its views could be opened", ret_handle);
    }
  }
  Qdp__EncodeReply er = QDP__ENCODE_REPLY__INIT;
  er.state = state_info(s, &a, &meta, payload ? payload : kept, token);
  rc = arena_check(&a, err);
  if (rc == QDP_OK && views) {
    rc = open_views(c, &a, payload, pid, er.state, err);
  }
  if (rc == QDP_OK) {
    *ret_reply = rpc_codec_pack(&er.base);
  }
  if (payload) {
    state_store_put(s->store, payload);
  }
  if (rc != QDP_OK) {
    /* The state exists but its handle could not be sent: release it rather than leak it. */
    state_store_release(s->store, ret_handle, token, NULL, NULL);
  }
  arena_free(&a);
  return rc;
}

/* Input from a registered region: offset and length within it, read through its mapping. */
static qdp_status resolve_region(struct rpc_call *c, const Qdp__Input *in,
                                 struct runtime_input *ret, struct rpc_region **ret_region,
                                 struct qdp_error *err) {
  const Qdp__SharedMemory *sh = in->shm;
  qdp_status rc = QDP_OK;
  uint64_t rows = 0, cols = 0;
  void *payload = NULL;
  QDP_TRY(rc,
          region_registry_get(c->srv->regions, sh->region, sh->region_token, &payload, NULL, err));
  struct rpc_region *g = payload;
  *ret_region = g; /* pinned: the caller puts it back */
  if (atomic_load(&g->lost)) {
    return qdp_error_set(err, QDP_ERR_DATA_LOSS, "input.shm.region",
                         "region '%.64s' shrank while a job read it; register it again",
                         sh->region);
  }
  QDP_TRY(rc, rpc_input_shape(in->dtype, in->rows, in->cols, sh->length, "input.shm", &rows, &cols,
                              err));
  /* Compared without forming offset + length, which may overflow. */
  if (sh->offset > g->map.bytes || sh->length > g->map.bytes - sh->offset) {
    rc = qdp_error_set(err, QDP_ERR_OUT_OF_RANGE,
                       sh->offset > g->map.bytes ? "input.shm.offset" : "input.shm.length",
                       "region '%.64s': offset %" PRIu64 " B + length %" PRIu64
                       " B passes its end at %" PRIu64 " B",
                       sh->region, sh->offset, sh->length, g->map.bytes);
    if (err) {
      err->need_bytes = sh->length;
      err->free_bytes = sh->offset > g->map.bytes ? 0 : g->map.bytes - sh->offset;
    }
    return rc;
  }
  *ret = (struct runtime_input){.data = (const char *)g->map.data + sh->offset,
                                .dtype = (qdp_dtype)in->dtype,
                                .rows = rows,
                                .cols = cols,
                                .pinned = g->pinned};
out:
  return rc;
}

/* Maps a request's input to host values the runtime reads. A mapping (file, shared memory) goes
 * to *map, which the caller unmaps; a registered region read goes to *ret_region, pinned, which
 * the caller puts back (also on failure). */
static qdp_status resolve_input(struct rpc_call *c, const Qdp__Input *in, struct runtime_input *ret,
                                struct io_mapping *map, struct rpc_region **ret_region,
                                struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  qdp_status rc = QDP_OK;
  uint64_t rows = 0, cols = 0;
  if (!in) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "input", "input is missing");
  }
  switch (in->source_case) {
  case QDP__INPUT__SOURCE_DATA:
    rc = rpc_input_shape(in->dtype, in->rows, in->cols, in->data.len, "input", &rows, &cols, err);
    if (rc == QDP_OK) {
      *ret = (struct runtime_input){
          .data = in->data.data, .dtype = (qdp_dtype)in->dtype, .rows = rows, .cols = cols};
    }
    return rc;
  case QDP__INPUT__SOURCE_PATH: {
    struct io_npy hdr;
    int fd = -1;
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
    char q[CONFIG_STR_MAX + 4];
    snprintf(q, sizeof q, "'%.200s'", in->path);
    struct stat st;
    bool have_st = fstat(fd, &st) == 0;
    QDP_TRY(rc, io_map_npy_fd(fd, q, map, &hdr, err));
    /* The file says its own dtype and shape; the planner refuses a dtype the encoding cannot
     * take (complex files, say). Other ranks open the path and must find this very file. */
    *ret = (struct runtime_input){.data = map->data,
                                  .dtype = hdr.dtype,
                                  .rows = hdr.rows,
                                  .cols = hdr.cols,
                                  .file = in->path,
                                  .file_offset = hdr.data_offset};
    if (have_st) {
      ret->file_id = (struct runtime_file_id){
          .ino = (uint64_t)st.st_ino,
          .size = (uint64_t)st.st_size,
          .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
    }
    return QDP_OK;
  }
  case QDP__INPUT__SOURCE_SHM: {
    const Qdp__SharedMemory *sh = in->shm;
    if (!sh) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "input.shm", "input.shm is empty");
    }
    if (sh->region && sh->region[0]) {
      return resolve_region(c, in, ret, ret_region, err);
    }
    char what[256];
    shm_what(sh->name, sh->pid, sh->fd, what, sizeof what);
    int fd = -1;
    QDP_TRY(rc, take_fd(c, sh->fd_ticket, FD_ACCESS_READ, what, "input.shm.fd_ticket", &fd, err));
    rc = rpc_input_shape(in->dtype, in->rows, in->cols, sh->length, "input.shm", &rows, &cols, err);
    if (rc != QDP_OK) {
      close(fd);
      goto out;
    }
    QDP_TRY(rc, io_map_fd(fd, what, sh->offset, sh->length, false, map, err));
    *ret = (struct runtime_input){
        .data = map->data, .dtype = (qdp_dtype)in->dtype, .rows = rows, .cols = cols};
    return QDP_OK;
  }
  default:
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "input",
                         "input has no source: give data, path or shm");
  }
out:
  return rc;
}

static grpc_byte_buffer *plan_reply(struct rpc_server *s, struct arena *a, const struct plan *p) {
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
  struct qdp_error why = QDP_ERROR_INIT;
  if (!p->feasible && plan_check_feasible(p, &why) != QDP_OK) {
    r.message = why.msg;
  }
  return a->failed ? NULL : rpc_codec_pack(&r.base);
}

/* Encode, Plan (dry_run) and EncodeUpload (uploaded != NULL) alike: validate -> plan ->
 * feasibility -> admit -> encode -> commit -> reply. Answers the call. */
static void run_encode(struct rpc_call *c, const Qdp__EncodeRequest *r,
                       const struct runtime_input *uploaded, bool dry_run) {
  struct rpc_server *s = c->srv;
  struct qdp_error err = QDP_ERROR_INIT;
  qdp_status rc = QDP_OK;
  struct io_mapping map = IO_MAPPING_INIT;
  struct rpc_region *region = NULL;
  int guard = -1;
  struct plan_device *devs = NULL;
  size_t *subset = NULL;
  struct plan *p = NULL;
  struct state_reservation *res = NULL;
  struct runtime_state *st = NULL;
  grpc_byte_buffer *reply = NULL;
  struct arena a = {0};
  struct runtime_input in;
  char handle[STATE_HANDLE_LEN] = "";

  if (!dry_run) {
    atomic_fetch_add(&s->jobs_total, 1);
    c->job_started = true;
  }
  QDP_TRY(rc, check_deadline(c, &err));
  if (uploaded) {
    in = *uploaded;
  } else if (dry_run && r->input && r->input->source_case == QDP__INPUT__SOURCE__NOT_SET) {
    /* A dry run of data still to be streamed: its declared shape is all the planner needs. */
    uint64_t rows, cols;
    QDP_TRY(rc, rpc_declared_shape(r->input->dtype, r->input->rows, r->input->cols, "input", &rows,
                                   &cols, &err));
    in = (struct runtime_input){
        .data = NULL, .dtype = (qdp_dtype)r->input->dtype, .rows = rows, .cols = cols};
  } else {
    QDP_TRY(rc, resolve_input(c, r->input, &in, &map, &region, &err));
  }
  if (map.base || region) {
    guard = region ? io_guard_add(region->map.base, region->map.map_len)
                   : io_guard_add(map.base, map.map_len);
    if (guard < 0) {
      rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, "input",
                         "too many mapped inputs are being read at once; retry");
      goto out;
    }
  }
  qdp_dtype out_dtype;
  QDP_TRY(rc, rpc_output_dtype(r->output_dtype, &out_dtype, &err));

  size_t n = s->ndev;
  devs = calloc(n ? n : 1, sizeof *devs);
  subset = calloc(n ? n : 1, sizeof *subset);
  if (!devs || !subset) {
    rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory to plan");
    goto out;
  }
  world_plan_devices(s->world, devs);
  enum plan_policy policy;
  size_t nsub = 0;
  QDP_TRY(rc, rpc_placement(r->placement, devs, n, &policy, subset, &nsub, &err));
  if (nsub == 0) {
    nsub = world_live_devices(s->world, subset); /* 0 while no rank is lost: all of them */
  }
  struct plan_request pr = {
      .encoding = (qdp_encoding)r->encoding,
      .qubits = r->qubits,
      .batch = in.rows,
      .values_per_sample = in.cols,
      .in_dtype = in.dtype,
      .out_dtype = out_dtype,
      .policy = policy,
      .device_subset = nsub ? subset : NULL,
      .device_subset_count = nsub,
      .staging_bytes = runtime_mesh_staging_bytes(s->mesh),
  };
  /* Links order the shards of an even plan so that exchange partners are the best joined (on
   * this node: the mesh knows only its own links). */
  size_t ranks = rpc_world_ranks(s);
  struct plan_world world = {.devices = devs,
                             .count = n,
                             .ranks = (int)ranks,
                             .link_cost = ranks == 1 ? runtime_mesh_link_costs(s->mesh) : NULL};
  struct plan_limits lim = {
      .max_qubits = (uint32_t)atomic_load(&s->max_qubits),
      .max_batch = atomic_load(&s->max_batch),
      .max_state_bytes = 0,
  };
  QDP_TRY(rc, plan_compute(&pr, &world, &lim, &p, &err));
  if (dry_run) {
    reply = plan_reply(s, &a, p);
    QDP_TRY(rc, arena_check(&a, &err));
    goto out;
  }
  if (r->views) {
    /* Refused before anything is encoded. */
    QDP_TRY(rc, runtime_mesh_check_views(s->mesh, &err));
  }
  QDP_TRY(rc, plan_check_feasible(p, &err));
  QDP_TRY(rc, state_store_admit(s->store, c->owner, p->total_bytes, &res, &err));
  rc = world_encode(s->world, p, &in, &st, &err);
  /* A mapped input that shrank under the job read zeros (or faulted): whatever the encode made
   * of them, success or a "zero norm", the true answer is the loss. */
  const struct io_mapping *src = region ? &region->map : map.base ? &map : NULL;
  bool lost = guard >= 0 && io_guard_remove(guard);
  guard = -1;
  lost = lost || (src && io_mapping_shrunk(src));
  if (lost && region) {
    atomic_store(&region->lost, true);
  }
  if (lost || (region && atomic_load(&region->lost))) {
    rc = qdp_error_set(&err, QDP_ERR_DATA_LOSS, "input",
                       "the input file or shared memory shrank while it was being read; "
                       "nothing was kept%s",
                       region ? " (the region is lost: register it again)" : "");
  }
  if (rc != QDP_OK) {
    goto out;
  }
  /* Nobody would ever receive this state's token: its memory goes back now, not at its TTL. */
  QDP_TRY(rc, check_caller_waits(c, &err));
  rc = commit_state(c, res, st, r->ttl_seconds, r->label, r->views, r->client_pid, &reply, handle,
                    &err);
  res = NULL; /* consumed either way, and st with it */
  st = NULL;
  if (rc != QDP_OK) {
    goto out;
  }
  log_info("rpc", "%s from %s: %s %u qubits x %" PRIu64 " -> %s (%" PRIu64 " B, %s, %zu shard%s)",
           rpc_method_name(c), c->client, qdp_encoding_name((qdp_encoding)r->encoding), r->qubits,
           in.rows, handle, p->total_bytes, plan_policy_name(p->policy), p->nshards,
           p->nshards == 1 ? "" : "s");
out:
  if (guard >= 0) {
    io_guard_remove(guard);
  }
  runtime_state_destroy(st);
  state_reservation_cancel(res);
  plan_destroy(p);
  io_unmap(&map);
  if (region) {
    /* The last pin of a region unregistered meanwhile unmaps it here. */
    region_registry_put(s->regions, region);
  }
  free(devs);
  free(subset);
  arena_free(&a);
  if (uploaded) {
    /* The upload's buffer goes back to upload_budget now, not when the client reads the reply. */
    rpc_upload_free(c);
  }
  if (rc != QDP_OK) {
    if (reply) {
      grpc_byte_buffer_destroy(reply);
    }
    rpc_finish(c, NULL, &err);
  } else {
    rpc_finish(c, reply, NULL);
  }
}

void rpc_h_encode(struct rpc_job *j) {
  run_encode(j->call, (const Qdp__EncodeRequest *)j->call->req, NULL, false);
}

void rpc_h_plan(struct rpc_job *j) {
  run_encode(j->call, (const Qdp__EncodeRequest *)j->call->req, NULL, true);
}

void rpc_h_upload_encode(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__Input *decl = c->up.req->input;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t rows, cols;
  if (rpc_input_shape(decl->dtype, decl->rows, decl->cols, c->up.len, "request.input", &rows, &cols,
                      &err) != QDP_OK) {
    atomic_fetch_add(&c->srv->jobs_total, 1);
    c->job_started = true;
    rpc_upload_free(c);
    rpc_finish(c, NULL, &err);
    return;
  }
  struct runtime_input in = {
      .data = c->up.buf, .dtype = (qdp_dtype)decl->dtype, .rows = rows, .cols = cols};
  /* The request stays alive (c->up.req) until the call is freed, after the answer. */
  run_encode(c, c->up.req, &in, false);
}

void rpc_h_describe(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__DescribeRequest *r = (const Qdp__DescribeRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  struct arena a = {0};
  grpc_byte_buffer *reply = NULL;
  void *payload = NULL;
  struct state_meta meta;
  qdp_status rc = QDP_OK;
  if (!r->handle || !r->handle[0]) {
    rc = qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, "handle", "handle is missing");
  }
  if (rc == QDP_OK && r->views) {
    rc = runtime_mesh_check_views(s->mesh, &err);
  }
  if (rc == QDP_OK) {
    rc = state_store_get(s->store, r->handle, r->token, &payload, &meta, &err);
  }
  if (rc == QDP_OK) {
    Qdp__StateInfo *info = state_info(s, &a, &meta, payload, NULL);
    rc = arena_check(&a, &err);
    if (rc == QDP_OK && r->views) {
      rc = open_views(c, &a, payload, r->client_pid, info, &err);
    }
    if (rc == QDP_OK) {
      reply = rpc_codec_pack(&info->base);
    }
    state_store_put(s->store, payload);
  }
  arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

void rpc_h_close_view(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__CloseViewRequest *r = (const Qdp__CloseViewRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t freed = 0;
  qdp_status rc = QDP_OK;
  if (!r->handle || !r->handle[0]) {
    rc = qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, "handle", "handle is missing");
  } else {
    /* The last lease of a released state frees device memory: this runs on a worker. */
    rc = state_store_lease_close(c->srv->store, r->handle, r->token, r->lease_id, &freed, &err);
  }
  if (rc != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "CloseView from %s: %s lease %" PRIu64 " (%" PRIu64 " B freed)", c->client,
           r->handle, r->lease_id, freed);
  Qdp__CloseViewReply cr = QDP__CLOSE_VIEW_REPLY__INIT;
  cr.freed_bytes = freed;
  rpc_finish(c, rpc_codec_pack(&cr.base), NULL);
}

void rpc_h_gather(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__GatherRequest *r = (const Qdp__GatherRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  qdp_status rc = QDP_OK;
  void *payload = NULL;
  struct state_reservation *res = NULL;
  struct runtime_state *g = NULL;
  grpc_byte_buffer *reply = NULL;
  char handle[STATE_HANDLE_LEN] = "";
  size_t device = 0;
  QDP_TRY(rc, check_ref(r->state, "state", &err));
  QDP_TRY(rc, check_deadline(c, &err));
  QDP_TRY(rc, runtime_mesh_find_device(s->mesh, r->device, "device", &device, &err));
  QDP_TRY(rc, state_store_get(s->store, r->state->handle, r->state->token, &payload, NULL, &err));
  uint64_t bytes = runtime_state_bytes(payload);
  QDP_TRY(rc, state_store_admit(s->store, c->owner, bytes, &res, &err));
  QDP_TRY(rc, runtime_state_gather(s->mesh, payload, device, &g, &err));
  QDP_TRY(rc, check_caller_waits(c, &err));
  rc = commit_state(c, res, g, r->ttl_seconds, r->label, false, 0, &reply, handle, &err);
  res = NULL; /* consumed either way, and g with it */
  g = NULL;
  if (rc != QDP_OK) {
    goto out;
  }
  log_info("rpc", "Gather from %s: %s -> %s on %s (%" PRIu64 " B)", c->client, r->state->handle,
           handle, r->device, bytes);
out:
  runtime_state_destroy(g);
  state_reservation_cancel(res);
  if (payload) {
    state_store_put(s->store, payload);
  }
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

struct list_ctx {
  struct rpc_server *s;
  struct arena *a;
  const char *owner; /* NULL: every owner's */
  Qdp__StateInfo **items;
  size_t n, cap;
  bool failed;
};

/* Under the store's lock: no store calls here. */
static void list_one(const struct state_meta *meta, void *payload, void *arg) {
  struct list_ctx *l = arg;
  if (l->failed || (l->owner && strcmp(meta->owner, l->owner) != 0)) {
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
  Qdp__StateInfo *info = state_info(l->s, l->a, meta, payload, NULL);
  if (!info) {
    l->failed = true;
    return;
  }
  l->items[l->n++] = info;
}

void rpc_h_list(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  struct arena a = {0};
  const Qdp__ListRequest *r = (const Qdp__ListRequest *)c->req;
  struct list_ctx l = {.s = s, .a = &a, .owner = c->owner};
  struct qdp_error err = QDP_ERROR_INIT;
  grpc_byte_buffer *reply = NULL;
  qdp_status rc = QDP_OK;
  if (r->all) {
    /* Whose states exist is the operator's business: the daemon's own user, or root. */
    if (c->tcp || (c->ucred.uid != 0 && c->ucred.uid != s->euid)) {
      rc = qdp_error_set(&err, QDP_ERR_PERMISSION_DENIED, "all",
                         "listing every identity's states is for the daemon's own user and root; "
                         "%s may list its own",
                         c->owner);
      rpc_finish(c, NULL, &err);
      return;
    }
    l.owner = NULL;
  }
  state_store_foreach(s->store, list_one, &l);
  if (l.failed || a.failed) {
    rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory to list %zu states",
                       l.n);
  } else {
    Qdp__ListReply r = QDP__LIST_REPLY__INIT;
    r.n_states = l.n;
    r.states = l.items;
    reply = rpc_codec_pack(&r.base);
  }
  free(l.items);
  arena_free(&a);
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

void rpc_h_release(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__StateRef *ref = (const Qdp__StateRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t freed = 0;
  qdp_status rc = check_ref(ref, "state", &err);
  if (rc == QDP_OK) {
    /* The last pin's put frees device memory: this runs on a worker for that reason. Without a
     * token the owner releases its own state by handle. */
    rc = ref->token && ref->token[0]
             ? state_store_release(c->srv->store, ref->handle, ref->token, &freed, &err)
             : state_store_release_owned(c->srv->store, ref->handle, c->owner, &freed, &err);
  }
  if (rc != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "Release from %s: %s (%" PRIu64 " B)", c->client, ref->handle, freed);
  Qdp__ReleaseReply r = QDP__RELEASE_REPLY__INIT;
  r.freed_bytes = freed;
  rpc_finish(c, rpc_codec_pack(&r.base), NULL);
}

/* ---- Fetch: a server stream, one chunk in flight
 * ---------------------------------------------------- */

static void fetch_step(struct rpc_job *j);

static void fetch_end(struct rpc_call *c, const struct qdp_error *err) {
  if (c->fetch.state) {
    state_store_put(c->srv->store, c->fetch.state);
    c->fetch.state = NULL;
  }
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
  struct rpc_fetch *f = &c->fetch;
  struct qdp_error err = QDP_ERROR_INIT;
  if (f->send_failed || atomic_load(&c->cancel_seen)) {
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
  uint64_t n = f->end - f->next < f->chunk ? f->end - f->next : f->chunk;
  uint8_t *data = NULL;
  grpc_byte_buffer *bb =
      rpc_codec_fetch_chunk(f->next, f->dtype, f->total, (size_t)(n * f->esize), &data);
  if (runtime_state_read(f->state, f->next, n, data, &err) != QDP_OK) {
    grpc_byte_buffer_destroy(bb);
    fetch_end(c, &err);
    return;
  }
  f->next += n;
  c->sending = bb;
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t k = 0;
  if (!c->md_sent) {
    ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->md_sent = true;
  }
  ops[k].op = GRPC_OP_SEND_MESSAGE;
  ops[k].data.send_message.send_message = bb;
  k++;
  c->ev_send = (struct rpc_ev){.fn = on_fetch_sent, .call = c};
  if (!rpc_start(c, ops, k, &c->ev_send)) {
    grpc_byte_buffer_destroy(bb);
    c->sending = NULL;
    qdp_error_set(&err, QDP_ERR_INTERNAL, NULL, "Fetch could not send a chunk");
    fetch_end(c, &err);
  }
}

void rpc_h_fetch(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__FetchRequest *r = (const Qdp__FetchRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  void *payload = NULL;
  struct state_meta meta;
  qdp_status rc = check_ref(r->state, "state", &err);
  if (rc == QDP_OK) {
    rc = state_store_get(s->store, r->state->handle, r->state->token, &payload, &meta, &err);
  }
  if (rc != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  struct rpc_fetch *f = &c->fetch;
  f->state = payload; /* pinned until fetch_end */
  const struct plan *p = runtime_state_plan(f->state);
  uint64_t amps = p->batch * p->amplitudes; /* fits: batch * 2^n * dtype size did */
  if (r->offset > amps || (r->count != 0 && r->count > amps - r->offset)) {
    qdp_error_set(&err, QDP_ERR_OUT_OF_RANGE, r->offset > amps ? "offset" : "count",
                  "offset %" PRIu64 " + count %" PRIu64 " is past the state's %" PRIu64
                  " amplitudes (%" PRIu64 " x 2^%u)",
                  r->offset, r->count, amps, p->batch, p->qubits);
    fetch_end(c, &err);
    return;
  }
  f->total = r->count ? r->count : amps - r->offset;
  f->next = r->offset;
  f->end = r->offset + f->total;
  f->dtype = (int)p->out_dtype;
  f->esize = qdp_dtype_size(p->out_dtype);
  uint64_t chunk_bytes = r->chunk_bytes ? r->chunk_bytes : atomic_load(&s->fetch_chunk);
  uint64_t cap = s->max_message_bytes - RPC_FETCH_CHUNK_HEADER_MAX;
  if (chunk_bytes > cap) {
    chunk_bytes = cap;
  }
  f->chunk = chunk_bytes / f->esize ? chunk_bytes / f->esize : 1;

  /* Learn at once when the client leaves, not only at the next send. */
  rpc_watch_close(c);
  fetch_step(j);
}

/* ---- Export
 * ------------------------------------------------------------------------------------------- */

static qdp_status export_read(void *arg, uint64_t offset, uint64_t n, void *dst,
                              struct qdp_error *reterr) {
  return runtime_state_read(arg, offset, n, dst, reterr);
}

void rpc_h_export(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  const Qdp__ExportRequest *r = (const Qdp__ExportRequest *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  void *payload = NULL;
  struct state_meta meta;
  grpc_byte_buffer *reply = NULL;
  int fd = -1;
  qdp_status rc;
  QDP_TRY(rc, check_ref(r->state, "state", &err));
  QDP_TRY(rc, io_check_path(r->path, "path", &err));
  if (c->tcp) {
    QDP_TRY(rc, check_tcp_path(c, &s->export_folder, "export_dir", "path", &err));
  } else {
    char what[CONFIG_STR_MAX + 16];
    snprintf(what, sizeof what, "Export path '%.200s'", r->path);
    QDP_TRY(rc, take_fd(c, r->fd_ticket, FD_ACCESS_WRITE, what, "fd_ticket", &fd, &err));
    if (s->export_folder.fd >= 0) {
      QDP_TRY(rc, io_folder_check_fd(&s->export_folder, r->path, fd, "path", &err));
    }
  }
  QDP_TRY(rc, state_store_get(s->store, r->state->handle, r->state->token, &payload, &meta, &err));
  const struct plan *p = runtime_state_plan(payload);
  int ndim = p->batch > 1 ? 2 : 1;
  char hdr[IO_NPY_HEADER_CAP];
  size_t hlen = 0;
  QDP_TRY(rc,
          io_npy_header(p->out_dtype, ndim, p->batch, p->amplitudes, hdr, sizeof hdr, &hlen, &err));
  if (fd >= 0) {
    char q[CONFIG_STR_MAX + 4];
    snprintf(q, sizeof q, "'%.200s'", r->path);
    QDP_TRY(rc, io_write_npy_fd(fd, q, p->out_dtype, ndim, p->batch, p->amplitudes, export_read,
                                payload, &err));
  } else {
    QDP_TRY(rc, io_write_npy_beneath(&s->export_folder, r->path, r->overwrite, s->own, s->nown,
                                     p->out_dtype, ndim, p->batch, p->amplitudes, export_read,
                                     payload, &err));
  }
  log_info("rpc", "Export from %s: %s -> %s (%" PRIu64 " B)", c->client, meta.handle, r->path,
           (uint64_t)hlen + p->total_bytes);
  Qdp__ExportReply er = QDP__EXPORT_REPLY__INIT;
  er.path = r->path;
  er.bytes = (uint64_t)hlen + p->total_bytes;
  reply = rpc_codec_pack(&er.base);
out:
  if (fd >= 0) {
    close(fd);
  }
  if (payload) {
    state_store_put(s->store, payload);
  }
  rpc_finish(c, reply, rc == QDP_OK ? NULL : &err);
}

/* ---- Status
 * --------------------------------------------------------------------------------------------- */

/* The world's part of Status: every rank, whether it is lost, and how the ranks talk. */
static void status_world(struct rpc_server *s, struct arena *a, Qdp__StatusReply *r) {
  int ranks = rpc_world_ranks(s);
  Qdp__RankInfo **arr = arena_alloc(a, (size_t)ranks * sizeof *arr);
  Qdp__RankInfo *ri = arena_alloc(a, (size_t)ranks * sizeof *ri);
  struct world_rank_info *wi = arena_alloc(a, (size_t)ranks * sizeof *wi);
  bool mpi = strcmp(world_transport_name(s->world), "mpi") == 0;
  r->transport = mpi ? "mpi" : "local";
  r->host_collectives = mpi ? "mpi (point to point, host memory)" : "in-process";
  r->mpi_threads = mpi ? (char *)world_threads_name(s->world) : "";
  r->rank_timeout_ms = world_timeout_ms(s->world);
  char *dc = arena_alloc(a, 192);
  if (dc) {
    world_device_collectives(s->world, dc, 192);
  }
  r->device_collectives = dc ? dc : "";
  if (!arr || !ri || !wi) {
    return;
  }
  for (int i = 0; i < ranks; i++) {
    qdp__rank_info__init(&ri[i]);
    world_rank_info(s->world, i, &wi[i]);
    ri[i].rank = i;
    ri[i].host = wi[i].host;
    ri[i].devices = wi[i].devices;
    ri[i].lost = wi[i].lost;
    ri[i].reason = wi[i].reason;
    arr[i] = &ri[i];
  }
  r->n_rank_info = (size_t)ranks;
  r->rank_info = arr;
}

void rpc_h_status(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  struct rpc_server *s = c->srv;
  struct arena a = {0};
  struct qdp_error err = QDP_ERROR_INIT;
  Qdp__StatusReply r = QDP__STATUS_REPLY__INIT;
  r.version = QDP_VERSION;
  r.uptime_ms = 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  r.uptime_ms = now - s->start_mono_ms;
  r.backend = (char *)runtime_mesh_backend(s->mesh);
  r.ranks = rpc_world_ranks(s);
  Qdp__Device **devs = arena_alloc(&a, s->ndev * sizeof *devs);
  Qdp__Device *d = arena_alloc(&a, s->ndev * sizeof *d);
  struct runtime_device_info *info = arena_alloc(&a, s->ndev * sizeof *info);
  if (devs && d && info) {
    for (size_t i = 0; i < s->ndev; i++) {
      struct world_device wd;
      world_device_at(s->world, i, &wd);
      info[i] = wd.info;
      int rank = wd.rank;
      const char *host = wd.host;
      qdp__device__init(&d[i]);
      d[i].name = info[i].name;
      d[i].kind = info[i].kind == RUNTIME_DEVICE_CUDA ? "cuda" : "cpu";
      d[i].rank = rank;
      d[i].ordinal = info[i].ordinal;
      d[i].uuid = info[i].uuid;
      d[i].model = info[i].model;
      d[i].total_bytes = info[i].total_bytes;
      d[i].free_bytes = info[i].free_bytes;
      d[i].budget_bytes = info[i].budget_bytes;
      d[i].used_bytes = info[i].used_bytes;
      d[i].cc_major = info[i].cc_major;
      d[i].cc_minor = info[i].cc_minor;
      d[i].host = (char *)host;
      d[i].numa_node = info[i].numa_node;
      devs[i] = &d[i];
    }
    r.n_devices = s->ndev;
    r.devices = devs;
  }
  r.topology_source = (char *)runtime_mesh_topology_source(s->mesh);
  r.collectives = (char *)runtime_mesh_collectives(s->mesh);
  /* This node's links: its devices are the first of the list (a world lists rank 0's first). */
  size_t nloc = runtime_mesh_count(s->mesh), nl = nloc * nloc;
  Qdp__Link **links = arena_alloc(&a, nl * sizeof *links);
  Qdp__Link *l = arena_alloc(&a, nl * sizeof *l);
  if (links && l) {
    for (size_t k = 0; k < nl; k++) {
      struct runtime_link rl;
      runtime_mesh_link(s->mesh, k / nloc, k % nloc, &rl);
      qdp__link__init(&l[k]);
      l[k].from = (uint32_t)(k / nloc);
      l[k].to = (uint32_t)(k % nloc);
      l[k].kind = (char *)runtime_link_kind_name(rl.kind);
      l[k].nvlinks = rl.nvlinks;
      l[k].peer = rl.peer;
      l[k].perf_rank = rl.perf_rank;
      links[k] = &l[k];
    }
    r.n_links = nl;
    r.links = links;
  }
  r.budget_bytes = s->store_budget;
  uint32_t states = 0;
  state_store_usage(s->store, &r.used_bytes, &states);
  r.states = states;
  r.jobs_total = atomic_load(&s->jobs_total);
  r.jobs_failed = atomic_load(&s->jobs_failed);
  r.max_qubits = (uint32_t)atomic_load(&s->max_qubits);
  region_registry_usage(s->regions, &r.regions, &r.region_bytes);
  status_world(s, &a, &r);
  grpc_byte_buffer *reply = NULL;
  qdp_status rc = arena_check(&a, &err);
  if (rc == QDP_OK) {
    reply = rpc_codec_pack(&r.base);
  }
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
  qdp_status rc = QDP_OK;
  struct rpc_region *g = NULL;
  bool reserved = false;
  char handle[REGION_HANDLE_LEN] = "";
  char token[REGION_TOKEN_LEN] = "";
  struct region_meta meta;

  char what[256];
  shm_what(r->name, r->pid, r->fd, what, sizeof what);
  /* The limit first: nothing is mapped or pinned for a registration that would be refused. */
  QDP_TRY(rc, region_registry_reserve(s->regions, &err));
  reserved = true;
  g = calloc(1, sizeof *g);
  if (!g) {
    rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "no host memory for a %zu B region record", sizeof *g);
    goto out;
  }
  g->mesh = s->mesh;
  atomic_init(&g->lost, false);
  int fd = -1;
  QDP_TRY(rc, take_fd(c, r->fd_ticket, FD_ACCESS_READ, what, "fd_ticket", &fd, &err));
  QDP_TRY(rc, io_map_fd(fd, what, 0, 0, true, &g->map, &err));
  QDP_TRY(rc, runtime_mesh_register_host(s->mesh, g->map.base, g->map.map_len, &g->pinned, &err));
  reserved = false; /* commit consumes the slot either way */
  rc = region_registry_commit(s->regions, c->owner, g->map.bytes, g, region_end, handle, token,
                              &meta, &err);
  if (rc != QDP_OK) {
    goto out;
  }
  log_info("rpc", "RegisterRegion from %s: %s (%" PRIu64 " B%s%s)", c->client, handle, meta.bytes,
           g->map.sealed ? ", sealed" : "", g->pinned ? ", pinned" : "");
  Qdp__RegionInfo ri = QDP__REGION_INFO__INIT;
  ri.handle = handle;
  ri.token = token;
  ri.bytes = meta.bytes;
  ri.owner = meta.owner;
  ri.sealed = g->map.sealed != 0;
  ri.pinned = g->pinned;
  ri.created_unix_ms = meta.created_unix_ms;
  g = NULL; /* the registry's now */
  grpc_byte_buffer *reply = rpc_codec_pack(&ri.base);
  if (!reply) {
    /* Registered but unanswerable: take it back rather than leak it. */
    region_registry_remove(s->regions, handle, token, NULL, NULL);
    rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the reply");
    goto out;
  }
  rpc_finish(c, reply, NULL);
  return;
out:
  if (reserved) {
    region_registry_cancel(s->regions);
  }
  if (g) {
    region_end(g);
  }
  rpc_finish(c, NULL, &err);
}

void rpc_h_unregister_region(struct rpc_job *j) {
  struct rpc_call *c = j->call;
  const Qdp__RegionRef *ref = (const Qdp__RegionRef *)c->req;
  struct qdp_error err = QDP_ERROR_INIT;
  uint64_t bytes = 0;
  qdp_status rc = QDP_OK;
  if (!ref->handle || !ref->handle[0]) {
    rc = qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, "handle", "region.handle is missing");
  } else {
    /* Unmapping (and unpinning, on GPUs) may take a while: this runs on a worker. */
    rc = region_registry_remove(c->srv->regions, ref->handle, ref->token, &bytes, &err);
  }
  if (rc != QDP_OK) {
    rpc_finish(c, NULL, &err);
    return;
  }
  log_info("rpc", "UnregisterRegion from %s: %s (%" PRIu64 " B)", c->client, ref->handle, bytes);
  Qdp__UnregisterRegionReply r = QDP__UNREGISTER_REGION_REPLY__INIT;
  r.bytes = bytes;
  rpc_finish(c, rpc_codec_pack(&r.base), NULL);
}
