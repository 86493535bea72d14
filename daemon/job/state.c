/* The pipeline and the jobs on states that exist: commit and its views, describe, list, release,
 * gather, fetch, export; the daemon's status and expiry. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"
#include "io/guard.h"
#include "io/npy.h"
#include "region.h"

qdp_status job_pipeline_create(const struct job_deps *deps, struct job_pipeline **ret,
                               struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  struct job_pipeline *jp = calloc(1, sizeof *jp);
  if (!jp) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory for the job pipeline (%zu bytes)", sizeof *jp);
  }
  jp->mesh = deps->mesh;
  jp->world = deps->world;
  jp->store = deps->store;
  jp->nown = deps->nown < sizeof jp->own / sizeof jp->own[0] ? deps->nown
                                                             : sizeof jp->own / sizeof jp->own[0];
  if (jp->nown) {
    memcpy(jp->own, deps->own_files, jp->nown * sizeof *jp->own);
  }
  atomic_init(&jp->max_qubits, 0);
  atomic_init(&jp->max_batch, 0);
  job_uploads_init(jp);
  /* Budgets and use are read per call; names and UUIDs are fixed for the world's life. */
  jp->ndev = world_device_count(jp->world);
  jp->devs = calloc(jp->ndev ? jp->ndev : 1, sizeof *jp->devs);
  if (!jp->devs) {
    rc =
        qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for %zu devices", jp->ndev);
    goto out;
  }
  for (size_t i = 0; i < jp->ndev; i++) {
    struct world_device wd;
    world_device_at(jp->world, i, &wd);
    jp->devs[i] = wd.info;
  }
  QDP_TRY(rc, io_guard_install(err));
  QDP_TRY(rc,
          region_registry_create(deps->max_regions, deps->max_client_regions, &jp->regions, err));
  QDP_TRY(rc, session_table_create(&deps->sessions, &jp->sessions, err));
  jp->lease_grace_ms = deps->lease_grace_ms;
  *ret = jp;
  jp = NULL;
out:
  job_pipeline_destroy(jp);
  return rc;
}

void job_pipeline_destroy(struct job_pipeline *jp) {
  if (!jp) {
    return;
  }
  /* Every job is over: the regions are unmapped, and unpinned while the mesh is still there. */
  region_registry_destroy(jp->regions);
  session_table_destroy(jp->sessions);
  job_uploads_end(jp);
  free(jp->devs);
  free(jp);
}

void job_set_limits(struct job_pipeline *jp, uint32_t max_qubits, uint64_t max_batch) {
  atomic_store(&jp->max_qubits, max_qubits);
  atomic_store(&jp->max_batch, max_batch);
}

int job_world_ranks(const struct job_pipeline *jp) {
  return world_size(jp->world);
}

const struct runtime_device_info *job_device(const struct job_pipeline *jp, size_t i) {
  return i < jp->ndev ? &jp->devs[i] : NULL;
}

const char *job_rank_host(const struct job_pipeline *jp, int rank) {
  return world_host(jp->world, rank);
}

qdp_status job_check_handle(const char *handle, const char *field, struct qdp_error *err) {
  if (!handle || !handle[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, field, "%s.handle is missing", field);
  }
  return QDP_OK;
}

qdp_status job_check_caller(const struct job_caller *caller, bool committing,
                            struct qdp_error *err) {
  unsigned s = caller->gone ? caller->gone(caller->arg) : 0;
  if (!committing) {
    if (s & JOB_CALLER_LATE) {
      return qdp_error_set(err, QDP_ERR_DEADLINE_EXCEEDED, NULL,
                           "the call's deadline passed before its job could start");
    }
    return QDP_OK;
  }
  /* A caller gone (cancelled, its connection closed) or past its deadline never receives the
   * new state's token. */
  if (s & JOB_CALLER_LEFT) {
    return qdp_error_set(err, QDP_ERR_CANCELLED, NULL,
                         "the caller left before the state was ready; nothing was kept");
  }
  if (s & JOB_CALLER_LATE) {
    return qdp_error_set(err, QDP_ERR_DEADLINE_EXCEEDED, NULL,
                         "the call's deadline passed before the state was ready; nothing was kept");
  }
  return QDP_OK;
}

void job_info_fill(struct job_state_info *info, const struct state_meta *meta,
                   struct runtime_state *st) {
  info->meta = *meta;
  info->plan = runtime_state_plan(st);
  info->collective = runtime_state_collective(st);
  info->encode_ms = runtime_state_encode_ms(st);
  info->collective_ms = runtime_state_collective_ms(st);
  info->overwritten = runtime_state_written(st);
}

qdp_status job_lease_state(struct job_pipeline *jp, const struct job_caller *caller, int pid,
                           bool write, struct job_state_info *info, struct qdp_error *err) {
  /* The views' process: the one the client names, else the caller itself, as the kernel says
   * and, where the listener took one, by its pidfd (a pid the client names is tested by pid). */
  int viewer = pid ? pid : caller->pid;
  int pidfd = viewer == caller->pid ? caller->pidfd : -1;
  qdp_status rc = state_store_lease_open(jp->store, info->pinned, caller->owner, viewer, pidfd,
                                         write, &info->lease, err);
  if (rc != QDP_OK) {
    return rc;
  }
  info->meta.leases++;
  if (write) {
    /* The store let no other call read it: every pin after the lease's sees the mark. */
    runtime_state_mark_written(info->pinned);
    info->overwritten = true;
    info->meta.writer_lease = info->lease;
    snprintf(info->meta.writer, sizeof info->meta.writer, "%s", caller->owner);
    info->meta.writer_pid = viewer;
  }
  return QDP_OK;
}

qdp_status job_open_views(struct job_pipeline *jp, const struct job_caller *caller, int pid,
                          unsigned views, struct job_state_info *info, struct qdp_error *err) {
  size_t n = info->plan->nshards;
  info->ipc = calloc(n ? n : 1, sizeof *info->ipc);
  if (!info->ipc) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory to build the reply");
  }
  for (size_t i = 0; i < n; i++) {
    info->ipc[i].fd = -1; /* job_state_info_end closes those set */
  }
  for (size_t i = 0; i < n; i++) {
    qdp_status rc = runtime_state_export_ipc(info->pinned, i, &info->ipc[i], err);
    if (rc != QDP_OK) {
      return rc;
    }
    if (info->ipc[i].fd >= 0 && !(views & JOB_VIEWS_FDS)) {
      return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "descriptors",
                           "this daemon hands views out as file descriptors over its socket, "
                           "which this client does not take (it leaves "
                           "DescribeRequest.descriptors unset): update it (libqdp and the "
                           "Python package 0.7 take them), or run the daemon with "
                           "legacy_ipc_views = yes");
    }
  }
  return job_lease_state(jp, caller, pid, (views & JOB_VIEWS_WRITE) != 0, info, err);
}

static void destroy_state(void *payload) {
  runtime_state_destroy(payload);
}

qdp_status job_commit(struct job_pipeline *jp, const struct job_caller *caller,
                      struct state_reservation *res, struct runtime_state *st, uint64_t ttl_seconds,
                      const char *label, unsigned views, int pid, struct job_state_info *ret,
                      struct qdp_error *err) {
  struct state_meta meta;
  memset(ret, 0, sizeof *ret);
  qdp_status rc = state_reservation_join(res, caller->session, err);
  if (rc != QDP_OK) {
    state_reservation_cancel(res);
    runtime_state_destroy(st);
    return rc;
  }
  /* Pinned as it is linked: a Release with the new token, or an expiry, may land before the
   * reply is built, and then this pin keeps st (its plan, its shards) alive until the reply's
   * job_state_info_end. */
  rc = state_store_commit_pinned(jp->store, res, st, destroy_state, job_ttl_ms(ttl_seconds), label,
                                 &meta, ret->token, err);
  if (rc != QDP_OK) {
    runtime_state_destroy(st);
    return rc;
  }
  job_info_fill(ret, &meta, st);
  ret->pinned = st;
  ret->fresh = true;
  /* A session that ended during the job released what it had before this state was linked:
   * this one is released here instead (a sweep after the link finds it itself). */
  if ((rc = job_check_session(jp, caller, err)) != QDP_OK) {
    job_state_info_end(jp, ret, false);
    return rc;
  }
  if (!views) {
    return QDP_OK;
  }
  if (meta.expires_unix_ms && meta.expires_unix_ms <= clock_unix_ms()) {
    /* A TTL shorter than this reply: views of it would outlive what its handle answers. */
    rc = qdp_error_set(err, QDP_ERR_NOT_FOUND, "ttl_seconds",
                       "state '%s' expired before its views could be opened", meta.handle);
  } else {
    rc = job_open_views(jp, caller, pid, views, ret, err);
  }
  if (rc != QDP_OK) {
    job_state_info_end(jp, ret, false);
  }
  return rc;
}

void job_state_info_end(struct job_pipeline *jp, struct job_state_info *info, bool handed_over) {
  if (!info) {
    return;
  }
  if (info->pinned) {
    state_store_put(jp->store, info->pinned);
  }
  if (!handed_over && info->fresh) {
    /* The state exists but its handle could not be sent: released rather than leaked. */
    state_store_release(jp->store, info->meta.handle, info->token, NULL, NULL);
  }
  for (size_t i = 0; info->ipc && i < info->plan->nshards; i++) {
    if (info->ipc[i].fd >= 0) {
      close(info->ipc[i].fd); /* never handed out */
    }
  }
  free(info->ipc);
  free(info->tickets);
  runtime_state_destroy(info->written); /* the caller's memory stays as it is */
  memset(info, 0, sizeof *info);
}

qdp_status job_describe(struct job_pipeline *jp, const struct job_caller *caller,
                        const char *handle, const char *token, unsigned views, int pid,
                        struct job_state_info *ret, struct qdp_error *err) {
  memset(ret, 0, sizeof *ret);
  if (!handle || !handle[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "handle", "handle is missing");
  }
  bool any = views & (JOB_VIEWS_READ | JOB_VIEWS_WRITE);
  qdp_status rc = any ? runtime_mesh_check_views(jp->mesh, err) : QDP_OK;
  void *payload = NULL;
  struct state_meta meta;
  if (rc == QDP_OK) {
    /* The record only: the lease below decides whether views may open beside a write lease. */
    rc = state_store_get_record(jp->store, handle, token, &payload, &meta, err);
  }
  if (rc != QDP_OK) {
    return rc;
  }
  job_info_fill(ret, &meta, payload);
  ret->pinned = payload;
  if (any) {
    rc = job_open_views(jp, caller, pid, views, ret, err);
    if (rc != QDP_OK) {
      job_state_info_end(jp, ret, true);
    }
  }
  return rc;
}

struct list_ctx {
  const char *owner; /* NULL: every owner's */
  void (*fn)(const struct job_state_info *info, void *arg);
  void *arg;
};

/* Under the store's lock: no store calls here. */
static void list_one(const struct state_meta *meta, void *payload, void *arg) {
  struct list_ctx *l = arg;
  if (l->owner && strcmp(meta->owner, l->owner) != 0) {
    return;
  }
  struct job_state_info info;
  memset(&info, 0, sizeof info);
  job_info_fill(&info, meta, payload);
  l->fn(&info, l->arg);
}

qdp_status job_list(struct job_pipeline *jp, const struct job_caller *caller, bool all,
                    void (*fn)(const struct job_state_info *info, void *arg), void *arg,
                    struct qdp_error *err) {
  struct list_ctx l = {.owner = caller->owner, .fn = fn, .arg = arg};
  if (all) {
    /* Whose states exist is the operator's business: the daemon's own user, or root. */
    if (!caller->operator) {
      return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "all",
                           "listing every identity's states is for the daemon's own user and "
                           "root; %s may list its own",
                           caller->owner);
    }
    l.owner = NULL;
  }
  state_store_foreach(jp->store, list_one, &l);
  return QDP_OK;
}

qdp_status job_release(struct job_pipeline *jp, const struct job_caller *caller, const char *handle,
                       const char *token, uint64_t *ret_freed, struct qdp_error *err) {
  qdp_status rc = job_check_handle(handle, "state", err);
  if (rc != QDP_OK) {
    return rc;
  }
  /* The last pin's put frees device memory. Without a token the owner releases its own state
   * by handle, so a lost token strands no memory. */
  return token && token[0]
             ? state_store_release(jp->store, handle, token, ret_freed, err)
             : state_store_release_owned(jp->store, handle, caller->owner, ret_freed, err);
}

qdp_status job_close_view(struct job_pipeline *jp, const char *handle, const char *token,
                          uint64_t lease, uint64_t *ret_freed, struct qdp_error *err) {
  if (!handle || !handle[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "handle", "handle is missing");
  }
  /* The last lease of a released state frees device memory. */
  return state_store_lease_close(jp->store, handle, token, lease, ret_freed, err);
}

qdp_status job_gather(struct job_pipeline *jp, const struct job_caller *caller, const char *handle,
                      const char *token, const char *device, uint64_t ttl_seconds,
                      const char *label, struct job_state_info *ret, struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  void *payload = NULL;
  struct state_reservation *res = NULL;
  struct runtime_state *g = NULL;
  size_t dev = 0;
  memset(ret, 0, sizeof *ret);
  QDP_TRY(rc, job_check_handle(handle, "state", err));
  QDP_TRY(rc, job_check_caller(caller, false, err));
  QDP_TRY(rc, job_check_session(jp, caller, err));
  QDP_TRY(rc, runtime_mesh_find_device(jp->mesh, device, "device", &dev, err));
  QDP_TRY(rc, state_store_get(jp->store, handle, token, &payload, NULL, err));
  QDP_TRY(rc, state_store_admit(jp->store, caller->owner, runtime_state_bytes(payload), &res, err));
  QDP_TRY(rc, runtime_state_gather(jp->mesh, payload, dev, &g, err));
  QDP_TRY(rc, job_check_caller(caller, true, err));
  rc = job_commit(jp, caller, res, g, ttl_seconds, label, false, 0, ret, err);
  res = NULL; /* consumed either way, and g with it */
  g = NULL;
out:
  runtime_state_destroy(g);
  state_reservation_cancel(res);
  if (payload) {
    state_store_put(jp->store, payload);
  }
  return rc;
}

qdp_status job_fetch_open(struct job_pipeline *jp, const char *handle, const char *token,
                          uint64_t offset, uint64_t count, struct job_fetch *f,
                          struct qdp_error *err) {
  void *payload = NULL;
  memset(f, 0, sizeof *f);
  qdp_status rc = job_check_handle(handle, "state", err);
  if (rc == QDP_OK) {
    rc = state_store_get(jp->store, handle, token, &payload, NULL, err);
  }
  if (rc != QDP_OK) {
    return rc;
  }
  f->state = payload; /* pinned until job_fetch_close */
  const struct plan *p = runtime_state_plan(f->state);
  uint64_t amps = p->batch * p->amplitudes; /* fits: batch * 2^n * dtype size did */
  if (offset > amps || (count != 0 && count > amps - offset)) {
    return qdp_error_set(err, QDP_ERR_OUT_OF_RANGE, offset > amps ? "offset" : "count",
                         "offset %" PRIu64 " + count %" PRIu64 " is past the state's %" PRIu64
                         " amplitudes (%" PRIu64 " x 2^%u)",
                         offset, count, amps, p->batch, p->qubits);
  }
  f->total = count ? count : amps - offset;
  f->next = offset;
  f->end = offset + f->total;
  f->dtype = p->out_dtype;
  f->esize = qdp_dtype_size(p->out_dtype);
  return QDP_OK;
}

qdp_status job_fetch_read(struct job_fetch *f, uint64_t n, void *dst, struct qdp_error *err) {
  qdp_status rc = runtime_state_read(f->state, f->next, n, dst, err);
  if (rc == QDP_OK) {
    f->next += n;
  }
  return rc;
}

void job_fetch_close(struct job_pipeline *jp, struct job_fetch *f) {
  if (f->state) {
    state_store_put(jp->store, f->state);
    f->state = NULL;
  }
}

static qdp_status export_read(void *arg, uint64_t offset, uint64_t n, void *dst,
                              struct qdp_error *err) {
  return runtime_state_read(arg, offset, n, dst, err);
}

qdp_status job_export(struct job_pipeline *jp, const struct job_export_request *req,
                      uint64_t *ret_bytes, struct qdp_error *err) {
  void *payload = NULL;
  int fd = req->fd;
  qdp_status rc;
  QDP_TRY(rc, job_check_handle(req->handle, "state", err));
  QDP_TRY(rc, state_store_get(jp->store, req->handle, req->token, &payload, NULL, err));
  const struct plan *p = runtime_state_plan(payload);
  int ndim = p->batch > 1 ? 2 : 1;
  char hdr[IO_NPY_HEADER_CAP];
  size_t hlen = 0;
  QDP_TRY(rc,
          io_npy_header(p->out_dtype, ndim, p->batch, p->amplitudes, hdr, sizeof hdr, &hlen, err));
  if (fd >= 0) {
    char q[4200];
    snprintf(q, sizeof q, "'%.200s'", req->path);
    QDP_TRY(rc, io_write_npy_fd(fd, q, p->out_dtype, ndim, p->batch, p->amplitudes, export_read,
                                payload, err));
  } else {
    QDP_TRY(rc, io_write_npy_beneath(req->folder, req->path, req->overwrite, jp->own, jp->nown,
                                     p->out_dtype, ndim, p->batch, p->amplitudes, export_read,
                                     payload, err));
  }
  *ret_bytes = (uint64_t)hlen + p->total_bytes;
out:
  if (fd >= 0) {
    close(fd);
  }
  if (payload) {
    state_store_put(jp->store, payload);
  }
  return rc;
}

int job_ranks_lost(struct job_pipeline *jp) {
  int lost = 0;
  for (int r = 0; r < world_size(jp->world); r++) {
    struct world_rank_info ri;
    world_rank_info(jp->world, r, &ri);
    lost += ri.lost;
  }
  return lost;
}

qdp_status job_status(struct job_pipeline *jp, struct job_status *st, struct qdp_error *err) {
  memset(st, 0, sizeof *st);
  st->backend = runtime_mesh_backend(jp->mesh);
  st->topology_source = runtime_mesh_topology_source(jp->mesh);
  st->collectives = runtime_mesh_collectives(jp->mesh);
  st->transport = world_transport_name(jp->world);
  st->threads = world_threads_name(jp->world);
  st->ranks = job_world_ranks(jp);
  st->rank_timeout_ms = world_timeout_ms(jp->world);
  world_device_collectives(jp->world, st->device_collectives, sizeof st->device_collectives);
  /* This node's links: its devices are the first of the list (a world lists rank 0's first). */
  st->nlocal = runtime_mesh_count(jp->mesh);
  st->ndevices = jp->ndev;
  st->devices = calloc(jp->ndev ? jp->ndev : 1, sizeof *st->devices);
  st->links = calloc(st->nlocal ? st->nlocal * st->nlocal : 1, sizeof *st->links);
  st->rank_info = calloc((size_t)st->ranks, sizeof *st->rank_info);
  if (!st->devices || !st->links || !st->rank_info) {
    job_status_free(st);
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory to build the reply");
  }
  for (size_t i = 0; i < jp->ndev; i++) {
    world_device_at(jp->world, i, &st->devices[i]);
  }
  for (size_t k = 0; k < st->nlocal * st->nlocal; k++) {
    runtime_mesh_link(jp->mesh, k / st->nlocal, k % st->nlocal, &st->links[k]);
  }
  for (int i = 0; i < st->ranks; i++) {
    world_rank_info(jp->world, i, &st->rank_info[i]);
  }
  state_store_usage(jp->store, &st->used_bytes, &st->states, &st->leases);
  region_registry_usage(jp->regions, &st->regions, &st->region_bytes);
  st->max_qubits = (uint32_t)atomic_load(&jp->max_qubits);
  return QDP_OK;
}

void job_status_free(struct job_status *st) {
  if (!st) {
    return;
  }
  free(st->devices);
  free(st->links);
  free(st->rank_info);
  memset(st, 0, sizeof *st);
}

void job_expire(struct job_pipeline *jp, int64_t now_unix_ms,
                const struct job_expire_report *report, struct job_expiry *ret) {
  static const struct job_expire_report quiet;
  report = report ? report : &quiet;
  /* Releasing states frees device memory: a worker's call, never the loop's. */
  ret->states = state_store_expire(jp->store, now_unix_ms);
  ret->leases = state_store_sweep_leases(jp->store, now_unix_ms);
  /* A region's pages stay mapped (and pinned, on GPUs) for as long as it is registered; a client
   * killed before it unregistered has nobody left to do it. */
  ret->regions = region_registry_sweep(jp->regions, now_unix_ms, jp->lease_grace_ms,
                                       report->region, report->arg);
  ret->sessions = job_sweep_sessions(jp, now_unix_ms, report);
  runtime_mesh_trim(jp->mesh);
}

qdp_status job_pin_state(struct job_pipeline *jp, const char *handle, const char *token,
                         const char *field, struct runtime_state **ret, struct qdp_error *err) {
  void *payload = NULL;
  qdp_status rc = job_check_handle(handle, field, err);
  if (rc == QDP_OK) {
    rc = state_store_get(jp->store, handle, token, &payload, NULL, err);
  }
  if (rc != QDP_OK) {
    if (err && !err->field[0]) {
      snprintf(err->field, sizeof err->field, "%s", field);
    }
    return rc;
  }
  *ret = payload;
  return QDP_OK;
}
