/* world.h — the ranks of a qdpd world (one qdpd per node under mpirun or srun) and the coordinator
 * protocol between them.
 *
 * What it owns: the transport (local for a plain qdpd: a world of one, no MPI, no cost; MPI when
 * launched by mpirun/srun), every rank's mesh description exchanged at start (host, devices,
 * budgets), and on ranks other than 0 the states they hold. Rank 0 is the coordinator: it plans
 * across the world's devices, sends each job (the plan and each rank's slice of the input, to the
 * ranks that own shards and to no one else), runs its own shards and collects the others'
 * outcomes. Fetches of shards held elsewhere, views of those on this node, and releases go to the
 * owning ranks. When every device is a GPU the ranks also share one NCCL group (world_start).
 * The other ranks run world_serve: they never serve clients.
 *
 * Faults: every wait on another rank is bounded by the rank timeout. A rank that does not answer in
 * time is marked lost (it stays lost until the world is restarted); the job fails with
 * QDP_ERR_UNAVAILABLE naming the rank (reterr->rank), later jobs that would touch it fail at once
 * (requests that name no devices are planned over the live ranks: world_live_devices), and
 * everything else goes on: Status, and states held wholly by live ranks. Launch with
 * `mpirun --enable-recovery` (else Open MPI kills every rank when one dies). Stop a world with
 * SIGTERM to rank 0: it drains, releases, and tells the others to stop.
 *
 * Threads: world_create first, on the main thread, before any other thread exists (MPI_Init);
 * world_start and world_destroy on the main thread. On the coordinator world_encode and the
 * runtime hooks may be called from any thread: they take the world's lock, so MPI is used by one
 * thread at a time (MPI_THREAD_SERIALIZED or better is required, and checked). World_rank_info
 * never waits for the lock. world_serve runs on the main thread of ranks other than 0.
 *
 * Statuses: QDP_ERR_UNAVAILABLE (a rank lost or not answering), QDP_ERR_MPI,
 * QDP_ERR_FAILED_PRECONDITION (ranks that disagree on the build, too little MPI thread support),
 * RESOURCE_EXHAUSTED, and whatever the job itself returns on any rank.
 */
#ifndef QDP_WORLD_H
#define QDP_WORLD_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "plan/plan.h"
#include "runtime/runtime.h"

struct world;

/* Whether this process was started by an MPI launcher (mpirun, or srun with PMI/PMIx), so that
 * world_create should join an MPI world. Reads the environment only. */
bool world_launched_by_mpi(void);

/* Joins the world: over MPI when use_mpi (MPI_Init_thread), else a world of one. Main thread,
 * before any other thread is started. */
qdp_status world_create(bool use_mpi, int *argc, char ***argv, struct world **ret,
                        struct qdp_error *reterr);

/* Every rank calls it once its mesh is built (mesh_rc != QDP_OK: building it failed with mesh_err):
 * the ranks agree (one failure fails every rank, naming the rank), exchange their meshes, and hook
 * this rank's mesh into the world. timeout_ms bounds every later wait on another rank (>= 1).
 * A mesh of several GPUs is handed its own NCCL group here (world/mesh_group.h; none without
 * device_collectives), which the world owns until world_destroy.
 * With device_collectives on every rank and a GPU for every device of the world, the ranks also
 * join one NCCL group over all those GPUs, which jobs across ranks use for their device
 * collectives; when that fails the world still starts, reducing over MPI
 * (world_device_collectives says which and why). */
qdp_status world_start(struct world *w, qdp_status mesh_rc, const struct qdp_error *mesh_err,
                       struct runtime_mesh *mesh, uint64_t timeout_ms, bool device_collectives,
                       struct qdp_error *reterr);

/* Coordinator: tells the other ranks to stop, then leaves MPI (MPI_Finalize, skipped when a rank
 * was lost: it would wait for the dead). Any rank: frees everything. NULL-safe. */
void world_destroy(struct world *w);

int world_rank(const struct world *w);
int world_size(const struct world *w);
const char *world_transport_name(const struct world *w); /* "local", "mpi" */
const char *world_threads_name(const struct world *w);   /* MPI's thread level */
uint64_t world_timeout_ms(const struct world *w);

/* One device of the world, as exchanged at start (used_bytes: rank 0's read now; the others' as
 * the coordinator accounts them). */
struct world_device {
  int rank;
  struct runtime_device_info info;
  const char *host;
};
size_t world_device_count(const struct world *w);
void world_device_at(struct world *w, size_t i, struct world_device *ret);

/* What the device collectives of jobs across ranks use, into buf: "nccl (NCCL 22803, 2 ranks,
 * 2 GPUs)", "mpi (why not NCCL)", "none (one rank)". Once a rank's copy of the NCCL group is
 * aborted (a rank died or hung inside a collective) the world reduces over MPI for the rest of
 * its life. Never waits for a job. */
void world_device_collectives(struct world *w, char *buf, size_t size);

/* Rank's host name as exchanged at start; fixed for the world's life. */
const char *world_host(const struct world *w, int rank);

struct world_rank_info {
  int rank;
  char host[64];
  uint32_t devices;
  bool lost;
  char reason[160]; /* why it was marked lost; "" while live */
};
void world_rank_info(struct world *w, int rank, struct world_rank_info *ret);

/* The planner's view of every device of the world (world_device_count entries), rank-major, each
 * rank's devices in its mesh order; names "rN/cpu:0" when the world has more than one rank. */
void world_plan_devices(struct world *w, struct plan_device *devs);

/* While a rank is lost: the indices (into world_plan_devices' table) of the live ranks' devices,
 * in table order, into ret (world_device_count entries), and how many; a request that names no
 * devices is planned over these. 0 while every rank is live (plan over all). */
size_t world_live_devices(struct world *w, size_t *ret);

/* Coordinator: runs plan p (made from world_plan_devices) across the world, in is the whole input
 * (rank 0 reads it and sends each rank its slice only). The returned state is rank 0's part and
 * reaches the others' shards (reads, release) through the world. */
qdp_status world_encode(struct world *w, const struct plan *p, const struct runtime_input *in,
                        struct runtime_state **ret_state, struct qdp_error *reterr);

/* Ranks other than 0: serve the coordinator's jobs, reads and releases until it says stop. Once
 * *stop becomes non-zero (a signal; checked every 200 ms) it keeps serving for one more rank
 * timeout, so a coordinator stopping on the same signal can drain its calls and say stop first.
 * QDP_OK on an orderly stop. */
qdp_status world_serve(struct world *w, volatile sig_atomic_t *stop, struct qdp_error *reterr);

#endif /* QDP_WORLD_H */
