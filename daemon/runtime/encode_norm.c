/* The norm on the host, along its fixed tree, its scaled fallback, and the job of a NORM
 * reduction (amplitude) (encode.h). */
#include "runtime/encode.h"

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
  if (m->world_ops && encode_spans_ranks(p)) {
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
  runtime_workers_run(st->mesh->workers, t, n, sizeof *t, encode_task_sumsq);
  qdp_status rc = encode_first_failure(t, n, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  uint64_t t0 = clock_mono_ns();
  rc = reduce_norms(st, t, n, sumsq, reterr);
  st->norm_us +=
      n > 1 || encode_spans_ranks(&st->plan) ? (double)(clock_mono_ns() - t0) / CLOCK_NS_PER_US : 0;
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

/* One row of a shard's input on the host: x itself, or a device input's row copied into *copy
 * (malloc'd; the caller frees it). */
static qdp_status row_on_host(const struct runtime_state *st, const struct runtime_input *in,
                              const char *x, uint64_t bytes, const char **ret, char **copy,
                              struct qdp_error *reterr) {
  *ret = x;
  if (!in->on_device) {
    return QDP_OK;
  }
  struct runtime_device *d = st->mesh->devs[in->device];
  *copy = realloc(*copy, bytes ? (size_t)bytes : 1);
  if (!*copy) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %" PRIu64 " B input row", bytes);
  }
  *ret = *copy;
  return d->ops->read(d, x, bytes, *copy, reterr);
}

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
  char *copy = NULL;
  for (size_t i = 0; i < n && rc == QDP_OK; i++) {
    const struct runtime_shard_work *w = &t[i].work;
    size_t isize = qdp_dtype_size(w->in);
    for (uint64_t r = 0; r < w->shard->rows && w->len > 0 && rc == QDP_OK; r++) {
      uint64_t row = w->shard->row_first + r, at = 0;
      const char *x = NULL;
      if (!need[row]) {
        continue;
      }
      rc = row_on_host(st, in, (const char *)w->x + r * w->in_stride * isize, w->len * isize, &x,
                       &copy, reterr);
      if (rc != QDP_OK) {
        break;
      }
      mine[k] = (struct norm_extreme){
          .row = row, .bad = UINT64_MAX, .max = qdpk_cpu_absmax(x, w->in, w->len)};
      if (qdpk_cpu_find_nonfinite(x, w->in, w->len, &at)) {
        struct runtime_input here = {.data = x, .dtype = w->in, .rows = 1, .cols = w->len};
        mine[k].bad = w->shard->first + at;
        mine[k].bad_value = encode_value_at(&here, at);
      }
      k++;
    }
  }
  free(copy);
  if (rc != QDP_OK) {
    free(mine);
    return rc;
  }
  if (m->world_ops && encode_spans_ranks(&st->plan)) {
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

/* Sample r's exponent from the gathered extremes: -ilogb of its largest |value|. A NaN or Inf is
 * refused with its position (the first), a sample of zeros with zero norm. */
static qdp_status sample_scale(const struct norm_extreme *ext, size_t next, uint64_t r,
                               int32_t *ret_scale, struct qdp_error *reterr) {
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
    return encode_bad_value(reterr, "amplitudes", r, bad, v);
  }
  if (max == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                         "input sample %" PRIu64
                         " has zero norm: every value is zero, and amplitude encoding needs at "
                         "least one non-zero value",
                         r);
  }
  *ret_scale = -ilogb(max);
  return QDP_OK;
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
    if (need[r]) {
      QDP_TRY(rc, sample_scale(ext, next, r, &scales[r], reterr));
    }
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

/* A NORM reduction: each sample's sum of squares along the one tree (over the device group where
 * there is one, else on the host), checked and, where it must be, redone scaled (settle_norms),
 * then pass 2 on every shard. */
qdp_status encode_run_norm(struct runtime_state *st, struct shard_task *t, size_t n,
                           const struct runtime_input *in, struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  if (n == 0 && !encode_spans_ranks(p)) {
    return QDP_OK; /* the coordinator of a job held wholly by another rank */
  }
  struct device_comm *c = encode_job_group(st->mesh, p);
  bool on_device = encode_device_norm_possible(st->mesh, c, t, n, p);
  qdp_status rc = QDP_OK;
  int32_t *scales = NULL;
  double *sumsq = malloc(p->batch * sizeof *sumsq);
  if (!sumsq) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate %" PRIu64 " norms", p->batch);
  }
  if (on_device) {
    QDP_TRY(rc, encode_device_norms(st, t, n, in, c, sumsq, reterr));
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
  runtime_workers_run(st->mesh->workers, t, n, sizeof *t, encode_task_scale);
  QDP_TRY(rc, encode_first_failure(t, n, reterr));
  /* Only a sample split over shards needs an exchange; a batch split by sample does not. */
  for (size_t i = 0; i < n; i++) {
    if (t[i].work.shard->count != p->amplitudes) {
      st->collective = on_device ? "nccl" : encode_spans_ranks(p) ? "mpi" : "host";
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
