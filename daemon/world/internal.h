/* internal.h — the world's state and what its parts share: start.c (joining, the device tables,
 * leaving), peers.c (faults and the runtime's collectives among the ranks of a job),
 * coordinator.c (rank 0: jobs, reads, views, releases, stop) and follower.c (the other ranks:
 * serving them). Internal to world/.
 */
#ifndef QDP_WORLD_INTERNAL_H
#define QDP_WORLD_INTERNAL_H

#include <pthread.h>

#include "collectives.h"
#include "transport.h"
#include "world/wire.h"
#include "world/world.h"

struct held_state { /* a state this rank holds for the coordinator */
  uint64_t job;
  struct runtime_state *st;
  struct held_state *next;
};

struct rank_entry {
  char host[64];
  size_t dev_first, ndev;
  bool lost;
  char reason[160];
};

struct dev_entry {
  int rank;
  struct runtime_device_info info;
  uint64_t used_remote; /* coordinator's account of what it placed there (ranks other than 0) */
};

struct world {
  struct transport *t;
  struct runtime_mesh *mesh;
  uint64_t timeout_ms;
  pthread_mutex_t mu;      /* recursive: one MPI user at a time; release may nest in encode */
  pthread_mutex_t info_mu; /* lost flags and device accounts, for Status without waiting */
  int nranks;
  struct rank_entry *ranks;
  size_t ndev;
  struct dev_entry *devs;
  uint64_t seq;
  bool any_lost; /* coordinator: never finalize MPI then; other ranks: told so by STOP */
  /* The job running on this rank: its sequence number and the ranks taking part. */
  uint64_t job;
  int *parts;
  size_t nparts;
  bool job_group; /* the job may use the device group */
  struct held_state *held;
  /* NCCL across every GPU of the world, made at start when every device is a GPU; comm NULL:
   * device collectives of jobs across ranks run on the host over MPI. */
  struct collectives_group group;
  bool group_on;                 /* coordinator: jobs use it (until a rank reports it aborted) */
  struct mesh_group *mesh_group; /* the group over this rank's GPUs, handed to the mesh */
};

/* RESOURCE_EXHAUSTED for `bytes` of `what`. */
qdp_status world_no_memory(struct qdp_error *reterr, const char *what, size_t bytes);

/* ---- peers.c ---- */

/* The runtime's hooks into the world (runtime_mesh_set_world). */
extern const struct runtime_world_ops world_runtime_ops;

/* A rank that did not answer in time: lost until the world is restarted. */
void world_mark_lost(struct world *w, int rank, const char *why);
bool world_is_lost(struct world *w, int rank);
/* UNAVAILABLE naming the lost rank, reterr->rank set. */
qdp_status world_lost_error(struct world *w, int rank, struct qdp_error *reterr);
/* Bounded messages with other ranks. On the coordinator a peer that does not answer is marked
 * lost (mark: the caller knows the peer itself was due to answer, not a third rank). */
qdp_status world_exchange(struct world *w, struct transport_io *items, size_t n, bool mark,
                          struct qdp_error *reterr);
/* All-gather among the ranks of the job running here (runtime_world_ops.allgather); fixed: every
 * rank contributes `bytes`. */
qdp_status world_allgather(struct world *w, const void *mine, size_t bytes, bool fixed, void **ret,
                           size_t *ret_bytes, struct qdp_error *reterr);
/* Makes job (plan p) the one running here: rank 0 and every rank holding a shard take part. */
qdp_status world_set_job(struct world *w, const struct plan *p, uint64_t job,
                         struct qdp_error *reterr);
/* The ranks of a job whose input file each reads itself say whether they could (mine), before
 * anything else: one that could not fails the job on every rank at once. */
qdp_status world_agree_input(struct world *w, qdp_status mine, struct qdp_error *reterr);

/* ---- coordinator.c ---- */

qdp_status coordinator_read(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count,
                            void *dst, size_t bytes, struct qdp_error *reterr);
void coordinator_release(void *ctx, uint64_t job, const struct plan *p);
qdp_status coordinator_export_ipc(void *ctx, int rank, uint64_t job, size_t shard,
                                  struct runtime_ipc *ret, struct qdp_error *reterr);
/* Tells every other rank to stop (world_destroy). */
void coordinator_stop(struct world *w);

/* ---- follower.c ---- */

/* Frees every state this rank holds for the coordinator (world_destroy). */
void follower_release_all(struct world *w);

#endif /* QDP_WORLD_INTERNAL_H */
