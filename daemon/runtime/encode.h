/* encode.h — the executor's insides, shared by its files. Internal to runtime/.
 *
 * encode.c drives a job (checks, shard allocation, the order of the phases) and owns the state;
 * encode_tasks.c holds the per-shard tasks that run on every device at once and the input helpers;
 * encode_norm.c the norm on the host, its scaled fallback and the job of a NORM reduction;
 * encode_collective.c the norm over a device collective; encode_stages.c the global-bit
 * Walsh-Hadamard stages between shard pairs.
 */
#ifndef QDP_RUNTIME_ENCODE_H
#define QDP_RUNTIME_ENCODE_H

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "collectives.h"
#include "qdp_encodings.h"
#include "qdp_limits.h"
#include "qdpk.h"
#include "runtime/mesh.h"
#include "runtime/norm.h"
#include "runtime/state.h"

/* One shard of the job in flight. */
struct shard_task {
  struct runtime_state *st;
  size_t index;
  struct runtime_device *dev;
  struct runtime_shard_work work;
  struct norm_block *blocks; /* amplitude: [rows][nblocks] */
  size_t nblocks;
  const double *sumsq;   /* amplitude: the shard's rows' totals; NULL: already on the device */
  const int32_t *scales; /* amplitude: the rows' fallback exponents (settle_norms); NULL: none */
  /* The device-collective norm: this shard's parts, the buffers the gather reads and fills, and
   * the totals its device combined (host copy). */
  struct runtime_sum_part *parts;
  size_t nparts;
  const struct qdpk_norm_part *all;
  size_t nall;
  uint64_t stride;
  size_t members;
  double *send, *recv;
  const double *totals; /* host copy of the totals its device combined, once its stream is done */
  void *stream;
  int loaded;
  struct qdp_error err;
  qdp_status rc;
};

/* One exchange of a global-bit stage: the shards whose indices differ only in that bit. */
struct pair_task {
  struct shard_task *lo, *hi;
  qdp_dtype out;
  const char *how;
  qdp_status rc;
  struct qdp_error err;
};

/* The flattened input values this rank holds: all of them, or its window (runtime_input). */
static inline uint64_t encode_input_first(const struct runtime_input *in) {
  return in->windowed ? in->window_first : 0;
}

static inline uint64_t encode_input_count(const struct runtime_input *in) {
  return in->windowed ? in->window_count : in->rows * in->cols;
}

/* The address of flattened value `flat`, which the caller knows is held here. */
static inline const char *encode_input_at(const struct runtime_input *in, uint64_t flat) {
  return (const char *)in->data + (flat - encode_input_first(in)) * qdp_dtype_size(in->dtype);
}

/* The values of a shard's range present in each sample (the rest is zero padding). */
static inline uint64_t encode_shard_len(const struct plan_shard *sh, uint64_t cols) {
  uint64_t present = cols > sh->first ? cols - sh->first : 0;
  return present < sh->count ? present : sh->count;
}

/* One value of the input for a message: read byte-wise, as the input may sit at any address (a
 * mapped file is read in place). */
static inline double encode_value_at(const struct runtime_input *in, uint64_t flat) {
  const void *at = encode_input_at(in, flat);
  switch (in->dtype) {
  case QDP_DTYPE_FLOAT32: {
    float v;
    memcpy(&v, at, sizeof v);
    return v;
  }
  case QDP_DTYPE_INT64: {
    int64_t v;
    memcpy(&v, at, sizeof v);
    return (double)v;
  }
  default: {
    double v;
    memcpy(&v, at, sizeof v);
    return v;
  }
  }
}

/* Shard tasks (encode_tasks.c): run on every shard of the job at once by the mesh's workers
 * (runtime_workers_run). */
qdp_status encode_first_failure(const struct shard_task *t, size_t n, struct qdp_error *reterr);
void *encode_task_sumsq(void *arg);
void *encode_task_scale(void *arg);
void *encode_task_encode(void *arg);
void *encode_task_butterfly(void *arg);
void *encode_task_partials(void *arg);
qdp_status encode_bad_value(struct qdp_error *reterr, const char *what, uint64_t row, uint64_t col,
                            double v);
bool encode_spans_ranks(const struct plan *p);

/* The norm on the host and the job of a NORM reduction (encode_norm.c). */
qdp_status encode_run_norm(struct runtime_state *st, struct shard_task *t, size_t n,
                           const struct runtime_input *in, struct qdp_error *reterr);

/* The norm over a device collective (encode_collective.c). */
struct device_comm *encode_job_group(const struct runtime_mesh *m, const struct plan *p);
size_t encode_shard_member(const struct runtime_mesh *m, const struct device_comm *c,
                           const struct plan_shard *sh);
bool encode_device_norm_possible(const struct runtime_mesh *m, const struct device_comm *c,
                                 const struct shard_task *t, size_t n, const struct plan *p);
qdp_status encode_agree_before(const char *what, const struct runtime_mesh *m,
                               const struct device_comm *c, qdp_status mine,
                               struct qdp_error *reterr);
qdp_status encode_device_norms(struct runtime_state *st, struct shard_task *t, size_t n,
                               const struct runtime_input *in, struct device_comm *c, double *sumsq,
                               struct qdp_error *reterr);

/* The global-bit stages (encode_stages.c): the `stages` lowest global bits, ascending (those above
 * them, the state's top bits, the shards' encode transformed with no exchange). */
qdp_status encode_run_global_stages(struct runtime_state *st, struct shard_task *t, size_t n,
                                    uint32_t stages, struct qdp_error *reterr);

#endif /* QDP_RUNTIME_ENCODE_H */
