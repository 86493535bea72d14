/* Zero-copy shard views (qdp.h, since 0.3): Describe with views gives one lease and per shard a
 * descriptor to take on the daemon's socket (since 0.7; the allocation, imported and mapped here
 * with CUDA's virtual memory management, across PID namespaces) or a legacy daemon's CUDA IPC
 * handle, with the shard's offset. Each is opened on the GPU of this process whose UUID the
 * daemon named (ordinals differ between processes under CUDA_VISIBLE_DEVICES), and the views are
 * kept per handle in the client until closed. Where libqdp is built without CUDA, opening views is
 * QDP_ERR_UNIMPLEMENTED; the DLPack wrapping needs no CUDA call and is built everywhere. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libqdp_int.h"
#include "qdp_build_config.h"
#include "qdp_dlpack.h"

#if QDP_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

/* The driver calls a descriptor view needs, taken through the runtime (libqdp links no
 * libcuda). */
struct vmm_calls {
  CUresult (*import)(CUmemGenericAllocationHandle *h, void *shareable,
                     CUmemAllocationHandleType type);
  CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                      unsigned long long flags);
  CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags);
  CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t n);
  CUresult (*unmap)(CUdeviceptr ptr, size_t size);
  CUresult (*address_free)(CUdeviceptr ptr, size_t size);
  CUresult (*release)(CUmemGenericAllocationHandle h);
};
#endif

/* One shard mapped from a descriptor: its allocation handle and address range (size 0: none). */
struct vmm_map {
  unsigned long long handle;
  uintptr_t ptr;
  size_t size;
};

/* The views of one handle, and what is needed to close them. */
struct qdp__view_set {
  struct qdp__view_set *next;
  struct qdp_views pub;
  struct qdp_view *views;
  void **bases; /* what cudaIpcOpenMemHandle returned, per shard (NULL: not open) */
  struct vmm_map *maps; /* per shard: a descriptor view's mapping */
#if QDP_HAVE_CUDA
  struct vmm_calls cu;
#endif
  struct qdp_state_info *state;
  char *token;
};

/* Closes the mappings and frees the set; the lease is the caller's business. */
static void set_free(struct qdp__view_set *v) {
  if (!v) {
    return;
  }
#if QDP_HAVE_CUDA
  for (size_t i = 0; v->maps && i < v->pub.count; i++) {
    const struct vmm_map *m = &v->maps[i];
    if (m->size) {
      (void)v->cu.unmap((CUdeviceptr)m->ptr, m->size);
      (void)v->cu.address_free((CUdeviceptr)m->ptr, m->size);
      (void)v->cu.release((CUmemGenericAllocationHandle)m->handle);
    }
  }
  for (size_t i = 0; v->bases && i < v->pub.count; i++) {
    if (v->bases[i]) {
      /* The current device must be the handle's: cudaIpcCloseMemHandle acts on its context. */
      if (cudaSetDevice(v->views[i].device_id) != cudaSuccess ||
          cudaIpcCloseMemHandle(v->bases[i]) != cudaSuccess) {
        (void)cudaGetLastError(); /* nothing left to do about it: the process keeps a mapping */
      }
    }
  }
#endif
  free(v->bases);
  free(v->maps);
  free(v->views);
  qdp_state_info_free(v->state);
  free(v->token);
  free(v);
}

/* Unlinks and returns the set of handle, or NULL. Under views_mu. */
static struct qdp__view_set *set_take(qdp_client *c, const char *handle) {
  for (struct qdp__view_set **pp = &c->views; *pp; pp = &(*pp)->next) {
    if (strcmp((*pp)->state->handle, handle) == 0) {
      struct qdp__view_set *v = *pp;
      *pp = v->next;
      return v;
    }
  }
  return NULL;
}

/* Waits for every device writable views are on, so that the daemon's next read, on its own
 * streams, sees what this process wrote through them. */
static qdp_status finish_writes(const struct qdp__view_set *v) {
#if QDP_HAVE_CUDA
  for (size_t i = 0; v->pub.writable && v->views && i < v->pub.count; i++) {
    int d = v->views[i].device_id;
    bool seen = false;
    for (size_t j = 0; j < i; j++) {
      seen = seen || v->views[j].device_id == d;
    }
    cudaError_t ce = seen ? cudaSuccess : cudaSetDevice(d);
    if (!seen && ce == cudaSuccess) {
      ce = cudaDeviceSynchronize();
    }
    if (ce != cudaSuccess) {
      return qdp__err_local(QDP_ERR_CUDA, (int)ce, "views",
                            "Waiting for the writes through the views of '%.64s' on CUDA device "
                            "%d failed: %s; what the daemon reads of the state may be incomplete.",
                            v->state->handle, d, cudaGetErrorString(ce));
    }
  }
#else
  (void)v;
#endif
  return QDP_OK;
}

/* Closes the mappings, then the lease: the daemon may free the memory once the lease is gone. A
 * failed wait for writes is reported, the lease closed all the same. */
static qdp_status set_close(qdp_client *c, struct qdp__view_set *v) {
  qdp_status wrc = finish_writes(v);
  struct qdp_errinfo why = *qdp__err();
  uint64_t lease = v->pub.lease_id;
  char *handle = v->state->handle, *token = v->token;
  v->state->handle = NULL;
  v->token = NULL;
  set_free(v);
  qdp_status rc = qdp__close_view(c, handle, token, lease, NULL);
  free(handle);
  free(token);
  if (wrc != QDP_OK) {
    *qdp__err() = why;
    return wrc;
  }
  return rc;
}

#if QDP_HAVE_CUDA
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as the daemon (and nvidia-smi) print it. */
static void format_uuid(const cudaUUID_t *u, char *buf, size_t size) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(buf, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

/* This process's ordinal of the GPU with that UUID. */
static qdp_status find_gpu(const struct qdp_shard *sh, int *ret_ordinal) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return qdp__err_local(QDP_ERR_FAILED_PRECONDITION, (int)err, "views",
                          "This process sees no GPU (cudaGetDeviceCount: %s), so it cannot open "
                          "the views of %s ('%s').",
                          cudaGetErrorName(err), sh->device, sh->uuid);
  }
  for (int i = 0; i < n; i++) {
    struct cudaDeviceProp prop;
    char uuid[48];
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    format_uuid(&prop.uuid, uuid, sizeof uuid);
    if (strcmp(uuid, sh->uuid) == 0) {
      *ret_ordinal = i;
      return QDP_OK;
    }
  }
  return qdp__err_local(QDP_ERR_FAILED_PRECONDITION, -1, "views",
                        "The daemon's %s ('%s') is not among the %d GPUs this process sees "
                        "(CUDA_VISIBLE_DEVICES?).",
                        sh->device, sh->uuid, n);
}

static qdp_status vmm_lookup(void **fn, const char *name) {
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || !*fn) {
    (void)cudaGetLastError();
    return qdp__err_local(QDP_ERR_FAILED_PRECONDITION, (int)err, "views",
                          "This process's CUDA driver has no %s, which a view handed out as a "
                          "descriptor needs (a driver of CUDA 12 or later).",
                          name);
  }
  return QDP_OK;
}

static qdp_status vmm_calls_get(struct vmm_calls *cu) {
  struct {
    const char *name;
    void **fn;
  } fns[] = {
      {"cuMemImportFromShareableHandle", (void **)&cu->import},
      {"cuMemAddressReserve", (void **)&cu->reserve},
      {"cuMemMap", (void **)&cu->map},
      {"cuMemSetAccess", (void **)&cu->set_access},
      {"cuMemUnmap", (void **)&cu->unmap},
      {"cuMemAddressFree", (void **)&cu->address_free},
      {"cuMemRelease", (void **)&cu->release},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    qdp_status rc = vmm_lookup(fns[i].fn, fns[i].name);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  return QDP_OK;
}

static qdp_status vmm_failed(CUresult cu, const char *call, size_t shard, const char *device) {
  return qdp__err_local(QDP_ERR_CUDA, (int)cu, "views",
                        "Mapping the view of shard %zu on %s failed: %s returned CUresult %d.",
                        shard, device, call, (int)cu);
}

/* Takes shard i's descriptor and maps its allocation whole on this process's GPU dev
 * (v->maps[i] records it for set_free); *ret_base is its start. */
static qdp_status map_descriptor(qdp_client *c, struct qdp__view_set *v, size_t i, int dev,
                                 char **ret_base) {
  const struct qdp_shard *sh = v->state->shards[i];
  int fd = -1;
  qdp_status rc = qdp__take_fd(c, sh->view_ticket, &fd);
  if (rc != QDP_OK) {
    return rc;
  }
  CUmemGenericAllocationHandle h = 0;
  CUresult cu = v->cu.import(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  close(fd); /* the handle holds the memory now */
  if (cu != CUDA_SUCCESS) {
    return vmm_failed(cu, "cuMemImportFromShareableHandle", i, sh->device);
  }
  size_t size = (size_t)sh->view_bytes;
  CUdeviceptr p = 0;
  if ((cu = v->cu.reserve(&p, size, 0, 0, 0)) != CUDA_SUCCESS) {
    (void)v->cu.release(h);
    return vmm_failed(cu, "cuMemAddressReserve", i, sh->device);
  }
  if ((cu = v->cu.map(p, size, 0, h, 0)) != CUDA_SUCCESS) {
    (void)v->cu.address_free(p, size);
    (void)v->cu.release(h);
    return vmm_failed(cu, "cuMemMap", i, sh->device);
  }
  v->maps[i] = (struct vmm_map){.handle = h, .ptr = (uintptr_t)p, .size = size};
  CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if ((cu = v->cu.set_access(p, size, &access, 1)) != CUDA_SUCCESS) {
    return vmm_failed(cu, "cuMemSetAccess", i, sh->device);
  }
  *ret_base = (char *)(uintptr_t)p;
  return QDP_OK;
}

/* Maps every shard of v->state; on failure the ones mapped stay in v->bases and v->maps for
 * set_free. */
static qdp_status map_shards(qdp_client *c, struct qdp__view_set *v) {
  for (size_t i = 0; i < v->pub.count; i++) {
    const struct qdp_shard *sh = v->state->shards[i];
    if (sh->view_ticket && sh->view_ticket[0]) {
      int dev = -1;
      char *base = NULL;
      qdp_status rc = find_gpu(sh, &dev);
      if (rc == QDP_OK && cudaSetDevice(dev) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = qdp__err_local(QDP_ERR_CUDA, -1, "views", "cudaSetDevice(%d) failed.", dev);
      }
      if (rc == QDP_OK && !v->cu.import) {
        rc = vmm_calls_get(&v->cu);
      }
      if (rc == QDP_OK) {
        rc = map_descriptor(c, v, i, dev, &base);
      }
      if (rc != QDP_OK) {
        return rc;
      }
      v->views[i] = (struct qdp_view){.struct_size = sizeof(struct qdp_view),
                                      .data = base + sh->ipc_offset,
                                      .device_id = dev,
                                      .shard = sh};
      continue;
    }
    cudaIpcMemHandle_t h;
    if (!sh->ipc_handle || sh->ipc_handle_bytes != sizeof h) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, "views",
                            "The daemon sent a %zu B IPC handle for shard %zu; expected %zu B.",
                            sh->ipc_handle_bytes, i, sizeof h);
    }
    memcpy(&h, sh->ipc_handle, sizeof h);
    int dev = -1;
    qdp_status rc = find_gpu(sh, &dev);
    if (rc != QDP_OK) {
      return rc;
    }
    cudaError_t err = cudaSetDevice(dev);
    if (err == cudaSuccess) {
      err = cudaIpcOpenMemHandle(&v->bases[i], h, cudaIpcMemLazyEnablePeerAccess);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      v->bases[i] = NULL;
      return qdp__err_local(QDP_ERR_CUDA, (int)err, "views",
                            "Opening the view of shard %zu on %s (this process's GPU %d) failed: "
                            "%s (%s).",
                            i, sh->device, dev, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    v->views[i] = (struct qdp_view){.struct_size = sizeof(struct qdp_view),
                                    .data = (char *)v->bases[i] + sh->ipc_offset,
                                    .device_id = dev,
                                    .shard = sh};
  }
  return QDP_OK;
}
#endif

qdp_status qdp_views_open(qdp_client *c, const char *handle, const char *token,
                          const struct qdp_views **ret) {
  return qdp_views_open_mode(c, handle, token, QDP_VIEWS_READ, ret);
}

qdp_status qdp_views_open_mode(qdp_client *c, const char *handle, const char *token,
                               enum qdp_views_mode mode, const struct qdp_views **ret) {
  qdp__err_reset();
  if (!c || !handle || !*handle || !token || !ret) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1,
                          !c     ? "client"
                          : !ret ? "ret"
                                 : "state",
                          "qdp_views_open needs a client, a handle, a token and a result pointer.");
  }
  if (mode != QDP_VIEWS_READ && mode != QDP_VIEWS_WRITE) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "mode",
                          "mode %d is neither QDP_VIEWS_READ (0) nor QDP_VIEWS_WRITE (1).",
                          (int)mode);
  }
#if !QDP_HAVE_CUDA
  return qdp__err_local(QDP_ERR_UNIMPLEMENTED, -1, "views",
                        "This libqdp was built without CUDA, so it cannot open zero-copy views; "
                        "read the state with qdp_fetch instead.");
#else
  qdp_status rc = QDP_OK;
  struct qdp__view_set *v = NULL;
  pthread_mutex_lock(&c->views_mu);
  for (struct qdp__view_set *s = c->views; s; s = s->next) {
    if (strcmp(s->state->handle, handle) == 0) {
      if (mode == QDP_VIEWS_WRITE && !s->pub.writable) {
        rc = qdp__err_local(QDP_ERR_FAILED_PRECONDITION, -1, "handle",
                            "This client holds read views of '%.64s' (lease %" PRIu64
                            "); a write lease is exclusive: close them (qdp_views_close) first.",
                            handle, s->pub.lease_id);
      } else {
        *ret = &s->pub;
      }
      goto out;
    }
  }
  v = calloc(1, sizeof *v);
  if (!v || !(v->token = strdup(token))) {
    rc = qdp__err_nomem("opening views");
    goto out;
  }
  rc = qdp__describe(c, handle, token, 1, mode == QDP_VIEWS_WRITE, &v->state);
  if (rc != QDP_OK) {
    goto out;
  }
  v->pub = (struct qdp_views){.struct_size = sizeof v->pub,
                              .state = v->state,
                              .lease_id = v->state->nshards ? v->state->shards[0]->lease_id : 0,
                              .count = v->state->nshards,
                              .writable = mode == QDP_VIEWS_WRITE};
  if (mode == QDP_VIEWS_WRITE &&
      (!v->state->nshards || v->state->writer_lease_id != v->state->shards[0]->lease_id)) {
    /* A qdpd from before write leases reads no `writable` and lends read views under a lease
     * that excludes nothing: writing through them would race its reads. */
    rc = qdp__err_local(QDP_ERR_FAILED_PRECONDITION, -1, "views",
                        "qdpd lent views of '%.64s' that are not under its write lease (a "
                        "daemon from before write leases): upgrade qdpd.",
                        handle);
    goto out;
  }
  v->views = calloc(v->pub.count ? v->pub.count : 1, sizeof *v->views);
  v->bases = calloc(v->pub.count ? v->pub.count : 1, sizeof *v->bases);
  v->maps = calloc(v->pub.count ? v->pub.count : 1, sizeof *v->maps);
  if (!v->views || !v->bases || !v->maps) {
    rc = qdp__err_nomem("opening views");
    goto out;
  }
  rc = map_shards(c, v);
  if (rc != QDP_OK) {
    goto out;
  }
  v->pub.views = v->views;
  v->next = c->views;
  c->views = v;
  *ret = &v->pub;
  v = NULL;
out:
  pthread_mutex_unlock(&c->views_mu);
  if (v && v->state) {
    /* The lease was taken: give it back, keeping the failure that is being reported. */
    struct qdp_errinfo why = *qdp__err();
    (void)set_close(c, v);
    *qdp__err() = why;
  } else {
    set_free(v);
  }
  return rc;
#endif
}

qdp_status qdp_views_close(qdp_client *c, const char *handle) {
  qdp__err_reset();
  if (!c || !handle) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, c ? "handle" : "client",
                          "qdp_views_close needs a client and a handle.");
  }
  pthread_mutex_lock(&c->views_mu);
  struct qdp__view_set *v = set_take(c, handle);
  pthread_mutex_unlock(&c->views_mu);
  if (!v) {
    return qdp__err_local(QDP_ERR_NOT_FOUND, -1, "handle",
                          "This client has no open views of '%.64s'.", handle);
  }
  return set_close(c, v);
}

void qdp__views_forget(qdp_client *c, const char *handle) {
  pthread_mutex_lock(&c->views_mu);
  struct qdp__view_set *v = set_take(c, handle);
  pthread_mutex_unlock(&c->views_mu);
  if (v) {
    struct qdp_errinfo kept = *qdp__err();
    (void)set_close(c, v);
    *qdp__err() = kept;
  }
}

void qdp__views_forget_all(qdp_client *c) {
  pthread_mutex_lock(&c->views_mu);
  struct qdp__view_set *v = c->views;
  c->views = NULL;
  pthread_mutex_unlock(&c->views_mu);
  struct qdp_errinfo kept = *qdp__err();
  while (v) {
    struct qdp__view_set *next = v->next;
    (void)set_close(c, v);
    v = next;
  }
  *qdp__err() = kept;
}

/* The tensor and its shape in one allocation, so that the deleter frees one block. */
struct dlpack_block {
  DLManagedTensor t;
  int64_t shape[2];
};

static void dlpack_delete(DLManagedTensor *self) {
  free(self); /* t is the block's first member */
}

qdp_status qdp_view_dlpack(const struct qdp_views *v, size_t i, struct DLManagedTensor **ret) {
  qdp__err_reset();
  if (!v || !ret) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, v ? "ret" : "views",
                          "qdp_view_dlpack needs views and a result pointer.");
  }
  if (i >= v->count) {
    return qdp__err_local(QDP_ERR_OUT_OF_RANGE, -1, "index",
                          "Shard %zu asked of views with %zu shards.", i, v->count);
  }
  unsigned bits = v->state->dtype == QDP_DTYPE_COMPLEX64 ? 64 : 128;
  struct dlpack_block *b = calloc(1, sizeof *b);
  if (!b) {
    return qdp__err_nomem("making a DLPack tensor");
  }
  const struct qdp_view *w = &v->views[i];
  b->shape[0] = (int64_t)w->shard->rows;
  b->shape[1] = (int64_t)w->shard->count;
  b->t.dl_tensor = (DLTensor){.data = w->data,
                              .device = {.device_type = kDLCUDA, .device_id = w->device_id},
                              .ndim = 2,
                              .dtype = {.code = kDLComplex, .bits = (uint8_t)bits, .lanes = 1},
                              .shape = b->shape,
                              .strides = NULL,
                              .byte_offset = 0};
  b->t.manager_ctx = NULL;
  b->t.deleter = dlpack_delete;
  *ret = &b->t;
  return QDP_OK;
}
