/* The CUDA backend's NORM reduction (amplitude): loading a shard's slice, the norm's sums of
 * squares (host and device paths) and the scale pass, whose launcher is the encoding's in the CUDA
 * table (qdpk_cuda_encoder) (cuda_backend.h). */
#include "runtime/cuda_backend.h"

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
  QDP_TRY(rc, cuda_scratch_grow(c, &s->scales, &s->scales_cap, bytes, reterr));
  CU_TRY(rc, reterr, &c->base, "cudaMemcpyAsync",
         cudaMemcpyAsync(s->scales, scale_log2, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
  *ret_dev = s->scales;
out:
  return rc;
}

/* Whether pass 1 of the shard's slice is summed on the host (cuda_norm_sumsq): host memory of at
 * most CUDA_HOST_NORM_MAX. Nothing then needs it on the device before pass 2, which reads it from
 * a pinned slot (scale_mapped). */
static bool host_norm_input(const struct runtime_shard_work *w) {
  return w->x_host && w->shard->rows * w->in_stride * qdp_dtype_size(w->in) <= CUDA_HOST_NORM_MAX;
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
    /* Registered host memory or a client's device allocation (cuda_stage_put says why Default),
     * in one DMA on the copy stream: it runs beside the kernels of the jobs queued ahead of it.
     * Whatever reads the slice waits for it first (upload_landed), not the work stream here: that
     * would hold every job queued after this one behind the whole upload. */
    if (!s->uploaded) {
      CU_TRY(rc, reterr, d, "cudaEventCreateWithFlags",
             cudaEventCreateWithFlags(&s->uploaded, cudaEventDisableTiming));
    }
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cuda_copy_rows_async(c->copy_stream, s->resident, w->x, w->in_stride * isize, row_bytes,
                                rows, cudaMemcpyDefault));
    CU_TRY(rc, reterr, d, "cudaEventRecord", cudaEventRecord(s->uploaded, c->copy_stream));
    s->upload_pending = true;
    goto out;
  }
  if (rows > 1) {
    CU_TRY(rc, reterr, d, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[0]));
    host_copy_rows(c->copier, c->stage_host[0], w->x, w->in_stride * isize, row_bytes, rows);
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync((void *)s->resident, c->stage_host[0], (size_t)bytes,
                           cudaMemcpyHostToDevice, c->stream));
    QDP_TRY(rc, cuda_stage_release(c, 0, reterr));
    goto out;
  }
  for (uint64_t at = 0, k = 0; at < bytes; at += c->stage_bytes, k++) {
    int slot = (int)(k & 1);
    uint64_t n = bytes - at < c->stage_bytes ? bytes - at : c->stage_bytes;
    CU_TRY(rc, reterr, d, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[slot]));
    host_copy_rows(c->copier, c->stage_host[slot], (const char *)w->x + at, n, n, 1);
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync((void *)(s->resident + at), c->stage_host[slot], (size_t)n,
                           cudaMemcpyHostToDevice, c->stream));
    QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
  }
out:
  return rc;
}

/* Before the first read of a slice uploaded on the copy stream: waits for the upload on the host
 * (pass 1: nothing it queues then waits on the work stream) or makes the work stream wait. */
static qdp_status upload_landed(struct cuda_device *c, struct cuda_scratch *s, bool on_host,
                                struct qdp_error *reterr) {
  if (!s->upload_pending) {
    return QDP_OK;
  }
  cudaError_t err =
      on_host ? cudaEventSynchronize(s->uploaded) : cudaStreamWaitEvent(c->stream, s->uploaded, 0);
  if (err != cudaSuccess) {
    return cuda_failed(&c->base, err, on_host ? "cudaEventSynchronize" : "cudaStreamWaitEvent",
                       reterr);
  }
  s->upload_pending = false;
  return QDP_OK;
}

qdp_status cuda_norm_load(struct runtime_device *d, struct runtime_shard_work *w,
                          struct qdp_error *reterr) {
  /* Small slices are not uploaded here: both passes stream them through the staging. Large ones
   * go up once, into the tail of the shard's buffer, so the input is read from the host once and
   * the device never holds more than the state and the staging. */
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  struct cuda_scratch *s = cuda_scratch_take(c);
  if (!s) {
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, ENOMEM,
                            "%s: cannot allocate the job's scratch description", d->info.name);
  }
  QDP_TRY(rc, cuda_use_device(d, reterr));
  QDP_TRY(rc,
          cuda_scratch_grow(c, &s->norms, &s->norms_cap, w->shard->rows * sizeof(double), reterr));
  w->scratch = s;
  if (w->x_on_device && w->len > 0) {
    /* Already on this GPU: both passes read the client's allocation where it is. */
    s->resident = w->x;
    s->resident_stride = w->in_stride;
    s->resident_external = true;
  } else if (!host_norm_input(w) && resident_input(c, w)) {
    uint64_t rows = w->shard->rows;
    uint64_t end = rows * w->shard->count * qdp_dtype_size(w->plan->out_dtype);
    /* 16-byte aligned for the kernels' vector loads. */
    s->resident =
        (const char *)w->out + ((end - rows * w->len * qdp_dtype_size(w->in)) & ~(uint64_t)15);
    s->resident_stride = w->len;
    QDP_TRY(rc, cuda_stage_begin(c, reterr));
    /* Not waited for: everything that reads it is queued behind it on the stream. */
    rc = cuda_stage_end_queued(c, upload_resident(c, w, reterr), reterr);
  }
  s = NULL;
out:
  if (s && w->scratch == s) {
    w->scratch = NULL;
  }
  cuda_scratch_free(s);
  return rc;
}

/* What both ways of sumsq_staged read of the work: the rows, their stride and element size in
 * bytes, and the state's dtype. */
struct staged_rows {
  uint64_t rows;
  uint64_t stride;
  unsigned isize;
  qdp_dtype out;
};

/* sumsq_staged for rows that fit a staging slot: whole rows per piece, slots alternating. A subtree
 * wholly past len adds +0, which changes no bit, so the tree over the block is the tree over the
 * smallest power of two holding len. */
static qdp_status sumsq_rows_staged(struct cuda_device *c, struct runtime_shard_work *w,
                                    const struct staged_rows *g, const char *x, uint64_t len,
                                    const int32_t *scales, double *ret_sums,
                                    struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = QDP_OK;
  int slot = 0;
  uint64_t sub = pow2_ceil(len);
  uint64_t per = c->stage_bytes / (len * g->isize);
  per = per < g->rows ? per : g->rows;
  QDP_TRY(rc, cuda_scratch_grow(c, &s->sums, &s->sums_cap, g->rows * sizeof(double), reterr));
  QDP_TRY(rc,
          cuda_scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, per), reterr));
  for (uint64_t r0 = 0; r0 < g->rows; r0 += per) {
    uint64_t nr = g->rows - r0 < per ? g->rows - r0 : per;
    QDP_TRY(rc, cuda_stage_put(c, slot, x + r0 * g->stride, g->stride, len * g->isize, nr,
                               w->pinned, reterr));
    K_TRY(rc, reterr, d, "qdpk_sumsq",
          qdpk_sumsq(c->stage_dev[slot], w->in, len, len, sub, nr, g->out,
                     scales ? scales + r0 : NULL, s->ws, (size_t)s->ws_cap, (double *)s->sums + r0,
                     c->stream));
    QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
    slot ^= 1;
  }
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(ret_sums, s->sums, (size_t)g->rows * sizeof(double),
                         cudaMemcpyDeviceToHost, c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  return rc;
}

/* sumsq_staged for rows longer than a slot: one sum per aligned chunk of `chunk` values into
 * s->host_sums, slots alternating, then the block's tree over each row's chunks. */
static qdp_status sumsq_chunks_staged(struct cuda_device *c, struct runtime_shard_work *w,
                                      const struct staged_rows *g, const char *x, uint64_t len,
                                      uint64_t block, uint64_t chunk, const int32_t *scales,
                                      double *ret_sums, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  struct norm_block *chunks = NULL;
  qdp_status rc = QDP_OK;
  int slot = 0;
  uint64_t nchunks = (len + chunk - 1) / chunk;
  uint64_t nsums = g->rows * nchunks;
  QDP_TRY(rc, cuda_scratch_grow(c, &s->sums, &s->sums_cap, nsums * sizeof(double), reterr));
  QDP_TRY(rc,
          cuda_scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(chunk, 1), reterr));
  QDP_TRY(rc, cuda_host_sums_grow(c, s, nsums, reterr));
  chunks = nchunks <= SIZE_MAX / sizeof *chunks ? malloc((size_t)nchunks * sizeof *chunks) : NULL;
  if (!chunks) {
    rc = qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, ENOMEM,
                          "%s: cannot allocate %llu chunk descriptions", d->info.name,
                          (unsigned long long)nchunks);
    goto out;
  }
  for (uint64_t r = 0; r < g->rows; r++) {
    for (uint64_t k = 0; k < nchunks; k++) {
      uint64_t at = k * chunk;
      uint64_t n = len - at < chunk ? len - at : chunk;
      QDP_TRY(rc, cuda_stage_put(c, slot, x + r * g->stride + at * g->isize, n * g->isize,
                                 n * g->isize, 1, w->pinned, reterr));
      K_TRY(rc, reterr, d, "qdpk_sumsq",
            qdpk_sumsq(c->stage_dev[slot], w->in, n, n, pow2_ceil(n), 1, g->out,
                       scales ? scales + r : NULL, s->ws, (size_t)s->ws_cap,
                       (double *)s->sums + r * nchunks + k, c->stream));
      QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
      slot ^= 1;
    }
  }
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(s->host_sums, s->sums, (size_t)nsums * sizeof(double),
                         cudaMemcpyDeviceToHost, c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
  /* Chunk k is the aligned subtree [k * chunk, (k + 1) * chunk) of the block's tree [0, block);
   * the subtrees past len are absent, which norm_combine counts as zero, as the kernel would.
   * Float states add in float, as the kernel does. */
  for (uint64_t r = 0; r < g->rows; r++) {
    for (uint64_t k = 0; k < nchunks; k++) {
      chunks[k] = (struct norm_block){
          .first = k * chunk, .log2 = log2_of(chunk), .sum = s->host_sums[r * nchunks + k]};
    }
    ret_sums[r] =
        norm_combine(chunks, (size_t)nchunks, log2_of(block), g->out == QDP_DTYPE_COMPLEX64);
  }
out:
  free(chunks);
  return rc;
}

/* Pass 1 for one aligned block, with the staging held: the pairwise sum of squares of each row's
 * values [0, len) at x (zero past len up to `block`). */
static qdp_status sumsq_staged(struct cuda_device *c, struct runtime_shard_work *w, const char *x,
                               uint64_t len, uint64_t block, const int32_t *scales,
                               double *ret_sums, struct qdp_error *reterr) {
  unsigned isize = qdp_dtype_size(w->in);
  const struct staged_rows g = {w->shard->rows, w->in_stride * isize, isize, w->plan->out_dtype};
  /* The largest aligned power-of-two subtree that fits a slot. */
  uint64_t chunk = pow2_floor(c->stage_bytes / isize);
  if (len <= chunk) {
    return sumsq_rows_staged(c, w, &g, x, len, scales, ret_sums, reterr);
  }
  return sumsq_chunks_staged(c, w, &g, x, len, block, chunk, scales, ret_sums, reterr);
}

qdp_status cuda_norm_sumsq(struct runtime_device *d, struct runtime_shard_work *w, uint64_t offset,
                           uint64_t len, uint64_t block, const int32_t *scale_log2,
                           double *ret_sums, struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  if (!w->scratch || len == 0 || len > block || (block & (block - 1)) != 0) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: sum of squares asked for %llu values in a block of %llu%s",
                            d->info.name, (unsigned long long)len, (unsigned long long)block,
                            w->scratch ? "" : " before the slice was loaded");
  }
  uint64_t rows = w->shard->rows, isize = qdp_dtype_size(w->in);
  if (host_norm_input(w)) {
    qdpk_cpu_sumsq((const char *)w->x + offset * isize, w->in, w->in_stride, len, block, rows,
                   w->plan->out_dtype, scale_log2, ret_sums);
    return QDP_OK;
  }
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = upload_landed(c, s, true, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = cuda_stage_begin(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  const int32_t *scales = NULL;
  QDP_TRY(rc, upload_scales(c, w, scale_log2, &scales, reterr));
  if (s->resident) {
    /* The whole block in one launch: the tree over the smallest power of two holding len, which
     * is the block's (the rest is zeros). */
    uint64_t sub = pow2_ceil(len);
    QDP_TRY(rc, cuda_scratch_grow(c, &s->sums, &s->sums_cap, rows * sizeof(double), reterr));
    QDP_TRY(rc, cuda_scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, rows),
                                  reterr));
    K_TRY(rc, reterr, d, "qdpk_sumsq",
          qdpk_sumsq(s->resident + offset * qdp_dtype_size(w->in), w->in, s->resident_stride, len,
                     sub, rows, w->plan->out_dtype, scales, s->ws, (size_t)s->ws_cap,
                     (double *)s->sums, c->stream));
    /* Into page-locked memory, so that the staging is handed back before the sums land (the
     * copy waits for the slice's upload): the next job's upload is queued behind this one's
     * instead of after it has finished. */
    QDP_TRY(rc, cuda_pinned_grow(c, s, rows * sizeof(double), reterr));
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(s->pinned, s->sums, (size_t)rows * sizeof(double),
                           cudaMemcpyDeviceToHost, c->stream));
    rc = cuda_stage_end_waited(c, &s->done, rc, reterr);
    if (rc == QDP_OK) {
      memcpy(ret_sums, s->pinned, (size_t)rows * sizeof(double));
    }
    return rc;
  }
  const char *x = (const char *)w->x + offset * qdp_dtype_size(w->in);
  rc = sumsq_staged(c, w, x, len, block, scales, ret_sums, reterr);
out:
  return cuda_stage_end_waited(c, &s->done, rc, reterr);
}

/* Pass 2 for a resident slice, in place: the amplitudes are written from the front of the buffer
 * while the input sits at its back. A chunk [e0, e1) may only write bytes below the first input
 * value it has not read yet (e1 * osize <= input base + e0 * isize), so the chunks grow no larger
 * than the room already freed: about half of what is left each time for a 2:1 size ratio. Once
 * the input left fits a staging slot it is copied there and the rest is one launch. */
static qdp_status scale_resident(struct cuda_device *c, struct runtime_shard_work *w,
                                 const int32_t *scales, struct qdp_error *reterr) {
  const struct qdpk_cuda_encoder *k = qdpk_cuda_encoder(w->plan->encoding);
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
    K_TRY(rc, reterr, d, k->name,
          k->scale(&span, s->resident + e0 * isize, w->in, e1 - e0, e1 - e0,
                   (const double *)s->norms, scales, o + e0 * osize, c->stream));
    e0 = e1;
  }
  /* The rest of the input (at most a slot) moves to the staging, out of the way of the writes. */
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(c->stage_dev[0], s->resident + e0 * isize,
                         (size_t)(rows * (len - e0) * isize), cudaMemcpyDeviceToDevice, c->stream));
  span.first = w->shard->first + e0;
  span.count = count - e0;
  span.rows = rows;
  K_TRY(rc, reterr, d, k->name,
        k->scale(&span, c->stage_dev[0], w->in, len - e0, len - e0, (const double *)s->norms,
                 scales, o + e0 * osize, c->stream));
  QDP_TRY(rc, cuda_stage_release(c, 0, reterr));
out:
  return rc;
}

/* Where scale_mapped packs a small slice in a slot: each row's norm, then its exponent (with the
 * fallback), then the rows at a 16-byte boundary for the kernels' vector loads; bytes in all. */
struct mapped_layout {
  uint64_t scales_at, x_at, bytes;
};

static struct mapped_layout mapped_layout_of(const struct runtime_shard_work *w, bool scales) {
  uint64_t rows = w->shard->rows;
  struct mapped_layout l = {.scales_at = rows * sizeof(double)};
  l.x_at = (l.scales_at + (scales ? rows * sizeof(int32_t) : 0) + 15) & ~(uint64_t)15;
  l.bytes = l.x_at + rows * w->len * qdp_dtype_size(w->in);
  return l;
}

/* Pass 2 of a small host slice (host_norm_input), with the staging held: its rows, norms and
 * exponents packed into slot 0's pinned buffer, which the kernel reads in place through the
 * slot's device mapping. One launch and no copy: a small job's whole device work. */
static qdp_status scale_mapped(struct cuda_device *c, struct runtime_shard_work *w,
                               const struct qdpk_span *span, const struct mapped_layout *l,
                               const double *sumsq, const int32_t *scale_log2,
                               struct qdp_error *reterr) {
  const struct qdpk_cuda_encoder *k = qdpk_cuda_encoder(w->plan->encoding);
  struct runtime_device *d = &c->base;
  qdp_status rc = QDP_OK;
  uint64_t rows = w->shard->rows, isize = qdp_dtype_size(w->in);
  char *host = c->stage_host[0];
  const char *dev = c->stage_mapped[0];
  CU_TRY(rc, reterr, d, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[0]));
  memcpy(host, sumsq, (size_t)rows * sizeof(double));
  if (scale_log2) {
    memcpy(host + l->scales_at, scale_log2, (size_t)rows * sizeof(int32_t));
  }
  host_copy_rows(c->copier, host + l->x_at, w->x, w->in_stride * isize, w->len * isize, rows);
  K_TRY(rc, reterr, d, k->name,
        k->scale(span, dev + l->x_at, w->in, w->len, w->len, (const double *)dev,
                 scale_log2 ? (const int32_t *)(dev + l->scales_at) : NULL, w->out, c->stream));
  QDP_TRY(rc, cuda_stage_release(c, 0, reterr));
out:
  return rc;
}

/* Pass 2 with the staging held: out = x / sqrt(sumsq) for each row's len values, zeros after. */
static qdp_status scale_staged(struct cuda_device *c, struct runtime_shard_work *w,
                               const double *sumsq, const int32_t *scale_log2,
                               struct qdp_error *reterr) {
  const struct qdpk_cuda_encoder *k = qdpk_cuda_encoder(w->plan->encoding);
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
  QDP_TRY(rc, upload_landed(c, s, false, reterr));
  if (len == 0) {
    /* The shard lies wholly past the input: padding only. */
    CU_TRY(rc, reterr, d, "cudaMemsetAsync",
           cudaMemsetAsync(o, 0, (size_t)(rows * count * osize), c->stream));
    goto out;
  }
  struct mapped_layout l = mapped_layout_of(w, scale_log2 != NULL);
  if (sumsq && !s->resident && host_norm_input(w) && c->stage_mapped[0] &&
      l.bytes <= c->stage_bytes) {
    rc = scale_mapped(c, w, &span, &l, sumsq, scale_log2, reterr);
    goto out;
  }
  if (sumsq) {
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(s->norms, sumsq, (size_t)rows * sizeof(double), cudaMemcpyHostToDevice,
                           c->stream));
  }
  const int32_t *scales = NULL;
  QDP_TRY(rc, upload_scales(c, w, scale_log2, &scales, reterr));
  if (s->resident && s->resident_external) {
    /* Nothing to overwrite: one launch from the client's allocation into the shard's buffer. */
    K_TRY(rc, reterr, d, k->name,
          k->scale(&span, s->resident, w->in, s->resident_stride, len, (const double *)s->norms,
                   scales, o, c->stream));
    goto out;
  }
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
      QDP_TRY(rc,
              cuda_stage_put(c, slot, x + r0 * stride, stride, len * isize, nr, w->pinned, reterr));
      span.rows = nr;
      K_TRY(rc, reterr, d, k->name,
            k->scale(&span, c->stage_dev[slot], w->in, len, len, (double *)s->norms + r0,
                     scales ? scales + r0 : NULL, o + r0 * count * osize, c->stream));
      QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
      slot ^= 1;
    }
    goto out;
  }
  /* Rows longer than a slot, piece by piece; the last piece also writes the row's padding. */
  span.rows = 1;
  for (uint64_t r = 0; r < rows; r++) {
    for (uint64_t at = 0; at < len; at += chunk) {
      uint64_t n = len - at < chunk ? len - at : chunk;
      QDP_TRY(rc, cuda_stage_put(c, slot, x + r * stride + at * isize, n * isize, n * isize, 1,
                                 w->pinned, reterr));
      span.first = w->shard->first + at;
      span.count = at + n == len ? count - at : n;
      K_TRY(rc, reterr, d, k->name,
            k->scale(&span, c->stage_dev[slot], w->in, n, n, (double *)s->norms + r,
                     scales ? scales + r : NULL, o + (r * count + at) * osize, c->stream));
      QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
      slot ^= 1;
    }
  }
out:
  return rc;
}

qdp_status cuda_norm_scale(struct runtime_device *d, struct runtime_shard_work *w,
                           const double *sumsq, const int32_t *scale_log2,
                           struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  const struct qdpk_cuda_encoder *k = qdpk_cuda_encoder(w->plan->encoding);
  if (!k || !k->scale) {
    return cuda_no_kernel(d, w->plan, reterr);
  }
  if (!w->scratch) {
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: amplitudes asked before the slice was loaded", d->info.name);
  }
  qdp_status rc = cuda_stage_begin(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = scale_staged(c, w, sumsq, scale_log2, reterr);
  return cuda_stage_end_waited(c, &((struct cuda_scratch *)w->scratch)->done, rc, reterr);
}

uint32_t cuda_norm_part_log2(struct runtime_device *d, qdp_dtype in) {
  return log2_of(pow2_floor(cuda_of(d)->stage_bytes / qdp_dtype_size(in)));
}

/* Each part's sums go through the `sums` scratch (one per row of a launch) into column k of the
 * send buffer; a part never exceeds a staging slot, so a launch covers whole parts. */
static qdp_status partials_staged(struct cuda_device *c, struct runtime_shard_work *w,
                                  const struct runtime_sum_part *parts, size_t nparts,
                                  uint64_t stride, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_scratch *s = w->scratch;
  qdp_status rc = QDP_OK;
  unsigned isize = qdp_dtype_size(w->in);
  uint64_t rows = w->shard->rows, row_bytes = w->in_stride * isize;
  int slot = 0;
  for (size_t k = 0; k < nparts; k++) {
    const struct runtime_sum_part *pt = &parts[k];
    uint64_t sub = pow2_ceil(pt->len);
    uint64_t per = c->stage_bytes / (pt->len * isize);
    per = per < rows ? per : rows;
    if (per == 0 || sub > (UINT64_C(1) << pt->log2)) {
      rc = qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: a part of %llu values does not fit a staging slot", d->info.name,
                            (unsigned long long)pt->len);
      goto out;
    }
    QDP_TRY(rc,
            cuda_scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, per), reterr));
    if (s->resident) {
      QDP_TRY(rc, cuda_scratch_grow(c, &s->ws, &s->ws_cap, qdpk_sumsq_workspace_bytes(sub, rows),
                                    reterr));
      K_TRY(rc, reterr, d, "qdpk_sumsq",
            qdpk_sumsq(s->resident + pt->offset * isize, w->in, s->resident_stride, pt->len, sub,
                       rows, w->plan->out_dtype, NULL, s->ws, (size_t)s->ws_cap, (double *)s->sums,
                       c->stream));
      CU_TRY(
          rc, reterr, d, "cudaMemcpy2DAsync",
          cudaMemcpy2DAsync((double *)s->send + k, stride * sizeof(double), s->sums, sizeof(double),
                            sizeof(double), (size_t)rows, cudaMemcpyDeviceToDevice, c->stream));
      continue;
    }
    const char *x = (const char *)w->x + pt->offset * isize;
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
      uint64_t nr = rows - r0 < per ? rows - r0 : per;
      QDP_TRY(rc, cuda_stage_put(c, slot, x + r0 * row_bytes, row_bytes, pt->len * isize, nr,
                                 w->pinned, reterr));
      K_TRY(rc, reterr, d, "qdpk_sumsq",
            qdpk_sumsq(c->stage_dev[slot], w->in, pt->len, pt->len, sub, nr, w->plan->out_dtype,
                       NULL, s->ws, (size_t)s->ws_cap, (double *)s->sums, c->stream));
      QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
      slot ^= 1;
      CU_TRY(rc, reterr, d, "cudaMemcpy2DAsync",
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

qdp_status cuda_norm_partials(struct runtime_device *d, struct runtime_shard_work *w,
                              const struct runtime_sum_part *parts, size_t nparts, uint64_t stride,
                              size_t members, const struct qdpk_norm_part *all, size_t nall,
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
  QDP_TRY(rc, cuda_use_device(d, reterr));
  /* Everything the combine needs is allocated here, before the gather: growing a buffer later
   * would wait for the stream, and so for the other members. */
  QDP_TRY(rc, cuda_scratch_grow(c, &s->sums, &s->sums_cap, rows * sizeof(double), reterr));
  QDP_TRY(rc, cuda_scratch_grow(c, &s->send, &s->send_cap, rows * stride * sizeof(double), reterr));
  QDP_TRY(rc, cuda_scratch_grow(c, &s->recv, &s->recv_cap, members * rows * stride * sizeof(double),
                                reterr));
  QDP_TRY(rc, cuda_scratch_grow(c, &s->parts, &s->parts_cap, nall * sizeof *all, reterr));
  QDP_TRY(rc, cuda_pinned_grow(c, s, pinned_totals_at(nall) + rows * sizeof(double), reterr));
  memcpy(s->pinned, all, nall * sizeof *all);
  CU_TRY(
      rc, reterr, d, "cudaMemcpyAsync",
      cudaMemcpyAsync(s->parts, s->pinned, nall * sizeof *all, cudaMemcpyHostToDevice, c->stream));
  /* Columns past this shard's parts are never read; zero them so the buffers hold no garbage. */
  CU_TRY(rc, reterr, d, "cudaMemsetAsync",
         cudaMemsetAsync(s->send, 0, (size_t)(rows * stride * sizeof(double)), c->stream));
  QDP_TRY(rc, upload_landed(c, s, false, reterr));
  QDP_TRY(rc, cuda_stage_begin(c, reterr));
  /* Not waited for: the gather runs on the same stream after the partials. */
  rc = cuda_stage_end_queued(c, partials_staged(c, w, parts, nparts, stride, reterr), reterr);
  *ret_send = s->send;
  *ret_recv = s->recv;
  *ret_stream = c->stream;
out:
  return rc;
}

qdp_status cuda_norm_totals(struct runtime_device *d, struct runtime_shard_work *w, size_t nall,
                            uint64_t stride, const double **ret_totals, struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  struct cuda_scratch *s = w->scratch;
  uint64_t rows = w->shard->rows;
  qdp_status rc = QDP_OK;
  double *totals = (double *)((char *)s->pinned + pinned_totals_at(nall));
  QDP_TRY(rc, cuda_use_device(d, reterr));
  K_TRY(
      rc, reterr, d, "qdpk_norm_combine",
      qdpk_norm_combine(s->parts, nall, w->plan->qubits, w->plan->out_dtype == QDP_DTYPE_COMPLEX64,
                        s->recv, stride, rows, s->norms, c->stream));
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(totals, s->norms, (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost,
                         c->stream));
  *ret_totals = totals;
out:
  return rc;
}
