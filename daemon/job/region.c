/* Registered regions: shared memory a caller handed over once, mapped whole, read by every job
 * that names it, and written by FetchInto when registered writable. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "io/guard.h"
#include "region.h"

void job_region_end(void *payload) {
  struct job_region *g = payload;
  if (g->pinned) {
    runtime_mesh_unregister_host(g->mesh, g->map.base);
  }
  io_unmap(&g->map);
  free(g);
}

/* io_mapping_populate_write under a guard: a region cut meanwhile is DATA_LOSS, not a crash. */
static qdp_status populate(struct job_region *g, const char *what, struct qdp_error *err) {
  int guard = io_guard_add(g->map.base, g->map.map_len);
  if (guard < 0) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "region",
                         "too many mapped inputs and outputs are in use at once; retry");
  }
  qdp_status rc = io_mapping_populate_write(&g->map, err);
  if (io_guard_remove(guard) || io_mapping_shrunk(&g->map)) {
    rc = qdp_error_set(err, QDP_ERR_DATA_LOSS, "region",
                       "%s shrank while its %zu B were made present for writing", what,
                       g->map.map_len);
  }
  return rc;
}

qdp_status job_register_region(struct job_pipeline *jp, const struct job_caller *caller,
                               const struct job_region_request *req, struct job_region_info *ret,
                               struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  struct job_region *g = NULL;
  bool reserved = false;
  int fd = req->fd;
  bool writable = req->writable;
  if (req->keep && caller->session && caller->session[0]) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "session",
                       "a region registered with keep outlives every session: name no session");
    goto out;
  }
  QDP_TRY(rc, job_check_session(jp, caller, err));
  /* The limit first: nothing is mapped or pinned for a registration that would be refused. */
  QDP_TRY(rc, region_registry_reserve(jp->regions, caller->owner, err));
  reserved = true;
  g = calloc(1, sizeof *g);
  if (!g) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "no host memory for a %zu B region record", sizeof *g);
    goto out;
  }
  g->mesh = jp->mesh;
  g->writable = writable;
  atomic_init(&g->lost, false);
  rc =
      io_map_fd(fd, req->what, 0, 0, IO_MAP_WHOLE | (writable ? IO_MAP_WRITABLE : 0), &g->map, err);
  fd = -1; /* taken */
  if (rc != QDP_OK) {
    goto out;
  }
  if (writable && !g->map.sealed) {
    /* The daemon's first write to a page through its mapping would move the change time that
     * job_region_write compares (a write-notify fault): make every page writable now. */
    QDP_TRY(rc, populate(g, req->what, err));
  }
  QDP_TRY(rc, runtime_mesh_register_host(jp->mesh, g->map.base, g->map.map_len, writable,
                                         &g->pinned, err));
  if (!g->map.sealed) {
    int64_t now = 0;
    now = io_mapping_generation(&g->map, &now) ? now : INT64_MIN;
    atomic_store(&g->gen, now);
    atomic_store(&g->pin_gen, now);
  }
  reserved = false; /* commit consumes the slot either way */
  char handle[REGION_HANDLE_LEN];
  /* Swept by the kernel's pid of the caller (its pidfd where the listener took one), never one
   * the request declares: that is a label, and in another pid namespace not even this daemon's
   * number for the process. */
  int pid = req->keep ? 0 : caller->pid;
  int pidfd = req->keep ? -1 : caller->pidfd;
  QDP_TRY(rc, region_registry_commit(jp->regions, caller->owner, pid, pidfd, caller->session,
                                     g->map.bytes, g, job_region_end, handle, ret->token,
                                     &ret->meta, err));
  ret->sealed = g->map.sealed != 0;
  ret->frozen = g->map.frozen != 0;
  ret->pinned = g->pinned;
  ret->writable = writable;
  g = NULL; /* the registry's now */
  if ((rc = job_check_session(jp, caller, err)) != QDP_OK) {
    /* The session ended meanwhile, before this region was linked for its end to find. */
    region_registry_remove(jp->regions, handle, ret->token, NULL, NULL, NULL);
  }
out:
  if (fd >= 0) {
    close(fd);
  }
  if (reserved) {
    region_registry_cancel(jp->regions, caller->owner);
  }
  if (g) {
    job_region_end(g);
  }
  return rc;
}

qdp_status job_region_check_pinned(struct job_region *g, const char *name, const char *field,
                                   struct qdp_error *err) {
  int64_t now = INT64_MIN;
  if (!g->pinned || g->map.sealed ||
      (io_mapping_generation(&g->map, &now) && now == atomic_load(&g->pin_gen))) {
    return QDP_OK;
  }
  /* Something changed it since (a write(2) leaves the pinned pages the object's; a cut takes them
   * out of every mapping, this one included, while the pins keep them for the devices). Nothing
   * here touches the region's pages between its jobs, so a page missing now went with a cut. */
  int resident = io_mapping_resident(&g->map);
  if (resident == 1) {
    atomic_store(&g->pin_gen, now);
    return QDP_OK;
  }
  atomic_store(&g->lost, true);
  return qdp_error_set(err, QDP_ERR_DATA_LOSS, field,
                       "region '%.64s' was %s since it was page-locked for the devices, which "
                       "would use its old pages; it is lost: register it again, best as a memfd "
                       "sealed with F_SEAL_SHRINK | F_SEAL_GROW, which cannot be cut",
                       name,
                       resident == 0 ? "cut (and grown back)"
                                     : "changed (and this process cannot read its page tables to "
                                       "tell a write from a cut)");
}

qdp_status job_unregister_region(struct job_pipeline *jp, const struct job_caller *caller,
                                 const char *handle, const char *token, uint64_t *ret_bytes,
                                 struct qdp_error *err) {
  if (!handle || !handle[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "handle", "region.handle is missing");
  }
  /* Unmapping (and unpinning, on GPUs) may take a while: a worker's call. */
  return region_registry_remove(jp->regions, handle, token, caller ? caller->owner : NULL,
                                ret_bytes, err);
}

qdp_status job_output_region(struct job_pipeline *jp, const struct job_caller *caller,
                             const char *region, const char *token, const char *method,
                             struct job_region **ret, struct qdp_error *err) {
  void *payload = NULL;
  struct region_meta meta;
  qdp_status rc;
  *ret = NULL;
  QDP_TRY(rc, job_check_handle(region, "region", err));
  QDP_TRY(rc, region_registry_get(jp->regions, region, token, &payload, &meta, err));
  struct job_region *g = *ret = payload;
  if (strcmp(meta.owner, caller->owner) != 0) {
    rc = qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "region",
                       "region '%.64s' was registered by %s, not by %s: %s writes only "
                       "into the caller's own regions",
                       region, meta.owner, caller->owner, method);
  } else if (!g->writable) {
    rc = qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "region",
                       "region '%.64s' was registered read-only: register it with writable (its "
                       "descriptor opened O_RDWR and handed over for writing) to %s into it",
                       region, method);
  } else if (atomic_load(&g->lost)) {
    rc = qdp_error_set(err, QDP_ERR_DATA_LOSS, "region",
                       "region '%.64s' shrank or changed while a job used it; register it again",
                       region);
  } else {
    rc = job_region_check_pinned(g, region, "region", err);
  }
out:
  return rc;
}

qdp_status job_region_fits(const struct job_region *g, const char *name, uint64_t at,
                           uint64_t bytes, const char *what, const char *field,
                           struct qdp_error *err) {
  uint64_t size = g->map.bytes;
  if (at <= size && bytes <= size - at) {
    return QDP_OK;
  }
  qdp_status rc = qdp_error_set(err, QDP_ERR_OUT_OF_RANGE, at > size ? "region_offset" : field,
                                "%s (%" PRIu64 " B) at byte %" PRIu64
                                " of region '%.64s' pass its end at %" PRIu64 " B",
                                what, bytes, at, name, size);
  if (err) {
    err->need_bytes = bytes;
    err->free_bytes = at > size ? 0 : size - at;
  }
  return rc;
}

qdp_status job_region_write(struct job_region *g, const char *name, uint64_t at,
                            qdp_status (*write)(void *arg, void *dst, struct qdp_error *err),
                            void *arg, struct qdp_error *err) {
  /* A region cut under the write faults in the copy: the guard turns that into a loss. A pinned
   * region takes the DMA into pages the cut orphaned instead, which only its size tells; one cut
   * and grown back before the write ends keeps its size, but not its change time (io/map.h).
   * Not compared for a region sealed against shrinking, which cannot lose a page. */
  int guard = io_guard_add(g->map.base, g->map.map_len);
  if (guard < 0) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "region",
                         "too many mapped inputs and outputs are in use at once; retry");
  }
  qdp_status rc = QDP_OK;
  bool check = !g->map.sealed;
  int64_t before = INT64_MIN;
  if (check && g->pinned) {
    /* The time job_region_check_pinned (in job_output_region) verified its pages at: a cut
     * since is caught below. Its pages stay writable here: pinning made them so. */
    before = atomic_load(&g->pin_gen);
  } else if (check && io_mapping_generation(&g->map, &before) && before != atomic_load(&g->gen)) {
    /* Changed since its pages were last made writable here (a write(2), or a cut grown back
     * between jobs, which took them away): again, before the time is taken. */
    rc = io_mapping_populate_write(&g->map, err);
    if (!io_mapping_generation(&g->map, &before)) {
      before = INT64_MIN;
    }
    atomic_store(&g->gen, before);
  }
  if (rc == QDP_OK) {
    rc = write(arg, (char *)g->map.base + at, err);
  }
  bool faulted = io_guard_remove(guard);
  if (faulted || io_mapping_shrunk(&g->map)) {
    atomic_store(&g->lost, true);
    rc = qdp_error_set(err, QDP_ERR_DATA_LOSS, "region",
                       "region '%.64s' shrank while it was written: it does not hold what was "
                       "written (the region is lost: register it again)",
                       name);
  } else if (check && io_mapping_changed(&g->map, before)) {
    atomic_store(&g->lost, true);
    rc = qdp_error_set(err, QDP_ERR_DATA_LOSS, "region",
                       "region '%.64s' changed while it was written: it was truncated (and grown "
                       "back) or written by write(2) or fallocate, so it may not hold what was "
                       "written (the region is lost: register it again, best as a memfd sealed "
                       "with F_SEAL_SHRINK | F_SEAL_GROW, which cannot change size)",
                       name);
  }
  return rc;
}

static qdp_status fetch_write(void *arg, void *dst, struct qdp_error *err) {
  struct job_fetch *f = arg;
  return job_fetch_read(f, f->total, dst, err);
}

qdp_status job_fetch_into(struct job_pipeline *jp, const struct job_caller *caller,
                          const struct job_fetch_into_request *req,
                          struct job_fetch_into_result *ret, struct qdp_error *err) {
  struct job_region *g = NULL;
  struct job_fetch f;
  qdp_status rc;
  char what[64];
  memset(ret, 0, sizeof *ret);
  memset(&f, 0, sizeof f);
  QDP_TRY(rc, job_output_region(jp, caller, req->region, req->region_token, "FetchInto", &g, err));
  QDP_TRY(rc, job_fetch_open(jp, req->handle, req->token, req->offset, req->count, &f, err));
  uint64_t bytes = f.total * f.esize; /* fits: the state's bytes did */
  snprintf(what, sizeof what, "%" PRIu64 " amplitudes", f.total);
  QDP_TRY(rc, job_region_fits(g, req->region, req->region_offset, bytes, what, "count", err));
  rc = job_region_write(g, req->region, req->region_offset, fetch_write, &f, err);
  if (rc == QDP_OK) {
    *ret = (struct job_fetch_into_result){.count = f.total, .bytes = bytes, .dtype = f.dtype};
  }
out:
  job_fetch_close(jp, &f);
  if (g) {
    region_registry_put(jp->regions, g);
  }
  return rc;
}
