/* The CUDA backend's device memory: shard allocations, the cache of freed buffers, and amplitude
 * scratch (cuda_backend.h). */
#include "runtime/cuda_backend.h"

/* Frees every kept buffer and scratch description. */
void cuda_cache_drop(struct cuda_device *c) {
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
    cuda_scratch_free(spares);
    spares = next;
  }
}

qdp_status cuda_alloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                      struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = cuda_use_device(d, reterr);
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
  rc = cuda_dev_malloc(d, bytes, ret_ptr, reterr);
  if (rc == QDP_ERR_RESOURCE_EXHAUSTED && (c->ncache > 0 || c->nspares > 0)) {
    cuda_cache_drop(c);
    rc = cuda_dev_malloc(d, bytes, ret_ptr, reterr);
  }
  return rc;
}

void cuda_free(struct runtime_device *d, void *ptr, uint64_t bytes) {
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

void cuda_scratch_free(struct cuda_scratch *s) {
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
qdp_status cuda_scratch_grow(struct cuda_device *c, void **buf, uint64_t *cap, uint64_t need,
                             struct qdp_error *reterr) {
  if (need <= *cap) {
    return QDP_OK;
  }
  cuda_drain(c);
  if (*buf && cudaFree(*buf) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  *buf = NULL;
  *cap = 0;
  qdp_status rc = cuda_dev_malloc(&c->base, need, buf, reterr);
  if (rc == QDP_OK) {
    *cap = need;
  }
  return rc;
}

qdp_status cuda_host_sums_grow(struct cuda_device *c, struct cuda_scratch *s, uint64_t n,
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

/* A kept scratch description, or a new empty one. */
struct cuda_scratch *cuda_scratch_take(struct cuda_device *c) {
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
void cuda_scratch_give(struct cuda_device *c, struct cuda_scratch *s) {
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
  cuda_scratch_free(s);
}
