/* world_harness.h — the ranks of a world as threads of one test process, so that the executor's
 * cross-rank paths (norm blocks gathered from every rank, global-bit stages whose pairs are on two
 * ranks, input windows) run without MPI, on any backend. Test code only.
 *
 * Each rank is a mesh with the same number of devices; rank r's devices are planned as
 * [r * per_rank, (r + 1) * per_rank) of the world (rank-major, as daemon/world plans them). The
 * runtime's world ops go through shared memory between the rank threads.
 */
#ifndef QDP_TEST_WORLD_HARNESS_H
#define QDP_TEST_WORLD_HARNESS_H

#include <stddef.h>

#include "plan/plan.h"
#include "runtime/runtime.h"

/* The planner's view of the ranks' devices: ranks * per_rank entries, rank-major. */
void harness_plan_devices(struct runtime_mesh **meshes, int ranks, size_t per_rank,
                          struct plan_device *ret);

/* Runs plan p on every rank at once, each rank given only the window of `in` its shards read (a
 * rank holding only padding gets an empty window), then reads every shard back from its rank into
 * a malloc'd [batch][2^n] buffer (*ret_amps, NULL on failure). Returns the first failing rank's
 * status (rank order) with its error; every rank's states are freed. */
qdp_status harness_encode(struct runtime_mesh **meshes, int ranks, size_t per_rank,
                          const struct plan *p, const struct runtime_input *in, void **ret_amps,
                          struct qdp_error *reterr);

/* The same, with groups[r] as rank r's copy of a device group joining every rank's devices (the
 * world's NCCL group; NULL: none), and *ret_collective (may be NULL) set to what rank 0's state
 * says its collectives used. */
qdp_status harness_encode_grouped(struct runtime_mesh **meshes, int ranks, size_t per_rank,
                                  struct device_comm *const *groups, const struct plan *p,
                                  const struct runtime_input *in, void **ret_amps,
                                  const char **ret_collective, struct qdp_error *reterr);

#endif /* QDP_TEST_WORLD_HARNESS_H */
