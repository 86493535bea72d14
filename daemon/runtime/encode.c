/* The executor: one encode job on the mesh (runtime.h), in the order of DESIGN.md §3 — check the
 * values, reserve and allocate every local shard, ingest, reduce the norm along its fixed tree,
 * encode, run the global-bit Walsh-Hadamard stages between shard pairs — and reading states back.
 * Shards of one job run concurrently, one thread per shard; a job with one shard runs on the
 * caller's thread (no thread start on the small-job path). */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives.h"
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
  struct runtime_amp_part *parts;
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

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int plan_copy(const struct plan *src, struct plan *dst) {
  *dst = *src;
  dst->shards = malloc(src->nshards * sizeof *dst->shards);
  dst->needs = malloc((src->nneeds ? src->nneeds : 1) * sizeof *dst->needs);
  if (!dst->shards || !dst->needs) {
    free(dst->shards);
    free(dst->needs);
    return -1;
  }
  memcpy(dst->shards, src->shards, src->nshards * sizeof *dst->shards);
  memcpy(dst->needs, src->needs, src->nneeds * sizeof *dst->needs);
  return 0;
}

/* Runs fn over n items of `size` bytes at base, one thread each beyond the first, which runs here;
 * waits for all. */
static void run_all(void *base, size_t n, size_t size, void *(*fn)(void *)) {
  char *item = base;
  struct worker {
    pthread_t tid;
    int started;
  } *w = n > 1 ? calloc(n, sizeof *w) : NULL;
  for (size_t i = 1; w && i < n; i++) {
    w[i].started = pthread_create(&w[i].tid, NULL, fn, item + i * size) == 0;
  }
  /* Item 0 runs here, and so does any item that got no thread (no memory for the table, or
   * pthread_create failed): slower, never wrong. */
  for (size_t i = 0; i < n; i++) {
    if (!w || !w[i].started) {
      fn(item + i * size);
    }
  }
  for (size_t i = 1; w && i < n; i++) {
    if (w[i].started) {
      pthread_join(w[i].tid, NULL);
    }
  }
  free(w);
}

/* The first failure among tasks, copied to reterr. */
static qdp_status first_failure(const struct shard_task *t, size_t n, struct qdp_error *reterr) {
  for (size_t i = 0; i < n; i++) {
    if (t[i].rc != QDP_OK) {
      if (reterr) {
        *reterr = t[i].err;
      }
      return t[i].rc;
    }
  }
  return QDP_OK;
}

/* The shard's norm blocks, loading its slice first unless an earlier pass did; with t->scales set,
 * the fallback's scaled sums. */
static void *task_sumsq(void *arg) {
  struct shard_task *t = arg;
  struct runtime_shard_work *w = &t->work;
  t->rc = QDP_OK;
  if (!t->loaded) {
    t->rc = t->dev->ops->amp_load(t->dev, w, &t->err);
    t->loaded = t->rc == QDP_OK;
  }
  uint64_t rows = w->shard->rows;
  double *sums = t->rc == QDP_OK ? malloc(rows * sizeof *sums) : NULL;
  if (t->rc == QDP_OK && !sums) {
    t->rc = qdp_error_set(&t->err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                          "cannot allocate %" PRIu64 " row sums", rows);
  }
  for (size_t b = 0; t->rc == QDP_OK && b < t->nblocks; b++) {
    struct norm_block *blk = &t->blocks[b];
    uint64_t offset = blk->first - w->shard->first;
    uint64_t size = UINT64_C(1) << blk->log2;
    uint64_t len = offset >= w->len ? 0 : (w->len - offset < size ? w->len - offset : size);
    if (len == 0) {
      for (uint64_t r = 0; r < rows; r++) {
        t->blocks[r * t->nblocks + b].sum = 0.0; /* past the input: zeros */
      }
      continue;
    }
    t->rc = t->dev->ops->amp_sumsq(t->dev, w, offset, len, size, t->scales, sums, &t->err);
    for (uint64_t r = 0; t->rc == QDP_OK && r < rows; r++) {
      t->blocks[r * t->nblocks + b] = *blk;
      t->blocks[r * t->nblocks + b].sum = sums[r];
    }
  }
  free(sums);
  return NULL;
}

static void *task_scale(void *arg) {
  struct shard_task *t = arg;
  t->rc = t->dev->ops->amp_scale(t->dev, &t->work, t->sumsq, t->scales, &t->err);
  return NULL;
}

static void *task_encode(void *arg) {
  struct shard_task *t = arg;
  t->rc = t->dev->ops->encode(t->dev, &t->work, &t->err);
  return NULL;
}

/* One exchange of a global-bit stage: the shards whose indices differ only in that bit. */
struct pair_task {
  struct shard_task *lo, *hi;
  qdp_dtype out;
  const char *how;
  qdp_status rc;
  struct qdp_error err;
};

static void *task_butterfly(void *arg) {
  struct pair_task *p = arg;
  p->rc = p->lo->dev->ops->butterfly(p->lo->dev, p->lo->work.out, p->hi->dev, p->hi->work.out,
                                     p->out, p->lo->work.shard->count, &p->how, &p->err);
  return NULL;
}

/* The flattened input values this rank holds: all of them, or its window (runtime_input). */
static uint64_t input_first(const struct runtime_input *in) {
  return in->windowed ? in->window_first : 0;
}

static uint64_t input_count(const struct runtime_input *in) {
  return in->windowed ? in->window_count : in->rows * in->cols;
}

/* The address of flattened value `flat`, which the caller knows is held here. */
static const char *input_at(const struct runtime_input *in, uint64_t flat) {
  return (const char *)in->data + (flat - input_first(in)) * qdp_dtype_size(in->dtype);
}

/* The values of a shard's range present in each sample (the rest is zero padding). */
static uint64_t shard_len(const struct plan_shard *sh, uint64_t cols) {
  uint64_t present = cols > sh->first ? cols - sh->first : 0;
  return present < sh->count ? present : sh->count;
}

/* One value of the input for a message: read byte-wise, as the input may sit at any address (a
 * mapped file is read in place). */
static double value_at(const struct runtime_input *in, uint64_t flat) {
  const void *at = input_at(in, flat);
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

/* A non-finite value v at column col of sample row, as an error. */
static qdp_status bad_value(struct qdp_error *reterr, const char *what, uint64_t row, uint64_t col,
                            double v) {
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                       "input sample %" PRIu64 " value %" PRIu64 " is %g: %s must be finite", row,
                       col, v, what);
}

/* A closed form's parameters the output precision cannot take (qdpk_cpu_check_params), as an
 * error naming the sample, the value and what to ask for instead. */
static qdp_status bad_params(const struct plan *p, const struct runtime_input *in,
                             enum qdpk_param_fault f, uint64_t row, uint64_t col, double sum,
                             struct qdp_error *reterr) {
  const char *what = p->encoding == QDP_ENCODING_ANGLE   ? "angles"
                     : p->encoding == QDP_ENCODING_PHASE ? "phases"
                                                         : "coefficients";
  int single = p->out_dtype == QDP_DTYPE_COMPLEX64;
  switch (f) {
  case QDPK_PARAM_NOT_FINITE:
    return bad_value(reterr, what, row, col, value_at(in, row * in->cols + col));
  case QDPK_PARAM_NOT_FLOAT32:
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                         "input sample %" PRIu64 " value %" PRIu64
                         " is %g, which does not fit float32 (largest %g), the precision "
                         "complex64 output is computed in: ask for complex128 output",
                         row, col, value_at(in, row * in->cols + col), (double)FLT_MAX);
  default:
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "input",
        "input sample %" PRIu64
        " has %s whose magnitudes sum to %g: theta(z), "
        "summed in %s, could overflow (its bound is %g); %s",
        row, what, sum,
        single ? "float32 (the precision complex64 output is computed in)" : "float64",
        qdpk_param_sum_limit(p->out_dtype),
        single ? "ask for complex128 output" : "scale the coefficients down");
  }
}

static qdp_status check_values(const struct plan *p, const struct runtime_input *in,
                               struct qdp_error *reterr) {
  uint64_t index = 0;
  switch (p->encoding) {
  case QDP_ENCODING_ANGLE:
  case QDP_ENCODING_PHASE:
  case QDP_ENCODING_IQP:
  case QDP_ENCODING_IQP_Z: {
    /* A window holds whole rows (the parameters of a sample are never split). Only iqp's theta
     * sums the values; angle and phase multiply per-qubit factors of magnitude at most 1. */
    uint64_t row = 0, col = 0;
    double sum = 0;
    int summed = p->encoding == QDP_ENCODING_IQP || p->encoding == QDP_ENCODING_IQP_Z;
    enum qdpk_param_fault f =
        qdpk_cpu_check_params(in->data, in->dtype, in->cols, in->cols, input_count(in) / in->cols,
                              p->out_dtype, summed, &row, &col, &sum);
    return f == QDPK_PARAM_OK
               ? QDP_OK
               : bad_params(p, in, f, row + input_first(in) / in->cols, col, sum, reterr);
  }
  case QDP_ENCODING_BASIS: {
    /* Basis input is whole rows (one index each), so a window is whole rows too. */
    enum qdpk_basis_fault f = qdpk_cpu_check_basis(in->data, in->dtype, in->cols,
                                                   input_count(in) / in->cols, p->qubits, &index);
    if (f == QDPK_BASIS_OK) {
      return QDP_OK;
    }
    index += input_first(in) / in->cols;
    double v = value_at(in, index * in->cols);
    static const char *const why[] = {
        [QDPK_BASIS_NOT_FINITE] = "is not finite",
        [QDPK_BASIS_NOT_INTEGER] = "is not an integer",
        [QDPK_BASIS_NEGATIVE] = "is negative",
        [QDPK_BASIS_TOO_LARGE] = "is not below 2^qubits",
    };
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                         "basis index %.17g of sample %" PRIu64
                         " %s (qubits %u: valid indices are "
                         "0..%" PRIu64 ")",
                         v, index, why[f], p->qubits, (UINT64_C(1) << p->qubits) - 1);
  }
  default:
    return QDP_OK;
  }
}

static qdp_status check_input_shape(const struct plan *p, const struct runtime_input *in,
                                    struct qdp_error *reterr) {
  if (in->rows != p->batch || in->dtype != p->in_dtype || in->cols == 0 ||
      (p->encoding == QDP_ENCODING_AMPLITUDE
           ? in->cols > p->amplitudes
           : in->cols != qdpk_params_per_sample(p->encoding, p->qubits))) {
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "input",
        "input of %" PRIu64 " x %" PRIu64
        " %s values does not match the plan "
        "(%" PRIu64 " samples of %u qubits, %s input)",
        in->rows, in->cols, qdp_dtype_name(in->dtype) ? qdp_dtype_name(in->dtype) : "?", p->batch,
        p->qubits, qdp_dtype_name(p->in_dtype) ? qdp_dtype_name(p->in_dtype) : "?");
  }
  return QDP_OK;
}

/* Whether the plan's shards are on more than one rank (then its collectives go through the world).
 */
static bool spans_ranks(const struct plan *p) {
  for (size_t i = 1; i < p->nshards; i++) {
    if (p->shards[i].rank != p->shards[0].rank) {
      return true;
    }
  }
  return false;
}

/* One norm block of one sample, as the ranks exchange them. */
struct norm_record {
  uint64_t row;
  struct norm_block block;
};

static int record_order(const void *a, const void *b) {
  const struct norm_record *x = a, *y = b;
  if (x->row != y->row) {
    return x->row < y->row ? -1 : 1;
  }
  return x->block.first < y->block.first ? -1 : x->block.first > y->block.first;
}

/* Reduces each sample's blocks along the tree into sumsq (one total per sample of the job). The
 * blocks of every shard of a sample (other ranks' too, all-gathered: never an MPI reduction on
 * floating point) are combined in index order, so every rank computes the same bits. */
static qdp_status reduce_norms(struct runtime_state *st, struct shard_task *t, size_t n,
                               double *sumsq, struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  const struct runtime_mesh *m = st->mesh;
  int single = p->out_dtype == QDP_DTYPE_COMPLEX64;
  qdp_status rc = QDP_OK;
  size_t nmine = 0;
  for (size_t i = 0; i < n; i++) {
    nmine += t[i].work.shard->rows * t[i].nblocks;
  }
  struct norm_record *mine = calloc(nmine ? nmine : 1, sizeof *mine);
  struct norm_record *all = mine;
  void *gathered = NULL;
  struct norm_block *row_blocks = NULL;
  size_t nall = nmine;
  if (!mine) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate norm blocks");
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    for (uint64_t r = 0; r < t[i].work.shard->rows; r++) {
      for (size_t b = 0; b < t[i].nblocks; b++) {
        mine[k].row = t[i].work.shard->row_first + r;
        mine[k].block = t[i].blocks[r * t[i].nblocks + b];
        k++;
      }
    }
  }
  if (m->world_ops && spans_ranks(p)) {
    size_t bytes = 0;
    QDP_TRY(rc, m->world_ops->allgather(m->world_ctx, mine, nmine * sizeof *mine, &gathered, &bytes,
                                        reterr));
    all = gathered;
    nall = bytes / sizeof *all;
  }
  qsort(all, nall, sizeof *all, record_order);
  row_blocks = malloc((nall ? nall : 1) * sizeof *row_blocks);
  if (!row_blocks) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate norm blocks");
    goto out;
  }
  size_t at = 0;
  for (uint64_t row = 0; row < p->batch; row++) {
    size_t nb = 0;
    for (; at < nall && all[at].row == row; at++) {
      row_blocks[nb++] = all[at].block;
    }
    sumsq[row] = norm_combine(row_blocks, nb, p->qubits, single);
  }
out:
  free(row_blocks);
  free(gathered);
  free(mine);
  return rc;
}

/* The host path of the norm: every shard's blocks (its slice loaded first, unless an earlier pass
 * did), summed with the rows' exponents `scales` (one per sample of the job; NULL: none), then
 * reduced along the tree into sumsq. */
static qdp_status host_norms(struct runtime_state *st, struct shard_task *t, size_t n,
                             const int32_t *scales, double *sumsq, struct qdp_error *reterr) {
  for (size_t i = 0; i < n; i++) {
    const struct plan_shard *sh = t[i].work.shard;
    t[i].scales = scales ? scales + sh->row_first : NULL;
    if (t[i].blocks) {
      continue;
    }
    struct norm_block split[NORM_BLOCKS_MAX];
    t[i].nblocks = norm_split(sh->first, sh->first + sh->count, split);
    t[i].blocks = malloc(sh->rows * t[i].nblocks * sizeof *t[i].blocks);
    if (!t[i].blocks) {
      return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate norm blocks");
    }
    for (uint64_t r = 0; r < sh->rows; r++) {
      memcpy(&t[i].blocks[r * t[i].nblocks], split, t[i].nblocks * sizeof *split);
    }
  }
  run_all(t, n, sizeof *t, task_sumsq);
  qdp_status rc = first_failure(t, n, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  double t0 = now_ms();
  rc = reduce_norms(st, t, n, sumsq, reterr);
  st->norm_us += n > 1 || spans_ranks(&st->plan) ? (now_ms() - t0) * 1e3 : 0;
  return rc;
}

/* Whether a sample's sum of squares S gives its state as it is: finite, and at least 2^n times
 * the output precision's smallest normal 2^emin. A square that falls below the normal range is
 * off by up to half the smallest subnormal, 2^(emin - p - 1) (p fraction bits), not by a relative
 * rounding; with at most 2^n of them, S is off by at most 2^(n + emin - p - 1), which
 * S >= 2^(n + emin) keeps within one more unit roundoff 2^-(p + 1) of S (sums of subnormals are
 * exact). Below it, the state could be visibly wrong ([3e-162, 3e-162] once normalized to 0.675
 * each). S == 0 (every square underflowed, or every value is zero) and S not finite (a square
 * overflowed, or a value is NaN or Inf) fail it too. */
static bool norm_direct(const struct plan *p, double s) {
  double tiny = p->out_dtype == QDP_DTYPE_COMPLEX64 ? (double)FLT_MIN : DBL_MIN;
  return isfinite(s) && s >= ldexp(tiny, (int)p->qubits);
}

/* What the norm's fallback needs of a sample from every shard that holds part of it: the largest
 * |value| (a plain maximum: the same whatever the sharding, and the same on every rank) and the
 * first non-finite value, if any (bad = its column, or UINT64_MAX). */
struct norm_extreme {
  uint64_t row, bad;
  double max, bad_value;
};

/* The extremes of the samples `need` marks, over the values this rank's shards hold, gathered from
 * every rank of the job: *ret (malloc'd) gets them all, rank after rank. */
static qdp_status gather_extremes(struct runtime_state *st, struct shard_task *t, size_t n,
                                  const struct runtime_input *in, const bool *need,
                                  struct norm_extreme **ret, size_t *ret_count,
                                  struct qdp_error *reterr) {
  const struct runtime_mesh *m = st->mesh;
  qdp_status rc = QDP_OK;
  size_t nmine = 0;
  for (size_t i = 0; i < n; i++) {
    for (uint64_t r = 0; r < t[i].work.shard->rows; r++) {
      nmine += need[t[i].work.shard->row_first + r] && t[i].work.len > 0;
    }
  }
  struct norm_extreme *mine = calloc(nmine ? nmine : 1, sizeof *mine);
  if (!mine) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate %zu norm extremes", nmine);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const struct runtime_shard_work *w = &t[i].work;
    size_t isize = qdp_dtype_size(w->in);
    for (uint64_t r = 0; r < w->shard->rows && w->len > 0; r++) {
      uint64_t row = w->shard->row_first + r, at = 0;
      if (!need[row]) {
        continue;
      }
      const char *x = (const char *)w->x + r * w->in_stride * isize;
      mine[k] = (struct norm_extreme){
          .row = row, .bad = UINT64_MAX, .max = qdpk_cpu_absmax(x, w->in, w->len)};
      if (qdpk_cpu_find_nonfinite(x, w->in, w->len, &at)) {
        mine[k].bad = w->shard->first + at;
        mine[k].bad_value = value_at(in, row * in->cols + mine[k].bad);
      }
      k++;
    }
  }
  if (m->world_ops && spans_ranks(&st->plan)) {
    void *all = NULL;
    size_t bytes = 0;
    rc = m->world_ops->allgather(m->world_ctx, mine, nmine * sizeof *mine, &all, &bytes, reterr);
    free(mine);
    mine = all;
    nmine = bytes / sizeof *mine;
  }
  if (rc == QDP_OK) {
    *ret = mine;
    *ret_count = nmine;
    mine = NULL;
  }
  free(mine);
  return rc;
}

/* Checks every sample's sum of squares and computes, where the plain sum cannot give the state,
 * the one the math defines ("scale before summing, as a careful 2-norm does"). The fast path is
 * untouched: samples whose S passes norm_direct keep their bits, and nothing more is read. For
 * the others, every rank decides the same from the same S: the sample's largest |value| M is
 * gathered (a maximum, so order does not matter), a NaN or Inf is refused with its position, a
 * sample of zeros with zero norm, and any other is summed again along the same tree with each
 * value multiplied by 2^e, e = -ilogb(M), in the input precision before any conversion: an exact
 * power of two that brings M to [1, 2), so S' lies in [1, 2^(n+2)] whatever the input's range, and
 * pass 2 writes (x 2^e) / sqrt(S'). *ret_scales gets the exponents (one per sample, 0 where none
 * is needed), or NULL when no sample needed them. */
static qdp_status settle_norms(struct runtime_state *st, struct shard_task *t, size_t n,
                               const struct runtime_input *in, double *sumsq, int32_t **ret_scales,
                               struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  qdp_status rc = QDP_OK;
  bool *need = NULL;
  int32_t *scales = NULL;
  struct norm_extreme *ext = NULL;
  double *scaled = NULL;
  size_t next = 0, nneed = 0;
  *ret_scales = NULL;
  for (uint64_t r = 0; r < p->batch; r++) {
    nneed += !norm_direct(p, sumsq[r]);
  }
  if (nneed == 0) {
    return QDP_OK;
  }
  need = calloc(p->batch, sizeof *need);
  scales = calloc(p->batch, sizeof *scales);
  scaled = malloc(p->batch * sizeof *scaled);
  if (!need || !scales || !scaled) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "cannot allocate the norm's fallback for %" PRIu64 " samples", p->batch);
    goto out;
  }
  for (uint64_t r = 0; r < p->batch; r++) {
    need[r] = !norm_direct(p, sumsq[r]);
  }
  QDP_TRY(rc, gather_extremes(st, t, n, in, need, &ext, &next, reterr));
  for (uint64_t r = 0; r < p->batch; r++) {
    if (!need[r]) {
      continue;
    }
    double max = 0, v = 0;
    uint64_t bad = UINT64_MAX;
    for (size_t k = 0; k < next; k++) {
      if (ext[k].row != r) {
        continue;
      }
      max = ext[k].max > max ? ext[k].max : max;
      if (ext[k].bad < bad) {
        bad = ext[k].bad;
        v = ext[k].bad_value;
      }
    }
    if (bad != UINT64_MAX) {
      rc = bad_value(reterr, "amplitudes", r, bad, v);
      goto out;
    }
    if (max == 0) {
      rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                         "input sample %" PRIu64
                         " has zero norm: every value is zero, and amplitude encoding needs at "
                         "least one non-zero value",
                         r);
      goto out;
    }
    scales[r] = -ilogb(max);
  }
  QDP_TRY(rc, host_norms(st, t, n, scales, scaled, reterr));
  for (uint64_t r = 0; r < p->batch; r++) {
    if (!need[r]) {
      continue;
    }
    /* S' lies in [1, 2^(n+2)] by construction: anything else is a defect, never a state. */
    if (!(scaled[r] >= 1.0 && scaled[r] <= ldexp(1.0, (int)p->qubits + 2))) {
      rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                         "sample %" PRIu64
                         ": the sum of squares scaled by 2^%d is %g, outside "
                         "[1, 2^%u]",
                         r, scales[r], scaled[r], p->qubits + 2);
      goto out;
    }
    sumsq[r] = scaled[r];
  }
  *ret_scales = scales;
  scales = NULL;
out:
  free(scaled);
  free(ext);
  free(scales);
  free(need);
  return rc;
}

/* ---- the norm over a device collective
 * A sample split over devices needs every device's partial sums. Instead of copying them to the
 * host, each device's parts are all-gathered over the mesh's NCCL communicator and every device
 * combines the same parts along the same tree, so each holds the bits the host path would get,
 * and the scale pass reads its totals where they already are. */

/* The group a job was given to gather over: the mesh's (its owner's) for a job on this rank's
 * GPUs, the world's for one across ranks (when the coordinator allows it); NULL: none. */
static struct device_comm *job_group(const struct runtime_mesh *m, const struct plan *p) {
  if (!spans_ranks(p)) {
    return m->device_comm;
  }
  return m->world_ops && m->world_ops->device_group ? m->world_ops->device_group(m->world_ctx)
                                                     : NULL;
}

/* A shard's member number in group c: this rank's devices from the group's first member on,
 * another rank's by its index in the world's device table (as the plan names them). */
static size_t shard_member(const struct runtime_mesh *m, const struct device_comm *c,
                           const struct plan_shard *sh) {
  return sh->rank == m->rank ? (size_t)device_comm_first_member(c) + sh->device : sh->device;
}

/* Whether this job's norm can gather over group c (collectives_job_fits: one shard per member),
 * with every shard holding every row (a sample split by index, not a batch split by sample, which
 * needs no exchange at all) and a backend that has the device path. Every rank decides the same
 * from the same plan. */
static bool device_norm_possible(const struct runtime_mesh *m, const struct device_comm *c,
                                 const struct shard_task *t, size_t n, const struct plan *p) {
  size_t members[QDP_DEVICES_MAX];
  if (!c || p->nshards > sizeof members / sizeof members[0]) {
    return false;
  }
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    if (sh->row_first != 0 || sh->rows != p->batch) {
      return false;
    }
    members[i] = shard_member(m, c, sh);
  }
  for (size_t i = 0; i < n; i++) {
    if (!t[i].dev->ops->amp_partials) {
      return false;
    }
  }
  return collectives_job_fits(c, members, p->nshards, n);
}

/* A shard's parts: its norm blocks, each cut into aligned pieces of at most 2^span values, with
 * the values present only (an absent subtree is zero in the tree). ret NULL: only counts. */
static size_t shard_parts(const struct plan_shard *sh, uint64_t len, uint32_t span,
                          struct runtime_amp_part *ret) {
  struct norm_block split[NORM_BLOCKS_MAX];
  size_t nb = norm_split(sh->first, sh->first + sh->count, split), k = 0;
  for (size_t b = 0; b < nb; b++) {
    uint64_t offset = split[b].first - sh->first, size = UINT64_C(1) << split[b].log2;
    uint64_t present = offset >= len ? 0 : (len - offset < size ? len - offset : size);
    uint32_t lg = split[b].log2 <= span ? split[b].log2 : span;
    for (uint64_t at = 0; at < present; at += UINT64_C(1) << lg, k++) {
      uint64_t piece = present - at < (UINT64_C(1) << lg) ? present - at : UINT64_C(1) << lg;
      if (ret) {
        ret[k] = (struct runtime_amp_part){.offset = offset + at, .len = piece, .log2 = lg};
      }
    }
  }
  return k;
}

/* Across ranks, before an exchange (`what`): every rank says whether its part so far succeeded and
 * its group c (NULL: none) is still usable, so that no rank enters an exchange another will never
 * join. A rank that failed reports its own error with the job; the others fail with UNAVAILABLE,
 * which the coordinator ranks below it. */
static qdp_status agree_before(const char *what, const struct runtime_mesh *m,
                               const struct device_comm *c, qdp_status mine,
                               struct qdp_error *reterr) {
  struct ready {
    int32_t rank, status, usable, pad;
  } me = {m->rank, mine, !c || device_comm_usable(c), 0};
  struct qdp_error own = QDP_ERROR_INIT;
  if (reterr) {
    own = *reterr;
  }
  void *got = NULL;
  size_t bytes = 0;
  qdp_status rc = m->world_ops->allgather_fixed(m->world_ctx, &me, sizeof me, &got, &bytes, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (mine != QDP_OK) {
    free(got);
    if (reterr) {
      *reterr = own;
    }
    return mine;
  }
  const struct ready *all = got;
  for (size_t i = 0; rc == QDP_OK && i < bytes / sizeof *all; i++) {
    if (all[i].status != QDP_OK) {
      rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, NULL,
                         "rank %d failed before %s (%s); nothing was exchanged", all[i].rank, what,
                         qdp_status_name((qdp_status)all[i].status));
    } else if (!all[i].usable) {
      rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, NULL,
                         "the device group across ranks was aborted on rank %d; later jobs reduce "
                         "over MPI",
                         all[i].rank);
    }
  }
  free(got);
  return rc;
}

static void *task_partials(void *arg) {
  struct shard_task *t = arg;
  t->rc = t->dev->ops->amp_load(t->dev, &t->work, &t->err);
  t->loaded = t->rc == QDP_OK;
  if (t->rc == QDP_OK) {
    t->rc = t->dev->ops->amp_partials(t->dev, &t->work, t->parts, t->nparts, t->stride, t->members,
                                      t->all, t->nall, &t->send, &t->recv, &t->stream, &t->err);
  }
  return NULL;
}

/* The device path of the norm: every shard's parts all-gathered over group c and combined on every
 * device; sumsq gets the totals (host copy), which the devices also keep for the scale pass. */
static qdp_status device_norms(struct runtime_state *st, struct shard_task *t, size_t n,
                               const struct runtime_input *in, struct device_comm *c, double *sumsq,
                               struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  const struct runtime_mesh *m = st->mesh;
  bool world = spans_ranks(p);
  uint64_t rows = p->batch;
  uint32_t span = t[0].dev->ops->amp_part_log2(t[0].dev, in->dtype);
  size_t stride = 1, nall = 0, most = 1;
  for (size_t i = 0; i < p->nshards; i++) {
    size_t k = shard_parts(&p->shards[i], shard_len(&p->shards[i], in->cols), span, NULL);
    stride = k > stride ? k : stride;
    most = k > most ? k : most;
    nall += k;
  }
  qdp_status rc = QDP_OK;
  struct qdpk_norm_part *all = calloc(nall ? nall : 1, sizeof *all);
  struct runtime_amp_part *parts = calloc(most, sizeof *parts);
  const double **send = calloc(n, sizeof *send);
  double **recv = calloc(n, sizeof *recv);
  void **streams = calloc(n, sizeof *streams);
  if (!all || !parts || !send || !recv || !streams) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "cannot allocate the norm's %zu part descriptions", nall);
    goto out;
  }
  /* Every shard's parts, this rank's and the others', ascending (shards are in index order);
   * a part's column in the gathered buffer is its shard's member number. */
  size_t j = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    size_t k = shard_parts(sh, shard_len(sh, in->cols), span, parts);
    size_t member = shard_member(m, c, sh);
    for (size_t q = 0; q < k; q++) {
      all[j++] = (struct qdpk_norm_part){.first = sh->first + parts[q].offset,
                                         .log2 = parts[q].log2,
                                         .src = member * rows * stride + q};
    }
  }
  for (size_t i = 0; i < n; i++) {
    const struct plan_shard *sh = t[i].work.shard;
    t[i].nparts = shard_parts(sh, t[i].work.len, span, NULL);
    t[i].parts = malloc((t[i].nparts ? t[i].nparts : 1) * sizeof *t[i].parts);
    if (!t[i].parts) {
      rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate norm parts");
      goto out;
    }
    shard_parts(sh, t[i].work.len, span, t[i].parts);
    t[i].stride = stride;
    t[i].members = (size_t)device_comm_size(c);
    t[i].all = all;
    t[i].nall = nall;
  }
  run_all(t, n, sizeof *t, task_partials);
  double t0 = now_ms();
  rc = first_failure(t, n, reterr);
  if (world) {
    rc = agree_before("the norm's all-gather", m, c, rc, reterr);
  }
  if (rc != QDP_OK) {
    goto out;
  }
  /* Local member i is this rank's device i. */
  for (size_t i = 0; i < n; i++) {
    size_t local = t[i].work.shard->device;
    send[local] = t[i].send;
    recv[local] = t[i].recv;
    streams[local] = t[i].stream;
  }
  QDP_TRY(rc, device_comm_allgather_f64_all(c, send, recv, rows * stride, streams, reterr));
  /* The combine goes behind the gather without waiting; then one wait per device, which across
   * processes ends within the rank timeout: a rank that died in the middle fails the job instead
   * of hanging this one. */
  for (size_t i = 0; i < n; i++) {
    QDP_TRY(rc,
            t[i].dev->ops->amp_combine(t[i].dev, &t[i].work, nall, stride, &t[i].totals, reterr));
  }
  for (size_t i = 0; i < n; i++) {
    QDP_TRY(rc,
            device_comm_wait(c, t[i].work.shard->device, streams[t[i].work.shard->device], reterr));
  }
  st->norm_us = (now_ms() - t0) * 1e3;
  for (uint64_t r = 0; r < rows; r++) {
    /* Every device walked the same parts along the same tree: anything else is a defect. */
    for (size_t i = 1; i < n; i++) {
      if (memcmp(&t[i].totals[r], &t[0].totals[r], sizeof(double)) != 0) {
        rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "sample %" PRIu64
                           ": device %zu combined the norm to %.17g, device 0 "
                           "to %.17g",
                           r, i, t[i].totals[r], t[0].totals[r]);
        goto out;
      }
    }
    sumsq[r] = t[0].totals[r];
  }
out:
  for (size_t i = 0; i < n; i++) {
    /* After a failure nothing queued may still write the scratch when it goes back: wait (within
     * the group's bounds; a group that times out is aborted, which ends its work). */
    if (rc != QDP_OK && t[i].stream) {
      (void)device_comm_wait(c, t[i].work.shard->device, t[i].stream, NULL);
    }
    free(t[i].parts);
    t[i].parts = NULL;
  }
  free(all);
  free(parts);
  free(send);
  free(recv);
  free(streams);
  return rc;
}

/* Amplitude: each sample's sum of squares along the one tree (over the device group where there
 * is one, else on the host), checked and, where it must be, redone scaled (settle_norms), then
 * pass 2 on every shard. */
static qdp_status run_amplitude(struct runtime_state *st, struct shard_task *t, size_t n,
                                const struct runtime_input *in, struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  if (n == 0 && !spans_ranks(p)) {
    return QDP_OK; /* the coordinator of a job held wholly by another rank */
  }
  struct device_comm *c = job_group(st->mesh, p);
  bool on_device = device_norm_possible(st->mesh, c, t, n, p);
  qdp_status rc = QDP_OK;
  int32_t *scales = NULL;
  double *sumsq = malloc(p->batch * sizeof *sumsq);
  if (!sumsq) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate %" PRIu64 " norms", p->batch);
  }
  if (on_device) {
    QDP_TRY(rc, device_norms(st, t, n, in, c, sumsq, reterr));
  } else {
    QDP_TRY(rc, host_norms(st, t, n, NULL, sumsq, reterr));
  }
  QDP_TRY(rc, settle_norms(st, t, n, in, sumsq, &scales, reterr));
  for (size_t i = 0; i < n; i++) {
    /* The devices hold the gathered totals; a fallback changed some, which then go up again. */
    uint64_t r0 = t[i].work.shard->row_first;
    t[i].sumsq = on_device && !scales ? NULL : sumsq + r0;
    t[i].scales = scales ? scales + r0 : NULL;
  }
  run_all(t, n, sizeof *t, task_scale);
  QDP_TRY(rc, first_failure(t, n, reterr));
  /* Only a sample split over shards needs an exchange; a batch split by sample does not. */
  for (size_t i = 0; i < n; i++) {
    if (t[i].work.shard->count != p->amplitudes) {
      st->collective = on_device ? "nccl" : spans_ranks(p) ? "mpi" : "host";
    }
  }
out:
  for (size_t i = 0; i < n; i++) {
    free(t[i].blocks);
    t[i].blocks = NULL;
  }
  free(scales);
  free(sumsq);
  return rc;
}

/* A global-bit stage whose partner shard is on rank `peer`: the two ranks trade the shard's data
 * in chunks through host memory (the exchange buffer the planner counted) and each combines its
 * own half. Both ranks walk the same chunks in the same order. */
static qdp_status exchange_stage(struct runtime_state *st, struct shard_task *mine, int peer,
                                 int high, struct qdp_error *reterr) {
  const struct runtime_mesh *m = st->mesh;
  struct runtime_device *d = mine->dev;
  qdp_dtype out = st->plan.out_dtype;
  unsigned esize = qdp_dtype_size(out);
  uint64_t count = mine->work.shard->bytes / esize;
  uint64_t piece =
      PLAN_EXCHANGE_CHUNK_BYTES / esize < count ? PLAN_EXCHANGE_CHUNK_BYTES / esize : count;
  qdp_status rc = QDP_OK;
  char *send = malloc(piece * esize), *recv = malloc(piece * esize);
  if (!send || !recv) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "cannot allocate 2 x %" PRIu64 " B of exchange buffers", piece * esize);
    goto out;
  }
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t len = count - at < piece ? count - at : piece;
    char *chunk = (char *)mine->work.out + at * esize;
    QDP_TRY(rc, d->ops->read(d, chunk, len * esize, send, reterr));
    QDP_TRY(rc, m->world_ops->exchange(m->world_ctx, peer, send, recv, len * esize, reterr));
    QDP_TRY(rc, d->ops->combine_host(d, chunk, recv, out, len, high, reterr));
  }
out:
  free(send);
  free(recv);
  return rc;
}

/* The global-bit stages of the Walsh-Hadamard transform of a sharded iqp state: for each global
 * bit, ascending, every shard pair differing in that bit exchanges and combines. Shards of an even
 * plan are in index order, so shard i holds global index bits i. Pairs on this rank run
 * concurrently; pairs split with another rank run one after another in shard order, the same
 * order on every rank, so two ranks always meet at their lowest pending pair. */
static qdp_status run_global_stages(struct runtime_state *st, struct shard_task *t, size_t n,
                                    struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  size_t npairs = p->nshards / 2;
  struct device_comm *group = spans_ranks(p) ? job_group(st->mesh, p) : NULL;
  const char *cross = NULL;
  struct pair_task *pairs = calloc(npairs ? npairs : 1, sizeof *pairs);
  struct shard_task **local = calloc(p->nshards, sizeof *local); /* by shard index */
  qdp_status rc = QDP_OK;
  if (!pairs || !local) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate exchange pairs");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    local[t[i].index] = &t[i];
  }
  for (uint32_t bit = 0; bit < p->global_bits; bit++) {
    size_t k = 0, stride = (size_t)1 << bit;
    for (size_t i = 0; i < p->nshards; i++) {
      if (!(i & stride) && local[i] && local[i | stride]) {
        pairs[k] = (struct pair_task){
            .lo = local[i], .hi = local[i | stride], .out = p->out_dtype, .err = QDP_ERROR_INIT};
        k++;
      }
    }
    run_all(pairs, k, sizeof *pairs, task_butterfly);
    for (size_t i = 0; i < k; i++) {
      if (pairs[i].rc != QDP_OK) {
        rc = pairs[i].rc;
        if (reterr) {
          *reterr = pairs[i].err;
        }
        goto out;
      }
      st->collective = pairs[i].how;
    }
    for (size_t i = 0; i < p->nshards; i++) {
      size_t j = i | stride;
      if ((i & stride) || !local[i] == !local[j]) {
        continue;
      }
      if (!st->mesh->world_ops) {
        rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "shards %zu and %zu are on different ranks but the mesh has no world", i,
                           j);
        goto out;
      }
      int high = local[i] == NULL;
      struct shard_task *mine = high ? local[j] : local[i];
      const struct plan_shard *partner = &p->shards[high ? i : j];
      if (group && mine->dev->ops->combine_group) {
        QDP_TRY(rc,
                mine->dev->ops->combine_group(
                    mine->dev, mine->work.out, p->out_dtype, mine->work.shard->count, high, group,
                    mine->work.shard->device, (int)shard_member(st->mesh, group, partner), reterr));
        cross = "nccl";
      } else {
        QDP_TRY(rc, exchange_stage(st, mine, partner->rank, high, reterr));
        cross = "mpi";
      }
    }
  }
  /* A stage between ranks is what the state's collectives cost most: it names them. */
  st->collective = cross ? cross : st->collective;
out:
  free(local);
  free(pairs);
  return rc;
}

static void state_free_buffers(struct runtime_state *st) {
  for (size_t i = 0; st->bufs && i < st->plan.nshards; i++) {
    if (st->bufs[i]) {
      struct runtime_device *d = st->mesh->devs[st->plan.shards[i].device];
      d->ops->free(d, st->bufs[i], st->plan.shards[i].bytes);
      runtime_device_unreserve(d, st->plan.shards[i].bytes);
    }
  }
  free(st->bufs);
  st->bufs = NULL;
}

void runtime_state_destroy(struct runtime_state *s) {
  if (!s) {
    return;
  }
  if (s->world_job && s->mesh->world_ops) {
    s->mesh->world_ops->release(s->mesh->world_ctx, s->world_job, &s->plan);
  }
  state_free_buffers(s);
  free(s->plan.shards);
  free(s->plan.needs);
  free(s);
}

qdp_status runtime_encode(struct runtime_mesh *m, const struct plan *p,
                          const struct runtime_input *in, struct runtime_state **ret_state,
                          struct qdp_error *reterr) {
  double t0 = now_ms();
  qdp_status rc = QDP_OK;
  struct runtime_state *st = NULL;
  struct shard_task *t = NULL;
  size_t n = 0;

  if (!p->feasible || p->nshards == 0) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "the plan is not feasible; nothing was encoded");
  }
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank == m->rank && p->shards[i].device >= m->count) {
      return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "shard %zu names device %zu but the mesh has %zu", i,
                           p->shards[i].device, m->count);
    }
  }
  QDP_TRY(rc, check_input_shape(p, in, reterr));
  QDP_TRY(rc, check_values(p, in, reterr));

  st = calloc(1, sizeof *st);
  if (!st || plan_copy(p, &st->plan) != 0) {
    free(st);
    st = NULL;
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the state");
    goto out;
  }
  st->mesh = m;
  st->collective = "none";
  st->bufs = calloc(p->nshards, sizeof *st->bufs);
  t = calloc(p->nshards, sizeof *t);
  if (!st->bufs || !t) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the shard table");
    goto out;
  }

  /* Reserve and allocate every local shard before any work starts. */
  for (size_t i = 0; i < st->plan.nshards; i++) {
    const struct plan_shard *sh = &st->plan.shards[i];
    if (sh->rank != m->rank) {
      continue;
    }
    struct runtime_device *d = m->devs[sh->device];
    QDP_TRY(rc, runtime_device_reserve(d, sh->bytes, reterr));
    rc = d->ops->alloc(d, sh->bytes, &st->bufs[i], reterr);
    if (rc != QDP_OK) {
      runtime_device_unreserve(d, sh->bytes);
      goto out;
    }
    st->bytes += sh->bytes;
    struct shard_task *k = &t[n++];
    k->st = st;
    k->index = i;
    k->dev = d;
    k->err = (struct qdp_error)QDP_ERROR_INIT;
    k->work = (struct runtime_shard_work){.plan = &st->plan,
                                          .shard = sh,
                                          .out = st->bufs[i],
                                          .in = in->dtype,
                                          .in_stride = in->cols,
                                          .pinned = in->pinned};
    uint64_t row0 = sh->row_first * in->cols;
    if (st->plan.encoding == QDP_ENCODING_AMPLITUDE) {
      k->work.len = shard_len(sh, in->cols);
      k->work.x = k->work.len ? input_at(in, row0 + sh->first) : in->data;
    } else {
      k->work.x = input_at(in, row0);
    }
  }

  if (st->plan.encoding == QDP_ENCODING_AMPLITUDE) {
    rc = run_amplitude(st, t, n, in, reterr);
  } else {
    run_all(t, n, sizeof *t, task_encode);
    rc = first_failure(t, n, reterr);
    bool staged = st->plan.global_bits > 0 && (st->plan.encoding == QDP_ENCODING_IQP ||
                                               st->plan.encoding == QDP_ENCODING_IQP_Z);
    if (staged && spans_ranks(&st->plan)) {
      rc = agree_before("the global-bit exchange", m, job_group(m, &st->plan), rc, reterr);
    }
    if (rc == QDP_OK && staged) {
      rc = run_global_stages(st, t, n, reterr);
    }
  }
  if (rc != QDP_OK) {
    goto out;
  }
  st->encode_ms = now_ms() - t0;
  *ret_state = st;
  st = NULL;
out:
  for (size_t i = 0; i < n; i++) {
    if (t[i].loaded || t[i].work.scratch) {
      t[i].dev->ops->work_done(t[i].dev, &t[i].work);
    }
  }
  free(t);
  runtime_state_destroy(st);
  return rc;
}

void runtime_state_set_world_job(struct runtime_state *s, uint64_t job) {
  s->world_job = job;
}

const struct plan *runtime_state_plan(const struct runtime_state *s) {
  return &s->plan;
}

const char *runtime_state_collective(const struct runtime_state *s) {
  return s->collective;
}

uint64_t runtime_state_bytes(const struct runtime_state *s) {
  return s->bytes;
}

double runtime_state_encode_ms(const struct runtime_state *s) {
  return s->encode_ms;
}

double runtime_state_norm_us(const struct runtime_state *s) {
  return s->norm_us;
}

qdp_status runtime_state_read(struct runtime_state *s, uint64_t offset, uint64_t count, void *dst,
                              struct qdp_error *reterr) {
  const struct plan *p = &s->plan;
  uint64_t total = p->batch * p->amplitudes; /* the planner proved this does not overflow */
  if (offset > total || count > total - offset) {
    return qdp_error_set(reterr, QDP_ERR_OUT_OF_RANGE, "offset",
                         "amplitudes [%" PRIu64 ", %" PRIu64 ") are outside the state's %" PRIu64,
                         offset, offset + count, total);
  }
  unsigned esize = qdp_dtype_size(p->out_dtype);
  char *out = dst;
  while (count > 0) {
    uint64_t row = offset >> p->qubits, idx = offset & (p->amplitudes - 1);
    size_t i = 0;
    while (i < p->nshards &&
           !(row >= p->shards[i].row_first && row - p->shards[i].row_first < p->shards[i].rows &&
             idx >= p->shards[i].first && idx - p->shards[i].first < p->shards[i].count)) {
      i++;
    }
    const struct plan_shard *sh = i < p->nshards ? &p->shards[i] : NULL;
    uint64_t run = sh ? sh->first + sh->count - idx : 0;
    run = run < count ? run : count;
    if (sh && !s->bufs[i] && sh->rank != s->mesh->rank && s->world_job && s->mesh->world_ops) {
      qdp_status rc = s->mesh->world_ops->read(s->mesh->world_ctx, sh->rank, s->world_job, offset,
                                               run, out, run * esize, reterr);
      if (rc != QDP_OK) {
        return rc;
      }
      out += run * esize;
      offset += run;
      count -= run;
      continue;
    }
    if (!sh || !s->bufs[i]) {
      return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "amplitude %" PRIu64 " is in no local shard", offset);
    }
    uint64_t at = ((row - sh->row_first) * sh->count + (idx - sh->first)) * esize;
    struct runtime_device *d = s->mesh->devs[sh->device];
    qdp_status rc = d->ops->read(d, (const char *)s->bufs[i] + at, run * esize, out, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
    out += run * esize;
    offset += run;
    count -= run;
  }
  return QDP_OK;
}
