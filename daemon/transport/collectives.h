/* collectives.h — the device-collective policy: which NCCL groups exist, which jobs may use one,
 * and what reductions run on otherwise, with the reason Status reports.
 *
 * There are at most two groups: a mesh's, over the GPUs of this process, and a world's, over every
 * GPU of every rank. Whoever builds the mesh or the world makes its group here, once, hands it to
 * the runtime (runtime_mesh_set_device_group, runtime_world_ops.device_group) and destroys it after
 * the runtime has let go; runtime/ never makes a communicator. A group is made only over two or
 * more members that are all GPUs, when no one configured host reductions. Failing to make one is
 * never fatal: reductions then run on the host (one process) or over MPI (across ranks), and the
 * group's description says why.
 *
 * A job may run a collective over a group only when it fits it (collectives_job_fits): every
 * member takes part in a collective, so every member must hold exactly one shard of the job.
 */
#ifndef QDP_COLLECTIVES_H
#define QDP_COLLECTIVES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device_comm.h"
#include "transport.h"

#define COLLECTIVES_DESC_BYTES 192

struct collectives_group {
  struct device_comm *comm;          /* NULL: reductions on the host or over MPI */
  char desc[COLLECTIVES_DESC_BYTES]; /* "nccl (NCCL 22803, 2 GPUs)", "host (configured)", ... */
};

/* The group over this process's GPUs ordinals[0..n), member i on ordinals[i]: "none (one GPU)"
 * for fewer than two, "host (configured)" with host_only, else NCCL's ("nccl (NCCL 22803, 2
 * GPUs)") or why not ("host (<NCCL's error>)"). */
void collectives_local_group(const int *ordinals, size_t n, bool host_only,
                             struct collectives_group *ret);

/* The group over every GPU of the world, `size` members: this rank's members first_member ..
 * first_member + n - 1 on ordinals[0..n). Collective over t: every rank calls it with the same
 * all_gpus (every device of the world is a GPU) and its own `wanted` (host reductions not
 * configured). Joining is bounded by timeout_ms, and so is every later wait of the group.
 * "nccl (NCCL 22803, 2 ranks, 2 GPUs)" or "mpi (why not)". */
void collectives_world_group(struct transport *t, bool all_gpus, bool wanted, int size,
                             int first_member, const int *ordinals, size_t n, uint64_t timeout_ms,
                             struct collectives_group *ret);

/* The group was aborted on `rank` (a rank died or hung inside a collective): the description says
 * that reductions went back to MPI. The communicator stays until collectives_group_fini. */
void collectives_group_aborted(struct collectives_group *g, int rank);

/* Destroys the communicator (nothing may use it any more). */
void collectives_group_fini(struct collectives_group *g);

/* Whether a job can run its collectives over c: its n shards sit on members members[0..n), `local`
 * of them in this process. True when c is usable for it: n >= 2, every member of c holds exactly
 * one shard, and this process drives every one of its own members. */
bool collectives_job_fits(const struct device_comm *c, const size_t *members, size_t n,
                          size_t local);

#endif /* QDP_COLLECTIVES_H */
