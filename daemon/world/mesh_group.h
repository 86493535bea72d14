/* mesh_group.h — a mesh's device group over its own GPUs: made by transport/collectives.h (the
 * policy), handed to the mesh, taken back before it is destroyed. world_start does this for the
 * daemon's mesh; tools and tests that drive a mesh without a world do it here.
 *
 * Threads: main thread, before jobs (create) and after them (destroy).
 */
#ifndef QDP_WORLD_MESH_GROUP_H
#define QDP_WORLD_MESH_GROUP_H

#include <stdbool.h>

#include "error.h"
#include "runtime/runtime.h"

struct mesh_group;

/* Makes the group over m's GPUs and hands it to m (runtime_mesh_set_device_group); `wanted` false:
 * none ("host (configured)"). A mesh of host-memory devices gets none and keeps its description.
 * Failing to make the group is not an error (m reduces on the host and says why);
 * RESOURCE_EXHAUSTED only when this description cannot be allocated. */
qdp_status mesh_group_create(struct runtime_mesh *m, bool wanted, struct mesh_group **ret,
                             struct qdp_error *reterr);
/* Takes the group back from its mesh (which must still exist) and destroys it. NULL-safe. */
void mesh_group_destroy(struct mesh_group *g);

#endif /* QDP_WORLD_MESH_GROUP_H */
