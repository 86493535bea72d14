/* Encode and its dry run: the input resolved to host values (in memory, a mapped file or shared
 * memory, a registered region) or to a client's device allocation (CUDA IPC), planned over the
 * world, admitted, encoded, checked for data loss and committed. And the kernel matrix from
 * inputs, whose encodes go a tile at a time into the kernel's workspace and keep nothing. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"
#include "io/guard.h"
#include "io/npy.h"
#include "qdp_size.h"
#include "region.h"

/* A job's input while it runs (its ingest): what it maps or pins, and the guard over it. */
struct job_ingest {
  struct runtime_input in;
  struct io_mapping map;        /* a file or shared memory mapped for this job */
  struct job_region *region;    /* a registered region read, pinned */
  struct runtime_ipc_input ipc; /* a client's allocation opened for this job */
  int guard;
  const char *name; /* the region's handle, for messages; NULL for other inputs */
  /* The mapped object's change time when the job began reading it (io_mapping_generation),
   * compared when it ends: a shrink grown back meanwhile leaves the size but not this. Not
   * taken for an object sealed against shrinking, which cannot lose its pages. */
  bool gen_taken;
  int64_t gen;
};

#define JOB_INGEST_INIT \
  { .map = IO_MAPPING_INIT, .guard = -1 }

/* What became of a mapped input under the job. */
enum ingest_loss {
  INGEST_WHOLE,   /* nothing seen */
  INGEST_SHRANK,  /* a read faulted, the object is shorter now, or the region was lost before */
  INGEST_CHANGED, /* its change time moved: truncated and grown back, or written by write(2) */
};

static qdp_status map_file(const struct job_input *in, struct job_ingest *ing,
                           struct qdp_error *err) {
  char q[4200];
  snprintf(q, sizeof q, "'%.200s'", in->path);
  struct stat st;
  bool have_st = fstat(in->fd, &st) == 0;
  struct qdp_npy hdr;
  qdp_status rc = io_map_npy_fd(in->fd, q, &ing->map, &hdr, err);
  if (rc != QDP_OK) {
    return rc;
  }
  /* The file says its own dtype and shape; the planner refuses a dtype the encoding cannot take
   * (complex files, say). Other ranks open the path and must find this very file. */
  ing->in = (struct runtime_input){.data = ing->map.data,
                                   .dtype = hdr.dtype,
                                   .rows = hdr.rows,
                                   .cols = hdr.cols,
                                   .file = in->path,
                                   .file_offset = hdr.data_offset};
  if (have_st) {
    ing->in.file_id = (struct runtime_file_id){
        .ino = (uint64_t)st.st_ino,
        .size = (uint64_t)st.st_size,
        .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
  }
  return QDP_OK;
}

static qdp_status map_shm(const struct job_input *in, struct job_ingest *ing,
                          struct qdp_error *err) {
  uint64_t rows = 0, cols = 0;
  qdp_status rc =
      job_input_shape(in->dtype, in->rows, in->cols, in->length, "input.shm", &rows, &cols, err);
  if (rc != QDP_OK) {
    close(in->fd);
    return rc;
  }
  rc = io_map_fd(in->fd, in->what, in->offset, in->length, 0, &ing->map, err);
  if (rc == QDP_OK) {
    ing->in = (struct runtime_input){
        .data = ing->map.data, .dtype = (qdp_dtype)in->dtype, .rows = rows, .cols = cols};
  }
  return rc;
}

/* Input from a registered region: offset and length within it, read through its mapping. */
static qdp_status read_region(struct job_pipeline *jp, const struct job_input *in,
                              struct job_ingest *ing, struct qdp_error *err) {
  void *payload = NULL;
  uint64_t rows = 0, cols = 0;
  qdp_status rc =
      region_registry_get(jp->regions, in->region, in->region_token, &payload, NULL, err);
  if (rc != QDP_OK) {
    return rc;
  }
  struct job_region *g = payload;
  ing->region = g; /* pinned: put back with the source */
  ing->name = in->region;
  if (atomic_load(&g->lost)) {
    return qdp_error_set(err, QDP_ERR_DATA_LOSS, "input.shm.region",
                         "region '%.64s' shrank or changed while a job used it; register it "
                         "again",
                         in->region);
  }
  rc = job_region_check_pinned(g, in->region, "input.shm.region", err);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = job_input_shape(in->dtype, in->rows, in->cols, in->length, "input.shm", &rows, &cols, err);
  if (rc != QDP_OK) {
    return rc;
  }
  /* Compared without forming offset + length, which may overflow. */
  if (in->offset > g->map.bytes || in->length > g->map.bytes - in->offset) {
    rc = qdp_error_set(err, QDP_ERR_OUT_OF_RANGE,
                       in->offset > g->map.bytes ? "input.shm.offset" : "input.shm.length",
                       "region '%.64s': offset %" PRIu64 " B + length %" PRIu64
                       " B passes its end at %" PRIu64 " B",
                       in->region, in->offset, in->length, g->map.bytes);
    if (err) {
      err->need_bytes = in->length;
      err->free_bytes = in->offset > g->map.bytes ? 0 : g->map.bytes - in->offset;
    }
    return rc;
  }
  ing->in = (struct runtime_input){.data = (const char *)g->map.data + in->offset,
                                   .dtype = (qdp_dtype)in->dtype,
                                   .rows = rows,
                                   .cols = cols,
                                   .pinned = g->pinned};
  return QDP_OK;
}

/* A client's CUDA allocation: its GPU found by UUID among the mesh's, its handle opened there
 * and the bytes the shape says checked against the allocation. Opened per job and closed when it
 * ends, not cached: the daemon then never holds a mapping of client memory past a call (which
 * would keep a freed allocation alive in the client), and the driver counts repeated opens of
 * one handle, so concurrent jobs on one allocation need nothing more. A plan opens nothing. */
static qdp_status open_device_input(struct job_pipeline *jp, const struct job_input *in,
                                    bool plan_only, struct job_ingest *ing, struct qdp_error *err) {
  uint64_t rows = 0, cols = 0;
  size_t device = 0;
  qdp_status rc;
  QDP_TRY(rc, job_declared_shape(in->dtype, in->rows, in->cols, "input", &rows, &cols, err));
  if (in->ipc_handle_len != RUNTIME_IPC_HANDLE_BYTES) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "input.cuda_ipc.ipc_handle",
                       "input.cuda_ipc.ipc_handle has %zu bytes; a cudaIpcMemHandle_t has %d",
                       in->ipc_handle_len, RUNTIME_IPC_HANDLE_BYTES);
    goto out;
  }
  QDP_TRY(rc, runtime_mesh_find_uuid(jp->mesh, in->device_uuid, "input.cuda_ipc.device_uuid",
                                     &device, err));
  ing->in = (struct runtime_input){.dtype = (qdp_dtype)in->dtype,
                                   .rows = rows,
                                   .cols = cols,
                                   .on_device = true,
                                   .device = device};
  if (!plan_only) {
    /* job_declared_shape proved the product fits 64 bits. */
    uint64_t bytes = rows * cols * qdp_dtype_size((qdp_dtype)in->dtype);
    QDP_TRY(rc, runtime_mesh_open_ipc(jp->mesh, device, in->ipc_handle, in->offset, bytes,
                                      &ing->ipc, err));
    ing->in.data = (const char *)ing->ipc.base + in->offset;
  }
out:
  return rc;
}

/* The tensor is in this node's GPU memory: every shard must be on this rank (the coordinator),
 * whose process opened it. */
static qdp_status check_on_this_rank(struct job_pipeline *jp, const struct plan *p,
                                     struct qdp_error *err) {
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank != 0) {
      return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "placement",
                           "the tensor is on this node only: shard %zu would be on rank %d (%s); "
                           "place the state on the coordinator's devices (placement.devices)",
                           i, p->shards[i].rank, job_rank_host(jp, p->shards[i].rank));
    }
  }
  return QDP_OK;
}

/* Resolves the input to host values, and guards what is mapped (a mapped input that shrinks
 * raises SIGBUS, io/guard.h). A plan takes a declared shape; an encode needs values. */
static qdp_status ingest_open(struct job_pipeline *jp, const struct job_input *in, bool plan_only,
                              struct job_ingest *ing, struct qdp_error *err) {
  const char *field = in->field ? in->field : "input";
  uint64_t rows = 0, cols = 0;
  qdp_status rc = QDP_OK;
  switch (in->source) {
  case QDP_SOURCE_VALUES:
  case QDP_SOURCE_UPLOAD:
    rc = job_input_shape(in->dtype, in->rows, in->cols, in->bytes, field, &rows, &cols, err);
    ing->in = (struct runtime_input){
        .data = in->values, .dtype = (qdp_dtype)in->dtype, .rows = rows, .cols = cols};
    return rc;
  case QDP_SOURCE_NONE:
    if (!plan_only) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, field,
                           "input has no source: give data, path or shm");
    }
    /* A dry run of data still to be streamed: its declared shape is all the planner needs. */
    rc = job_declared_shape(in->dtype, in->rows, in->cols, field, &rows, &cols, err);
    ing->in = (struct runtime_input){.dtype = (qdp_dtype)in->dtype, .rows = rows, .cols = cols};
    return rc;
  case QDP_SOURCE_FILE:
    rc = map_file(in, ing, err);
    break;
  case QDP_SOURCE_SHM:
    rc = map_shm(in, ing, err);
    break;
  case QDP_SOURCE_REGION:
    rc = read_region(jp, in, ing, err);
    break;
  case QDP_SOURCE_CUDA_IPC:
    return open_device_input(jp, in, plan_only, ing, err); /* device memory: nothing to guard */
  case QDP_SOURCE_COUNT:
    return qdp_error_set(err, QDP_ERR_INTERNAL, field, "input source %d is unknown",
                         (int)in->source);
  }
  if (rc != QDP_OK) {
    return rc;
  }
  ing->guard = ing->region ? io_guard_add(ing->region->map.base, ing->region->map.map_len)
                           : io_guard_add(ing->map.base, ing->map.map_len);
  if (ing->guard < 0) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "input",
                         "too many mapped inputs are being read at once; retry");
  }
  const struct io_mapping *m = ing->region ? &ing->region->map : &ing->map;
  if (!m->sealed) {
    ing->gen_taken = true;
    if (!io_mapping_generation(m, &ing->gen)) {
      ing->gen = INT64_MIN; /* no fstat now: io_mapping_changed says changed at the end */
    }
  }
  return QDP_OK;
}

/* Ends the guard; what became of the input under the job (a region that shrank or changed is lost
 * for every later job too: its pages may be zeros, or, page-locked, no longer the object's). */
static enum ingest_loss ingest_lost(struct job_ingest *ing) {
  const struct io_mapping *m = ing->region ? &ing->region->map : ing->map.base ? &ing->map : NULL;
  bool faulted = ing->guard >= 0 && io_guard_remove(ing->guard);
  ing->guard = -1;
  enum ingest_loss why = INGEST_WHOLE;
  if (faulted || (m && io_mapping_shrunk(m))) {
    why = INGEST_SHRANK;
  } else if (m && ing->gen_taken && io_mapping_changed(m, ing->gen)) {
    why = INGEST_CHANGED;
  }
  if (why != INGEST_WHOLE && ing->region) {
    atomic_store(&ing->region->lost, true);
  }
  if (why == INGEST_WHOLE && ing->region && atomic_load(&ing->region->lost)) {
    why = INGEST_SHRANK; /* another job saw it go meanwhile */
  }
  return why;
}

/* DATA_LOSS for an input that shrank or changed under the job, naming field and the region. */
static qdp_status ingest_loss_error(const struct job_ingest *ing, enum ingest_loss why,
                                    const char *field, struct qdp_error *err) {
  char what[96];
  if (ing->name) {
    snprintf(what, sizeof what, "region '%.64s'", ing->name);
  } else {
    snprintf(what, sizeof what, "the input file or shared memory");
  }
  if (why == INGEST_SHRANK) {
    return qdp_error_set(err, QDP_ERR_DATA_LOSS, field,
                         "%s shrank while it was being read; nothing was kept%s", what,
                         ing->region ? " (the region is lost: register it again)" : "");
  }
  return qdp_error_set(
      err, QDP_ERR_DATA_LOSS, field,
      "%s changed while it was being read: it was truncated (and grown back) or written by "
      "write(2) or fallocate, so the pages read may be zeros or stale; nothing was kept%s",
      what,
      ing->region ? " (the region is lost: register it again, best as a memfd sealed with "
                    "F_SEAL_SHRINK | F_SEAL_GROW, which cannot change size)"
                  : " (hand over a memfd sealed with F_SEAL_SHRINK, or leave the input alone "
                    "until the call returns)");
}

static void ingest_close(struct job_pipeline *jp, struct job_ingest *ing) {
  if (ing->guard >= 0) {
    io_guard_remove(ing->guard);
  }
  io_unmap(&ing->map);
  runtime_mesh_close_ipc(jp->mesh, &ing->ipc);
  if (ing->region) {
    /* The last pin of a region unregistered meanwhile unmaps it here. */
    region_registry_put(jp->regions, ing->region);
  }
}

/* The plan of req over input `in`, across the world's live devices (or those it names); with
 * `sink`, whole on the caller's allocation's GPU and holding none of the state's bytes there. */
static qdp_status plan_job(struct job_pipeline *jp, const struct job_encode_request *req,
                           const struct runtime_input *in, const struct job_sink *sink,
                           struct plan **ret, struct qdp_error *err) {
  qdp_dtype out_dtype;
  qdp_status rc = job_output_dtype(req->output_dtype, &out_dtype, err);
  if (rc != QDP_OK) {
    return rc;
  }
  size_t n = jp->ndev;
  struct plan_device *devs = calloc(n ? n : 1, sizeof *devs);
  size_t *subset = calloc(n ? n : 1, sizeof *subset);
  if (!devs || !subset) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory to plan");
    goto out;
  }
  world_plan_devices(jp->world, devs);
  enum plan_policy policy;
  size_t nsub = 0;
  QDP_TRY(rc, job_placement(&req->placement, devs, n, &policy, subset, &nsub, err));
  if (sink) {
    QDP_TRY(rc, job_sink_place(jp, sink, &policy, subset, &nsub, err));
  }
  if (nsub == 0) {
    nsub = world_live_devices(jp->world, subset); /* 0 while no rank is lost: all of them */
  }
  struct plan_request pr = {
      .encoding = (qdp_encoding)req->encoding,
      .qubits = req->qubits,
      .batch = in->rows,
      .values_per_sample = in->cols,
      .in_dtype = in->dtype,
      .out_dtype = out_dtype,
      .policy = policy,
      .device_subset = nsub ? subset : NULL,
      .device_subset_count = nsub,
      .staging_bytes = runtime_mesh_staging_bytes(jp->mesh),
      .output_external = sink != NULL,
      .iqp_top_bits = runtime_mesh_iqp_top_bits(jp->mesh),
  };
  /* Links order the shards of an even plan so that exchange partners are the best joined (on
   * this node: the mesh knows only its own links). */
  int ranks = job_world_ranks(jp);
  struct plan_world world = {.devices = devs,
                             .count = n,
                             .ranks = ranks,
                             .link_cost = ranks == 1 ? runtime_mesh_link_costs(jp->mesh) : NULL};
  struct plan_limits lim = {.max_qubits = (uint32_t)atomic_load(&jp->max_qubits),
                            .max_batch = atomic_load(&jp->max_batch)};
  rc = plan_compute(&pr, &world, &lim, ret, err);
out:
  free(devs);
  free(subset);
  return rc;
}

qdp_status job_plan(struct job_pipeline *jp, const struct job_caller *caller,
                    const struct job_encode_request *req, struct plan **ret_plan,
                    struct qdp_error *ret_why, struct qdp_error *err) {
  struct job_ingest ing = JOB_INGEST_INIT;
  struct job_sink sink = {0};
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, job_check_caller(caller, false, err));
  QDP_TRY(rc, ingest_open(jp, &req->input, true, &ing, err));
  if (req->out) {
    QDP_TRY(rc, job_sink_find(jp, req, &ing.in, &sink, err));
  }
  QDP_TRY(rc, plan_job(jp, req, &ing.in, req->out ? &sink : NULL, ret_plan, err));
  qdp_error_clear(ret_why);
  if (!(*ret_plan)->feasible) {
    plan_check_feasible(*ret_plan, ret_why);
  }
out:
  ingest_close(jp, &ing);
  return rc;
}

/* The job on the devices: into the caller's allocation (opened here, on this rank: plan_job put
 * the one shard on its GPU, which is what world_encode runs on the mesh directly), else across
 * the world. */
static qdp_status run_job(struct job_pipeline *jp, const struct job_encode_request *req,
                          const struct runtime_input *in, const struct plan *p,
                          struct job_sink *sink, struct runtime_state **ret,
                          struct qdp_error *err) {
  if (!req->out) {
    return world_encode(jp->world, p, in, ret, err);
  }
  qdp_status rc = job_sink_open(jp, req->out, in, p, sink, err);
  return rc == QDP_OK ? runtime_encode_into(jp->mesh, p, in, &sink->out, ret, err) : rc;
}

qdp_status job_encode(struct job_pipeline *jp, const struct job_caller *caller,
                      const struct job_encode_request *req, struct job_state_info *ret,
                      struct qdp_error *err) {
  struct job_ingest ing = JOB_INGEST_INIT;
  struct job_sink sink = {0};
  struct plan *p = NULL;
  struct state_reservation *res = NULL;
  struct runtime_state *st = NULL;
  qdp_status rc = QDP_OK;
  memset(ret, 0, sizeof *ret);
  uint64_t t0 = clock_mono_ns(), t1 = 0, t2 = 0, t3 = 0;
  QDP_TRY(rc, job_check_caller(caller, false, err));
  QDP_TRY(rc, ingest_open(jp, &req->input, false, &ing, err));
  QDP_TRY(rc, job_check_session(jp, caller, err)); /* before the work its state would end with */
  t1 = clock_mono_ns();
  if (req->out) {
    QDP_TRY(rc, job_sink_find(jp, req, &ing.in, &sink, err));
  }
  QDP_TRY(rc, plan_job(jp, req, &ing.in, req->out ? &sink : NULL, &p, err));
  if (ing.in.on_device || req->out) {
    QDP_TRY(rc, check_on_this_rank(jp, p, err));
  }
  if (req->views) {
    /* Refused before anything is encoded. */
    QDP_TRY(rc, runtime_mesh_check_views(jp->mesh, err));
  }
  QDP_TRY(rc, plan_check_feasible(p, err));
  /* The caller's allocation holds the state: its job takes none of the store's bytes, and counts
   * against the state limits only as a job in flight. */
  QDP_TRY(rc,
          state_store_admit(jp->store, caller->owner, req->out ? 0 : p->total_bytes, &res, err));
  t2 = clock_mono_ns();
  rc = run_job(jp, req, &ing.in, p, &sink, &st, err);
  t3 = clock_mono_ns();
  /* A mapped input that shrank under the job read zeros (or faulted): whatever the encode made
   * of them, success or a "zero norm", the true answer is the loss. */
  enum ingest_loss why = ingest_lost(&ing);
  if (why != INGEST_WHOLE) {
    rc = ingest_loss_error(&ing, why, "input", err);
  }
  if (rc != QDP_OK) {
    goto out;
  }
  if (req->out) {
    /* The amplitudes are in place: nothing to commit, whether or not the caller still waits. */
    job_info_fill(ret, &(struct state_meta){0}, st);
    ret->written = st;
    st = NULL;
    ret->ingest_ms = (double)(t1 - t0) / CLOCK_NS_PER_MS;
    ret->plan_ms = (double)(t2 - t1) / CLOCK_NS_PER_MS;
    goto out;
  }
  /* Nobody would ever receive this state's token: its memory goes back now, not at its TTL. */
  QDP_TRY(rc, job_check_caller(caller, true, err));
  unsigned views = req->views ? JOB_VIEWS_READ | (req->descriptors ? JOB_VIEWS_FDS : 0) : 0;
  rc = job_commit(jp, caller, res, st, req->ttl_seconds, req->label, views, req->client_pid,
                  ret, err);
  res = NULL; /* consumed either way, and st with it */
  st = NULL;
  ret->ingest_ms = (double)(t1 - t0) / CLOCK_NS_PER_MS;
  ret->plan_ms = (double)(t2 - t1) / CLOCK_NS_PER_MS;
  ret->commit_ms = (double)(clock_mono_ns() - t3) / CLOCK_NS_PER_MS;
out:
  runtime_state_destroy(st);
  state_reservation_cancel(res);
  plan_destroy(p);
  job_sink_close(jp, &sink);
  ingest_close(jp, &ing);
  return rc;
}

/* ---- the kernel matrix from inputs ---- */

struct job_kernel_inputs {
  struct job_ingest ing[2]; /* a's input and b's */
  bool two;                 /* b's was given */
  struct plan *plans[2];    /* each batch whole on the computing device, output external */
  qdp_dtype dtype;
  uint64_t max_bytes;
};

/* The encode fields that keep or hand back a state, which this form never makes. */
static qdp_status check_kernel_encode(const struct job_encode_request *e, struct qdp_error *err) {
  const char *field = e->out ? "encode.out" : e->views ? "encode.views" : NULL;
  if (field) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s has nothing to act on: a kernel matrix from inputs keeps no state",
                         field);
  }
  if (e->placement.policy != 0 && e->placement.policy != PLAN_SINGLE) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "encode.placement.policy",
                         "a kernel matrix from inputs is computed on one device: leave the "
                         "policy out or ask for single (and name the device in devices)");
  }
  return QDP_OK;
}

qdp_status job_kernel_inputs_open(struct job_pipeline *jp, const struct job_caller *caller,
                                  const struct job_kernel_request *req,
                                  struct job_kernel_inputs **ret, struct qdp_error *err) {
  const struct job_encode_request *e = req->encode;
  struct plan *whole = NULL;
  qdp_status rc;
  struct job_kernel_inputs *ki = calloc(1, sizeof *ki);
  *ret = ki;
  if (!ki) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for a kernel");
  }
  ki->ing[0] = ki->ing[1] = (struct job_ingest)JOB_INGEST_INIT;
  ki->two = req->input_b != NULL;
  /* Both inputs first: each descriptor is taken, whatever is refused after. */
  rc = ingest_open(jp, &e->input, false, &ki->ing[0], err);
  if (ki->two) {
    struct qdp_error ignored = QDP_ERROR_INIT;
    qdp_status rb =
        ingest_open(jp, req->input_b, false, &ki->ing[1], rc == QDP_OK ? err : &ignored);
    rc = rc == QDP_OK ? rb : rc;
  }
  if (rc != QDP_OK) {
    goto out;
  }
  if ((req->a && req->a[0]) || (req->b && req->b[0])) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, req->a && req->a[0] ? "a" : "b",
                       "a kernel matrix is of resident states (a, b) or of inputs (encode, "
                       "input_b), not both");
    goto out;
  }
  QDP_TRY(rc, job_check_caller(caller, false, err));
  QDP_TRY(rc, check_kernel_encode(e, err));
  /* The whole batch planned as one shard names the device (the largest budget among those
   * allowed) and checks what every encode checks; then each input's batch is planned whole on it
   * as an encode into memory the job holds (its tiles are the kernel's workspace). */
  struct job_encode_request one = *e;
  one.placement.policy = PLAN_SINGLE;
  QDP_TRY(rc, plan_job(jp, &one, &ki->ing[0].in, NULL, &whole, err));
  if (whole->shards[0].rank != 0) {
    rc = qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "encode.placement.devices",
                       "a kernel matrix from inputs is computed on one of the coordinator's "
                       "devices, and the largest budget is on rank %d (%s): name one of rank 0's "
                       "in encode.placement.devices",
                       whole->shards[0].rank, job_rank_host(jp, whole->shards[0].rank));
    goto out;
  }
  ki->dtype = whole->out_dtype;
  ki->max_bytes = req->max_bytes;
  struct job_sink on = {.device = whole->shards[0].device};
  for (int i = 0; i < (ki->two ? 2 : 1); i++) {
    QDP_TRY(rc, plan_job(jp, &one, &ki->ing[i].in, &on, &ki->plans[i], err));
  }
out:
  plan_destroy(whole);
  return rc;
}

void job_kernel_inputs_shape(const struct job_kernel_inputs *ki, uint64_t *ret_rows,
                             uint64_t *ret_cols, qdp_dtype *ret_dtype) {
  *ret_rows = ki->ing[0].in.rows;
  *ret_cols = ki->ing[ki->two ? 1 : 0].in.rows;
  *ret_dtype = ki->dtype;
}

qdp_status job_kernel_inputs_write(struct job_pipeline *jp, struct job_kernel_inputs *ki,
                                   bool overlaps, void *dst, const char **ret_device,
                                   struct qdp_error *err) {
  struct runtime_kernel_input a = {&ki->ing[0].in, ki->plans[0]};
  struct runtime_kernel_input b = {&ki->ing[1].in, ki->plans[1]};
  qdp_status rc = runtime_inputs_kernel(jp->mesh, &a, ki->two ? &b : NULL, overlaps,
                                        RUNTIME_KERNEL_TILES, ki->max_bytes, dst, ret_device, err);
  for (int i = 0; i < (ki->two ? 2 : 1); i++) {
    enum ingest_loss why = ingest_lost(&ki->ing[i]);
    if (why != INGEST_WHOLE) {
      rc = ingest_loss_error(&ki->ing[i], why, i ? "input_b" : "encode.input", err);
    }
  }
  return rc;
}

void job_kernel_inputs_close(struct job_pipeline *jp, struct job_kernel_inputs *ki) {
  if (!ki) {
    return;
  }
  plan_destroy(ki->plans[0]);
  plan_destroy(ki->plans[1]);
  ingest_close(jp, &ki->ing[0]);
  ingest_close(jp, &ki->ing[1]);
  free(ki);
}
