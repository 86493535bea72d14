/* device.h — the backend interface every device kind implements (CPU now, CUDA alongside), and the
 * per-shard work the executor hands it. Internal to runtime/.
 *
 * A backend owns its devices' memory and streams; the executor (encode.c) owns the order of work:
 * which shard runs what, when the norm is reduced, and which shards exchange for the global-bit
 * Walsh-Hadamard stages. Every op runs on the thread of the shard's device (one thread per device
 * per job), may block until its work is done, and reports failures with the device named.
 */
#ifndef QDP_RUNTIME_DEVICE_H
#define QDP_RUNTIME_DEVICE_H

#include <stdint.h>

#include "error.h"
#include "plan/plan.h"
#include "runtime/runtime.h"

struct runtime_device;

/* One shard of one job, as a backend sees it. `x` is host memory: for amplitude the value of
 * global index shard->first of the shard's first row (len values present from there, rows
 * in_stride apart); for the other encodings the parameters of the shard's first row. */
struct runtime_shard_work {
  const struct plan *plan;
  const struct plan_shard *shard;
  void *out; /* the shard's buffer on its device: [rows][count] of plan->out_dtype */
  const void *x;
  qdp_dtype in;
  uint64_t in_stride;
  uint64_t len;  /* amplitude: input values present from shard->first, <= shard->count */
  void *scratch; /* the backend's, between amp_load and work_done */
};

struct runtime_device_ops {
  const char *backend; /* "cpu", "cuda" */
  /* Total and free bytes now (cpu: the configured size and what qdp has not taken). */
  void (*query)(struct runtime_device *d, uint64_t *ret_total, uint64_t *ret_free);
  qdp_status (*alloc)(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                      struct qdp_error *reterr);
  void (*free)(struct runtime_device *d, void *ptr);
  /* Device memory -> host memory. */
  qdp_status (*read)(struct runtime_device *d, const void *src, uint64_t bytes, void *dst,
                     struct qdp_error *reterr);
  /* Amplitude: bring the shard's input slice to the device. */
  qdp_status (*amp_load)(struct runtime_device *d, struct runtime_shard_work *w,
                         struct qdp_error *reterr);
  /* Amplitude: pairwise sums of squares (qdpk contract) per row over the aligned block
   * [shard->first + offset, + block) of the loaded slice, len of its values present. */
  qdp_status (*amp_sumsq)(struct runtime_device *d, struct runtime_shard_work *w, uint64_t offset,
                          uint64_t len, uint64_t block, double *ret_sums, struct qdp_error *reterr);
  /* Amplitude: write the shard's amplitudes given each row's total sum of squares. */
  qdp_status (*amp_scale)(struct runtime_device *d, struct runtime_shard_work *w,
                          const double *sumsq, struct qdp_error *reterr);
  /* Angle, phase, basis: the final amplitudes; iqp, iqp-z: phases and the local-bit transform. */
  qdp_status (*encode)(struct runtime_device *d, struct runtime_shard_work *w,
                       struct qdp_error *reterr);
  /* One global-bit stage between two equal shards on devices da and db: (a, b) <- (a+b, a-b). */
  qdp_status (*butterfly)(struct runtime_device *da, void *a, struct runtime_device *db, void *b,
                          qdp_dtype out, uint64_t count, struct qdp_error *reterr);
  /* A global-bit stage whose partner shard is on another rank: `mine` (count amplitudes on d)
   * combines with the partner's same range, received into host memory (which it may overwrite):
   * high = 0 (mine is the low side a) leaves a + b, high = 1 (mine is b) leaves a - b, with the
   * butterfly's own arithmetic, so the result has the same bits as a butterfly on one rank. */
  qdp_status (*combine_host)(struct runtime_device *d, void *mine, void *partner_host,
                             qdp_dtype out, uint64_t count, int high, struct qdp_error *reterr);
  /* Frees what amp_load kept in w->scratch. NULL-safe on scratch. */
  void (*work_done)(struct runtime_device *d, struct runtime_shard_work *w);
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
