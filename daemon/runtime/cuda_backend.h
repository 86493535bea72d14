/* cuda_backend.h — the CUDA backend: GPUs ("cuda:N") running the launchers of kernels/qdpk_cuda.h
 * behind the interface of runtime/device.h. Internal to runtime/: cuda_device.c (the ops table,
 * errors, the encodings other than amplitude, views), cuda_staging.c (host input through the
 * staging pair, reads), cuda_memory.c (allocations, the cache of freed buffers, amplitude scratch),
 * cuda_norm.c (the norm and the scale pass), cuda_exchange.c (global-bit stages) and
 * cuda_mesh.c (discovery, devices, the mesh).
 *
 * Each device has two non-blocking streams, created once: its work stream, which every op queues
 * on, and a copy stream that takes only the one-DMA uploads of page-locked input (whatever reads
 * such a slice waits for its upload first), so that a job's upload runs beside the kernels of the
 * jobs ahead of it. It has a fixed staging pair for host input: two pinned host buffers and two
 * device buffers of `stage_bytes` each, with an event per slot that says when the GPU is done
 * with it. Input from host memory is streamed through the pair in pieces: while the GPU uploads
 * and computes on one slot, this thread packs the next piece into the other, helped by the
 * device's copy threads (runtime/host_copy.h) when the input is not page-locked. So the input
 * never needs to be whole on the GPU, and the device memory qdp takes for input is bounded by the
 * staging, whatever the input's size. cuda_gram.c has the kernel matrix's ops (on cuBLAS).
 *
 * The executor calls the ops from the mesh's worker threads, and jobs may run concurrently,
 * so every op makes its device current first (cudaSetDevice is per thread) and holds the device's
 * staging lock while it uses the staging. Ops are blocking: each one synchronizes the stream before
 * it returns, so the executor may hand the shard to the next op, or another device, at once.
 *
 * Amplitude's sum of squares must be the pairwise tree of kernels/qdpk.h over each aligned block
 * the executor asks for. A block whose values do not fit one staging slot is cut into aligned
 * power-of-two chunks (each a subtree of the block's tree), and the chunk sums are combined on the
 * host along the same tree (norm_combine), so the result has the bits of one launch over the block.
 *
 * Errors: a failed cudaMalloc is RESOURCE_EXHAUSTED with the bytes asked and cudaMemGetInfo's free
 * bytes; every other CUDA failure is QDP_ERR_CUDA naming the device, the call and the CUDA error,
 * and clears the error state so the next call on this thread starts clean.
 */
#ifndef QDP_RUNTIME_CUDA_BACKEND_H
#define QDP_RUNTIME_CUDA_BACKEND_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "clock.h"
#include "device_comm.h"
#include "qdp_limits.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "runtime/device.h"
#include "runtime/host_copy.h"
#include "runtime/mesh.h"
#include "runtime/norm.h"

/* Each staging slot: 64 MiB by default. A piece that large takes ~1.2 ms to upload at the
 * 55 GB/s pinned host-to-device rate measured on the target GPU, long enough that the per-piece
 * launch and event overheads (a few microseconds) vanish, small enough that 2 x 64 MiB of device
 * memory is negligible next to a GPU's state budget. */
#define CUDA_STAGE_DEFAULT (UINT64_C(64) << 20)
/* Threads packing unpinned host input per GPU when copy_threads is 0 (auto), at most: one thread
 * copies out of the page cache at about 9 GB/s, a GPU's link takes 55; on an H200, 16 threads took
 * a 2^30 float64 file in the page cache up at 37.5 GB/s, one at 5.4 (docs/performance.md, "Host
 * and file input"). They only run while a copy does. */
#define CUDA_COPY_THREADS_AUTO 16
/* The smallest slot: it must hold one row of the widest parameter set (iqp with 60 qubits has
 * 60 + 1770 values, 14640 B in float64) with room to spare. */
#define CUDA_STAGE_MIN (UINT64_C(64) << 10)
/* Reads up to this size go straight to the caller's memory (the driver stages them itself);
 * larger ones through the pinned staging, two slots in flight. */
#define CUDA_READ_DIRECT (UINT64_C(1) << 20)
/* Freed state buffers up to CUDA_CACHE_ENTRY_MAX are kept (CUDA_CACHE_SLOTS of them, at most
 * CUDA_CACHE_BYTES in all) for the next state of the same size: a stream of small jobs then
 * neither pays cudaMalloc nor cudaFree, whose implicit device-wide synchronization would stall
 * every other job on the GPU. When a buffer finds no room, the entries kept longest ago make way:
 * sizes a workload no longer asks for would otherwise hold the cache for good, and every job of
 * a new size would pay both calls. Kept buffers count as free memory; a cudaMalloc that fails
 * empties the cache and tries again. */
#define CUDA_CACHE_ENTRY_MAX (UINT64_C(256) << 20)
#define CUDA_CACHE_BYTES (UINT64_C(1) << 30)
#define CUDA_CACHE_SLOTS 32
/* What is kept for reuse beyond those, each for CUDA_KEEP_MS after its last use and then given
 * back by the periodic trim (so at most that plus one sweep interval): the last freed buffer
 * larger than CUDA_CACHE_ENTRY_MAX, for a next state of the very same size (a loop re-encoding a
 * 16 GiB state otherwise pays a cudaMalloc of milliseconds and a cudaFree of 12 ms that waits
 * for the whole device), and up to CUDA_IPC_KEEP clients' allocations opened through CUDA IPC
 * (an open costs 0.1-1.2 ms; a client's caching allocator hands the same allocation again). */
#define CUDA_KEEP_MS 2000
/* How long a cudaMemGetInfo answer stands in for the next (cuda_query). */
#define CUDA_FREE_TTL_MS 20
/* Pass 1 of a slice in host memory up to this size is summed on the host (qdpk_cpu_sumsq, the
 * same bits): a launch, a copy back and a stream synchronization cost a small job more than
 * summing 8 K values here. Pass 2 of such a slice reads it, and its norms, from a pinned slot in
 * place over the bus: the job is then one launch, with no copy queued. */
#define CUDA_HOST_NORM_MAX (UINT64_C(64) << 10)
#define CUDA_IPC_KEEP 16

/* A client's allocation opened here through CUDA IPC, kept open between the jobs that read or
 * write it; closed by the trim once no job has used it for CUDA_KEEP_MS. */
struct cuda_ipc_open {
  unsigned char handle[RUNTIME_IPC_HANDLE_BYTES];
  void *base;
  uint64_t size;    /* as the driver records it */
  unsigned refs;    /* jobs using it now */
  uint64_t used_ns; /* clock_mono_ns when the last of them ended */
};

struct cuda_device {
  struct runtime_device base; /* first: the executor sees only this */
  cudaStream_t stream;
  cudaStream_t copy_stream;   /* one-DMA uploads of page-locked input only (cuda_backend.h) */
  pthread_mutex_t stage_lock; /* the staging pair and its events */
  struct host_copy *copier;   /* packs unpinned host input into a slot (NULL: this thread) */
  int lock_ready;
  uint64_t stage_bytes; /* of each slot */
  void *stage_host[2];  /* pinned */
  void *stage_dev[2];
  void *stage_mapped[2]; /* stage_host as kernels address it; NULL: not mapped into the device */
  cudaEvent_t stage_free[2];           /* recorded after the last GPU use of the slot */
  unsigned char peer[QDP_DEVICES_MAX]; /* by ordinal: this device can access that one's memory */
  pthread_mutex_t cache_lock;          /* the kept buffers */
  struct device_comm *comm; /* the mesh's group, with this device as member `member`; NULL: none */
  size_t member;
  bool nccl_exchange; /* swap global-bit stages over NCCL even with peer access */
  struct {
    void *ptr;
    uint64_t bytes;
    uint64_t kept_at; /* cache_clock when it was kept: the smallest makes way first */
  } cache[CUDA_CACHE_SLOTS];
  size_t ncache;
  uint64_t cache_bytes;
  uint64_t cache_clock;
  struct cuda_scratch *spares; /* under cache_lock */
  size_t nspares;
  struct {
    void *ptr;
    uint64_t bytes;
    uint64_t since_ns;
  } big;                      /* the one kept large buffer, under cache_lock */
  size_t mem_free, mem_total; /* the last cudaMemGetInfo, at mem_info_ns (0: none yet) */
  uint64_t mem_info_ns;
  pthread_mutex_t ipc_lock; /* the opened client allocations */
  struct cuda_ipc_open ipc[CUDA_IPC_KEEP];
  size_t nipc;
  pthread_mutex_t blas_lock; /* the cuBLAS handle (cuda_gram.c) */
  void *blas;                /* cublasHandle_t, made at the first kernel matrix; NULL: none */
  /* Buffers handed out to clients, by IPC handle or descriptor (under cache_lock): freed, never
   * kept for another state, since a client may still have them open (cuda_mark_exported). */
  const void **exported;
  size_t nexported, exported_cap;
  /* State memory exportable as file descriptors (cuda_vmm.c); NULL: cudaMalloc, legacy IPC. */
  struct cuda_vmm *vmm;
  unsigned char accessed_by[QDP_DEVICES_MAX]; /* by ordinal: that device reaches this one's */
};

/* Amplitude's per-job device memory, between norm_load and work_done. */
struct cuda_scratch {
  void *norms; /* device doubles: each row's total sum of squares, for pass 2 */
  uint64_t norms_cap;
  void *sums;        /* device doubles: the sums pass 1 computes, one per launch row */
  uint64_t sums_cap; /* bytes */
  double *host_sums; /* their host copy */
  uint64_t host_cap;
  void *ws; /* qdpk_sumsq's workspace */
  uint64_t ws_cap;
  void *scales; /* device int32s: each row's exponent, for the norm's fallback */
  uint64_t scales_cap;
  /* The device-collective path: this shard's partials, every member's gathered, and the part
   * descriptors the combine walks. */
  void *send, *recv, *parts;
  uint64_t send_cap, recv_cap, parts_cap;
  /* Page-locked host memory: the partials' descriptors going up and totals coming back, or the
   * resident pass 1's sums (a copy into pageable memory would hold the staging until it lands). */
  void *pinned;
  uint64_t pinned_cap;
  /* One-pass input, read in place by both passes; NULL: streamed through the staging. Either the
   * client's own allocation on this GPU (resident_external), or the slice uploaded once into the
   * tail of the shard's own buffer (the state takes at least twice the input's bytes), which
   * pass 2 then overwrites as it goes. resident_stride: values from one row's start to the next. */
  const char *resident;
  uint64_t resident_stride;
  bool resident_external;
  cudaEvent_t done;          /* behind the job's work on this device, for cuda_stage_end_waited */
  cudaEvent_t uploaded;      /* behind its upload on the copy stream */
  bool upload_pending;       /* that upload not yet waited for (upload_landed) */
  struct cuda_scratch *next; /* in the device's spares */
};

/* Scratch descriptions with their device buffers are kept (up to CUDA_SPARE_SCRATCH, each holding
 * at most CUDA_SPARE_SCRATCH_BYTES) for the next amplitude job: a small job then allocates and
 * frees no device memory at all (a cudaFree waits for the whole device). */
#define CUDA_SPARE_SCRATCH 8
#define CUDA_SPARE_SCRATCH_BYTES (UINT64_C(64) << 20)

static inline struct cuda_device *cuda_of(struct runtime_device *d) {
  return (struct cuda_device *)d;
}

static inline uint64_t pow2_floor(uint64_t v) {
  return v ? UINT64_C(1) << (63 - __builtin_clzll(v)) : 0;
}

static inline uint64_t pow2_ceil(uint64_t v) {
  return v <= 1 ? 1 : UINT64_C(1) << (64 - __builtin_clzll(v - 1));
}

static inline uint32_t log2_of(uint64_t pow2) {
  return (uint32_t)__builtin_ctzll(pow2);
}

/* CU_TRY(rc, err, d, "cudaX", cudaX(...)): a failed CUDA call fills err (a struct qdp_error *,
 * may be NULL) naming device d and the call, sets rc and jumps to `out:`. */
#define CU_TRY(rc, err, d, name, call) \
  do { \
    cudaError_t cu_err_ = (call); \
    if (cu_err_ != cudaSuccess) { \
      (rc) = cuda_failed((d), cu_err_, (name), (err)); \
      goto out; \
    } \
  } while (0)

/* K_TRY(rc, err, d, "qdpk_x", qdpk_x(...)): the same for a kernel launcher's status. */
#define K_TRY(rc, err, d, name, call) \
  do { \
    qdp_status k_st_ = (call); \
    if (k_st_ != QDP_OK) { \
      (rc) = cuda_launch_failed((d), k_st_, (name), (err)); \
      goto out; \
    } \
  } while (0)

/* The ops table (cuda_device.c). The ops below (cuda_read, cuda_alloc, cuda_norm_*, ...) keep the
 * contracts runtime/device.h gives them. */
extern const struct runtime_device_ops runtime_cuda_ops;

/* Errors, the current device, the stream (cuda_device.c) */
qdp_status cuda_failed(const struct runtime_device *d, cudaError_t err, const char *call,
                       struct qdp_error *reterr);
qdp_status cuda_launch_failed(const struct runtime_device *d, qdp_status st, const char *kernel,
                              struct qdp_error *reterr);
/* INTERNAL: the CUDA table has no launcher for p's encoding (what the op needs of it). */
qdp_status cuda_no_kernel(const struct runtime_device *d, const struct plan *p,
                          struct qdp_error *reterr);
qdp_status cuda_use_device(struct runtime_device *d, struct qdp_error *reterr);
qdp_status cuda_dev_malloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                           struct qdp_error *reterr);
/* The driver call `name` at its CUDA 12 ABI, taken through the runtime so that qdpd does not link
 * libcuda (absent where there is no driver); QDP_ERR_CUDA naming the call when the driver lacks
 * it. */
qdp_status cuda_driver_entry(struct runtime_device *d, const char *name, void **ret,
                             struct qdp_error *reterr);
/* RESOURCE_EXHAUSTED for an allocation of `bytes` that `call` refused with `why` (code): the
 * device's free and total memory in the message, need_bytes and free_bytes set. */
qdp_status cuda_out_of_memory(struct runtime_device *d, uint64_t bytes, const char *call,
                              const char *why, int code, struct qdp_error *reterr);
void cuda_drain(struct cuda_device *c);
qdp_status cuda_finish(struct cuda_device *c, struct qdp_error *reterr);

/* Staging and reads (cuda_staging.c) */
cudaError_t cuda_copy_rows_async(cudaStream_t stream, const void *dst, const void *src,
                                 uint64_t src_stride, uint64_t row_bytes, uint64_t nrows,
                                 enum cudaMemcpyKind kind);
qdp_status cuda_stage_put(struct cuda_device *c, int slot, const char *src, uint64_t src_stride,
                          uint64_t row_bytes, uint64_t nrows, bool pinned,
                          struct qdp_error *reterr);
qdp_status cuda_stage_release(struct cuda_device *c, int slot, struct qdp_error *reterr);
qdp_status cuda_stage_begin(struct cuda_device *c, struct qdp_error *reterr);
qdp_status cuda_stage_end(struct cuda_device *c, qdp_status rc, struct qdp_error *reterr);
qdp_status cuda_stage_end_queued(struct cuda_device *c, qdp_status rc, struct qdp_error *reterr);
/* Ends a staged op whose results the host reads next (sums, a finished shard): the staging is
 * handed back at once and then only the work queued so far is waited for, through *done (an
 * event made on first use), so that the next holder queues its own work meanwhile instead of
 * waiting for it too. On failure as stage_end. */
qdp_status cuda_stage_end_waited(struct cuda_device *c, cudaEvent_t *done, qdp_status rc,
                                 struct qdp_error *reterr);
qdp_status cuda_read(struct runtime_device *d, const void *src, uint64_t bytes, void *dst,
                     struct qdp_error *reterr);
qdp_status cuda_write(struct runtime_device *d, void *dst, const void *src, uint64_t bytes,
                      struct qdp_error *reterr);

/* CUDA IPC: shards exported for views, clients' allocations opened and kept (cuda_ipc.c) */
qdp_status cuda_export_view(struct runtime_device *d, const void *ptr, struct runtime_ipc *ret,
                            struct qdp_error *reterr);
qdp_status cuda_open_ipc(struct runtime_device *d, const unsigned char *handle, uint64_t offset,
                         uint64_t bytes, void **ret_base, uint64_t *ret_size,
                         struct qdp_error *reterr);
void cuda_close_ipc(struct runtime_device *d, void *base);
/* Closes the kept allocations no job uses now and none has for keep_ms (0: all unused ones). */
void cuda_ipc_trim(struct cuda_device *c, uint64_t keep_ms);

/* Descriptor-exportable state memory (cuda_vmm.c). create: c->vmm when the device and driver
 * support POSIX file descriptor handles (*ret_supported), else nothing (legacy allocations);
 * errors only for a driver that lacks the calls. alloc: an allocation of at least `bytes`
 * (rounded up to the granularity), mapped for this device and c->accessed_by. free: false when
 * ptr is not one (a cudaMalloc'd buffer); else waits for the device and releases it (its memory
 * lives on while a client maps it). export: a new descriptor of ptr's allocation into ret (fd,
 * map_bytes), the allocation marked exported (cuda_mark_exported). */
qdp_status cuda_vmm_create(struct cuda_device *c, bool *ret_supported, struct qdp_error *reterr);
void cuda_vmm_destroy(struct cuda_device *c);
qdp_status cuda_vmm_alloc(struct cuda_device *c, uint64_t bytes, void **ret_ptr,
                          struct qdp_error *reterr);
bool cuda_vmm_free(struct cuda_device *c, void *ptr);
qdp_status cuda_vmm_export(struct cuda_device *c, const void *ptr, struct runtime_ipc *ret,
                           struct qdp_error *reterr);

/* The kernel matrix (cuda_gram.c): the ops of runtime/device.h, and the handle's teardown. */
qdp_status cuda_gram(struct runtime_device *d, const void *a, uint64_t lda, uint64_t rows,
                     const void *b, uint64_t ldb, uint64_t cols, uint64_t len, qdp_dtype dt,
                     bool upper, bool real, void *g, struct qdp_error *reterr);
qdp_status cuda_real_rows(struct runtime_device *d, void *dst, uint64_t dst_pitch, const void *src,
                          uint64_t src_pitch, uint64_t width, uint64_t rows, qdp_dtype dt,
                          struct qdp_error *reterr);
qdp_status cuda_gram_add(struct runtime_device *d, void *g, const void *h, uint64_t n,
                         qdp_dtype dt, bool real, struct qdp_error *reterr);
qdp_status cuda_gram_finish(struct runtime_device *d, const void *g, uint64_t rows, uint64_t cols,
                            qdp_dtype dt, bool real, bool overlaps, bool fill, void *scratch,
                            void *out, void *mirror, uint64_t pitch_bytes,
                            struct qdp_error *reterr);
void cuda_gram_destroy(struct cuda_device *c);

/* Measurements (cuda_measure.c): the ops of runtime/device.h. */
qdp_status cuda_measure(struct runtime_device *d, const struct qdpk_measure *m, const void *x,
                        uint64_t ld, const void *partner, uint64_t pld, uint64_t rows,
                        uint64_t first, uint64_t len, void *scratch, double *out,
                        struct qdp_error *reterr);
qdp_status cuda_abs2(struct runtime_device *d, const void *x, uint64_t ld, uint64_t rows,
                     uint64_t count, qdp_dtype dt, void *scratch, double *out, uint64_t out_ld,
                     struct qdp_error *reterr);

/* Memory: allocations, the cache, scratch (cuda_memory.c) */
void cuda_cache_drop(struct cuda_device *c);
void cuda_trim(struct runtime_device *d);
qdp_status cuda_alloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                      struct qdp_error *reterr);
void cuda_free(struct runtime_device *d, void *ptr, uint64_t bytes);
/* Records that base's allocation went to a client (an IPC handle or a descriptor): cuda_free then
 * frees it rather than keeping it for the next state of its size, which the client could
 * otherwise read. RESOURCE_EXHAUSTED when it cannot be recorded: the view is then refused. */
qdp_status cuda_mark_exported(struct cuda_device *c, const void *base, struct qdp_error *reterr);
void cuda_scratch_free(struct cuda_scratch *s);
qdp_status cuda_scratch_grow(struct cuda_device *c, void **buf, uint64_t *cap, uint64_t need,
                             struct qdp_error *reterr);
qdp_status cuda_host_sums_grow(struct cuda_device *c, struct cuda_scratch *s, uint64_t n,
                               struct qdp_error *reterr);
qdp_status cuda_pinned_grow(struct cuda_device *c, struct cuda_scratch *s, uint64_t bytes,
                            struct qdp_error *reterr);
struct cuda_scratch *cuda_scratch_take(struct cuda_device *c);
void cuda_scratch_give(struct cuda_device *c, struct cuda_scratch *s);

/* Amplitude (cuda_norm.c) */
qdp_status cuda_norm_load(struct runtime_device *d, struct runtime_shard_work *w,
                          struct qdp_error *reterr);
qdp_status cuda_norm_sumsq(struct runtime_device *d, struct runtime_shard_work *w, uint64_t offset,
                           uint64_t len, uint64_t block, const int32_t *scale_log2,
                           double *ret_sums, struct qdp_error *reterr);
qdp_status cuda_norm_scale(struct runtime_device *d, struct runtime_shard_work *w,
                           const double *sumsq, const int32_t *scale_log2,
                           struct qdp_error *reterr);
uint32_t cuda_norm_part_log2(struct runtime_device *d, qdp_dtype in);
qdp_status cuda_norm_partials(struct runtime_device *d, struct runtime_shard_work *w,
                              const struct runtime_sum_part *parts, size_t nparts, uint64_t stride,
                              size_t members, const struct qdpk_norm_part *all, size_t nall,
                              double **ret_send, double **ret_recv, void **ret_stream,
                              struct qdp_error *reterr);
qdp_status cuda_norm_totals(struct runtime_device *d, struct runtime_shard_work *w, size_t nall,
                            uint64_t stride, const double **ret_totals, struct qdp_error *reterr);

/* Global-bit stages (cuda_exchange.c) */
qdp_status cuda_butterfly(struct runtime_device *da, void *a, struct runtime_device *db, void *b,
                          qdp_dtype out, uint64_t count, const char **ret_how,
                          struct qdp_error *reterr);
qdp_status cuda_combine_host(struct runtime_device *d, void *mine, void *partner_host,
                             qdp_dtype out, uint64_t count, int high, struct qdp_error *reterr);
qdp_status cuda_combine_group(struct runtime_device *d, void *mine, qdp_dtype out, uint64_t count,
                              int high, struct device_comm *g, size_t local, int peer,
                              struct qdp_error *reterr);

#endif /* QDP_RUNTIME_CUDA_BACKEND_H */
