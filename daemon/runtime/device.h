/* device.h — the backend interface every device kind implements (CPU now, CUDA alongside), and the
 * per-shard work the executor hands it. Internal to runtime/.
 *
 * A backend owns its devices' memory and streams; the executor (encode.h) owns the order of work:
 * which shard runs what, when the norm is reduced, and which shards exchange for the global-bit
 * Walsh-Hadamard stages. Every op runs on one of the mesh's threads (runtime/workers.h: one per
 * device, for the mesh's life), may block until its work is done, and reports failures with the
 * device named.
 */
#ifndef QDP_RUNTIME_DEVICE_H
#define QDP_RUNTIME_DEVICE_H

#include <stdint.h>

#include "error.h"
#include "plan/plan.h"
#include "runtime/runtime.h"

struct qdpk_measure; /* kernels/qdpk.h */

struct runtime_device;

/* One shard of one job, as a backend sees it. `x` is host memory: for an encoding whose values
 * are laid out by amplitude (common/qdp_encodings.h) the value of global index shard->first of the
 * shard's first row (len values present from there, rows in_stride apart); for the others the
 * parameters of the shard's first row. */
struct runtime_shard_work {
  const struct plan *plan;
  const struct plan_shard *shard;
  void *out; /* the shard's buffer on its device: [rows][count] of plan->out_dtype */
  const void *x;
  qdp_dtype in;
  uint64_t in_stride;
  uint64_t len; /* values laid out by amplitude: those present from shard->first, <= count */
  /* The copy engine reads x directly (cudaMemcpyDefault: UVA tells which): registered
   * (page-locked) host memory, or device memory of a client's allocation (CUDA IPC input) on
   * this or another GPU of the mesh, copied device to device. */
  bool pinned;
  /* x is memory of this very device (a client's allocation on the shard's GPU): the kernels read
   * it in place, with no copy into the staging or the shard's buffer. */
  bool x_on_device;
  bool x_host;   /* x is host memory (inline, a mapped file or region): the host can read it */
  void *scratch; /* the backend's, between norm_load and work_done */
};

/* One partial sum of the device path: values [offset, offset + len) of the loaded slice, the
 * aligned subtree of 2^log2 values from offset (zeros past len). */
struct runtime_sum_part {
  uint64_t offset, len;
  uint32_t log2;
};

struct qdpk_norm_part; /* kernels/qdpk_cuda.h */

struct runtime_device_ops {
  const char *backend; /* "cpu", "cuda" */
  /* Total and free bytes now (cpu: the configured size and what qdp has not taken). */
  void (*query)(struct runtime_device *d, uint64_t *ret_total, uint64_t *ret_free);
  qdp_status (*alloc)(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                      struct qdp_error *reterr);
  /* ptr came from alloc with these bytes. */
  void (*free)(struct runtime_device *d, void *ptr, uint64_t bytes);
  /* Device memory -> host memory. */
  qdp_status (*read)(struct runtime_device *d, const void *src, uint64_t bytes, void *dst,
                     struct qdp_error *reterr);
  /* Host memory -> device memory (another rank's amplitudes, received, into a workspace);
   * returns when done. */
  qdp_status (*write)(struct runtime_device *d, void *dst, const void *src, uint64_t bytes,
                      struct qdp_error *reterr);
  /* The NORM reduction (the encodings whose row needs it, common/qdp_encodings.h: amplitude), in
   * the order the executor runs it: load, the partial sums (norm_sumsq on the host, or
   * norm_partials and norm_totals over a device collective), then norm_scale.
   * Bring the shard's input slice to the device. */
  qdp_status (*norm_load)(struct runtime_device *d, struct runtime_shard_work *w,
                          struct qdp_error *reterr);
  /* Pairwise sums of squares (qdpk contract) per row over the aligned block
   * [shard->first + offset, + block) of the loaded slice, len of its values present. scale_log2:
   * NULL, or one exponent per row of the shard: the leaves are then (x * 2^e)^2 (qdpk_cpu_sumsq),
   * the norm's fallback for samples whose plain sum of squares under- or overflows. */
  qdp_status (*norm_sumsq)(struct runtime_device *d, struct runtime_shard_work *w, uint64_t offset,
                           uint64_t len, uint64_t block, const int32_t *scale_log2,
                           double *ret_sums, struct qdp_error *reterr);
  /* Write the shard's amplitudes with the encoding's scale kernel given each row's total sum of
   * squares (NULL: the totals norm_totals left on the device) and, with the fallback, each row's
   * exponent (NULL: none; host memory, as sumsq). */
  qdp_status (*norm_scale)(struct runtime_device *d, struct runtime_shard_work *w,
                           const double *sumsq, const int32_t *scale_log2,
                           struct qdp_error *reterr);
  /* The norm over a device collective; NULL where the backend has none (the executor
   * then reduces on the host). A part is an aligned subtree of the pairwise tree inside the
   * loaded slice (runtime_sum_part); one part covers at most 2^norm_part_log2 values. */
  uint32_t (*norm_part_log2)(struct runtime_device *d, qdp_dtype in);
  /* Enqueues each row's sum of squares of every part into the device buffer *ret_send
   * ([rows][stride] doubles, part k in column k), sizes *ret_recv for `members` such buffers, and
   * uploads `all` (the combine's descriptors, src indexing the recv buffer); *ret_stream is the
   * stream it is all ordered on. Does not wait for the device. */
  qdp_status (*norm_partials)(struct runtime_device *d, struct runtime_shard_work *w,
                              const struct runtime_sum_part *parts, size_t nparts, uint64_t stride,
                              size_t members, const struct qdpk_norm_part *all, size_t nall,
                              double **ret_send, double **ret_recv, void **ret_stream,
                              struct qdp_error *reterr);
  /* Enqueues, behind the gather that fills the recv buffer: each row's total along the tree into
   * the device's norms for norm_scale, and a copy of the totals into host memory at *ret_totals
   * (rows doubles, readable once the stream is done, until work_done). Neither waits nor
   * allocates, so a gather that never completes cannot block it: the caller waits on the stream
   * (within its bounds). */
  qdp_status (*norm_totals)(struct runtime_device *d, struct runtime_shard_work *w, size_t nall,
                            uint64_t stride, const double **ret_totals, struct qdp_error *reterr);
  /* Every other encoding: the encoding's kernel of the backend's table writes the shard's
   * amplitudes; with a WHT exchange, the transform of its local bits and of the state's top
   * min(n, iqp_top_bits) bits too (the executor runs the global bits below them). */
  qdp_status (*encode)(struct runtime_device *d, struct runtime_shard_work *w,
                       struct qdp_error *reterr);
  /* The top bits of a WHT-exchange state (iqp) that encode transforms on every shard with no
   * exchange (QDPK_IQP_TOP_BITS on the CPU and CUDA backends, 0 where a backend has no such
   * kernel): the global-bit stages run only over the global bits below them. */
  uint32_t iqp_top_bits;
  /* One global-bit stage between two equal shards on devices da and db: (a, b) <- (a+b, a-b).
   * *ret_how names the path the data took: "local" (one memory or one device), "peer" (a kernel
   * reading the partner's memory over a peer link), "nccl" (swapped over NCCL), "copy" (copied
   * over and back without peer access). */
  qdp_status (*butterfly)(struct runtime_device *da, void *a, struct runtime_device *db, void *b,
                          qdp_dtype out, uint64_t count, const char **ret_how,
                          struct qdp_error *reterr);
  /* A global-bit stage whose partner shard is on another rank: `mine` (count amplitudes on d)
   * combines with the partner's same range, received into host memory (which it may overwrite):
   * high = 0 (mine is the low side a) leaves a + b, high = 1 (mine is b) leaves a - b, with the
   * butterfly's own arithmetic, so the result has the same bits as a butterfly on one rank. */
  qdp_status (*combine_host)(struct runtime_device *d, void *mine, void *partner_host,
                             qdp_dtype out, uint64_t count, int high, struct qdp_error *reterr);
  /* The same stage over device group c (the world's NCCL group; this device is local member
   * `local`): mine goes to member `peer` and the partner's range comes back, piece by piece
   * through a device buffer, each piece combined as combine_host does. Waits within the group's
   * bounds. NULL where the backend has no device group. */
  qdp_status (*combine_group)(struct runtime_device *d, void *mine, qdp_dtype out, uint64_t count,
                              int high, struct device_comm *c, size_t local, int peer,
                              struct qdp_error *reterr);
  /* Frees what norm_load kept in w->scratch. NULL-safe on scratch. */
  void (*work_done)(struct runtime_device *d, struct runtime_shard_work *w);

  /* Zero-copy views (views.c): the allocation that holds ptr as a file descriptor of its own
   * (ret->fd, the caller's to close) where the device's state memory is exportable so, else its
   * CUDA IPC handle; and ptr's byte offset from that allocation's base. The CPU backend has
   * neither: FAILED_PRECONDITION. */
  qdp_status (*export_view)(struct runtime_device *d, const void *ptr, struct runtime_ipc *ret,
                            struct qdp_error *reterr);
  /* Gather (views.c): `rows` rows of row_bytes each from src on device `src_dev` (rows src_pitch
   * bytes apart) to dst on device d (dst_pitch apart), device to device; returns when they are
   * done. Runs on the destination device's thread. */
  qdp_status (*copy_rows)(struct runtime_device *d, void *dst, uint64_t dst_pitch,
                          struct runtime_device *src_dev, const void *src, uint64_t src_pitch,
                          uint64_t row_bytes, uint64_t rows, struct qdp_error *reterr);
  /* CUDA IPC input: opens a client's allocation (its RUNTIME_IPC_HANDLE_BYTES handle) on d;
   * *ret_base is its base, *ret_size its size as the driver records it. OUT_OF_RANGE (field
   * "input.cuda_ipc.offset", need_bytes, free_bytes) when [offset, offset + bytes) is not inside
   * it; nothing stays open on failure. NULL where the backend has no IPC (CPU). */
  qdp_status (*open_ipc)(struct runtime_device *d, const unsigned char *handle, uint64_t offset,
                         uint64_t bytes, void **ret_base, uint64_t *ret_size,
                         struct qdp_error *reterr);
  void (*close_ipc)(struct runtime_device *d, void *base);
  /* Gives back what the backend keeps for reuse and has not used for a while (runtime_mesh_trim).
   * NULL where it keeps nothing time-bound. */
  void (*trim)(struct runtime_device *d);

  /* The kernel matrix (kernel.c), on device memory of d, complex of dt, all three returning when
   * done. gram: g [rows][cols] = the block product of qdpk_cpu_gram (a's rows lda elements apart,
   * b's ldb; `upper`: a == b and only j >= i is needed; `real`: states with real amplitudes,
   * a and b their real parts (real_rows), g real), in the backend's own representation (the
   * CUDA one holds the conjugate); its bits depend only on the values and the shape.
   * real_rows: the real parts of `rows` rows of `width` complex values of dt (src_pitch bytes
   * apart, this device's memory) into dst (dst_pitch apart) as dt's real type. gram_add: g += h
   * over n values.
   * gram_finish: g's tile into host memory `out` (rows pitch_bytes apart) as qdpk_cpu_gram_finish
   * writes it (`fill`: a Hermitian tile's other half from its upper one; `mirror`, not NULL: the
   * transpose there too), through `scratch` (device memory of 2 * rows * cols complex values)
   * where the backend needs it. NULL where the backend has none. */
  qdp_status (*gram)(struct runtime_device *d, const void *a, uint64_t lda, uint64_t rows,
                     const void *b, uint64_t ldb, uint64_t cols, uint64_t len, qdp_dtype dt,
                     bool upper, bool real, void *g, struct qdp_error *reterr);
  qdp_status (*real_rows)(struct runtime_device *d, void *dst, uint64_t dst_pitch,
                          const void *src, uint64_t src_pitch, uint64_t width, uint64_t rows,
                          qdp_dtype dt, struct qdp_error *reterr);
  qdp_status (*gram_add)(struct runtime_device *d, void *g, const void *h, uint64_t n,
                         qdp_dtype dt, bool real, struct qdp_error *reterr);
  qdp_status (*gram_finish)(struct runtime_device *d, const void *g, uint64_t rows, uint64_t cols,
                            qdp_dtype dt, bool real, bool overlaps, bool fill, void *scratch,
                            void *out, void *mirror, uint64_t pitch_bytes,
                            struct qdp_error *reterr);

  /* Measurements (measure.c), on device memory of d, returning when done. measure: the values of
   * one window (qdpk_cpu_measure's, each leaf summed in the backend's own fixed order) of x (rows
   * ld complex values apart) and its partner window (rows pld apart; NULL: x), into host memory
   * out ([rows][m->cols] doubles); scratch: device memory of (len / QDPK_MEASURE_LEAF + 3) * rows
   * * m->cols doubles. abs2: |x|^2 of `count` amplitudes of each of `rows` rows (ld apart) into
   * host memory out (rows out_ld doubles apart), through scratch (rows * count doubles) where the
   * backend needs it. NULL where the backend has none. */
  qdp_status (*measure)(struct runtime_device *d, const struct qdpk_measure *m, const void *x,
                        uint64_t ld, const void *partner, uint64_t pld, uint64_t rows,
                        uint64_t first, uint64_t len, void *scratch, double *out,
                        struct qdp_error *reterr);
  qdp_status (*abs2)(struct runtime_device *d, const void *x, uint64_t ld, uint64_t rows,
                     uint64_t count, qdp_dtype dt, void *scratch, double *out, uint64_t out_ld,
                     struct qdp_error *reterr);
};

/* What every backend's device struct starts with. */
struct runtime_device {
  const struct runtime_device_ops *ops;
  struct runtime_device_info info; /* name, kind, ordinal, uuid, model, total, budget */
  uint64_t used_bytes;             /* atomic: shard bytes held and reserved */
};

/* The CPU backend: `count` host-memory devices of `bytes_each`. ret_devs gets `count` pointers. */
qdp_status runtime_cpu_devices_create(unsigned count, uint64_t bytes_each,
                                      struct runtime_device **ret_devs, struct qdp_error *reterr);
void runtime_cpu_device_destroy(struct runtime_device *d);

#endif /* QDP_RUNTIME_DEVICE_H */
