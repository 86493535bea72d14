/* State memory that a client can be handed as a file descriptor (cuda_backend.h): CUDA virtual
 * memory management. Each allocation is physical memory made with cuMemCreate, exportable as a
 * POSIX file descriptor, mapped at an address range of its own and made accessible to this
 * device and to the mesh's devices that reach it over a peer link. A client imports the
 * descriptor (cuMemImportFromShareableHandle) whatever its PID namespace, which legacy CUDA IPC
 * handles cannot cross. An allocation once exported is never reused: the daemon releases its
 * handle when the state goes, and the driver frees the memory when the last importer has
 * unmapped it, so no client ever maps memory that another state then takes over. */
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#include "runtime/cuda_backend.h"

/* The driver calls (cuda_driver_entry). */
struct cuda_vmm_driver {
  CUresult (*create)(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,
                     unsigned long long flags);
  CUresult (*release)(CUmemGenericAllocationHandle h);
  CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                      unsigned long long flags);
  CUresult (*address_free)(CUdeviceptr ptr, size_t size);
  CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags);
  CUresult (*unmap)(CUdeviceptr ptr, size_t size);
  CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t n);
  CUresult (*granularity)(size_t *g, const CUmemAllocationProp *p,
                          CUmemAllocationGranularity_flags option);
  CUresult (*export_handle)(void *shareable, CUmemGenericAllocationHandle h,
                            CUmemAllocationHandleType type, unsigned long long flags);
  CUresult (*attribute)(int *v, CUdevice_attribute a, CUdevice dev);
};

struct cuda_vmm_block {
  void *ptr;
  size_t size; /* a multiple of the granularity */
  CUmemGenericAllocationHandle handle;
  int fd; /* its exported descriptor, kept for the next view (each gets a duplicate); -1: none */
};

struct cuda_vmm {
  struct cuda_vmm_driver drv;
  CUmemAllocationProp prop;
  size_t granularity;
  pthread_mutex_t lock; /* the blocks */
  struct cuda_vmm_block *v;
  size_t n, cap;
};

static qdp_status driver_failed(struct runtime_device *d, CUresult cu, const char *call,
                                struct qdp_error *reterr) {
  return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)cu,
                          "%s: %s failed with CUresult %d", d->info.name, call, (int)cu);
}

qdp_status cuda_vmm_create(struct cuda_device *c, bool *ret_supported, struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  *ret_supported = false;
  struct cuda_vmm *v = calloc(1, sizeof *v);
  if (!v) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for %s's allocation table", d->info.name);
  }
  qdp_status rc = QDP_OK;
  struct {
    const char *name;
    void **fn;
  } fns[] = {
      {"cuMemCreate", (void **)&v->drv.create},
      {"cuMemRelease", (void **)&v->drv.release},
      {"cuMemAddressReserve", (void **)&v->drv.reserve},
      {"cuMemAddressFree", (void **)&v->drv.address_free},
      {"cuMemMap", (void **)&v->drv.map},
      {"cuMemUnmap", (void **)&v->drv.unmap},
      {"cuMemSetAccess", (void **)&v->drv.set_access},
      {"cuMemGetAllocationGranularity", (void **)&v->drv.granularity},
      {"cuMemExportToShareableHandle", (void **)&v->drv.export_handle},
      {"cuDeviceGetAttribute", (void **)&v->drv.attribute},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    QDP_TRY(rc, cuda_driver_entry(d, fns[i].name, fns[i].fn, reterr));
  }
  int vmm = 0, posix = 0;
  if (v->drv.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                       d->info.ordinal) != CUDA_SUCCESS ||
      v->drv.attribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                       d->info.ordinal) != CUDA_SUCCESS ||
      !vmm || !posix) {
    goto out; /* legacy allocations: not an error */
  }
  v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  v->prop.location.id = d->info.ordinal;
  v->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUresult cu = v->drv.granularity(&v->granularity, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (cu != CUDA_SUCCESS || v->granularity == 0) {
    rc = driver_failed(d, cu, "cuMemGetAllocationGranularity", reterr);
    goto out;
  }
  if (pthread_mutex_init(&v->lock, NULL) != 0) {
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, d->info.ordinal, errno,
                          "%s: cannot create a mutex", d->info.name);
    goto out;
  }
  c->vmm = v;
  v = NULL;
  *ret_supported = true;
out:
  free(v);
  return rc;
}

/* Unmaps and releases block b (its range is no longer used by any work). */
static void block_end(struct cuda_vmm *v, const struct cuda_vmm_block *b) {
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)b->ptr;
  if (b->fd >= 0) {
    close(b->fd);
  }
  (void)v->drv.unmap(p, b->size);
  (void)v->drv.address_free(p, b->size);
  (void)v->drv.release(b->handle);
}

void cuda_vmm_destroy(struct cuda_device *c) {
  struct cuda_vmm *v = c->vmm;
  if (!v) {
    return;
  }
  for (size_t i = 0; i < v->n; i++) {
    block_end(v, &v->v[i]);
  }
  free(v->v);
  pthread_mutex_destroy(&v->lock);
  free(v);
  c->vmm = NULL;
}

qdp_status cuda_vmm_alloc(struct cuda_device *c, uint64_t bytes, void **ret_ptr,
                          struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_vmm *v = c->vmm;
  uint64_t ask = bytes ? bytes : 1;
  if (ask > SIZE_MAX - v->granularity) {
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, 0,
                            "%s cannot allocate %" PRIu64 " B", d->info.name, bytes);
  }
  size_t size = ((size_t)ask + v->granularity - 1) / v->granularity * v->granularity;
  struct cuda_vmm_block b = {.size = size, .fd = -1};
  CUdeviceptr p = 0;
  qdp_status rc = QDP_OK;
  CUresult cu = v->drv.create(&b.handle, size, &v->prop, 0);
  if (cu == CUDA_ERROR_OUT_OF_MEMORY) {
    return cuda_out_of_memory(d, size, "cuMemCreate", "CUDA_ERROR_OUT_OF_MEMORY", (int)cu, reterr);
  }
  if (cu != CUDA_SUCCESS) {
    return driver_failed(d, cu, "cuMemCreate", reterr);
  }
  /* The address range aligned to the largest power of two within the size (up to 1 GiB), which
   * leaves the driver free to map it with the largest pages it has. */
  size_t align = v->granularity;
  while (align < (UINT64_C(1) << 30) && align * 2 <= size) {
    align *= 2;
  }
  if ((cu = v->drv.reserve(&p, size, align, 0, 0)) != CUDA_SUCCESS) {
    rc = driver_failed(d, cu, "cuMemAddressReserve", reterr);
    goto fail_reserve;
  }
  if ((cu = v->drv.map(p, size, 0, b.handle, 0)) != CUDA_SUCCESS) {
    rc = driver_failed(d, cu, "cuMemMap", reterr);
    goto fail_map;
  }
  /* This device, and every device of the mesh that reaches it over a peer link (peer kernels and
   * copies between shards): mappings made this way are not covered by peer access. */
  CUmemAccessDesc access[QDP_DEVICES_MAX];
  size_t na = 0;
  for (int o = 0; o < QDP_DEVICES_MAX; o++) {
    if (o == d->info.ordinal || c->accessed_by[o]) {
      access[na].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access[na].location.id = o;
      access[na].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      na++;
    }
  }
  if ((cu = v->drv.set_access(p, size, access, na)) != CUDA_SUCCESS) {
    rc = driver_failed(d, cu, "cuMemSetAccess", reterr);
    goto fail_access;
  }
  b.ptr = (void *)(uintptr_t)p;
  pthread_mutex_lock(&v->lock);
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 64;
    struct cuda_vmm_block *nv = realloc(v->v, cap * sizeof *nv);
    if (nv) {
      v->v = nv;
      v->cap = cap;
    }
  }
  bool kept = v->n < v->cap;
  if (kept) {
    v->v[v->n++] = b;
  }
  pthread_mutex_unlock(&v->lock);
  if (kept) {
    *ret_ptr = b.ptr;
    return QDP_OK;
  }
  rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                     "no host memory for %s's allocation table", d->info.name);
fail_access:
  (void)v->drv.unmap(p, size);
fail_map:
  (void)v->drv.address_free(p, size);
fail_reserve:
  (void)v->drv.release(b.handle);
  return rc;
}

/* The index of the block at ptr, or n; under the lock. */
static size_t find(const struct cuda_vmm *v, const void *ptr) {
  size_t i = 0;
  while (i < v->n && v->v[i].ptr != ptr) {
    i++;
  }
  return i;
}

bool cuda_vmm_free(struct cuda_device *c, void *ptr) {
  struct cuda_vmm *v = c->vmm;
  if (!v) {
    return false;
  }
  pthread_mutex_lock(&v->lock);
  size_t i = find(v, ptr);
  struct cuda_vmm_block b = {0};
  bool found = i < v->n;
  if (found) {
    b = v->v[i];
    v->v[i] = v->v[--v->n];
  }
  pthread_mutex_unlock(&v->lock);
  if (found) {
    /* Nothing of this device may still use it: the same promise cudaFree's implicit
     * synchronization keeps. */
    if (cudaSetDevice(c->base.info.ordinal) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      (void)cudaGetLastError();
    }
    block_end(v, &b);
  }
  return found;
}

qdp_status cuda_vmm_export(struct cuda_device *c, const void *ptr, struct runtime_ipc *ret,
                           struct qdp_error *reterr) {
  struct runtime_device *d = &c->base;
  struct cuda_vmm *v = c->vmm;
  /* Never reused from here on (cuda_free). The first view exports the allocation (a driver call
   * of a few hundred microseconds); every view gets a duplicate of that descriptor. */
  qdp_status rc = cuda_mark_exported(c, ptr, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  int fd = -1;
  pthread_mutex_lock(&v->lock);
  size_t i = find(v, ptr);
  struct cuda_vmm_block *b = i < v->n ? &v->v[i] : NULL;
  if (!b) {
    rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                       "%s: a shard's memory is not one of the device's allocations",
                       d->info.name);
  } else {
    CUresult cu = CUDA_SUCCESS;
    if (b->fd < 0 &&
        ((cu = v->drv.export_handle(&b->fd, b->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                    0)) != CUDA_SUCCESS ||
         b->fd < 0)) {
      b->fd = -1;
      rc = driver_failed(d, cu, "cuMemExportToShareableHandle", reterr);
    } else if ((fd = fcntl(b->fd, F_DUPFD_CLOEXEC, 3)) < 0) {
      rc = qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, errno,
                            "%s: no descriptor left for a view: %s", d->info.name,
                            strerror(errno));
    }
  }
  size_t size = b ? b->size : 0;
  pthread_mutex_unlock(&v->lock);
  if (rc != QDP_OK) {
    return rc;
  }
  memset(ret->handle, 0, sizeof ret->handle);
  ret->fd = fd;
  ret->offset = 0;
  ret->map_bytes = size;
  return QDP_OK;
}
