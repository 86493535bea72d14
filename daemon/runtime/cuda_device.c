/* The CUDA backend's ops table, its error reporting and the encodings other than a NORM
 * reduction's (cuda_backend.h), each run by its launcher in the CUDA table (qdpk_cuda_encoder). */
#include "qdp_size.h"
#include "runtime/cuda_backend.h"

/* Records a failed CUDA call and clears the thread's CUDA error state. */
qdp_status cuda_failed(const struct runtime_device *d, cudaError_t err, const char *call,
                       struct qdp_error *reterr) {
  (void)cudaGetLastError();
  return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)err, "%s: %s failed: %s (%s)",
                          d->info.name, call, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* A launcher reported failure: the CUDA error, if it left one, names the cause. */
qdp_status cuda_launch_failed(const struct runtime_device *d, qdp_status st, const char *kernel,
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

qdp_status cuda_use_device(struct runtime_device *d, struct qdp_error *reterr) {
  cudaError_t err = cudaSetDevice(d->info.ordinal);
  return err == cudaSuccess ? QDP_OK : cuda_failed(d, err, "cudaSetDevice", reterr);
}

/* cudaMalloc on the current device; RESOURCE_EXHAUSTED with the numbers when memory is short. */
qdp_status cuda_dev_malloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
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
  return cuda_out_of_memory(d, bytes, "cudaMalloc", cudaGetErrorName(err), (int)err, reterr);
}

qdp_status cuda_out_of_memory(struct runtime_device *d, uint64_t bytes, const char *call,
                              const char *why, int code, struct qdp_error *reterr) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    free_b = 0;
  }
  if (reterr) {
    reterr->need_bytes = bytes;
    reterr->free_bytes = free_b;
  }
  return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, code,
                          "%s cannot allocate %s of device memory: %s reports %s with %s free of "
                          "%s",
                          d->info.name, QDP_SIZE_STR(bytes), call, why, QDP_SIZE_STR(free_b),
                          QDP_SIZE_STR(total_b));
}

qdp_status cuda_driver_entry(struct runtime_device *d, const char *name, void **ret,
                             struct qdp_error *reterr) {
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  /* 12000: each call's ABI as of CUDA 12 (cuMemGetAddressRange's _v2, say). */
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, ret, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || !*ret) {
    (void)cudaGetLastError();
    return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)found,
                            "%s: the driver has no %s (lookup result %d)", d->info.name, name,
                            (int)found);
  }
  return QDP_OK;
}

/* Waits for everything queued on the device's streams; used on error paths so that no copy is
 * still reading a staging slot or a buffer about to be freed. Errors here are the ones already
 * being reported, so they are cleared, not returned. */
void cuda_drain(struct cuda_device *c) {
  if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  if (c->copy_stream && cudaStreamSynchronize(c->copy_stream) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

qdp_status cuda_finish(struct cuda_device *c, struct qdp_error *reterr) {
  cudaError_t err = cudaStreamSynchronize(c->stream);
  return err == cudaSuccess ? QDP_OK : cuda_failed(&c->base, err, "cudaStreamSynchronize", reterr);
}

/* cudaMemGetInfo, answered from the last call when it is under CUDA_FREE_TTL_MS old: every plan
 * asks, and the driver's answer costs a small job tens of microseconds. What qdp itself holds is
 * counted by its reservations, exactly; this figure only bounds what other processes took. */
static cudaError_t mem_info(struct cuda_device *c, size_t *ret_free, size_t *ret_total) {
  uint64_t now = clock_mono_ns();
  pthread_mutex_lock(&c->cache_lock);
  bool fresh = c->mem_info_ns != 0 && now - c->mem_info_ns < CUDA_FREE_TTL_MS * CLOCK_NS_PER_MS;
  *ret_free = c->mem_free;
  *ret_total = c->mem_total;
  pthread_mutex_unlock(&c->cache_lock);
  if (fresh) {
    return cudaSuccess;
  }
  cudaError_t err = cudaSetDevice(c->base.info.ordinal);
  if (err == cudaSuccess) {
    err = cudaMemGetInfo(ret_free, ret_total);
  }
  if (err == cudaSuccess) {
    pthread_mutex_lock(&c->cache_lock);
    c->mem_free = *ret_free;
    c->mem_total = *ret_total;
    c->mem_info_ns = now;
    pthread_mutex_unlock(&c->cache_lock);
  }
  return err;
}

static void cuda_query(struct runtime_device *d, uint64_t *ret_total, uint64_t *ret_free) {
  struct cuda_device *c = cuda_of(d);
  size_t free_b = 0, total_b = 0;
  if (mem_info(c, &free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    *ret_total = d->info.total_bytes;
    *ret_free = 0; /* a device that cannot answer has nothing to offer */
    return;
  }
  pthread_mutex_lock(&c->cache_lock);
  uint64_t kept = c->cache_bytes + c->big.bytes;
  pthread_mutex_unlock(&c->cache_lock);
  *ret_total = total_b;
  *ret_free = free_b + kept;
}

/* A plan whose encoding this backend has no launcher for (encoders_cuda.c lacks its row). */
qdp_status cuda_no_kernel(const struct runtime_device *d, const struct plan *p,
                          struct qdp_error *reterr) {
  const char *name = qdp_encoding_name(p->encoding);
  return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                          "%s: the CUDA backend has no kernel for encoding %s (%d)", d->info.name,
                          name ? name : "unknown", (int)p->encoding);
}

/* An encoding other than a NORM reduction's, with the staging held: the parameters go up in
 * groups of whole rows, each group encoded by the encoding's launcher as soon as it lands. */
static qdp_status encode_staged(struct cuda_device *c, struct runtime_shard_work *w,
                                struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  qdp_status rc = QDP_OK;
  const struct plan *p = w->plan;
  const struct qdpk_cuda_encoder *k = qdpk_cuda_encoder(p->encoding);
  unsigned isize = qdp_dtype_size(w->in);
  unsigned osize = qdp_dtype_size(p->out_dtype);
  uint64_t rows = w->shard->rows, count = w->shard->count;
  uint64_t row_bytes = w->in_stride * isize;
  uint64_t per = row_bytes ? c->stage_bytes / row_bytes : 0;
  if (!k || !k->encode) {
    return cuda_no_kernel(d, p, reterr);
  }
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
    QDP_TRY(rc, cuda_stage_put(c, slot, (const char *)w->x + r0 * row_bytes, row_bytes, row_bytes,
                               nr, w->pinned, reterr));
    xs = c->stage_dev[slot];
    span.rows = nr;
    /* With a WHT exchange: the top bits and the local ones; the executor runs the global bits
     * below the top. */
    K_TRY(rc, reterr, d, k->name, k->encode(&span, xs, w->in, w->in_stride, o, c->stream));
    QDP_TRY(rc, cuda_stage_release(c, slot, reterr));
    slot ^= 1;
  }
out:
  return rc;
}

static qdp_status cuda_encode(struct runtime_device *d, struct runtime_shard_work *w,
                              struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = cuda_stage_begin(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = encode_staged(c, w, reterr);
  return cuda_stage_end(c, rc, reterr);
}

static void cuda_work_done(struct runtime_device *d, struct runtime_shard_work *w) {
  if (!w->scratch) {
    return;
  }
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  cuda_scratch_give(cuda_of(d), w->scratch);
  w->scratch = NULL;
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
  QDP_TRY(rc, cuda_use_device(d, reterr));
  if (src_dev == d && rows == 1) { /* one run: its pitches mean nothing (a 2-D copy would
                                     * refuse a run longer than them) */
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(dst, src, row_bytes, cudaMemcpyDeviceToDevice, c->stream));
    rows = 0;
  } else if (src_dev == d) { /* one 2-D copy on this device, not one call a row */
    CU_TRY(rc, reterr, d, "cudaMemcpy2DAsync",
           cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                             cudaMemcpyDeviceToDevice, c->stream));
    rows = 0;
  }
  for (uint64_t r = 0; r < rows; r++) {
    CU_TRY(rc, reterr, d, "cudaMemcpyPeerAsync",
           cudaMemcpyPeerAsync((char *)dst + r * dst_pitch, d->info.ordinal,
                               (const char *)src + r * src_pitch, src_dev->info.ordinal,
                               (size_t)row_bytes, c->stream));
  }
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}

const struct runtime_device_ops runtime_cuda_ops = {
    .backend = "cuda",
    .query = cuda_query,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .read = cuda_read,
    .write = cuda_write,
    .norm_load = cuda_norm_load,
    .norm_sumsq = cuda_norm_sumsq,
    .norm_scale = cuda_norm_scale,
    .norm_part_log2 = cuda_norm_part_log2,
    .norm_partials = cuda_norm_partials,
    .norm_totals = cuda_norm_totals,
    .encode = cuda_encode,
    .iqp_top_bits = QDPK_IQP_TOP_BITS,
    .butterfly = cuda_butterfly,
    .combine_host = cuda_combine_host,
    .combine_group = cuda_combine_group,
    .work_done = cuda_work_done,
    .export_view = cuda_export_view,
    .copy_rows = cuda_copy_rows,
    .open_ipc = cuda_open_ipc,
    .close_ipc = cuda_close_ipc,
    .trim = cuda_trim,
    .gram = cuda_gram,
    .real_rows = cuda_real_rows,
    .gram_add = cuda_gram_add,
    .gram_finish = cuda_gram_finish,
    .measure = cuda_measure,
    .abs2 = cuda_abs2,
};
