/* The amplitude norm over a device collective (encode.h). */
#include "runtime/encode.h"

/* ---- the norm over a device collective
 * A sample split over devices needs every device's partial sums. Instead of copying them to the
 * host, each device's parts are all-gathered over the mesh's NCCL communicator and every device
 * combines the same parts along the same tree, so each holds the bits the host path would get,
 * and the scale pass reads its totals where they already are. */

/* The group a job was given to gather over: the mesh's (its owner's) for a job on this rank's
 * GPUs, the world's for one across ranks (when the coordinator allows it); NULL: none. */
struct device_comm *encode_job_group(const struct runtime_mesh *m, const struct plan *p) {
  if (!encode_spans_ranks(p)) {
    return m->device_comm;
  }
  return m->world_ops && m->world_ops->device_group ? m->world_ops->device_group(m->world_ctx)
                                                    : NULL;
}

/* A shard's member number in group c: this rank's devices from the group's first member on,
 * another rank's by its index in the world's device table (as the plan names them). */
size_t encode_shard_member(const struct runtime_mesh *m, const struct device_comm *c,
                           const struct plan_shard *sh) {
  return sh->rank == m->rank ? (size_t)device_comm_first_member(c) + sh->device : sh->device;
}

/* Whether this job's norm can gather over group c (collectives_job_fits: one shard per member),
 * with every shard holding every row (a sample split by index, not a batch split by sample, which
 * needs no exchange at all) and a backend that has the device path. Every rank decides the same
 * from the same plan. */
bool encode_device_norm_possible(const struct runtime_mesh *m, const struct device_comm *c,
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
    members[i] = encode_shard_member(m, c, sh);
  }
  for (size_t i = 0; i < n; i++) {
    if (!t[i].dev->ops->norm_partials) {
      return false;
    }
  }
  return collectives_job_fits(c, members, p->nshards, n);
}

/* A shard's parts: its norm blocks, each cut into aligned pieces of at most 2^span values, with
 * the values present only (an absent subtree is zero in the tree). ret NULL: only counts. */
static size_t shard_parts(const struct plan_shard *sh, uint64_t len, uint32_t span,
                          struct runtime_sum_part *ret) {
  struct norm_block split[NORM_BLOCKS_MAX];
  size_t nb = norm_split(sh->first, sh->first + sh->count, split), k = 0;
  for (size_t b = 0; b < nb; b++) {
    uint64_t offset = split[b].first - sh->first, size = UINT64_C(1) << split[b].log2;
    uint64_t present = offset >= len ? 0 : (len - offset < size ? len - offset : size);
    uint32_t lg = split[b].log2 <= span ? split[b].log2 : span;
    for (uint64_t at = 0; at < present; at += UINT64_C(1) << lg, k++) {
      uint64_t piece = present - at < (UINT64_C(1) << lg) ? present - at : UINT64_C(1) << lg;
      if (ret) {
        ret[k] = (struct runtime_sum_part){.offset = offset + at, .len = piece, .log2 = lg};
      }
    }
  }
  return k;
}

/* Across ranks, before an exchange (`what`): every rank says whether its part so far succeeded and
 * its group c (NULL: none) is still usable, so that no rank enters an exchange another will never
 * join. A rank that failed reports its own error with the job; the others fail with UNAVAILABLE,
 * which the coordinator ranks below it. */
qdp_status encode_agree_before(const char *what, const struct runtime_mesh *m,
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

/* Every shard's parts, this rank's and the others', ascending (shards are in index order), as the
 * combine walks them: a part's column in the gathered buffer is its shard's member number.
 * *ret_all (calloc'd) gets *ret_nall of them, *ret_stride the most parts of one shard. */
static qdp_status norm_parts(const struct runtime_state *st, const struct runtime_input *in,
                             const struct device_comm *c, uint32_t span,
                             struct qdpk_norm_part **ret_all, size_t *ret_nall, size_t *ret_stride,
                             struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  size_t stride = 1, nall = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    size_t k = shard_parts(&p->shards[i], encode_shard_len(&p->shards[i], in->cols), span, NULL);
    stride = k > stride ? k : stride;
    nall += k;
  }
  struct qdpk_norm_part *all = calloc(nall ? nall : 1, sizeof *all);
  struct runtime_sum_part *parts = calloc(stride, sizeof *parts);
  if (!all || !parts) {
    free(all);
    free(parts);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate the norm's %zu part descriptions", nall);
  }
  size_t j = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    size_t k = shard_parts(sh, encode_shard_len(sh, in->cols), span, parts);
    size_t member = encode_shard_member(st->mesh, c, sh);
    for (size_t q = 0; q < k; q++) {
      all[j++] = (struct qdpk_norm_part){.first = sh->first + parts[q].offset,
                                         .log2 = parts[q].log2,
                                         .src = member * p->batch * stride + q};
    }
  }
  free(parts);
  *ret_all = all;
  *ret_nall = nall;
  *ret_stride = stride;
  return QDP_OK;
}

/* Each local shard's own parts, and what its partial sums need to know of the gather. */
static qdp_status task_parts(struct shard_task *t, size_t n, uint32_t span, size_t stride,
                             size_t members, const struct qdpk_norm_part *all, size_t nall,
                             struct qdp_error *reterr) {
  for (size_t i = 0; i < n; i++) {
    const struct plan_shard *sh = t[i].work.shard;
    t[i].nparts = shard_parts(sh, t[i].work.len, span, NULL);
    t[i].parts = malloc((t[i].nparts ? t[i].nparts : 1) * sizeof *t[i].parts);
    if (!t[i].parts) {
      return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate norm parts");
    }
    shard_parts(sh, t[i].work.len, span, t[i].parts);
    t[i].stride = stride;
    t[i].members = members;
    t[i].all = all;
    t[i].nall = nall;
  }
  return QDP_OK;
}

/* The gather of every local shard's partials over c, the combine behind it on every device, and
 * the wait for both; st->norm_us from t0 on. sumsq gets the totals, which every device must
 * agree on. */
static qdp_status gather_totals(struct runtime_state *st, struct shard_task *t, size_t n,
                                struct device_comm *c, size_t stride, size_t nall, uint64_t t0,
                                double *sumsq, struct qdp_error *reterr) {
  uint64_t rows = st->plan.batch;
  qdp_status rc = QDP_OK;
  const double **send = calloc(n, sizeof *send);
  double **recv = calloc(n, sizeof *recv);
  void **streams = calloc(n, sizeof *streams);
  if (!send || !recv || !streams) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "cannot allocate the norm's gather tables");
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
            t[i].dev->ops->norm_totals(t[i].dev, &t[i].work, nall, stride, &t[i].totals, reterr));
  }
  for (size_t i = 0; i < n; i++) {
    QDP_TRY(rc,
            device_comm_wait(c, t[i].work.shard->device, streams[t[i].work.shard->device], reterr));
  }
  st->norm_us = (double)(clock_mono_ns() - t0) / CLOCK_NS_PER_US;
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
  free(send);
  free(recv);
  free(streams);
  return rc;
}

/* The device path of the norm: every shard's parts all-gathered over group c and combined on every
 * device; sumsq gets the totals (host copy), which the devices also keep for the scale pass. */
qdp_status encode_device_norms(struct runtime_state *st, struct shard_task *t, size_t n,
                               const struct runtime_input *in, struct device_comm *c, double *sumsq,
                               struct qdp_error *reterr) {
  uint32_t span = t[0].dev->ops->norm_part_log2(t[0].dev, in->dtype);
  struct qdpk_norm_part *all = NULL;
  size_t nall = 0, stride = 1;
  qdp_status rc = norm_parts(st, in, c, span, &all, &nall, &stride, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  QDP_TRY(rc, task_parts(t, n, span, stride, (size_t)device_comm_size(c), all, nall, reterr));
  runtime_workers_run(st->mesh->workers, t, n, sizeof *t, encode_task_partials);
  uint64_t t0 = clock_mono_ns();
  rc = encode_first_failure(t, n, reterr);
  if (encode_spans_ranks(&st->plan)) {
    rc = encode_agree_before("the norm's all-gather", st->mesh, c, rc, reterr);
  }
  if (rc == QDP_OK) {
    rc = gather_totals(st, t, n, c, stride, nall, t0, sumsq, reterr);
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
  return rc;
}
