/* The CUDA backend: GPUs ("cuda:N") running the launchers of kernels/qdpk_cuda.h behind the
 * interface of runtime/device.h.
 *
 * Each device has one non-blocking stream, created once, and a fixed staging pair for host input:
 * two pinned host buffers and two device buffers of `stage_bytes` each, with an event per slot
 * that says when the GPU is done with it. Input from host memory is streamed through the pair in
 * pieces: while the GPU uploads and computes on one slot, this thread packs the next piece into
 * the other. So the input never needs to be whole on the GPU, and the device memory qdp takes for
 * input is bounded by the staging, whatever the input's size.
 *
 * The executor calls the ops from its own threads (one per shard), and jobs may run concurrently,
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
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "device_comm.h"
#include "qdp_limits.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "runtime/device.h"
#include "runtime/mesh.h"
#include "runtime/norm.h"

/* Each staging slot: 64 MiB by default. A piece that large takes ~1.2 ms to upload at the
 * 55 GB/s pinned host-to-device rate measured on the target GPU, long enough that the per-piece
 * launch and event overheads (a few microseconds) vanish, small enough that 2 x 64 MiB of device
 * memory is negligible next to a GPU's state budget. */
#define CUDA_STAGE_DEFAULT (UINT64_C(64) << 20)
/* The smallest slot: it must hold one row of the widest parameter set (iqp with 60 qubits has
 * 60 + 1770 values, 14640 B in float64) with room to spare. */
#define CUDA_STAGE_MIN (UINT64_C(64) << 10)
/* Reads up to this size go straight to the caller's memory (the driver stages them itself);
 * larger ones through the pinned staging, two slots in flight. */
#define CUDA_READ_DIRECT (UINT64_C(1) << 20)
/* Freed state buffers up to CUDA_CACHE_ENTRY_MAX are kept (CUDA_CACHE_SLOTS of them, at most
 * CUDA_CACHE_BYTES in all) for the next state of the same size: a stream of small jobs then
 * neither pays cudaMalloc nor cudaFree, whose implicit device-wide synchronization would stall
 * every other job on the GPU. Kept buffers count as free memory; a cudaMalloc that fails empties
 * the cache and tries again. */
#define CUDA_CACHE_ENTRY_MAX (UINT64_C(256) << 20)
#define CUDA_CACHE_BYTES (UINT64_C(1) << 30)
#define CUDA_CACHE_SLOTS 32

struct cuda_device {
  struct runtime_device base; /* first: the executor sees only this */
  cudaStream_t stream;
  pthread_mutex_t stage_lock; /* the staging pair and its events */
  int lock_ready;
  uint64_t stage_bytes; /* of each slot */
  void *stage_host[2];  /* pinned */
  void *stage_dev[2];
  cudaEvent_t stage_free[2];            /* recorded after the last GPU use of the slot */
  unsigned char peer[QDP_DEVICES_MAX]; /* by ordinal: this device can access that one's memory */
  pthread_mutex_t cache_lock;           /* the kept buffers */
  struct device_comm *comm; /* the mesh's group, with this device as member `member`; NULL: none */
  size_t member;
  bool nccl_exchange; /* swap global-bit stages over NCCL even with peer access */
  struct {
    void *ptr;
    uint64_t bytes;
  } cache[CUDA_CACHE_SLOTS];
  size_t ncache;
  uint64_t cache_bytes;
  struct cuda_scratch *spares; /* under cache_lock */
  size_t nspares;
};

/* Amplitude's per-job device memory, between amp_load and work_done. */
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
  void *pinned; /* page-locked host memory: the descriptors going up, then the totals coming back */
  uint64_t pinned_cap;
  /* One-pass input: the slice uploaded once into the tail of the shard's own buffer (the state
   * takes at least twice the input's bytes), read there by both passes; NULL: streamed. */
  const char *resident;
  struct cuda_scratch *next; /* in the device's spares */
};

/* Scratch descriptions with their device buffers are kept (up to CUDA_SPARE_SCRATCH, each holding
 * at most CUDA_SPARE_SCRATCH_BYTES) for the next amplitude job: a small job then allocates and
 * frees no device memory at all (a cudaFree waits for the whole device). */
#define CUDA_SPARE_SCRATCH 8
#define CUDA_SPARE_SCRATCH_BYTES (UINT64_C(64) << 20)

static struct cuda_device *cuda_of(struct runtime_device *d) {
  return (struct cuda_device *)d;
}

/* Records a failed CUDA call and clears the thread's CUDA error state. */
static qdp_status cuda_failed(const struct runtime_device *d, cudaError_t err, const char *call,
                              struct qdp_error *reterr) {
  (void)cudaGetLastError();
  return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)err, "%s: %s failed: %s (%s)",
                          d->info.name, call, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* A launcher reported failure: the CUDA error, if it left one, names the cause. */
static qdp_status launch_failed(const struct runtime_device *d, qdp_status st, const char *kernel,
                                struct qdp_error *reterr) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)err,
                            "%s: kernel %s failed: %s (%s)", d->info.name, kernel,
                            cudaGetErrorName(err), cudaGetErrorString(err));
  }
  /* Anything but a CUDA failure means the backend passed arguments the launcher refuses: a bug
   * here, not a fault of the request. */
  return qdp_error_set_at(reterr, st == QDP_ERR_CUDA ? QDP_ERR_CUDA : QDP_ERR_INTERNAL,
                          d->info.ordinal, -1, "%s: kernel %s refused its arguments (%s)",
                          d->info.name, kernel, qdp_status_name(st));
}

/* CU_TRY(rc, d, "cudaX", cudaX(...)): a failed CUDA call sets rc and jumps to `out:`. */
#define CU_TRY(rc, d, name, call) \
  do { \
    cudaError_t cu_err_ = (call); \
    if (cu_err_ != cudaSuccess) { \
      (rc) = cuda_failed((d), cu_err_, name, reterr); \
      goto out; \
    } \
  } while (0)

/* K_TRY(rc, d, "qdpk_x", qdpk_x(...)): a failed launch sets rc and jumps to `out:`. */
#define K_TRY(rc, d, name, call) \
  do { \
    qdp_status k_st_ = (call); \
    if (k_st_ != QDP_OK) { \
      (rc) = launch_failed((d), k_st_, name, reterr); \
      goto out; \
    } \
  } while (0)

static qdp_status use_device(struct runtime_device *d, struct qdp_error *reterr) {
  cudaError_t err = cudaSetDevice(d->info.ordinal);
  return err == cudaSuccess ? QDP_OK : cuda_failed(d, err, "cudaSetDevice", reterr);
}

/* cudaMalloc on the current device; RESOURCE_EXHAUSTED with the numbers when memory is short. */
static qdp_status dev_malloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                             struct qdp_error *reterr) {
  void *p = NULL;
  /* cudaMalloc(0) gives NULL, which the executor would take for "no buffer". */
  uint64_t ask = bytes ? bytes : 1;
  cudaError_t err = ask > SIZE_MAX ? cudaErrorMemoryAllocation : cudaMalloc(&p, (size_t)ask);
  if (err == cudaSuccess) {
    *ret_ptr = p;
    return QDP_OK;
  }
  if (err != cudaErrorMemoryAllocation) {
    return cuda_failed(d, err, "cudaMalloc", reterr);
  }
  (void)cudaGetLastError();
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    free_b = 0;
  }
  if (reterr) {
    reterr->need_bytes = bytes;
    reterr->free_bytes = free_b;
  }
  return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, (int)err,
                          "%s cannot allocate %llu B of device memory: cudaMalloc reports %s "
                          "with %llu B free of %llu B",
                          d->info.name, (unsigned long long)bytes, cudaGetErrorName(err),
                          (unsigned long long)free_b, (unsigned long long)total_b);
}

/* Waits for everything queued on the device's stream; used on error paths so that no copy is
 * still reading a staging slot or a buffer about to be freed. Errors here are the ones already
 * being reported, so they are cleared, not returned. */
static void drain(struct cuda_device *c) {
  if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

static qdp_status finish(struct cuda_device *c, struct qdp_error *reterr) {
  cudaError_t err = cudaStreamSynchronize(c->stream);
  return err == cudaSuccess ? QDP_OK : cuda_failed(&c->base, err, "cudaStreamSynchronize", reterr);
}

/* Copies nrows rows of row_bytes, src_stride apart, to dst packed, on the device's stream: one
 * linear copy when the rows are contiguous (a pitched copy of one very wide row runs well below
 * the link's rate), a pitched one otherwise. */
static cudaError_t copy_rows_async(struct cuda_device *c, const void *dst, const void *src,
                                   uint64_t src_stride, uint64_t row_bytes, uint64_t nrows,
                                   enum cudaMemcpyKind kind) {
  if (nrows == 1 || src_stride == row_bytes) {
    return cudaMemcpyAsync((void *)dst, src, (size_t)(row_bytes * nrows), kind, c->stream);
  }
  return cudaMemcpy2DAsync((void *)dst, (size_t)row_bytes, src, (size_t)src_stride,
                           (size_t)row_bytes, (size_t)nrows, kind, c->stream);
}

/* Staging. The caller holds stage_lock. A slot is used as: stage_put (wait until the GPU is done
 * with it, pack rows into the pinned buffer, queue the upload), launches that read stage_dev[slot],
 * stage_release (record the slot's event after them). Source memory that is itself page-locked
 * (a registered region) skips the packing: the copy engine reads it directly, and stream order
 * alone keeps the slot's previous readers ahead of the new upload. */
static qdp_status stage_put(struct cuda_device *c, int slot, const char *src, uint64_t src_stride,
                            uint64_t row_bytes, uint64_t nrows, bool pinned,
                            struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  uint64_t bytes = row_bytes * nrows;
  if (bytes > c->stage_bytes) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, c->base.info.ordinal, -1,
                            "%s: a staging piece of %llu B exceeds the %llu B slot",
                            c->base.info.name, (unsigned long long)bytes,
                            (unsigned long long)c->stage_bytes);
  }
  if (pinned) {
    CU_TRY(rc, &c->base, "cudaMemcpyAsync",
           copy_rows_async(c, c->stage_dev[slot], src, src_stride, row_bytes, nrows,
                           cudaMemcpyHostToDevice));
    goto out;
  }
  CU_TRY(rc, &c->base, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[slot]));
  char *dst = c->stage_host[slot];
  if (src_stride == row_bytes) {
    memcpy(dst, src, (size_t)bytes);
  } else {
    for (uint64_t r = 0; r < nrows; r++) {
      memcpy(dst + r * row_bytes, src + r * src_stride, (size_t)row_bytes);
    }
  }
  CU_TRY(
      rc, &c->base, "cudaMemcpyAsync",
      cudaMemcpyAsync(c->stage_dev[slot], dst, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
out:
  return rc;
}

static qdp_status stage_release(struct cuda_device *c, int slot, struct qdp_error *reterr) {
  cudaError_t err = cudaEventRecord(c->stage_free[slot], c->stream);
  return err == cudaSuccess ? QDP_OK : cuda_failed(&c->base, err, "cudaEventRecord", reterr);
}

/* Takes the staging lock and makes the device current. */
static qdp_status stage_begin(struct cuda_device *c, struct qdp_error *reterr) {
  pthread_mutex_lock(&c->stage_lock);
  qdp_status rc = use_device(&c->base, reterr);
  if (rc != QDP_OK) {
    pthread_mutex_unlock(&c->stage_lock);
  }
  return rc;
}

/* Ends a staged op: on failure first waits out what is queued, so that nothing in flight still
 * reads a slot the next holder will write. */
static qdp_status stage_end(struct cuda_device *c, qdp_status rc, struct qdp_error *reterr) {
  if (rc == QDP_OK) {
    rc = finish(c, reterr);
  } else {
    drain(c);
  }
  pthread_mutex_unlock(&c->stage_lock);
  return rc;
}

/* Ends a staged op whose results only later work on the same stream reads: on success the staging
 * is handed back without waiting (the slots' events and stream order keep the next holder behind
 * it); on failure as stage_end. */
static qdp_status stage_end_queued(struct cuda_device *c, qdp_status rc, struct qdp_error *reterr) {
  if (rc != QDP_OK) {
    return stage_end(c, rc, reterr);
  }
  pthread_mutex_unlock(&c->stage_lock);
  return QDP_OK;
}

static uint64_t pow2_floor(uint64_t v) {
  return v ? UINT64_C(1) << (63 - __builtin_clzll(v)) : 0;
}

static uint64_t pow2_ceil(uint64_t v) {
  return v <= 1 ? 1 : UINT64_C(1) << (64 - __builtin_clzll(v - 1));
}

static uint32_t log2_of(uint64_t pow2) {
  return (uint32_t)__builtin_ctzll(pow2);
}

/* ---- the ops ----------------------------------------------------------------------------------
 */

static void scratch_free(struct cuda_scratch *s);

/* Frees every kept buffer and scratch description. */
static void cache_drop(struct cuda_device *c) {
  pthread_mutex_lock(&c->cache_lock);
  for (size_t i = 0; i < c->ncache; i++) {
    if (cudaFree(c->cache[i].ptr) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  c->ncache = 0;
  c->cache_bytes = 0;
  struct cuda_scratch *spares = c->spares;
  c->spares = NULL;
  c->nspares = 0;
  pthread_mutex_unlock(&c->cache_lock);
  while (spares) {
    struct cuda_scratch *next = spares->next;
    scratch_free(spares);
    spares = next;
  }
}

static void cuda_query(struct runtime_device *d, uint64_t *ret_total, uint64_t *ret_free) {
  struct cuda_device *c = cuda_of(d);
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess ||
      cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    *ret_total = d->info.total_bytes;
    *ret_free = 0; /* a device that cannot answer has nothing to offer */
    return;
  }
  pthread_mutex_lock(&c->cache_lock);
  uint64_t kept = c->cache_bytes;
  pthread_mutex_unlock(&c->cache_lock);
  *ret_total = total_b;
  *ret_free = free_b + kept;
}

static qdp_status cuda_alloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                             struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = use_device(d, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (bytes <= CUDA_CACHE_ENTRY_MAX) {
    pthread_mutex_lock(&c->cache_lock);
    for (size_t i = 0; i < c->ncache; i++) {
      if (c->cache[i].bytes == bytes) {
        *ret_ptr = c->cache[i].ptr;
        c->cache_bytes -= bytes;
        c->cache[i] = c->cache[--c->ncache];
        pthread_mutex_unlock(&c->cache_lock);
        return QDP_OK;
      }
    }
    pthread_mutex_unlock(&c->cache_lock);
  }
  rc = dev_malloc(d, bytes, ret_ptr, reterr);
  if (rc == QDP_ERR_RESOURCE_EXHAUSTED && (c->ncache > 0 || c->nspares > 0)) {
    cache_drop(c);
    rc = dev_malloc(d, bytes, ret_ptr, reterr);
  }
  return rc;
}

static void cuda_free(struct runtime_device *d, void *ptr, uint64_t bytes) {
  struct cuda_device *c = cuda_of(d);
  if (!ptr) {
    return;
  }
  if (bytes <= CUDA_CACHE_ENTRY_MAX) {
    pthread_mutex_lock(&c->cache_lock);
    if (c->ncache < CUDA_CACHE_SLOTS && c->cache_bytes + bytes <= CUDA_CACHE_BYTES) {
      c->cache[c->ncache].ptr = ptr;
      c->cache[c->ncache].bytes = bytes;
      c->ncache++;
      c->cache_bytes += bytes;
      pthread_mutex_unlock(&c->cache_lock);
      return;
    }
    pthread_mutex_unlock(&c->cache_lock);
  }
  /* Freed even when the device cannot be made current: with unified addressing cudaFree finds
   * the pointer's device itself. Errors are dropped, as nothing a caller freeing memory could do
   * would help. */
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  if (cudaFree(ptr) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

static qdp_status cuda_read(struct runtime_device *d, const void *src, uint64_t bytes, void *dst,
                            struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  if (bytes == 0) {
    return QDP_OK;
  }
  if (bytes <= CUDA_READ_DIRECT) {
    QDP_TRY(rc, use_device(d, reterr));
    CU_TRY(rc, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, c->stream));
    QDP_TRY(rc, finish(c, reterr));
    return QDP_OK;
  }
  /* Two slots in flight: the copy engine fills one pinned buffer while this thread empties the
   * other into dst. */
  QDP_TRY(rc, stage_begin(c, reterr));
  {
    uint64_t piece = c->stage_bytes;
    uint64_t npieces = (bytes + piece - 1) / piece;
    for (uint64_t k = 0; k <= npieces && rc == QDP_OK; k++) {
      if (k < npieces) {
        int slot = (int)(k & 1);
        uint64_t at = k * piece;
        uint64_t n = bytes - at < piece ? bytes - at : piece;
        cudaError_t err = cudaMemcpyAsync(c->stage_host[slot], (const char *)src + at, (size_t)n,
                                          cudaMemcpyDeviceToHost, c->stream);
        if (err == cudaSuccess) {
          err = cudaEventRecord(c->stage_free[slot], c->stream);
        }
        if (err != cudaSuccess) {
          rc = cuda_failed(d, err, "cudaMemcpyAsync", reterr);
          break;
        }
      }
      if (k > 0) {
        int slot = (int)((k - 1) & 1);
        uint64_t at = (k - 1) * piece;
        uint64_t n = bytes - at < piece ? bytes - at : piece;
        cudaError_t err = cudaEventSynchronize(c->stage_free[slot]);
        if (err != cudaSuccess) {
          rc = cuda_failed(d, err, "cudaEventSynchronize", reterr);
          break;
        }
        memcpy((char *)dst + at, c->stage_host[slot], (size_t)n);
      }
    }
  }
  rc = stage_end(c, rc, reterr);
out:
  return rc;
}

static void scratch_free(struct cuda_scratch *s) {
  if (!s) {
    return;
  }
  void *dev[] = {s->norms, s->sums, s->ws, s->scales, s->send, s->recv, s->parts};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) {
    if (dev[i] && cudaFree(dev[i]) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  if (s->pinned && cudaFreeHost(s->pinned) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  free(s->host_sums);
  free(s);
}

/* Grows a device scratch buffer to at least `need` bytes. The stream may still use the old one,
 * so it is drained first. */
static qdp_status scratch_grow(struct cuda_device *c, void **buf, uint64_t *cap, uint64_t need,
                               struct qdp_error *reterr) {
  if (need <= *cap) {
    return QDP_OK;
  }
  drain(c);
  if (*buf && cudaFree(*buf) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  *buf = NULL;
  *cap = 0;
  qdp_status rc = dev_malloc(&c->base, need, buf, reterr);
  if (rc == QDP_OK) {
    *cap = need;
  }
  return rc;
}

static qdp_status host_sums_grow(struct cuda_device *c, struct cuda_scratch *s, uint64_t n,
                                 struct qdp_error *reterr) {
  if (n <= s->host_cap) {
    return QDP_OK;
  }
  double *p = n <= SIZE_MAX / sizeof *p ? realloc(s->host_sums, (size_t)n * sizeof *p) : NULL;
  if (!p) {
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, c->base.info.ordinal, ENOMEM,
                            "%s: cannot allocate %llu B of host memory for partial norms",
                            c->base.info.name, (unsigned long long)(n * sizeof *p));
  }
  s->host_sums = p;
  s->host_cap = n;
  return QDP_OK;
}

/* The rows' exponents of the norm's fallback (host memory, NULL: none) in device memory, queued on
 * the stream; *ret_dev gets the device copy, or NULL. */
static qdp_status upload_scales(struct cuda_device *c, struct runtime_shard_work *w,
                                const int32_t *scale_log2, const int32_t **ret_dev,
                                struct qdp_error *reterr) {
  struct cuda_scratch *s = w->scratch;
  uint64_t bytes = w->shard->rows * sizeof(int32_t);
  qdp_status rc = QDP_OK;
  *ret_dev = NULL;
  if (!scale_log2) {
    return QDP_OK;
  }
  QDP_TRY(rc, scratch_grow(c, &s->scales, &s->scales_cap, bytes, reterr));
  CU_TRY(rc, &c->base, "cudaMemcpyAsync",
         cudaMemcpyAsync(s->scales, scale_log2, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
  *ret_dev = s->scales;
out:
  return rc;
}

/* Whether a shard's input goes up once, into the tail of its own buffer, instead of streaming
 * through the staging in each pass:
 *  - an input (one sample or a batch) that fits one staging slot whole (the second pass then
 *    reads its copy in the slot instead of the host again), or
 *  - one large sample with an output element at least twice the input's, so the input fits
 *    beside what is already written while pass 2 expands it in place (scale_resident). */
static bool resident_input(const struct cuda_device *c, const struct runtime_shard_work *w) {
  unsigned isize = qdp_dtype_size(w->in), osize = qdp_dtype_size(w->plan->out_dtype);
  uint64_t rows = w->shard->rows;
  if (w->len == 0) {
    return false;
  }
  if (w->len <= c->stage_bytes / isize / rows) {
    return true;
  }
  return rows == 1 && osize >= 2 * isize;
}

/* Uploads the slice, rows packed [rows][len], to s->resident: one DMA from registered memory,
 * else through the pinned staging (a batch in one slot; one large row piece by piece, two slots
 * in flight). With the staging held. */
static qdp_status upload_resident(struct cuda_device *c, struct runtime_shard_work *w,
                                  struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = QDP_OK;
  unsigned isize = qdp_dtype_size(w->in);
  uint64_t rows = w->shard->rows, row_bytes = w->len * isize, bytes = rows * row_bytes;
  if (w->pinned) {
    CU_TRY(rc, d, "cudaMemcpyAsync",
           copy_rows_async(c, s->resident, w->x, w->in_stride * isize, row_bytes, rows,
                           cudaMemcpyHostToDevice));
    goto out;
  }
  if (rows > 1) {
    CU_TRY(rc, d, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[0]));
    for (uint64_t r = 0; r < rows; r++) {
      memcpy((char *)c->stage_host[0] + r * row_bytes,
             (const char *)w->x + r * w->in_stride * isize, (size_t)row_bytes);
    }
    CU_TRY(rc, d, "cudaMemcpyAsync",
           cudaMemcpyAsync((void *)s->resident, c->stage_host[0], (size_t)bytes,
                           cudaMemcpyHostToDevice, c->stream));
    QDP_TRY(rc, stage_release(c, 0, reterr));
    goto out;
  }
  for (uint64_t at = 0, k = 0; at < bytes; at += c->stage_bytes, k++) {
    int slot = (int)(k & 1);
    uint64_t n = bytes - at < c->stage_bytes ? bytes - at : c->stage_bytes;
    CU_TRY(rc, d, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[slot]));
    memcpy(c->stage_host[slot], (const char *)w->x + at, (size_t)n);
    CU_TRY(rc, d, "cudaMemcpyAsync",
           cudaMemcpyAsync((void *)(s->resident + at), c->stage_host[slot], (size_t)n,
                           cudaMemcpyHostToDevice, c->stream));
    QDP_TRY(rc, stage_release(c, slot, reterr));
  }
out:
  return rc;
}

/* A kept scratch description, or a new empty one. */
static struct cuda_scratch *scratch_take(struct cuda_device *c) {
  pthread_mutex_lock(&c->cache_lock);
  struct cuda_scratch *s = c->spares;
  if (s) {
    c->spares = s->next;
    c->nspares--;
  }
  pthread_mutex_unlock(&c->cache_lock);
  if (s) {
    s->next = NULL;
    s->resident = NULL;
    return s;
  }
  return calloc(1, sizeof *s);
}

/* Keeps s for the next job when there is room and it is small, else frees it. */
static void scratch_give(struct cuda_device *c, struct cuda_scratch *s) {
  uint64_t bytes = s->norms_cap + s->sums_cap + s->ws_cap + s->scales_cap + s->send_cap +
                   s->recv_cap + s->parts_cap;
  pthread_mutex_lock(&c->cache_lock);
  if (c->nspares < CUDA_SPARE_SCRATCH && bytes <= CUDA_SPARE_SCRATCH_BYTES) {
    s->next = c->spares;
    c->spares = s;
    c->nspares++;
    s = NULL;
  }
  pthread_mutex_unlock(&c->cache_lock);
  scratch_free(s);
}

static qdp_status cuda_amp_load(struct runtime_device *d, struct runtime_shard_work *w,
                                struct qdp_error *reterr) {
  /* Small slices are not uploaded here: both passes stream them through the staging. Large ones
   * go up once, into the tail of the shard's buffer, so the input is read from the host once and
   * the device never holds more than the state and the staging. */
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  struct cuda_scratch *s = scratch_take(c);
  if (!s) {
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, ENOMEM,
                            "%s: cannot allocate the job's scratch description", d->info.name);
  }
  QDP_TRY(rc, use_device(d, reterr));
  QDP_TRY(rc, scratch_grow(c, &s->norms, &s->norms_cap, w->shard->rows * sizeof(double), reterr));
  w->scratch = s;
  if (resident_input(c, w)) {
    uint64_t rows = w->shard->rows;
    uint64_t end = rows * w->shard->count * qdp_dtype_size(w->plan->out_dtype);
    /* 16-byte aligned for the kernels' vector loads. */
    s->resident =
        (const char *)w->out + ((end - rows * w->len * qdp_dtype_size(w->in)) & ~(uint64_t)15);
    QDP_TRY(rc, stage_begin(c, reterr));
    /* Not waited for: everything that reads it is queued behind it on the stream. */
    rc = stage_end_queued(c, upload_resident(c, w, reterr), reterr);
  }
  s = NULL;
out:
  if (s && w->scratch == s) {
    w->scratch = NULL;
  }
  scratch_free(s);
  return rc;
}

/* Pass 1 for one aligned block, with the staging held: the pairwise sum of squares of each row's
 * values [0, len) at x (zero past len up to `block`). */
static qdp_status sumsq_staged(struct cuda_device *c, struct runtime_shard_work *w, const char *x,
                               uint64_t len, uint64_t block, const int32_t *scales,
                               double *ret_sums, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  struct norm_block *chunks = NULL;
  qdp_status rc = QDP_OK;
  unsigned isize = qdp_dtype_size(w->in);
  uint64_t rows = w->shard->rows;
  qdp_dtype out = w->plan->out_dtype;
  uint64_t stride = w->in_stride * isize;
  /* The largest aligned power-of-two subtree that fits a slot. */
  uint64_t chunk = pow2_floor(c->stage_bytes / isize);
  int slot = 0;
  if (len <= chunk) {
    /* Whole rows per piece. A subtree wholly past len adds +0, which changes no bit, so the tree
     * over the block is the tree over the smallest power of two holding len. */
    uint64_t sub = pow2_ceil(len);
    uint64_t per = c->stage_bytes / (len * isize);
    per = per < rows ? per : rows;
    QDP_TRY(rc, scratch_grow(c, &s->sums, &s->sums_cap, rows * sizeof(double), reterr));
    QDP_TRY(rc, scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, per), reterr));
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
      uint64_t nr = rows - r0 < per ? rows - r0 : per;
      QDP_TRY(rc, stage_put(c, slot, x + r0 * stride, stride, len * isize, nr, w->pinned, reterr));
      K_TRY(
          rc, d, "qdpk_sumsq",
          qdpk_sumsq(c->stage_dev[slot], w->in, len, len, sub, nr, out, scales ? scales + r0 : NULL,
                     s->ws, (size_t)s->ws_cap, (double *)s->sums + r0, c->stream));
      QDP_TRY(rc, stage_release(c, slot, reterr));
      slot ^= 1;
    }
    CU_TRY(rc, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(ret_sums, s->sums, (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost,
                           c->stream));
    QDP_TRY(rc, finish(c, reterr));
    goto out;
  }
  /* Rows longer than a slot: one sum per chunk, then the block's tree over the chunks. */
  uint64_t nchunks = (len + chunk - 1) / chunk;
  uint64_t nsums = rows * nchunks;
  QDP_TRY(rc, scratch_grow(c, &s->sums, &s->sums_cap, nsums * sizeof(double), reterr));
  QDP_TRY(rc, scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(chunk, 1), reterr));
  QDP_TRY(rc, host_sums_grow(c, s, nsums, reterr));
  chunks = nchunks <= SIZE_MAX / sizeof *chunks ? malloc((size_t)nchunks * sizeof *chunks) : NULL;
  if (!chunks) {
    rc = qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, ENOMEM,
                          "%s: cannot allocate %llu chunk descriptions", d->info.name,
                          (unsigned long long)nchunks);
    goto out;
  }
  for (uint64_t r = 0; r < rows; r++) {
    for (uint64_t k = 0; k < nchunks; k++) {
      uint64_t at = k * chunk;
      uint64_t n = len - at < chunk ? len - at : chunk;
      QDP_TRY(rc, stage_put(c, slot, x + r * stride + at * isize, n * isize, n * isize, 1,
                            w->pinned, reterr));
      K_TRY(rc, d, "qdpk_sumsq",
            qdpk_sumsq(c->stage_dev[slot], w->in, n, n, pow2_ceil(n), 1, out,
                       scales ? scales + r : NULL, s->ws, (size_t)s->ws_cap,
                       (double *)s->sums + r * nchunks + k, c->stream));
      QDP_TRY(rc, stage_release(c, slot, reterr));
      slot ^= 1;
    }
  }
  CU_TRY(rc, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(s->host_sums, s->sums, (size_t)nsums * sizeof(double),
                         cudaMemcpyDeviceToHost, c->stream));
  QDP_TRY(rc, finish(c, reterr));
  /* Chunk k is the aligned subtree [k * chunk, (k + 1) * chunk) of the block's tree [0, block);
   * the subtrees past len are absent, which norm_combine counts as zero, as the kernel would.
   * Float states add in float, as the kernel does. */
  for (uint64_t r = 0; r < rows; r++) {
    for (uint64_t k = 0; k < nchunks; k++) {
      chunks[k] = (struct norm_block){
          .first = k * chunk, .log2 = log2_of(chunk), .sum = s->host_sums[r * nchunks + k]};
    }
    ret_sums[r] = norm_combine(chunks, (size_t)nchunks, log2_of(block), out == QDP_DTYPE_COMPLEX64);
  }
out:
  free(chunks);
  return rc;
}

static qdp_status cuda_amp_sumsq(struct runtime_device *d, struct runtime_shard_work *w,
                                 uint64_t offset, uint64_t len, uint64_t block,
                                 const int32_t *scale_log2, double *ret_sums,
                                 struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  if (!w->scratch || len == 0 || len > block || (block & (block - 1)) != 0) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: sum of squares asked for %llu values in a block of %llu%s",
                            d->info.name, (unsigned long long)len, (unsigned long long)block,
                            w->scratch ? "" : " before the slice was loaded");
  }
  qdp_status rc = stage_begin(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  struct cuda_scratch *s = w->scratch;
  const int32_t *scales = NULL;
  QDP_TRY(rc, upload_scales(c, w, scale_log2, &scales, reterr));
  if (s->resident) {
    /* The whole block in one launch: the tree over the smallest power of two holding len, which
     * is the block's (the rest is zeros). */
    uint64_t sub = pow2_ceil(len), rows = w->shard->rows;
    QDP_TRY(rc, scratch_grow(c, &s->sums, &s->sums_cap, rows * sizeof(double), reterr));
    QDP_TRY(rc, scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, rows), reterr));
    K_TRY(rc, d, "qdpk_sumsq",
          qdpk_sumsq(s->resident + offset * qdp_dtype_size(w->in), w->in, w->len, len, sub, rows,
                     w->plan->out_dtype, scales, s->ws, (size_t)s->ws_cap, (double *)s->sums,
                     c->stream));
    CU_TRY(rc, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(ret_sums, s->sums, (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost,
                           c->stream));
    goto out;
  }
  const char *x = (const char *)w->x + offset * qdp_dtype_size(w->in);
  rc = sumsq_staged(c, w, x, len, block, scales, ret_sums, reterr);
out:
  return stage_end(c, rc, reterr);
}

/* Pass 2 for a resident slice, in place: the amplitudes are written from the front of the buffer
 * while the input sits at its back. A chunk [e0, e1) may only write bytes below the first input
 * value it has not read yet (e1 * osize <= input base + e0 * isize), so the chunks grow no larger
 * than the room already freed: about half of what is left each time for a 2:1 size ratio. Once
 * the input left fits a staging slot it is copied there and the rest is one launch. */
static qdp_status scale_resident(struct cuda_device *c, struct runtime_shard_work *w,
                                 const int32_t *scales, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = QDP_OK;
  unsigned isize = qdp_dtype_size(w->in), osize = qdp_dtype_size(w->plan->out_dtype);
  uint64_t count = w->shard->count, len = w->len, rows = w->shard->rows;
  char *o = w->out;
  uint64_t base = (uint64_t)(s->resident - o);
  struct qdpk_span span = {.qubits = w->plan->qubits, .rows = 1, .out = w->plan->out_dtype};
  uint64_t e0 = 0;
  /* A batch is resident only when it fits a slot: it goes there whole (below). */
  while (rows == 1 && (len - e0) * isize > c->stage_bytes) {
    uint64_t e1 = (base + e0 * isize) / osize;
    e1 = e1 < len ? e1 : len;
    span.first = w->shard->first + e0;
    span.count = e1 - e0;
    K_TRY(rc, d, "qdpk_amplitude",
          qdpk_amplitude(&span, s->resident + e0 * isize, w->in, e1 - e0, e1 - e0,
                         (const double *)s->norms, scales, o + e0 * osize, c->stream));
    e0 = e1;
  }
  /* The rest of the input (at most a slot) moves to the staging, out of the way of the writes. */
  CU_TRY(rc, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(c->stage_dev[0], s->resident + e0 * isize,
                         (size_t)(rows * (len - e0) * isize), cudaMemcpyDeviceToDevice, c->stream));
  span.first = w->shard->first + e0;
  span.count = count - e0;
  span.rows = rows;
  K_TRY(rc, d, "qdpk_amplitude",
        qdpk_amplitude(&span, c->stage_dev[0], w->in, len - e0, len - e0, (const double *)s->norms,
                       scales, o + e0 * osize, c->stream));
  QDP_TRY(rc, stage_release(c, 0, reterr));
out:
  return rc;
}

/* Pass 2 with the staging held: out = x / sqrt(sumsq) for each row's len values, zeros after. */
static qdp_status scale_staged(struct cuda_device *c, struct runtime_shard_work *w,
                               const double *sumsq, const int32_t *scale_log2,
                               struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = QDP_OK;
  unsigned isize = qdp_dtype_size(w->in);
  unsigned osize = qdp_dtype_size(w->plan->out_dtype);
  uint64_t rows = w->shard->rows, count = w->shard->count, len = w->len;
  uint64_t stride = w->in_stride * isize;
  const char *x = w->x;
  char *o = w->out;
  struct qdpk_span span = {.qubits = w->plan->qubits,
                           .first = w->shard->first,
                           .count = count,
                           .rows = rows,
                           .out = w->plan->out_dtype};
  int slot = 0;
  if (len == 0) {
    /* The shard lies wholly past the input: padding only. */
    CU_TRY(rc, d, "cudaMemsetAsync",
           cudaMemsetAsync(o, 0, (size_t)(rows * count * osize), c->stream));
    goto out;
  }
  if (sumsq) {
    CU_TRY(rc, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(s->norms, sumsq, (size_t)rows * sizeof(double), cudaMemcpyHostToDevice,
                           c->stream));
  }
  const int32_t *scales = NULL;
  QDP_TRY(rc, upload_scales(c, w, scale_log2, &scales, reterr));
  if (s->resident) {
    rc = scale_resident(c, w, scales, reterr);
    goto out;
  }
  uint64_t chunk = c->stage_bytes / isize;
  if (len <= chunk) {
    uint64_t per = c->stage_bytes / (len * isize);
    per = per < rows ? per : rows;
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
      uint64_t nr = rows - r0 < per ? rows - r0 : per;
      QDP_TRY(rc, stage_put(c, slot, x + r0 * stride, stride, len * isize, nr, w->pinned, reterr));
      span.rows = nr;
      K_TRY(rc, d, "qdpk_amplitude",
            qdpk_amplitude(&span, c->stage_dev[slot], w->in, len, len, (double *)s->norms + r0,
                           scales ? scales + r0 : NULL, o + r0 * count * osize, c->stream));
      QDP_TRY(rc, stage_release(c, slot, reterr));
      slot ^= 1;
    }
    goto out;
  }
  /* Rows longer than a slot, piece by piece; the last piece also writes the row's padding. */
  span.rows = 1;
  for (uint64_t r = 0; r < rows; r++) {
    for (uint64_t at = 0; at < len; at += chunk) {
      uint64_t n = len - at < chunk ? len - at : chunk;
      QDP_TRY(rc, stage_put(c, slot, x + r * stride + at * isize, n * isize, n * isize, 1,
                            w->pinned, reterr));
      span.first = w->shard->first + at;
      span.count = at + n == len ? count - at : n;
      K_TRY(rc, d, "qdpk_amplitude",
            qdpk_amplitude(&span, c->stage_dev[slot], w->in, n, n, (double *)s->norms + r,
                           scales ? scales + r : NULL, o + (r * count + at) * osize, c->stream));
      QDP_TRY(rc, stage_release(c, slot, reterr));
      slot ^= 1;
    }
  }
out:
  return rc;
}

static qdp_status cuda_amp_scale(struct runtime_device *d, struct runtime_shard_work *w,
                                 const double *sumsq, const int32_t *scale_log2,
                                 struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  if (!w->scratch) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: amplitudes asked before the slice was loaded", d->info.name);
  }
  qdp_status rc = stage_begin(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = scale_staged(c, w, sumsq, scale_log2, reterr);
  return stage_end(c, rc, reterr);
}

static uint32_t cuda_amp_part_log2(struct runtime_device *d, qdp_dtype in) {
  return log2_of(pow2_floor(cuda_of(d)->stage_bytes / qdp_dtype_size(in)));
}

/* Each part's sums go through the `sums` scratch (one per row of a launch) into column k of the
 * send buffer; a part never exceeds a staging slot, so a launch covers whole parts. */
static qdp_status partials_staged(struct cuda_device *c, struct runtime_shard_work *w,
                                  const struct runtime_amp_part *parts, size_t nparts,
                                  uint64_t stride, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = QDP_OK;
  unsigned isize = qdp_dtype_size(w->in);
  uint64_t rows = w->shard->rows, row_bytes = w->in_stride * isize;
  int slot = 0;
  for (size_t k = 0; k < nparts; k++) {
    const struct runtime_amp_part *pt = &parts[k];
    uint64_t sub = pow2_ceil(pt->len);
    uint64_t per = c->stage_bytes / (pt->len * isize);
    per = per < rows ? per : rows;
    if (per == 0 || sub > (UINT64_C(1) << pt->log2)) {
      rc = qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: a part of %llu values does not fit a staging slot", d->info.name,
                            (unsigned long long)pt->len);
      goto out;
    }
    QDP_TRY(rc, scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, per), reterr));
    if (s->resident) {
      QDP_TRY(rc,
              scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, rows), reterr));
      K_TRY(rc, d, "qdpk_sumsq",
            qdpk_sumsq(s->resident + pt->offset * isize, w->in, w->len, pt->len, sub, rows,
                       w->plan->out_dtype, NULL, s->ws, (size_t)s->ws_cap, (double *)s->sums,
                       c->stream));
      CU_TRY(
          rc, d, "cudaMemcpy2DAsync",
          cudaMemcpy2DAsync((double *)s->send + k, stride * sizeof(double), s->sums, sizeof(double),
                            sizeof(double), (size_t)rows, cudaMemcpyDeviceToDevice, c->stream));
      continue;
    }
    const char *x = (const char *)w->x + pt->offset * isize;
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
      uint64_t nr = rows - r0 < per ? rows - r0 : per;
      QDP_TRY(rc, stage_put(c, slot, x + r0 * row_bytes, row_bytes, pt->len * isize, nr, w->pinned,
                            reterr));
      K_TRY(rc, d, "qdpk_sumsq",
            qdpk_sumsq(c->stage_dev[slot], w->in, pt->len, pt->len, sub, nr, w->plan->out_dtype,
                       NULL, s->ws, (size_t)s->ws_cap, (double *)s->sums, c->stream));
      QDP_TRY(rc, stage_release(c, slot, reterr));
      slot ^= 1;
      CU_TRY(rc, d, "cudaMemcpy2DAsync",
             cudaMemcpy2DAsync((double *)s->send + r0 * stride + k, stride * sizeof(double),
                               s->sums, sizeof(double), sizeof(double), (size_t)nr,
                               cudaMemcpyDeviceToDevice, c->stream));
    }
  }
out:
  return rc;
}

/* The pinned area: nall descriptors, then rows totals (at a double's alignment). */
static uint64_t pinned_totals_at(size_t nall) {
  uint64_t at = nall * sizeof(struct qdpk_norm_part);
  return (at + sizeof(double) - 1) / sizeof(double) * sizeof(double);
}

static qdp_status cuda_amp_partials(struct runtime_device *d, struct runtime_shard_work *w,
                                    const struct runtime_amp_part *parts, size_t nparts,
                                    uint64_t stride, size_t members,
                                    const struct qdpk_norm_part *all, size_t nall,
                                    double **ret_send, double **ret_recv, void **ret_stream,
                                    struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  struct cuda_scratch *s = w->scratch;
  uint64_t rows = w->shard->rows;
  qdp_status rc = QDP_OK;
  if (!s || stride < nparts) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1, "%s: partials asked %s",
                            d->info.name,
                            s ? "with fewer columns than parts" : "before the slice was loaded");
  }
  QDP_TRY(rc, use_device(d, reterr));
  /* Everything the combine needs is allocated here, before the gather: growing a buffer later
   * would wait for the stream, and so for the other members. */
  QDP_TRY(rc, scratch_grow(c, &s->sums, &s->sums_cap, rows * sizeof(double), reterr));
  QDP_TRY(rc, scratch_grow(c, &s->send, &s->send_cap, rows * stride * sizeof(double), reterr));
  QDP_TRY(rc, scratch_grow(c, &s->recv, &s->recv_cap, members * rows * stride * sizeof(double),
                           reterr));
  QDP_TRY(rc, scratch_grow(c, &s->parts, &s->parts_cap, nall * sizeof *all, reterr));
  uint64_t pinned = pinned_totals_at(nall) + rows * sizeof(double);
  if (pinned > s->pinned_cap) {
    drain(c);
    if (s->pinned && cudaFreeHost(s->pinned) != cudaSuccess) {
      (void)cudaGetLastError();
    }
    s->pinned = NULL;
    s->pinned_cap = 0;
    CU_TRY(rc, d, "cudaMallocHost", cudaMallocHost(&s->pinned, (size_t)pinned));
    s->pinned_cap = pinned;
  }
  memcpy(s->pinned, all, nall * sizeof *all);
  CU_TRY(rc, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(s->parts, s->pinned, nall * sizeof *all, cudaMemcpyHostToDevice,
                         c->stream));
  /* Columns past this shard's parts are never read; zero them so the buffers hold no garbage. */
  CU_TRY(rc, d, "cudaMemsetAsync",
         cudaMemsetAsync(s->send, 0, (size_t)(rows * stride * sizeof(double)), c->stream));
  QDP_TRY(rc, stage_begin(c, reterr));
  /* Not waited for: the gather runs on the same stream after the partials. */
  rc = stage_end_queued(c, partials_staged(c, w, parts, nparts, stride, reterr), reterr);
  *ret_send = s->send;
  *ret_recv = s->recv;
  *ret_stream = c->stream;
out:
  return rc;
}

static qdp_status cuda_amp_combine(struct runtime_device *d, struct runtime_shard_work *w,
                                   size_t nall, uint64_t stride, const double **ret_totals,
                                   struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  struct cuda_scratch *s = w->scratch;
  uint64_t rows = w->shard->rows;
  qdp_status rc = QDP_OK;
  double *totals = (double *)((char *)s->pinned + pinned_totals_at(nall));
  QDP_TRY(rc, use_device(d, reterr));
  K_TRY(
      rc, d, "qdpk_norm_combine",
      qdpk_norm_combine(s->parts, nall, w->plan->qubits, w->plan->out_dtype == QDP_DTYPE_COMPLEX64,
                        s->recv, stride, rows, s->norms, c->stream));
  CU_TRY(rc, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(totals, s->norms, (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost,
                         c->stream));
  *ret_totals = totals;
out:
  return rc;
}

/* Angle, phase, basis, iqp and iqp-z with the staging held: the parameters go up in groups of
 * whole rows, each group encoded as soon as it lands. */
static qdp_status encode_staged(struct cuda_device *c, struct runtime_shard_work *w,
                                struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  qdp_status rc = QDP_OK;
  const struct plan *p = w->plan;
  unsigned isize = qdp_dtype_size(w->in);
  unsigned osize = qdp_dtype_size(p->out_dtype);
  uint64_t rows = w->shard->rows, count = w->shard->count;
  uint64_t row_bytes = w->in_stride * isize;
  uint64_t per = row_bytes ? c->stage_bytes / row_bytes : 0;
  if (per == 0) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: a row of %llu parameter bytes does not fit the %llu B staging "
                            "slot",
                            d->info.name, (unsigned long long)row_bytes,
                            (unsigned long long)c->stage_bytes);
  }
  per = per < rows ? per : rows;
  struct qdpk_span span = {.qubits = p->qubits,
                           .first = w->shard->first,
                           .count = count,
                           .rows = rows,
                           .out = p->out_dtype};
  int slot = 0;
  for (uint64_t r0 = 0; r0 < rows; r0 += per) {
    uint64_t nr = rows - r0 < per ? rows - r0 : per;
    const void *xs = NULL;
    char *o = (char *)w->out + r0 * count * osize;
    QDP_TRY(rc, stage_put(c, slot, (const char *)w->x + r0 * row_bytes, row_bytes, row_bytes, nr,
                          w->pinned, reterr));
    xs = c->stage_dev[slot];
    span.rows = nr;
    switch (p->encoding) {
    case QDP_ENCODING_ANGLE:
      K_TRY(rc, d, "qdpk_angle", qdpk_angle(&span, xs, w->in, w->in_stride, o, c->stream));
      break;
    case QDP_ENCODING_PHASE:
      K_TRY(rc, d, "qdpk_phase", qdpk_phase(&span, xs, w->in, w->in_stride, o, c->stream));
      break;
    case QDP_ENCODING_BASIS:
      K_TRY(rc, d, "qdpk_basis", qdpk_basis(&span, xs, w->in, w->in_stride, o, c->stream));
      break;
    case QDP_ENCODING_IQP:
    case QDP_ENCODING_IQP_Z:
      K_TRY(rc, d, "qdpk_iqp_phases",
            qdpk_iqp_phases(&span, xs, w->in, w->in_stride, p->encoding == QDP_ENCODING_IQP, o,
                            c->stream));
      /* The local bits of the transform; the executor runs the global ones between shards. */
      K_TRY(rc, d, "qdpk_wht", qdpk_wht(o, p->out_dtype, count, nr, c->stream));
      break;
    default:
      rc = qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: encoding %d has no direct kernel", d->info.name, (int)p->encoding);
      goto out;
    }
    QDP_TRY(rc, stage_release(c, slot, reterr));
    slot ^= 1;
  }
out:
  return rc;
}

static qdp_status cuda_encode(struct runtime_device *d, struct runtime_shard_work *w,
                              struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = stage_begin(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = encode_staged(c, w, reterr);
  return stage_end(c, rc, reterr);
}

/* (a, b) <- (a + b, a - b) on da's stream: b read and written in place over peer access, else
 * through a bounded buffer on da, one piece at a time. */
/* The stage over NCCL, piece by piece: a's piece lands in a buffer on b's GPU and b's in one on
 * a's, then each side keeps its half of the butterfly (a + b on a's, a - b on b's). */
static qdp_status butterfly_nccl(struct cuda_device *ca, void *a, struct cuda_device *cb, void *b,
                                 qdp_dtype out, uint64_t count, struct qdp_error *reterr) {
  struct runtime_device *da = &ca->base, *db = &cb->base;
  qdp_status rc = QDP_OK;
  unsigned esize = qdp_dtype_size(out);
  uint64_t piece =
      count < PLAN_EXCHANGE_CHUNK_BYTES / esize ? count : PLAN_EXCHANGE_CHUNK_BYTES / esize;
  void *ta = NULL, *tb = NULL;
  QDP_TRY(rc, use_device(db, reterr));
  QDP_TRY(rc, dev_malloc(db, piece * esize, &tb, reterr));
  QDP_TRY(rc, use_device(da, reterr));
  QDP_TRY(rc, dev_malloc(da, piece * esize, &ta, reterr));
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t n = count - at < piece ? count - at : piece;
    char *pa = (char *)a + at * esize, *pb = (char *)b + at * esize;
    QDP_TRY(rc, device_comm_swap(ca->comm, ca->member, pa, ta, cb->member, pb, tb, n * esize,
                                 ca->stream, cb->stream, reterr));
    /* (pa, ta) <- (a + b, a - b): a's side keeps a + b. */
    K_TRY(rc, da, "qdpk_butterfly", qdpk_butterfly(pa, ta, out, n, ca->stream));
    QDP_TRY(rc, use_device(db, reterr));
    /* (tb, pb) <- (a + b, a - b): b's side keeps a - b. */
    K_TRY(rc, db, "qdpk_butterfly", qdpk_butterfly(tb, pb, out, n, cb->stream));
    QDP_TRY(rc, use_device(da, reterr));
  }
  QDP_TRY(rc, finish(cb, reterr));
  QDP_TRY(rc, finish(ca, reterr));
out:
  if (rc != QDP_OK) {
    drain(ca);
    drain(cb);
  }
  if (tb && (cudaSetDevice(db->info.ordinal) != cudaSuccess || cudaFree(tb) != cudaSuccess)) {
    (void)cudaGetLastError();
  }
  if (ta && (cudaSetDevice(da->info.ordinal) != cudaSuccess || cudaFree(ta) != cudaSuccess)) {
    (void)cudaGetLastError();
  }
  return rc;
}

static qdp_status cuda_butterfly(struct runtime_device *da, void *a, struct runtime_device *db,
                                 void *b, qdp_dtype out, uint64_t count, const char **ret_how,
                                 struct qdp_error *reterr) {
  struct cuda_device *ca = cuda_of(da), *cb = cuda_of(db);
  qdp_status rc = QDP_OK;
  void *tmp = NULL;
  unsigned esize = qdp_dtype_size(out);
  QDP_TRY(rc, use_device(da, reterr));
  if (da != db && ca->peer[db->info.ordinal] && cb->peer[da->info.ordinal] &&
      !(ca->nccl_exchange && ca->comm)) {
    /* Both GPUs at once, each on half of the pair's range: the link carries traffic both ways
     * and neither GPU waits for the other's memory alone. */
    *ret_how = "peer";
    uint64_t h = count / 2;
    K_TRY(rc, da, "qdpk_butterfly", qdpk_butterfly(a, b, out, h, ca->stream));
    QDP_TRY(rc, use_device(db, reterr));
    K_TRY(rc, db, "qdpk_butterfly",
          qdpk_butterfly((char *)a + h * esize, (char *)b + h * esize, out, count - h, cb->stream));
    QDP_TRY(rc, finish(cb, reterr));
    QDP_TRY(rc, use_device(da, reterr));
    QDP_TRY(rc, finish(ca, reterr));
    goto out;
  }
  if (da == db || (ca->peer[db->info.ordinal] && !(ca->nccl_exchange && ca->comm))) {
    *ret_how = da == db ? "local" : "peer";
    K_TRY(rc, da, "qdpk_butterfly", qdpk_butterfly(a, b, out, count, ca->stream));
    QDP_TRY(rc, finish(ca, reterr));
    goto out;
  }
  if (ca->comm && cb->comm == ca->comm) {
    *ret_how = "nccl";
    rc = butterfly_nccl(ca, a, cb, b, out, count, reterr);
    goto out;
  }
  /* No peer access: b's piece comes over into tmp, the kernel leaves a - b there, and it goes
   * back. PLAN_EXCHANGE_CHUNK_BYTES is what the planner counted for this buffer. */
  *ret_how = "copy";
  uint64_t piece =
      count < PLAN_EXCHANGE_CHUNK_BYTES / esize ? count : PLAN_EXCHANGE_CHUNK_BYTES / esize;
  QDP_TRY(rc, dev_malloc(da, piece * esize, &tmp, reterr));
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t n = count - at < piece ? count - at : piece;
    char *pa = (char *)a + at * esize, *pb = (char *)b + at * esize;
    CU_TRY(rc, da, "cudaMemcpyPeerAsync",
           cudaMemcpyPeerAsync(tmp, da->info.ordinal, pb, db->info.ordinal, (size_t)(n * esize),
                               ca->stream));
    K_TRY(rc, da, "qdpk_butterfly", qdpk_butterfly(pa, tmp, out, n, ca->stream));
    CU_TRY(rc, da, "cudaMemcpyPeerAsync",
           cudaMemcpyPeerAsync(pb, db->info.ordinal, tmp, da->info.ordinal, (size_t)(n * esize),
                               ca->stream));
  }
  QDP_TRY(rc, finish(ca, reterr));
out:
  if (rc != QDP_OK) {
    /* Nothing either GPU still runs may touch the shards once the caller frees them. */
    drain(ca);
    drain(cb);
  }
  if (tmp && (cudaSetDevice(da->info.ordinal) != cudaSuccess || cudaFree(tmp) != cudaSuccess)) {
    (void)cudaGetLastError();
  }
  return rc;
}

/* Frees an exchange piece buffer (NULL: nothing); after a failure first waits out what the stream
 * still has queued, which may read or write it. */
static void piece_free(struct cuda_device *c, void *tmp, qdp_status rc) {
  if (!tmp) {
    return;
  }
  if (rc != QDP_OK) {
    drain(c);
  }
  if (cudaFree(tmp) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

static qdp_status cuda_combine_host(struct runtime_device *d, void *mine, void *partner_host,
                                    qdp_dtype out, uint64_t count, int high,
                                    struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  void *tmp = NULL;
  size_t bytes = (size_t)(count * qdp_dtype_size(out));
  QDP_TRY(rc, use_device(d, reterr));
  /* The partner's range comes up into a device buffer (count is at most one exchange chunk,
   * which the planner counted as this shard's workspace), and the butterfly kernel leaves a + b
   * in its first operand and a - b in its second. */
  QDP_TRY(rc, dev_malloc(d, bytes, &tmp, reterr));
  CU_TRY(rc, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(tmp, partner_host, bytes, cudaMemcpyHostToDevice, c->stream));
  K_TRY(rc, d, "qdpk_butterfly",
        high ? qdpk_butterfly(tmp, mine, out, count, c->stream)
             : qdpk_butterfly(mine, tmp, out, count, c->stream));
  QDP_TRY(rc, finish(c, reterr));
out:
  piece_free(c, tmp, rc);
  return rc;
}

static qdp_status cuda_combine_group(struct runtime_device *d, void *mine, qdp_dtype out,
                                     uint64_t count, int high, struct device_comm *g, size_t local,
                                     int peer, struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  void *tmp = NULL;
  unsigned esize = qdp_dtype_size(out);
  uint64_t piece =
      count < PLAN_EXCHANGE_CHUNK_BYTES / esize ? count : PLAN_EXCHANGE_CHUNK_BYTES / esize;
  QDP_TRY(rc, use_device(d, reterr));
  /* One piece buffer (the exchange workspace the planner counted); the stream orders each
   * piece's swap after the previous piece's kernel. */
  QDP_TRY(rc, dev_malloc(d, piece * esize, &tmp, reterr));
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t n = count - at < piece ? count - at : piece;
    char *pm = (char *)mine + at * esize;
    QDP_TRY(rc, device_comm_exchange(g, local, peer, pm, tmp, n * esize, c->stream, reterr));
    K_TRY(rc, d, "qdpk_butterfly",
          high ? qdpk_butterfly(tmp, pm, out, n, c->stream)
               : qdpk_butterfly(pm, tmp, out, n, c->stream));
  }
  QDP_TRY(rc, device_comm_wait(g, local, c->stream, reterr));
out:
  /* After a failure the group is aborted or the stream failed: either way nothing queued still
   * runs once drained. */
  piece_free(c, tmp, rc);
  return rc;
}

static void cuda_work_done(struct runtime_device *d, struct runtime_shard_work *w) {
  if (!w->scratch) {
    return;
  }
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  scratch_give(cuda_of(d), w->scratch);
  w->scratch = NULL;
}

/* cuMemGetAddressRange, which the runtime API lacks, is taken from the driver through the
 * runtime, so that qdpd does not link libcuda (absent where there is no driver). */
typedef CUresult (*mem_range_fn)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);

/* The handle names the whole cudaMalloc allocation, so the offset is taken from its base: a shard
 * need not start an allocation. */
static qdp_status cuda_export_ipc(struct runtime_device *d, const void *ptr,
                                  unsigned char *ret_handle, uint64_t *ret_offset,
                                  struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  CUdeviceptr base = 0;
  size_t size = 0;
  cudaIpcMemHandle_t h;
  _Static_assert(sizeof h == RUNTIME_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t is 64 bytes");
  QDP_TRY(rc, use_device(d, reterr));
  /* 12000: the cuMemGetAddressRange of CUDA 12 and later (the _v2 ABI). */
  CU_TRY(rc, d, "cudaGetDriverEntryPointByVersion",
         cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                          &found));
  if (found != cudaDriverEntryPointSuccess || !fn) {
    rc = qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)found,
                          "%s: the driver has no cuMemGetAddressRange (lookup result %d)",
                          d->info.name, (int)found);
    goto out;
  }
  CUresult cu = ((mem_range_fn)fn)(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
  if (cu != CUDA_SUCCESS) {
    rc =
        qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)cu,
                         "%s: cuMemGetAddressRange failed with CUresult %d", d->info.name, (int)cu);
    goto out;
  }
  CU_TRY(rc, d, "cudaIpcGetMemHandle", cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base));
  memcpy(ret_handle, &h, sizeof h);
  *ret_offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
out:
  return rc;
}

/* Peer copies run on the destination's stream: peer access is enabled between the mesh's GPUs
 * (enable_peers), so they go over NVLink where there is one; without it the driver stages them
 * through the host, slower but correct. */
static qdp_status cuda_copy_rows(struct runtime_device *d, void *dst, uint64_t dst_pitch,
                                 struct runtime_device *src_dev, const void *src,
                                 uint64_t src_pitch, uint64_t row_bytes, uint64_t rows,
                                 struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, use_device(d, reterr));
  for (uint64_t r = 0; r < rows; r++) {
    CU_TRY(rc, d, "cudaMemcpyPeerAsync",
           cudaMemcpyPeerAsync((char *)dst + r * dst_pitch, d->info.ordinal,
                               (const char *)src + r * src_pitch, src_dev->info.ordinal,
                               (size_t)row_bytes, c->stream));
  }
  QDP_TRY(rc, finish(c, reterr));
out:
  if (rc != QDP_OK) {
    drain(c);
  }
  return rc;
}

static const struct runtime_device_ops cuda_ops = {
    .backend = "cuda",
    .query = cuda_query,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .read = cuda_read,
    .amp_load = cuda_amp_load,
    .amp_sumsq = cuda_amp_sumsq,
    .amp_scale = cuda_amp_scale,
    .amp_part_log2 = cuda_amp_part_log2,
    .amp_partials = cuda_amp_partials,
    .amp_combine = cuda_amp_combine,
    .encode = cuda_encode,
    .butterfly = cuda_butterfly,
    .combine_host = cuda_combine_host,
    .combine_group = cuda_combine_group,
    .work_done = cuda_work_done,
    .export_ipc = cuda_export_ipc,
    .copy_rows = cuda_copy_rows,
};

/* ---- discovery and the mesh -------------------------------------------------------------------
 */

int runtime_cuda_device_count(void) {
  int n = 0;
  /* No driver (35), no GPU (100) or anything else: this node has no usable GPU. */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n < 0 ? 0 : n;
}

static void cuda_device_destroy(struct runtime_device *d) {
  if (!d) {
    return;
  }
  struct cuda_device *c = cuda_of(d);
  /* Everything is released even if the device cannot be made current (the handles know their
   * device); errors are dropped, teardown has no one to report them to. */
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  if (c->stream) {
    drain(c);
  }
  if (c->lock_ready) {
    cache_drop(c);
  }
  for (int i = 0; i < 2; i++) {
    if (c->stage_free[i]) {
      (void)cudaEventDestroy(c->stage_free[i]);
    }
    if (c->stage_host[i]) {
      (void)cudaFreeHost(c->stage_host[i]);
    }
    if (c->stage_dev[i]) {
      (void)cudaFree(c->stage_dev[i]);
    }
  }
  if (c->stream) {
    (void)cudaStreamDestroy(c->stream);
  }
  (void)cudaGetLastError();
  if (c->lock_ready) {
    pthread_mutex_destroy(&c->stage_lock);
    pthread_mutex_destroy(&c->cache_lock);
  }
  free(c);
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
static void format_uuid(const cudaUUID_t *u, char *buf, size_t size) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(buf, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

static qdp_status device_create(int ordinal, uint64_t budget_cfg, double fraction,
                                uint64_t stage_bytes, struct cuda_device **ret_dev,
                                struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct cuda_device *c = calloc(1, sizeof *c);
  if (!c) {
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, ordinal, ENOMEM,
                            "cannot allocate the description of cuda:%d", ordinal);
  }
  struct runtime_device *d = &c->base;
  d->ops = &cuda_ops;
  snprintf(d->info.name, sizeof d->info.name, "cuda:%d", ordinal);
  d->info.kind = RUNTIME_DEVICE_CUDA;
  d->info.ordinal = ordinal;
  c->stage_bytes = stage_bytes;
  if (pthread_mutex_init(&c->stage_lock, NULL) != 0) {
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, ordinal, errno, "%s: cannot create a mutex",
                          d->info.name);
    goto out;
  }
  if (pthread_mutex_init(&c->cache_lock, NULL) != 0) {
    pthread_mutex_destroy(&c->stage_lock);
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, ordinal, errno, "%s: cannot create a mutex",
                          d->info.name);
    goto out;
  }
  c->lock_ready = 1;
  QDP_TRY(rc, use_device(d, reterr));

  struct cudaDeviceProp prop;
  CU_TRY(rc, d, "cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, ordinal));
  snprintf(d->info.model, sizeof d->info.model, "%.63s", prop.name);
  format_uuid(&prop.uuid, d->info.uuid, sizeof d->info.uuid);
  d->info.cc_major = prop.major;
  d->info.cc_minor = prop.minor;
  size_t free_b = 0, total_b = 0;
  CU_TRY(rc, d, "cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b));
  d->info.total_bytes = total_b;
  d->info.free_bytes = free_b;
  /* The budget is taken from what was free before qdp's own staging: the staging lives inside
   * it, and the planner counts it in every job's need. */
  d->info.budget_bytes = budget_cfg ? budget_cfg : (uint64_t)((double)free_b * fraction);

  CU_TRY(rc, d, "cudaStreamCreateWithFlags",
         cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2; i++) {
    cudaError_t err = cudaMallocHost(&c->stage_host[i], (size_t)stage_bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      c->stage_host[i] = NULL;
      if (reterr) {
        reterr->need_bytes = stage_bytes;
      }
      rc = qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, ordinal, (int)err,
                            "%s cannot pin %llu B of host memory for its input staging; lower "
                            "staging_bytes",
                            d->info.name, (unsigned long long)stage_bytes);
      goto out;
    }
    if (err != cudaSuccess) {
      c->stage_host[i] = NULL;
      rc = cuda_failed(d, err, "cudaMallocHost", reterr);
      goto out;
    }
    QDP_TRY(rc, dev_malloc(d, stage_bytes, &c->stage_dev[i], reterr));
    CU_TRY(rc, d, "cudaEventCreateWithFlags",
           cudaEventCreateWithFlags(&c->stage_free[i], cudaEventDisableTiming));
  }
  *ret_dev = c;
  c = NULL;
out:
  if (c) {
    cuda_device_destroy(&c->base);
  }
  return rc;
}

/* Parses "0,1" / "cuda:0,cuda:1" (NULL: every GPU) into ordinals, refusing unknown and repeated
 * ones. */
static qdp_status parse_spec(const char *spec, int ngpu, int *ret_ords, size_t *ret_n,
                             struct qdp_error *reterr) {
  size_t n = 0;
  if (!spec) {
    for (int i = 0; i < ngpu && i < QDP_DEVICES_MAX; i++) {
      ret_ords[n++] = i;
    }
    *ret_n = n;
    return QDP_OK;
  }
  const char *tok = spec;
  for (;;) {
    struct runtime_device_token t;
    if (runtime_device_token(tok, &t) != 0 || t.kind == RUNTIME_TOKEN_CPU) {
      size_t tl = strcspn(tok, ",");
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices '%s': '%.*s' is not a GPU (expected cpu:N, auto, or GPU "
                           "ordinals such as 0,1 or cuda:0,cuda:1)",
                           spec, (int)tl, tok);
    }
    unsigned long v = t.n;
    if (v >= (unsigned long)ngpu || v >= QDP_DEVICES_MAX) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices '%s' names cuda:%lu, but this node has %d GPU%s (cuda:0.."
                           "cuda:%d)",
                           spec, v, ngpu, ngpu == 1 ? "" : "s", ngpu - 1);
    }
    for (size_t i = 0; i < n; i++) {
      if (ret_ords[i] == (int)v) {
        return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                             "devices '%s' names cuda:%lu twice", spec, v);
      }
    }
    if (n == QDP_DEVICES_MAX) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices '%s' names more than %d GPUs", spec, QDP_DEVICES_MAX);
    }
    ret_ords[n++] = (int)v;
    if (*t.end == '\0') {
      break;
    }
    tok = t.end + 1;
  }
  *ret_n = n;
  return QDP_OK;
}

/* Peer access for every ordered pair that supports it; where it is missing, the butterfly goes
 * through a buffer instead (about 10x slower, but correct). Already-enabled access (another mesh
 * of this process enabled it) counts as enabled. Never disabled again: peer access is process-wide
 * and another mesh may rely on it. */
static void enable_peers(struct runtime_device **devs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int oi = devs[i]->info.ordinal;
    if (cudaSetDevice(oi) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    for (size_t j = 0; j < n; j++) {
      int oj = devs[j]->info.ordinal, can = 0;
      if (i == j) {
        continue;
      }
      if (cudaDeviceCanAccessPeer(&can, oi, oj) != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;
      }
      if (can) {
        cudaError_t err = cudaDeviceEnablePeerAccess(oj, 0);
        can = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
        (void)cudaGetLastError();
      }
      cuda_of(devs[i])->peer[oj] = (unsigned char)can;
    }
  }
}

bool runtime_cuda_peer_enabled(const struct runtime_device *a, const struct runtime_device *b) {
  const struct cuda_device *c = (const struct cuda_device *)a;
  return b->info.ordinal < QDP_DEVICES_MAX && c->peer[b->info.ordinal];
}

/* Page-locks a registered input region once, so that every job reading it uploads from pinned
 * memory (no bounce through the staging copy, full PCIe rate). Portable: the pinning holds for the
 * contexts of every device of the mesh, not only the current one, so one call covers them all;
 * each device is made current first so a failure names the device whose context refused.
 * ReadOnly: the region is mapped PROT_READ, which cudaHostRegister refuses without it. */
static qdp_status cuda_register_host(struct runtime_mesh *m, void *ptr, uint64_t bytes,
                                     struct qdp_error *reterr) {
  if (m->count == 0) {
    return QDP_OK;
  }
  struct runtime_device *d = m->devs[0];
  qdp_status rc = use_device(d, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  unsigned flags = cudaHostRegisterPortable;
#ifdef cudaHostRegisterReadOnly
  flags |= cudaHostRegisterReadOnly;
#endif
  cudaError_t err = cudaHostRegister(ptr, (size_t)bytes, flags);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)err,
                            "%s: cudaHostRegister of a %llu B input region failed: %s (%s)",
                            d->info.name, (unsigned long long)bytes, cudaGetErrorName(err),
                            cudaGetErrorString(err));
  }
  /* Every other device must be able to use it too; a device whose context cannot is reported
   * by name and the pinning is undone, so the region is either usable everywhere or refused. */
  for (size_t i = 1; i < m->count; i++) {
    struct runtime_device *o = m->devs[i];
    unsigned got = 0;
    if ((rc = use_device(o, reterr)) != QDP_OK) {
      break;
    }
    err = cudaHostGetFlags(&got, ptr);
    if (err != cudaSuccess) {
      rc = qdp_error_set_at(reterr, QDP_ERR_CUDA, o->info.ordinal, (int)err,
                            "%s: the %llu B input region pinned on %s is not visible here: "
                            "cudaHostGetFlags failed: %s (%s)",
                            o->info.name, (unsigned long long)bytes, d->info.name,
                            cudaGetErrorName(err), cudaGetErrorString(err));
      (void)cudaGetLastError();
      break;
    }
  }
  if (rc != QDP_OK) {
    if (cudaSetDevice(d->info.ordinal) == cudaSuccess) {
      (void)cudaHostUnregister(ptr);
    }
    (void)cudaGetLastError();
  }
  return rc;
}

static void cuda_unregister_host(struct runtime_mesh *m, void *ptr) {
  if (m->count == 0) {
    return;
  }
  /* Nothing to report to: the region is going either way, and a failure here (the driver already
   * torn down at exit) leaves nothing pinned that outlives the process. */
  if (cudaSetDevice(m->devs[0]->info.ordinal) == cudaSuccess) {
    (void)cudaHostUnregister(ptr);
  }
  (void)cudaGetLastError();
}

/* Every device's member of the mesh's group is its index in the mesh. */
static void cuda_set_group(struct runtime_mesh *m, struct device_comm *comm) {
  for (size_t i = 0; i < m->count; i++) {
    struct cuda_device *c = cuda_of(m->devs[i]);
    c->comm = comm;
    c->member = i;
  }
}

qdp_status runtime_cuda_mesh_create(const struct runtime_mesh_config *cfg, const char *spec,
                                    double fraction, struct runtime_mesh **ret_mesh,
                                    struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct runtime_mesh *m = NULL;
  struct runtime_device **devs = NULL;
  size_t n = 0, made = 0;
  int ords[QDP_DEVICES_MAX];
  int ngpu = 0;
  cudaError_t err = cudaGetDeviceCount(&ngpu);
  if (err != cudaSuccess || ngpu <= 0) {
    (void)cudaGetLastError();
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "devices",
                         "devices '%s' asks for GPUs, but CUDA reports none (cudaGetDeviceCount: "
                         "%s); use cpu:N",
                         spec ? spec : "auto", err != cudaSuccess ? cudaGetErrorName(err) : "0");
  }
  QDP_TRY(rc, parse_spec(spec, ngpu, ords, &n, reterr));
  /* Two slots of half the configured staging each, in whole 4 KiB pages. */
  uint64_t slot = cfg->staging_bytes ? cfg->staging_bytes / 2 : CUDA_STAGE_DEFAULT;
  slot &= ~(uint64_t)4095;
  slot = slot < CUDA_STAGE_MIN ? CUDA_STAGE_MIN : slot;

  m = calloc(1, sizeof *m);
  devs = calloc(n, sizeof *devs);
  if (!m || !devs) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the mesh");
    goto out;
  }
  for (made = 0; made < n; made++) {
    struct cuda_device *c = NULL;
    QDP_TRY(rc, device_create(ords[made], cfg->device_budget_bytes, fraction, slot, &c, reterr));
    c->nccl_exchange = cfg->nccl_exchange;
    devs[made] = &c->base;
  }
  enable_peers(devs, n);
  m->devs = devs;
  m->count = n;
  made = 0; /* the mesh owns the devices now */
  devs = NULL;
  m->backend = "cuda";
  m->staging_bytes = 2 * slot;
  m->destroy_device = cuda_device_destroy;
  m->register_host = cuda_register_host;
  m->unregister_host = cuda_unregister_host;
  m->set_group = cuda_set_group;
  QDP_TRY(rc, runtime_cuda_topology(m, reterr));
  *ret_mesh = m;
  m = NULL;
out:
  for (size_t i = 0; devs && i < made; i++) {
    cuda_device_destroy(devs[i]);
  }
  free(devs);
  runtime_mesh_destroy(m);
  return rc;
}
