/* runtime.h — the DeviceMesh a daemon owns, and the execution of a plan on it.
 *
 * A mesh is the set of devices of this node the daemon was told to use: host-memory devices of the
 * CPU backend ("cpu:N") or GPUs of the CUDA backend. runtime_encode runs one job end to end on the
 * mesh: it reserves the bytes of each local shard on its device (refusing with the numbers when a
 * device filled up since planning), checks the input values (non-finite parameters, basis indices,
 * zero/NaN/Inf norm per sample), allocates the shards, ingests each shard's own slice of the input,
 * reduces the amplitude norm over shards in a fixed order (bit-identical for any even sharding),
 * encodes every shard concurrently (one thread per device), and returns a runtime_state. Any
 * failure frees everything it took.
 *
 * Threads: runtime_mesh_create/destroy on the main thread; everything else from any thread
 * (a mesh serializes what must be serialized; encodes of different jobs may run concurrently).
 * A runtime_state is immutable after runtime_encode returns; reads may run concurrently, and
 * runtime_state_destroy must not race with them (the state store pins states while in use).
 */
#ifndef QDP_RUNTIME_H
#define QDP_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "plan/plan.h"

enum runtime_device_kind { RUNTIME_DEVICE_CPU = 0, RUNTIME_DEVICE_CUDA = 1 };

struct runtime_device_info {
  char name[32]; /* "cpu:0", "cuda:1" */
  enum runtime_device_kind kind;
  int ordinal;
  char uuid[48];         /* "GPU-…" (40 characters) for CUDA devices, "" for cpu */
  char model[64];        /* "NVIDIA H200", "host memory" */
  uint64_t total_bytes;  /* device memory (cpu: the configured size) */
  uint64_t free_bytes;   /* free now as the device reports it */
  uint64_t budget_bytes; /* what qdp may hold on it in all */
  uint64_t used_bytes;   /* held now by qdp shards and reservations */
  int cc_major, cc_minor;
};

struct runtime_mesh_config {
  /* "cpu:N" (N host-memory devices), "auto" (all GPUs, else cpu:1), or GPU ordinals "0,1" /
   * "cuda:0,cuda:1". */
  const char *devices;
  uint64_t device_budget_bytes; /* per device; 0 = mem_fraction of free memory at start */
  double mem_fraction;          /* (0, 1]; default 0.9 */
  uint64_t staging_bytes;       /* per device for host input staging; 0 = backend default */
};

struct runtime_mesh;

qdp_status runtime_mesh_create(const struct runtime_mesh_config *cfg,
                               struct runtime_mesh **ret_mesh, struct qdp_error *reterr);
void runtime_mesh_destroy(struct runtime_mesh *m); /* NULL-safe; all states must be gone */

/* "cpu" or "cuda". */
const char *runtime_mesh_backend(const struct runtime_mesh *m);
size_t runtime_mesh_count(const struct runtime_mesh *m);
/* Fills *ret with device i's description, free and used bytes read now. */
void runtime_mesh_device_info(struct runtime_mesh *m, size_t i, struct runtime_device_info *ret);
/* The planner's view of this mesh for a world of one rank: one plan_device per device, budget =
 * budget_bytes - used_bytes. devs must have runtime_mesh_count(m) entries. */
void runtime_mesh_plan_devices(struct runtime_mesh *m, int rank, struct plan_device *devs);
/* Staging bytes per device the planner must count for a job reading host input. */
uint64_t runtime_mesh_staging_bytes(const struct runtime_mesh *m);

/* Prepares host memory that many jobs will read (a registered input region) for fast transfers to
 * every device: page-locked and mapped for all of them on the CUDA backend (about 50 ms per GiB,
 * paid once), nothing on the CPU backend. The memory may be read-only. *ret_registered says
 * whether anything was done, and so whether runtime_mesh_unregister_host must be called. Failures
 * name the device and the CUDA error. */
qdp_status runtime_mesh_register_host(struct runtime_mesh *m, void *ptr, uint64_t bytes,
                                      bool *ret_registered, struct qdp_error *reterr);
/* Undoes runtime_mesh_register_host (before the memory is unmapped). */
void runtime_mesh_unregister_host(struct runtime_mesh *m, void *ptr);

/* Input values resident in host memory (inline bytes, a mapped .npy file or shared-memory region,
 * an assembled upload), row-major [rows][cols] of dtype. Only read, never kept after the call.
 * A rank of a larger world holds only its slice: with `windowed` set, data holds the values
 * [window_first, window_first + window_count) of the flattened input, which must cover every value
 * this rank's shards read (world.h computes it). */
struct runtime_input {
  const void *data;
  qdp_dtype dtype;
  uint64_t rows, cols;
  bool windowed;
  uint64_t window_first, window_count;
  /* Where the values are a file on the node (an .npy read by path): its path and the byte offset
   * of the first value. In a world of several ranks each rank reads its own window from the file
   * (which must be at the same path on every rank: a shared filesystem) instead of receiving it.
   * NULL: the values exist only here. */
  const char *file;
  uint64_t file_offset;
};

struct runtime_state;

/* Runs plan p (which must be feasible and come from this mesh's devices, rank 0) on input `in`.
 * INVALID_ARGUMENT for bad values (field "input", the sample and position in the message),
 * RESOURCE_EXHAUSTED when a device cannot hold its shard, QDP_ERR_CUDA/SYSTEM for device faults. */
qdp_status runtime_encode(struct runtime_mesh *m, const struct plan *p,
                          const struct runtime_input *in, struct runtime_state **ret_state,
                          struct qdp_error *reterr);
void runtime_state_destroy(struct runtime_state *s); /* NULL-safe; frees every shard */

const struct plan *runtime_state_plan(const struct runtime_state *s);
/* How the norm was reduced: "none" (no norm needed or one shard), "host" (in-process, fixed order).
 */
const char *runtime_state_collective(const struct runtime_state *s);
/* Bytes of device memory the state holds. */
uint64_t runtime_state_bytes(const struct runtime_state *s);
/* Milliseconds runtime_encode spent on this state. */
double runtime_state_encode_ms(const struct runtime_state *s);

/* Copies amplitudes [offset, offset + count) of the flattened [batch][2^n] array, in the state's
 * dtype, to host memory dst (count * dtype size bytes). OUT_OF_RANGE past the end. */
qdp_status runtime_state_read(struct runtime_state *s, uint64_t offset, uint64_t count, void *dst,
                              struct qdp_error *reterr);

/* ---- a world of several ranks (daemon/world drives it; a mesh without a world is rank 0 of 1)
 *
 * Every rank runs runtime_encode on the same plan, each materializing the shards whose rank is its
 * own; the executor reaches the other ranks only through these host collectives (host memory
 * only: no device pointer ever reaches the transport). Each returns QDP_ERR_UNAVAILABLE naming the
 * rank when a peer does not answer in time. Called on the thread running runtime_encode (allgather,
 * exchange) or runtime_state_read / runtime_state_destroy (read, release). */
struct runtime_world_ops {
  /* Every rank of the job contributes `bytes` (may differ, 0 included); *ret gets all
   * contributions concatenated in rank order (malloc'd, free()), *ret_bytes their total. */
  qdp_status (*allgather)(void *ctx, const void *mine, size_t bytes, void **ret, size_t *ret_bytes,
                          struct qdp_error *reterr);
  /* Sends `bytes` of mine to rank peer and receives as many of the peer's into ret. */
  qdp_status (*exchange)(void *ctx, int peer, const void *mine, void *ret, size_t bytes,
                         struct qdp_error *reterr);
  /* Amplitudes [offset, offset + count) of job's state, all held by `rank`, into dst (`bytes`:
   * count times the state's dtype size). */
  qdp_status (*read)(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count, void *dst,
                     size_t bytes, struct qdp_error *reterr);
  /* Frees job's shards on every other rank that holds some (p->shards names them). */
  void (*release)(void *ctx, uint64_t job, const struct plan *p);
};

/* Makes m rank `rank` of a world reached through ops (NULL: back to a world of one). Plans given to
 * runtime_encode then index this mesh's devices for this rank's shards. Main thread, before jobs.
 */
void runtime_mesh_set_world(struct runtime_mesh *m, int rank, const struct runtime_world_ops *ops,
                            void *ctx);

/* The coordinator names a state's world job, so runtime_state_read fetches other ranks' shards
 * through ops->read and runtime_state_destroy frees them through ops->release (0: none). */
void runtime_state_set_world_job(struct runtime_state *s, uint64_t job);

#endif /* QDP_RUNTIME_H */
