/* The CUDA backend's device memory: shard allocations, the cache of freed buffers, and amplitude
 * scratch (cuda_backend.h). */
#include "runtime/cuda_backend.h"

static void free_now(struct runtime_device *d, void *ptr);

/* Frees every kept buffer and scratch description. */
void cuda_cache_drop(struct cuda_device *c) {
  pthread_mutex_lock(&c->cache_lock);
  for (size_t i = 0; i < c->ncache; i++) {
    free_now(&c->base, c->cache[i].ptr);
  }
  c->ncache = 0;
  c->cache_bytes = 0;
  if (c->big.ptr) {
    free_now(&c->base, c->big.ptr);
  }
  c->big.ptr = NULL;
  c->big.bytes = 0;
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

/* A kept buffer of exactly `bytes`, taken out of the cache. */
static bool cache_take(struct cuda_device *c, uint64_t bytes, void **ret_ptr) {
  bool found = false;
  pthread_mutex_lock(&c->cache_lock);
  if (bytes > CUDA_CACHE_ENTRY_MAX && c->big.ptr && c->big.bytes == bytes) {
    *ret_ptr = c->big.ptr;
    c->big.ptr = NULL;
    c->big.bytes = 0;
    found = true;
  }
  for (size_t i = 0; i < c->ncache && !found && bytes <= CUDA_CACHE_ENTRY_MAX; i++) {
    if (c->cache[i].bytes == bytes) {
      *ret_ptr = c->cache[i].ptr;
      c->cache_bytes -= bytes;
      c->cache[i] = c->cache[--c->ncache];
      found = true;
    }
  }
  pthread_mutex_unlock(&c->cache_lock);
  return found;
}

/* Keeps a freed buffer; what it displaced, to free, goes to evicted[*ret_n] (at most
 * CUDA_CACHE_SLOTS + 1 of them): the kept large one, or the small ones kept longest ago until this
 * one fits. */
static void cache_keep(struct cuda_device *c, void *ptr, uint64_t bytes, void **evicted,
                       size_t *ret_n) {
  size_t n = 0;
  pthread_mutex_lock(&c->cache_lock);
  if (bytes > CUDA_CACHE_ENTRY_MAX) {
    if (c->big.ptr) {
      evicted[n++] = c->big.ptr;
    }
    c->big.ptr = ptr;
    c->big.bytes = bytes;
    c->big.since_ns = clock_mono_ns();
  } else {
    while (c->ncache > 0 &&
           (c->ncache == CUDA_CACHE_SLOTS || c->cache_bytes + bytes > CUDA_CACHE_BYTES)) {
      size_t old = 0;
      for (size_t i = 1; i < c->ncache; i++) {
        old = c->cache[i].kept_at < c->cache[old].kept_at ? i : old;
      }
      evicted[n++] = c->cache[old].ptr;
      c->cache_bytes -= c->cache[old].bytes;
      c->cache[old] = c->cache[--c->ncache];
    }
    c->cache[c->ncache].ptr = ptr;
    c->cache[c->ncache].bytes = bytes;
    c->cache[c->ncache].kept_at = c->cache_clock++;
    c->ncache++;
    c->cache_bytes += bytes;
  }
  pthread_mutex_unlock(&c->cache_lock);
  *ret_n = n;
}

/* cudaFree on d (or the release of a descriptor-exportable allocation); errors are dropped, as
 * nothing a caller freeing memory could do would help. */
static void free_now(struct runtime_device *d, void *ptr) {
  if (cuda_vmm_free(cuda_of(d), ptr)) {
    return;
  }
  /* Freed even when the device cannot be made current: with unified addressing cudaFree finds
   * the pointer's device itself. */
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  if (cudaFree(ptr) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

qdp_status cuda_alloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                      struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = cuda_use_device(d, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (cache_take(c, bytes, ret_ptr)) {
    return QDP_OK;
  }
  rc = c->vmm ? cuda_vmm_alloc(c, bytes, ret_ptr, reterr) : cuda_dev_malloc(d, bytes, ret_ptr, reterr);
  if (rc == QDP_ERR_RESOURCE_EXHAUSTED && (c->ncache > 0 || c->nspares > 0 || c->big.ptr)) {
    cuda_cache_drop(c);
    rc = c->vmm ? cuda_vmm_alloc(c, bytes, ret_ptr, reterr)
                : cuda_dev_malloc(d, bytes, ret_ptr, reterr);
  }
  return rc;
}

qdp_status cuda_mark_exported(struct cuda_device *c, const void *base, struct qdp_error *reterr) {
  pthread_mutex_lock(&c->cache_lock);
  bool known = false;
  for (size_t i = 0; i < c->nexported && !known; i++) {
    known = c->exported[i] == base;
  }
  if (!known && c->nexported == c->exported_cap) {
    size_t cap = c->exported_cap ? 2 * c->exported_cap : 16;
    const void **v = realloc(c->exported, cap * sizeof *v);
    if (v) {
      c->exported = v;
      c->exported_cap = cap;
    }
  }
  bool recorded = known || c->nexported < c->exported_cap;
  if (!known && recorded) {
    c->exported[c->nexported++] = base;
  }
  pthread_mutex_unlock(&c->cache_lock);
  return recorded ? QDP_OK
                  : qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                                  "no host memory to record a view of %s's memory",
                                  c->base.info.name);
}

/* Whether ptr was marked exported; forgets it (it is being freed). */
static bool take_exported(struct cuda_device *c, void *ptr) {
  bool found = false;
  pthread_mutex_lock(&c->cache_lock);
  for (size_t i = 0; i < c->nexported; i++) {
    if (c->exported[i] == ptr) {
      c->exported[i] = c->exported[--c->nexported];
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&c->cache_lock);
  return found;
}

void cuda_free(struct runtime_device *d, void *ptr, uint64_t bytes) {
  struct cuda_device *c = cuda_of(d);
  if (!ptr) {
    return;
  }
  if (take_exported(c, ptr)) {
    /* A client may still map it: released, never handed to another state. */
    free_now(d, ptr);
    return;
  }
  void *evicted[CUDA_CACHE_SLOTS + 1];
  size_t n = 0;
  cache_keep(c, ptr, bytes, evicted, &n);
  for (size_t i = 0; i < n; i++) {
    free_now(d, evicted[i]);
  }
}

void cuda_trim(struct runtime_device *d) {
  struct cuda_device *c = cuda_of(d);
  void *old = NULL;
  pthread_mutex_lock(&c->cache_lock);
  if (c->big.ptr && clock_mono_ns() - c->big.since_ns >= CUDA_KEEP_MS * CLOCK_NS_PER_MS) {
    old = c->big.ptr;
    c->big.ptr = NULL;
    c->big.bytes = 0;
  }
  pthread_mutex_unlock(&c->cache_lock);
  if (old) {
    free_now(d, old);
  }
  cuda_ipc_trim(c, CUDA_KEEP_MS);
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
  cudaEvent_t events[] = {s->done, s->uploaded};
  for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
    if (events[i] && cudaEventDestroy(events[i]) != cudaSuccess) {
      (void)cudaGetLastError();
    }
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

/* Grows s->pinned to at least `bytes`; the stream may still copy into the old one, so it is
 * drained first. */
qdp_status cuda_pinned_grow(struct cuda_device *c, struct cuda_scratch *s, uint64_t bytes,
                            struct qdp_error *reterr) {
  if (bytes <= s->pinned_cap) {
    return QDP_OK;
  }
  cuda_drain(c);
  if (s->pinned && cudaFreeHost(s->pinned) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  s->pinned = NULL;
  s->pinned_cap = 0;
  cudaError_t err = cudaMallocHost(&s->pinned, (size_t)bytes);
  if (err != cudaSuccess) {
    return cuda_failed(&c->base, err, "cudaMallocHost", reterr);
  }
  s->pinned_cap = bytes;
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
    s->resident_stride = 0;
    s->resident_external = false;
    s->upload_pending = false;
    return s;
  }
  return calloc(1, sizeof *s);
}

/* Keeps s for the next job when there is room and it is small, else frees it. */
void cuda_scratch_give(struct cuda_device *c, struct cuda_scratch *s) {
  /* A job that failed before reading its slice: the copy engine may still write into the state
   * buffer its caller is about to free. */
  if (s->upload_pending && cudaEventSynchronize(s->uploaded) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  s->upload_pending = false;
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
