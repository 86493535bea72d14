/* CUDA IPC (cuda_backend.h): shards exported for zero-copy views, and clients' allocations
 * (CUDA tensor input) opened here and kept open between the jobs that use them. */
#include "runtime/cuda_backend.h"

/* cuMemGetAddressRange, which the runtime API lacks (cuda_driver_entry). */
typedef CUresult (*mem_range_fn)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);

/* The allocation holding ptr: its base and size (the device is current). */
static qdp_status address_range(struct runtime_device *d, const void *ptr, CUdeviceptr *ret_base,
                                size_t *ret_size, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  void *fn = NULL;
  QDP_TRY(rc, cuda_driver_entry(d, "cuMemGetAddressRange", &fn, reterr));
  CUresult cu = ((mem_range_fn)fn)(ret_base, ret_size, (CUdeviceptr)(uintptr_t)ptr);
  if (cu != CUDA_SUCCESS) {
    rc =
        qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)cu,
                         "%s: cuMemGetAddressRange failed with CUresult %d", d->info.name, (int)cu);
  }
out:
  return rc;
}

/* A descriptor where the device's state memory is exportable so (cuda_vmm.c); else the IPC handle,
 * which names the whole cudaMalloc allocation, so the offset is taken from its base: a shard need
 * not start an allocation. */
qdp_status cuda_export_view(struct runtime_device *d, const void *ptr, struct runtime_ipc *ret,
                            struct qdp_error *reterr) {
  ret->fd = -1;
  ret->map_bytes = 0;
  if (cuda_of(d)->vmm) {
    return cuda_vmm_export(cuda_of(d), ptr, ret, reterr);
  }
  unsigned char *ret_handle = ret->handle;
  uint64_t *ret_offset = &ret->offset;
  qdp_status rc = QDP_OK;
  CUdeviceptr base = 0;
  size_t size = 0;
  cudaIpcMemHandle_t h;
  _Static_assert(sizeof h == RUNTIME_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t is 64 bytes");
  QDP_TRY(rc, cuda_use_device(d, reterr));
  QDP_TRY(rc, address_range(d, ptr, &base, &size, reterr));
  CU_TRY(rc, reterr, d, "cudaIpcGetMemHandle", cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base));
  QDP_TRY(rc, cuda_mark_exported(cuda_of(d), (void *)(uintptr_t)base, reterr));
  memcpy(ret_handle, &h, sizeof h);
  *ret_offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
out:
  return rc;
}

/* Opens handle h once (the driver refuses a second open of one allocation in a process), its
 * base and the size the driver records; the ipc lock is held. */
static qdp_status open_fresh(struct cuda_device *c, const cudaIpcMemHandle_t *h, void **ret_base,
                             uint64_t *ret_size, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  qdp_status rc = QDP_OK;
  void *base = NULL;
  CUdeviceptr start = 0;
  size_t size = 0;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  CU_TRY(rc, reterr, d, "cudaIpcOpenMemHandle",
         cudaIpcOpenMemHandle(&base, *h, cudaIpcMemLazyEnablePeerAccess));
  rc = address_range(d, base, &start, &size, reterr);
  if (rc != QDP_OK) {
    (void)cudaIpcCloseMemHandle(base);
    goto out;
  }
  *ret_base = base;
  *ret_size = size;
out:
  return rc;
}

/* A slot for a new entry: a free one, else the least recently used one no job holds (closed
 * now); NULL when every slot is in use (the allocation is then opened for this job only). */
static struct cuda_ipc_open *ipc_slot(struct cuda_device *c) {
  if (c->nipc < CUDA_IPC_KEEP) {
    return &c->ipc[c->nipc++];
  }
  struct cuda_ipc_open *lru = NULL;
  for (size_t i = 0; i < c->nipc; i++) {
    if (c->ipc[i].refs == 0 && (!lru || c->ipc[i].used_ns < lru->used_ns)) {
      lru = &c->ipc[i];
    }
  }
  if (lru && cudaIpcCloseMemHandle(lru->base) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  return lru;
}

/* A client's allocation opened on this device, or found open from an earlier job. The handle
 * names the allocation's base; the driver's own record of the opened range is what the offset and
 * bytes are checked against, so a client cannot make a job reach past what it exported. A handle
 * names one allocation for its life (a new allocation at the same address gets a new handle), so
 * an entry found is the allocation the client means. LazyEnablePeerAccess: shards on the mesh's
 * other GPUs read it with peer copies. */
qdp_status cuda_open_ipc(struct runtime_device *d, const unsigned char *handle, uint64_t offset,
                         uint64_t bytes, void **ret_base, uint64_t *ret_size,
                         struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  cudaIpcMemHandle_t h;
  _Static_assert(sizeof h == RUNTIME_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t is 64 bytes");
  memcpy(&h, handle, sizeof h);
  pthread_mutex_lock(&c->ipc_lock);
  struct cuda_ipc_open *e = NULL, fresh = {.refs = 0};
  for (size_t i = 0; i < c->nipc && !e; i++) {
    e = memcmp(c->ipc[i].handle, handle, sizeof h) == 0 ? &c->ipc[i] : NULL;
  }
  if (!e) {
    QDP_TRY(rc, open_fresh(c, &h, &fresh.base, &fresh.size, reterr));
    memcpy(fresh.handle, handle, sizeof h);
    e = ipc_slot(c);
    if (e) {
      *e = fresh;
    }
  }
  struct cuda_ipc_open *at = e ? e : &fresh;
  if (offset > at->size || bytes > at->size - offset) {
    rc = qdp_error_set_at(reterr, QDP_ERR_OUT_OF_RANGE, d->info.ordinal, -1,
                          "%s: %llu B at offset %llu pass the end of the client's allocation of "
                          "%llu B",
                          d->info.name, (unsigned long long)bytes, (unsigned long long)offset,
                          (unsigned long long)at->size);
    if (reterr) {
      snprintf(reterr->field, sizeof reterr->field, "input.cuda_ipc.offset");
      reterr->need_bytes = bytes;
      reterr->free_bytes = offset > at->size ? 0 : at->size - offset;
    }
    if (!e) {
      (void)cudaIpcCloseMemHandle(fresh.base);
    }
    goto out;
  }
  at->refs += e != NULL;
  *ret_base = at->base;
  *ret_size = at->size;
out:
  pthread_mutex_unlock(&c->ipc_lock);
  return rc;
}

/* Kept ones stay open for the next job; one opened for its job only (every slot was busy) is
 * closed now. */
void cuda_close_ipc(struct runtime_device *d, void *base) {
  struct cuda_device *c = cuda_of(d);
  pthread_mutex_lock(&c->ipc_lock);
  for (size_t i = 0; i < c->nipc; i++) {
    if (c->ipc[i].base == base && c->ipc[i].refs > 0) {
      c->ipc[i].refs--;
      c->ipc[i].used_ns = clock_mono_ns();
      pthread_mutex_unlock(&c->ipc_lock);
      return;
    }
  }
  if (cuda_use_device(d, NULL) != QDP_OK || cudaIpcCloseMemHandle(base) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  pthread_mutex_unlock(&c->ipc_lock);
}

void cuda_ipc_trim(struct cuda_device *c, uint64_t keep_ms) {
  uint64_t now = clock_mono_ns();
  pthread_mutex_lock(&c->ipc_lock);
  if (cudaSetDevice(c->base.info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  for (size_t i = 0; i < c->nipc;) {
    struct cuda_ipc_open *e = &c->ipc[i];
    if (e->refs == 0 && now - e->used_ns >= keep_ms * CLOCK_NS_PER_MS) {
      if (cudaIpcCloseMemHandle(e->base) != cudaSuccess) {
        (void)cudaGetLastError();
      }
      *e = c->ipc[--c->nipc];
      continue;
    }
    i++;
  }
  pthread_mutex_unlock(&c->ipc_lock);
}
