/* A mesh's device group (mesh_group.h). */
#include <stdlib.h>

#include "collectives.h"
#include "world/mesh_group.h"

struct mesh_group {
  struct runtime_mesh *mesh;
  struct collectives_group group;
  bool handed; /* the mesh holds the group */
};

qdp_status mesh_group_create(struct runtime_mesh *m, bool wanted, struct mesh_group **ret,
                             struct qdp_error *reterr) {
  size_t n = runtime_mesh_count(m);
  struct mesh_group *g = calloc(1, sizeof *g);
  int *ords = calloc(n ? n : 1, sizeof *ords);
  if (!g || !ords) {
    free(g);
    free(ords);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate the mesh's device group");
  }
  g->mesh = m;
  bool gpus = true;
  for (size_t i = 0; gpus && i < n; i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(m, i, &info);
    gpus = info.kind == RUNTIME_DEVICE_CUDA;
    ords[i] = info.ordinal;
  }
  /* Host-memory devices reduce in their one memory. */
  if (gpus) {
    collectives_local_group(ords, n, !wanted, &g->group);
    runtime_mesh_set_device_group(m, g->group.comm, g->group.desc);
    g->handed = true;
  }
  free(ords);
  *ret = g;
  return QDP_OK;
}

void mesh_group_destroy(struct mesh_group *g) {
  if (!g) {
    return;
  }
  if (g->handed) {
    runtime_mesh_set_device_group(g->mesh, NULL, NULL);
  }
  collectives_group_fini(&g->group);
  free(g);
}
