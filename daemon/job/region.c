/* Registered regions: shared memory a caller handed over once, mapped whole, read by every job
 * that names it. */
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "region.h"

void job_region_end(void *payload) {
  struct job_region *g = payload;
  if (g->pinned) {
    runtime_mesh_unregister_host(g->mesh, g->map.base);
  }
  io_unmap(&g->map);
  free(g);
}

qdp_status job_register_region(struct job_pipeline *jp, const struct job_caller *caller, int fd,
                               const char *what, struct job_region_info *ret,
                               struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  struct job_region *g = NULL;
  bool reserved = false;
  /* The limit first: nothing is mapped or pinned for a registration that would be refused. */
  QDP_TRY(rc, region_registry_reserve(jp->regions, err));
  reserved = true;
  g = calloc(1, sizeof *g);
  if (!g) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "no host memory for a %zu B region record", sizeof *g);
    goto out;
  }
  g->mesh = jp->mesh;
  atomic_init(&g->lost, false);
  rc = io_map_fd(fd, what, 0, 0, true, &g->map, err);
  fd = -1; /* taken */
  if (rc != QDP_OK) {
    goto out;
  }
  QDP_TRY(rc, runtime_mesh_register_host(jp->mesh, g->map.base, g->map.map_len, &g->pinned, err));
  reserved = false; /* commit consumes the slot either way */
  char handle[REGION_HANDLE_LEN];
  QDP_TRY(rc, region_registry_commit(jp->regions, caller->owner, g->map.bytes, g, job_region_end,
                                     handle, ret->token, &ret->meta, err));
  ret->sealed = g->map.sealed != 0;
  ret->pinned = g->pinned;
  g = NULL; /* the registry's now */
out:
  if (fd >= 0) {
    close(fd);
  }
  if (reserved) {
    region_registry_cancel(jp->regions);
  }
  if (g) {
    job_region_end(g);
  }
  return rc;
}

qdp_status job_unregister_region(struct job_pipeline *jp, const char *handle, const char *token,
                                 uint64_t *ret_bytes, struct qdp_error *err) {
  if (!handle || !handle[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "handle", "region.handle is missing");
  }
  /* Unmapping (and unpinning, on GPUs) may take a while: a worker's call. */
  return region_registry_remove(jp->regions, handle, token, ret_bytes, err);
}
