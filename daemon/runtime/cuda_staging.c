/* The CUDA backend's staging pair: host input streamed to the device piece by piece, and reads
 * back (cuda_backend.h). */
#include "runtime/cuda_backend.h"

/* Copies nrows rows of row_bytes, src_stride apart, to dst packed, on `stream`: one linear copy
 * when the rows are contiguous (a pitched copy of one very wide row runs well below the link's
 * rate), a pitched one otherwise. */
cudaError_t cuda_copy_rows_async(cudaStream_t stream, const void *dst, const void *src,
                                 uint64_t src_stride, uint64_t row_bytes, uint64_t nrows,
                                 enum cudaMemcpyKind kind) {
  if (nrows == 1 || src_stride == row_bytes) {
    return cudaMemcpyAsync((void *)dst, src, (size_t)(row_bytes * nrows), kind, stream);
  }
  return cudaMemcpy2DAsync((void *)dst, (size_t)row_bytes, src, (size_t)src_stride,
                           (size_t)row_bytes, (size_t)nrows, kind, stream);
}

/* Staging. The caller holds stage_lock. A slot is used as: stage_put (wait until the GPU is done
 * with it, pack rows into the pinned buffer, queue the upload), launches that read stage_dev[slot],
 * stage_release (record the slot's event after them). Source memory that is itself page-locked
 * (a registered region) skips the packing: the copy engine reads it directly, and stream order
 * alone keeps the slot's previous readers ahead of the new upload. */
qdp_status cuda_stage_put(struct cuda_device *c, int slot, const char *src, uint64_t src_stride,
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
    /* Default: src is registered host memory or a client's device allocation (CUDA IPC input,
     * a peer copy when it is on another GPU); UVA tells the driver which. */
    CU_TRY(rc, reterr, &c->base, "cudaMemcpyAsync",
           cuda_copy_rows_async(c->stream, c->stage_dev[slot], src, src_stride, row_bytes, nrows,
                                cudaMemcpyDefault));
    goto out;
  }
  CU_TRY(rc, reterr, &c->base, "cudaEventSynchronize", cudaEventSynchronize(c->stage_free[slot]));
  char *dst = c->stage_host[slot];
  host_copy_rows(c->copier, dst, src, src_stride, row_bytes, nrows);
  CU_TRY(
      rc, reterr, &c->base, "cudaMemcpyAsync",
      cudaMemcpyAsync(c->stage_dev[slot], dst, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
out:
  return rc;
}

qdp_status cuda_stage_release(struct cuda_device *c, int slot, struct qdp_error *reterr) {
  cudaError_t err = cudaEventRecord(c->stage_free[slot], c->stream);
  return err == cudaSuccess ? QDP_OK : cuda_failed(&c->base, err, "cudaEventRecord", reterr);
}

/* Takes the staging lock and makes the device current. */
qdp_status cuda_stage_begin(struct cuda_device *c, struct qdp_error *reterr) {
  pthread_mutex_lock(&c->stage_lock);
  qdp_status rc = cuda_use_device(&c->base, reterr);
  if (rc != QDP_OK) {
    pthread_mutex_unlock(&c->stage_lock);
  }
  return rc;
}

/* Ends a staged op: on failure first waits out what is queued, so that nothing in flight still
 * reads a slot the next holder will write. */
qdp_status cuda_stage_end(struct cuda_device *c, qdp_status rc, struct qdp_error *reterr) {
  if (rc == QDP_OK) {
    rc = cuda_finish(c, reterr);
  } else {
    cuda_drain(c);
  }
  pthread_mutex_unlock(&c->stage_lock);
  return rc;
}

/* Ends a staged op whose results only later work on the same stream reads: on success the staging
 * is handed back without waiting (the slots' events and stream order keep the next holder behind
 * it); on failure as stage_end. */
qdp_status cuda_stage_end_queued(struct cuda_device *c, qdp_status rc, struct qdp_error *reterr) {
  if (rc != QDP_OK) {
    return cuda_stage_end(c, rc, reterr);
  }
  pthread_mutex_unlock(&c->stage_lock);
  return QDP_OK;
}

qdp_status cuda_stage_end_waited(struct cuda_device *c, cudaEvent_t *done, qdp_status rc,
                                 struct qdp_error *reterr) {
  if (rc == QDP_OK && !*done) {
    CU_TRY(rc, reterr, &c->base, "cudaEventCreateWithFlags",
           cudaEventCreateWithFlags(done, cudaEventDisableTiming));
  }
  if (rc == QDP_OK) {
    CU_TRY(rc, reterr, &c->base, "cudaEventRecord", cudaEventRecord(*done, c->stream));
  }
out:
  if (rc != QDP_OK) {
    return cuda_stage_end(c, rc, reterr);
  }
  pthread_mutex_unlock(&c->stage_lock);
  cudaError_t err = cudaEventSynchronize(*done);
  return err == cudaSuccess ? QDP_OK : cuda_failed(&c->base, err, "cudaEventSynchronize", reterr);
}

/* Whether dst is page-locked host memory (a region registered for the devices, FetchInto's
 * output): the copy engine then writes it directly, with no bounce through the staging. */
static bool host_registered(const void *dst) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, dst) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

qdp_status cuda_write(struct runtime_device *d, void *dst, const void *src, uint64_t bytes,
                      struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  if (bytes == 0) {
    return QDP_OK;
  }
  /* On the device's stream, behind what it has enqueued, whose reads it may overwrite. */
  QDP_TRY(rc, cuda_use_device(d, reterr));
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  return rc;
}

qdp_status cuda_read(struct runtime_device *d, const void *src, uint64_t bytes, void *dst,
                     struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  if (bytes == 0) {
    return QDP_OK;
  }
  if (bytes <= CUDA_READ_DIRECT || host_registered(dst)) {
    QDP_TRY(rc, cuda_use_device(d, reterr));
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, c->stream));
    QDP_TRY(rc, cuda_finish(c, reterr));
    return QDP_OK;
  }
  /* Two slots in flight: the copy engine fills one pinned buffer while this thread empties the
   * other into dst. */
  QDP_TRY(rc, cuda_stage_begin(c, reterr));
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
        host_copy_rows(c->copier, (char *)dst + at, c->stage_host[slot], n, n, 1);
      }
    }
  }
  rc = cuda_stage_end(c, rc, reterr);
out:
  return rc;
}
