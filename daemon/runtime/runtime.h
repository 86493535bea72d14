/* runtime.h — the DeviceMesh a daemon owns, and the execution of a plan on it.
 *
 * A mesh is the set of devices of this node the daemon was told to use: host-memory devices of the
 * CPU backend ("cpu:N") or GPUs of the CUDA backend. runtime_encode runs one job end to end on the
 * mesh: it reserves the bytes of each local shard on its device (refusing with the numbers when a
 * device filled up since planning), checks the input values (non-finite parameters, basis indices,
 * zero/NaN/Inf norm per sample), allocates the shards, ingests each shard's own slice of the input,
 * reduces the amplitude norm over shards in a fixed order (bit-identical for any even sharding),
 * encodes every shard concurrently (on the mesh's threads, one per device, made with the mesh),
 * and returns a runtime_state. Any failure frees everything it took.
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
  int numa_node; /* the host NUMA node the device hangs off; -1 unknown */
};

/* How device i of a mesh reaches device j's memory. */
enum runtime_link_kind {
  RUNTIME_LINK_SELF = 0,   /* i == j */
  RUNTIME_LINK_HOST = 1,   /* host-memory devices of the CPU backend: one memory */
  RUNTIME_LINK_NVLINK = 2, /* NVLink, direct or through NVSwitch */
  RUNTIME_LINK_PCIE = 3,   /* PCIe peer to peer */
  RUNTIME_LINK_PEER = 4,   /* some peer path; NVML was not there to say which */
  RUNTIME_LINK_NONE = 5    /* no peer path: copies go through host memory, ~10x slower */
};

struct runtime_link {
  enum runtime_link_kind kind;
  int nvlinks;   /* NVLink links joining the pair, or i's links into the NVSwitch fabric that
                    joins them; 0 none or unknown */
  bool peer;     /* peer access is enabled: i's kernels and copies reach j's memory directly */
  int perf_rank; /* CUDA's relative rank of the pair's path (0 best), -1 unknown */
};

/* "self", "host", "nvlink", "pcie", "peer", "none". */
const char *runtime_link_kind_name(enum runtime_link_kind k);

struct runtime_mesh_config {
  /* "cpu:N" (N host-memory devices), "auto" (all GPUs, else cpu:1), GPU ordinals "0,1" /
   * "cuda:0,cuda:1", or "local-rank" (the one GPU whose ordinal is this rank's index on its node,
   * for one rank per GPU). */
  const char *devices;
  uint64_t device_budget_bytes; /* per device; 0 = mem_fraction of free memory at start */
  double mem_fraction;          /* (0, 1]; default 0.9 */
  uint64_t staging_bytes;       /* per device for host input staging; 0 = backend default */
  /* Swap iqp's global-bit stages over NCCL (the mesh's device group, where it is given one) even
   * between GPUs with peer access. */
  bool nccl_exchange;
  /* Hand views out as legacy CUDA IPC handles over cudaMalloc'd state memory, rather than as file
   * descriptors of memory made exportable (CUDA virtual memory management), which GPUs and
   * drivers without POSIX file descriptor handles get anyway. */
  bool legacy_ipc_views;
  /* Threads per GPU that pack host input that is not page-locked (a .npy file, shared memory)
   * into the staging, the encoding thread among them (runtime/host_copy.h); 0: the CPUs this
   * process may run on, shared among the GPUs, at most 16. */
  unsigned copy_threads;
};

struct runtime_mesh;
struct device_comm;

qdp_status runtime_mesh_create(const struct runtime_mesh_config *cfg,
                               struct runtime_mesh **ret_mesh, struct qdp_error *reterr);
void runtime_mesh_destroy(struct runtime_mesh *m); /* NULL-safe; all states must be gone */
/* Gives back what the devices keep for reuse and no job has used for a few seconds (freed large
 * buffers, clients' allocations opened through CUDA IPC). Called periodically, on a thread that
 * may wait for the devices. */
void runtime_mesh_trim(struct runtime_mesh *m);

/* "cpu" or "cuda". */
const char *runtime_mesh_backend(const struct runtime_mesh *m);
size_t runtime_mesh_count(const struct runtime_mesh *m);
/* Fills *ret with device i's description, free and used bytes read now. */
void runtime_mesh_device_info(struct runtime_mesh *m, size_t i, struct runtime_device_info *ret);
/* The planner's view of this mesh for a world of one rank: one plan_device per device, budget =
 * budget_bytes - used_bytes. devs must have runtime_mesh_count(m) entries. */
void runtime_mesh_plan_devices(struct runtime_mesh *m, int rank, struct plan_device *devs);
/* The link from device i to device j. */
void runtime_mesh_link(const struct runtime_mesh *m, size_t i, size_t j, struct runtime_link *ret);
/* The planner's link costs (plan_world.link_cost) for this mesh's devices, [count][count]: 0 for
 * a device itself, 1 for NVLink or one memory, 2 for PCIe or another peer path, 3 for none.
 * Owned by the mesh. */
const uint8_t *runtime_mesh_link_costs(const struct runtime_mesh *m);
/* Where the link kinds come from: "nvml" (the driver's management library: NVLink vs PCIe and
 * link counts), "cuda" (peer attributes only), "host" (CPU backend). */
const char *runtime_mesh_topology_source(const struct runtime_mesh *m);
/* What the norm reductions of sharded states use on this mesh and why, e.g. "nccl (NCCL 22803,
 * 2 GPUs)" or "host (NCCL: ...)". */
const char *runtime_mesh_collectives(const struct runtime_mesh *m);
/* Hands m the device group (NCCL) over its devices, member i on device i, that its owner made
 * (transport/collectives.h: world_start does), with what the norm reductions then use and why
 * (runtime_mesh_collectives). The mesh never makes one; c NULL: reductions on the host. Ignored
 * where the backend has no device collectives (the CPU backend). c must outlive its use: hand
 * NULL before destroying it. Main thread, before jobs. */
void runtime_mesh_set_device_group(struct runtime_mesh *m, struct device_comm *c, const char *why);
/* Staging bytes per device the planner must count for a job reading host input. */
uint64_t runtime_mesh_staging_bytes(const struct runtime_mesh *m);
/* The top bits of an iqp state every device of the mesh transforms alone (plan_request's
 * iqp_top_bits): 3 on the CPU and CUDA backends. */
uint32_t runtime_mesh_iqp_top_bits(const struct runtime_mesh *m);

/* Prepares host memory that many jobs will read (a registered input region) for fast transfers to
 * every device: page-locked and mapped for all of them on the CUDA backend (about 50 ms per GiB,
 * paid once), nothing on the CPU backend. The memory may be read-only; `writable` memory (an
 * output region, mapped read-write) is registered so that device-to-host copies may land in it
 * too. *ret_registered says whether anything was done, and so whether
 * runtime_mesh_unregister_host must be called. Failures name the device and the CUDA error. */
qdp_status runtime_mesh_register_host(struct runtime_mesh *m, void *ptr, uint64_t bytes,
                                      bool writable, bool *ret_registered,
                                      struct qdp_error *reterr);
/* Undoes runtime_mesh_register_host (before the memory is unmapped). */
void runtime_mesh_unregister_host(struct runtime_mesh *m, void *ptr);

/* Input values resident in host memory (inline bytes, a mapped .npy file or shared-memory region,
 * an assembled upload), row-major [rows][cols] of dtype. Only read, never kept after the call.
 * A rank of a larger world holds only its slice: with `windowed` set, data holds the values
 * [window_first, window_first + window_count) of the flattened input, which must cover every value
 * this rank's shards read (world.h computes it). */
/* What identifies an input file across the ranks of a world: each rank opens the path itself and
 * must find the file the caller handed over (a shared filesystem gives every node the same inode
 * number, size and modification time). */
struct runtime_file_id {
  uint64_t ino, size;
  int64_t mtime_ns;
};

struct runtime_input {
  const void *data;
  qdp_dtype dtype;
  uint64_t rows, cols;
  /* data lies in memory runtime_mesh_register_host prepared: uploads read it directly (DMA),
   * without first packing it into the staging buffers. */
  bool pinned;
  bool windowed;
  uint64_t window_first, window_count;
  /* Where the values are a file on the node (an .npy read by path): its path and the byte offset
   * of the first value. In a world of several ranks each rank reads its own window from the file
   * (which must be at the same path on every rank: a shared filesystem) instead of receiving it.
   * NULL: the values exist only here. */
  const char *file;
  uint64_t file_offset;
  struct runtime_file_id file_id;
  /* data is device memory: a client's allocation opened by runtime_mesh_open_ipc on mesh device
   * `device` (rank 0 only, never windowed). Shards ingest it device to device (peer copies on
   * the mesh's other GPUs); the checks that read values (parameters, the norm's fallback) copy
   * what they read to the host first. */
  bool on_device;
  size_t device;
};

struct runtime_state;

/* Runs plan p (which must be feasible and come from this mesh's devices, rank 0) on input `in`.
 * INVALID_ARGUMENT for bad values (field "input", the sample and position in the message),
 * RESOURCE_EXHAUSTED when a device cannot hold its shard, QDP_ERR_CUDA/SYSTEM for device faults. */
qdp_status runtime_encode(struct runtime_mesh *m, const struct plan *p,
                          const struct runtime_input *in, struct runtime_state **ret_state,
                          struct qdp_error *reterr);

/* Memory the mesh does not own that an encode writes its one shard into: a client's allocation
 * opened by runtime_mesh_open_ipc on GPUs, any host memory on the CPU backend. `bytes` are
 * writable from data, which is aligned to the output dtype's size. */
struct runtime_output {
  void *data;
  size_t device; /* the mesh device it is memory of */
  uint64_t bytes;
};

/* runtime_encode writing into `out` instead of a shard it allocates: p must be one shard on this
 * rank's device out->device (FAILED_PRECONDITION otherwise, naming the shards and devices), of
 * at most out->bytes (INVALID_ARGUMENT, field "out.bytes", need_bytes and free_bytes set), and
 * data aligned (INVALID_ARGUMENT, field "out.offset"). Nothing is reserved or allocated for the
 * shard; the amplitudes are in place, every stream that wrote them synchronized, when it returns
 * QDP_OK, and only [data, data + p->total_bytes) was written (on failure that range holds
 * anything). *ret_state describes the job (plan,
 * collective, encode_ms; runtime_state_bytes 0) and must only be read for that: it holds no
 * memory of its own, and runtime_state_destroy leaves out's memory as it is. */
qdp_status runtime_encode_into(struct runtime_mesh *m, const struct plan *p,
                               const struct runtime_input *in, const struct runtime_output *out,
                               struct runtime_state **ret_state, struct qdp_error *reterr);
/* NULL-safe; frees every shard the mesh allocated (none of runtime_encode_into's output). */
void runtime_state_destroy(struct runtime_state *s);

const struct plan *runtime_state_plan(const struct runtime_state *s);
/* How shards exchanged: "none" (nothing to exchange: one shard, a batch split by sample, or iqp
 * whose global bits are all among the top ones its devices transform alone); for the amplitude norm "host" (partials
 * combined on the host in the fixed order), "mpi" (the same, gathered from the other ranks over
 * MPI) or "nccl" (partials all-gathered over NCCL, across ranks too, and combined on every device
 * in the same fixed order); for iqp's global-bit stages the path the shards took (between ranks:
 * "mpi" through host memory, "nccl" device to device):
 * "local" (one memory), "peer" (kernels reading the partner over a peer link), "nccl" (swapped
 * over NCCL), "copy" (copied over and back without peer access). */
const char *runtime_state_collective(const struct runtime_state *s);
/* Bytes of device memory the state holds. */
uint64_t runtime_state_bytes(const struct runtime_state *s);
/* Milliseconds runtime_encode spent on this state. */
double runtime_state_encode_ms(const struct runtime_state *s);
/* Amplitude split across devices: microseconds from the partial sums being queued (device path)
 * or on the host (host path) to every device holding the totals; 0 otherwise. On the device path
 * it includes waiting for the slowest device's partial sums. */
double runtime_state_norm_us(const struct runtime_state *s);
/* Milliseconds of runtime_encode spent between shards: amplitude's norm reduction across devices
 * (runtime_state_norm_us) or sharded iqp's global-bit stages; 0 for a state on one device. */
double runtime_state_collective_ms(const struct runtime_state *s);

/* A write lease was opened on the state: its amplitudes are whatever its holder wrote, no longer
 * its encoding's (so no shortcut that the encoding allows, such as real amplitudes, is taken).
 * Called by the store's holder with no other call reading the state; never undone. */
void runtime_state_mark_written(struct runtime_state *s);
bool runtime_state_written(const struct runtime_state *s);

/* Copies amplitudes [offset, offset + count) of the flattened [batch][2^n] array, in the state's
 * dtype, to host memory dst (count * dtype size bytes). OUT_OF_RANGE past the end. */
qdp_status runtime_state_read(struct runtime_state *s, uint64_t offset, uint64_t count, void *dst,
                              struct qdp_error *reterr);

/* ---- Shard views and gather (views.c) ----------------------------------------------------------
 *
 * A state's shards as clients see them, zero-copy handles to them, and a copy of the whole state
 * onto one device. Any thread, like the reads above. */

/* Bytes of a cudaIpcMemHandle_t. */
#define RUNTIME_IPC_HANDLE_BYTES 64

/* Where one shard of a state lives and what it holds: rows [row_first, row_first + rows) of the
 * batch, amplitudes [first, first + count) of each, row-major [rows][count] of dtype. */
struct runtime_shard_layout {
  int rank;
  size_t device; /* index into the mesh (Status's device list) */
  char name[32]; /* "cuda:1"; "" for a shard of another rank */
  int ordinal;
  char uuid[48]; /* "GPU-…"; "" on the CPU backend */
  uint64_t row_first, rows;
  uint64_t first, count;
  uint64_t bytes;
  qdp_dtype dtype;
};

/* Shard i (i < runtime_state_plan(s)->nshards) of s. */
void runtime_state_shard_layout(const struct runtime_state *s, size_t i,
                                struct runtime_shard_layout *ret);

/* A zero-copy handle to one shard: its allocation as a file descriptor (CUDA virtual memory
 * management, a POSIX file descriptor handle: fd >= 0, the holder's to close, and map_bytes, the
 * allocation's size, which an importer maps whole), or else as a legacy CUDA IPC handle; and the
 * shard's byte offset in it (not always 0: allocations may hold more than one shard). */
struct runtime_ipc {
  unsigned char handle[RUNTIME_IPC_HANDLE_BYTES];
  uint64_t offset;
  int fd;
  uint64_t map_bytes;
};

/* QDP_OK when the mesh's devices can export zero-copy views (GPUs); else FAILED_PRECONDITION
 * saying so and naming the mesh. */
qdp_status runtime_mesh_check_views(const struct runtime_mesh *m, struct qdp_error *reterr);

/* The view of shard i (*ret: a descriptor the caller closes, or an IPC handle). FAILED_PRECONDITION
 * on the CPU backend (zero-copy views need GPUs; the message names the mesh), for a shard this
 * rank does not hold, and for another rank's shard held as descriptor-exportable memory (its
 * descriptor is that process's); QDP_ERR_CUDA naming the device when the driver refuses. The
 * state must outlive every process that opened an IPC handle: that is what the store's leases
 * are for (a descriptor's memory outlives the state by itself: cuda_vmm.c). */
qdp_status runtime_state_export_ipc(struct runtime_state *s, size_t i, struct runtime_ipc *ret,
                                    struct qdp_error *reterr);

/* A new state holding all of s (every row, every amplitude) as one shard on mesh device `device`,
 * copied device to device (peer copies between GPUs). The bytes are reserved on the device first:
 * RESOURCE_EXHAUSTED naming the device, the bytes needed and what its budget has left when they
 * do not fit (need_bytes/free_bytes set); INVALID_ARGUMENT (field "device") for a device index
 * outside the mesh; FAILED_PRECONDITION when s has shards on other ranks. The new state is
 * independent of s: destroy both. */
qdp_status runtime_state_gather(struct runtime_mesh *m, const struct runtime_state *s,
                                size_t device, struct runtime_state **ret_state,
                                struct qdp_error *reterr);

/* ---- The kernel matrix (kernel.c) ---------------------------------------------------------------
 *
 * K[i][j] = |<a_i|b_j>|^2 (the real type of the states' precision), or with `overlaps` the
 * complex <a_i|b_j>, for the rows of a and b (b NULL: a with itself; only the upper half is
 * computed and mirrored, conjugated for overlaps). Computed on the first device of this rank that
 * holds a shard of a (runtime_state_home), other ranks' shards read through the world: the
 * amplitudes go in blocks, each block's product over tiles of rows gathered into the device's
 * workspace, and the blocks' products summed along one fixed pairwise tree: the same bits on any
 * sharding of a and b (they depend on the tiling, a function of the shapes and `tiles`). States
 * whose amplitudes are all real take products of their real parts. The workspace is reserved
 * against the device's budget first: RESOURCE_EXHAUSTED naming the device with the bytes needed
 * and free. INVALID_ARGUMENT (field "b") when a and b differ in qubits or dtype;
 * FAILED_PRECONDITION when the backend has no kernel. `out` is host memory of rows * cols
 * values, row-major (on the CUDA backend device memory of a mesh GPU too: a caller's allocation);
 * *ret_device names the device that computed it. */
struct runtime_kernel_tiles {
  unsigned block_log2; /* blocks of 2^min(n, block_log2) amplitudes, fewer where the operands of
                          a tile would pass their bound */
  uint64_t tile_rows;  /* rows of a (and of b) per tile, at most */
};
/* The daemon's: blocks of up to 2^20 amplitudes, tiles of up to 4096 rows. */
#define RUNTIME_KERNEL_TILES ((struct runtime_kernel_tiles){20, 4096})
qdp_status runtime_state_kernel(struct runtime_mesh *m, const struct runtime_state *a,
                                const struct runtime_state *b, bool overlaps,
                                struct runtime_kernel_tiles tiles, void *out,
                                const char **ret_device, struct qdp_error *reterr);

/* The same matrix from input values, with no state ever whole. Each input's `plan` is its whole
 * batch as one shard on one device of this rank (the same for both: where it is computed),
 * planned with an external output; the runtime encodes windows of it (plan_window) into its
 * workspace as its tile loop reaches them:
 *  - by blocks, for encodings whose amplitudes are each a function of their sample's parameters
 *    (plan_windows_amplitudes: angle, basis, phase): each block of each tile is encoded into the
 *    operand the resident form would gather, in the resident form's tiles when max_bytes is 0,
 *    so with its bits; max_bytes bounds the operands (and a real state's bounce buffer);
 *  - by rows, for the others: each tile of rows is encoded whole (a's once per row of tiles, b's
 *    once per tile) and each block taken into the operands as the resident form gathers it (a
 *    real state's real parts), in its blocks: with max_bytes 0, one tile of every row (at most
 *    4096) has the resident matrix's bits. max_bytes bounds the two tiles and the operands,
 *    which a complex state then does without (the block products read the tiles in place).
 * A device too full for the workspace takes smaller tiles, as runtime_state_kernel does.
 * The partial sums of the products come on top (up to 2 GiB, as the resident form's). 0: the
 * resident form's tiles. INVALID_ARGUMENT (field "max_bytes", need_bytes) when not one tile of
 * one row fits max_bytes; the workspace is reserved first (RESOURCE_EXHAUSTED naming the device);
 * an encode's refusal comes back prefixed with the rows of its tile. */
struct runtime_kernel_input {
  const struct runtime_input *in; /* on this rank, not windowed */
  const struct plan *plan;
};
qdp_status runtime_inputs_kernel(struct runtime_mesh *m, const struct runtime_kernel_input *a,
                                 const struct runtime_kernel_input *b, bool overlaps,
                                 struct runtime_kernel_tiles tiles, uint64_t max_bytes, void *out,
                                 const char **ret_device, struct qdp_error *reterr);

/* ---- Measurements (measure.c) -----------------------------------------------------------------
 *
 * Per sample of s, into host memory out ([batch][cols] doubles, row-major): the probabilities of
 * every basis state (nqubits 0: cols = 2^n), of the outcomes of `nqubits` chosen qubits (qubit
 * qubits[j] is bit j of the outcome; cols = 2^nqubits, at most 2^QDPK_MEASURE_QUBITS_MAX), or the
 * expectation values of `npaulis` Pauli strings (cols = npaulis). The amplitudes are summed in
 * windows of 2^min(n, window_log2) (the daemon's: RUNTIME_MEASURE_WINDOW_LOG2; smaller for many
 * columns, so that a window's partial sums stay bounded), each window on
 * the device that holds it (gathered onto one device where shards cut it), the windows along one
 * fixed tree: the same bits on any sharding. A string with X or Y qubits above the window measures
 * each pair of windows its X mask maps onto each other once, reading both: one read of the
 * state. INVALID_ARGUMENT for qubits or strings the state does
 * not have (fields "qubits", "paulis"). Windows of other ranks' shards are read through the
 * world onto the first device of this rank that holds a shard. */
#define RUNTIME_MEASURE_WINDOW_LOG2 28u
struct runtime_pauli {
  uint64_t xmask, zmask; /* X and Y qubits; Z and Y qubits */
  uint32_t ny;           /* Y qubits */
};
struct runtime_measure {
  uint32_t nqubits; /* probabilities: the qubits measured; 0 with npaulis 0: every basis state */
  const uint32_t *qubits;
  uint32_t npaulis; /* expectations */
  const struct runtime_pauli *paulis;
  unsigned window_log2;
};
qdp_status runtime_state_measure(struct runtime_mesh *m, const struct runtime_state *s,
                                 const struct runtime_measure *req, double *out,
                                 const char **ret_device, struct qdp_error *reterr);

/* `shots` basis states of each sample of s drawn by their probabilities, into out ([batch][shots]
 * indices): shot i of row r is drawn with a uniform number that is a function of (seed, r, i)
 * alone, and found by a search down the windows' fixed tree (each range's children's masses, 2^10
 * at a time; a range of at most 2^(window_log2 - 8) amplitudes that 16 or more shots reach is
 * read to the host once and searched there), so the samples are the same for a seed however s
 * is sharded. INVALID_ARGUMENT for a
 * state of more than window_log2 + 10 qubits; FAILED_PRECONDITION as runtime_state_measure. */
qdp_status runtime_state_sample(struct runtime_mesh *m, const struct runtime_state *s,
                                uint64_t shots, uint64_t seed, unsigned window_log2,
                                int64_t *out, const char **ret_device, struct qdp_error *reterr);

/* The mesh index of the device named `name` ("cuda:1", "cpu:0") or given by its index ("1").
 * INVALID_ARGUMENT (field `field`) naming the devices there are. */
qdp_status runtime_mesh_find_device(struct runtime_mesh *m, const char *name, const char *field,
                                    size_t *ret_index, struct qdp_error *reterr);

/* ---- CUDA IPC input: a same-node client's device allocation (runtime_input.on_device) -------- */

/* The mesh index of the GPU whose UUID is `uuid` ("GPU-..."). FAILED_PRECONDITION (field
 * `field`) naming what the mesh owns otherwise: a GPU of the node the daemon was not given, or
 * the CPU backend. */
qdp_status runtime_mesh_find_uuid(const struct runtime_mesh *m, const char *uuid, const char *field,
                                  size_t *ret_index, struct qdp_error *reterr);

/* A client's allocation opened on a device of the mesh, for one job. */
struct runtime_ipc_input {
  void *base;  /* the allocation's base in this process; NULL: nothing open */
  size_t device;
  uint64_t size; /* the allocation's bytes */
};

/* Opens the allocation of IPC handle `handle` (RUNTIME_IPC_HANDLE_BYTES) on mesh device
 * `device` and checks [offset, offset + bytes) lies inside it (OUT_OF_RANGE with the numbers).
 * FAILED_PRECONDITION where the backend has no IPC; QDP_ERR_CUDA naming the device when the
 * driver refuses the handle (another node's, freed, or of this very process). */
qdp_status runtime_mesh_open_ipc(struct runtime_mesh *m, size_t device, const unsigned char *handle,
                                 uint64_t offset, uint64_t bytes, struct runtime_ipc_input *ret,
                                 struct qdp_error *reterr);
/* Closes what runtime_mesh_open_ipc opened (the client's memory stays the client's). Safe on a
 * zeroed one. */
void runtime_mesh_close_ipc(struct runtime_mesh *m, struct runtime_ipc_input *in);

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
  /* The same when every rank contributes exactly `bytes` (a fixed record): one round instead of
   * two. */
  qdp_status (*allgather_fixed)(void *ctx, const void *mine, size_t bytes, void **ret,
                                size_t *ret_bytes, struct qdp_error *reterr);
  /* Sends `bytes` of mine to rank peer and receives as many of the peer's into ret. */
  qdp_status (*exchange)(void *ctx, int peer, const void *mine, void *ret, size_t bytes,
                         struct qdp_error *reterr);
  /* Amplitudes [offset, offset + count) of job's state, all held by `rank`, into dst (`bytes`:
   * count times the state's dtype size). */
  qdp_status (*read)(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count, void *dst,
                     size_t bytes, struct qdp_error *reterr);
  /* Frees job's shards on every other rank that holds some (p->shards names them). */
  void (*release)(void *ctx, uint64_t job, const struct plan *p);
  /* The zero-copy view (runtime_state_export_ipc) of shard `shard` of job's state, held by
   * `rank`; FAILED_PRECONDITION when that rank is on another node (an IPC handle opens on its
   * own node only). May be NULL. */
  qdp_status (*export_ipc)(void *ctx, int rank, uint64_t job, size_t shard,
                           struct runtime_ipc *ret, struct qdp_error *reterr);
  /* The device group (NCCL) joining every GPU of the world, when the job running now may use it
   * (the coordinator decides, the same for every rank of the job); NULL: the job's collectives
   * run on the host. This rank's device i is member device_comm_first_member + i, another
   * rank's device its index in the world's device table. May be NULL. */
  struct device_comm *(*device_group)(void *ctx);
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
