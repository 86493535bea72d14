/* The CUDA backend's discovery: the GPUs, their devices (stream, staging), peer access, host
 * registration, and the mesh (cuda_backend.h). */
#include <sched.h>

#include "qdp_size.h"
#include "runtime/cuda_backend.h"

int runtime_cuda_device_count(void) {
  int n = 0;
  /* No driver (35), no GPU (100) or anything else: this node has no usable GPU. */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n < 0 ? 0 : n;
}

static void cuda_device_destroy(struct runtime_device *d) {
  if (!d) {
    return;
  }
  struct cuda_device *c = cuda_of(d);
  /* Everything is released even if the device cannot be made current (the handles know their
   * device); errors are dropped, teardown has no one to report them to. */
  if (cudaSetDevice(d->info.ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  if (c->stream) {
    cuda_drain(c);
  }
  if (c->lock_ready) {
    cuda_ipc_trim(c, 0);
    cuda_cache_drop(c);
  }
  cuda_vmm_destroy(c);
  free(c->exported);
  cuda_gram_destroy(c);
  for (int i = 0; i < 2; i++) {
    if (c->stage_free[i]) {
      (void)cudaEventDestroy(c->stage_free[i]);
    }
    if (c->stage_host[i]) {
      (void)cudaFreeHost(c->stage_host[i]);
    }
    if (c->stage_dev[i]) {
      (void)cudaFree(c->stage_dev[i]);
    }
  }
  if (c->stream) {
    (void)cudaStreamDestroy(c->stream);
  }
  if (c->copy_stream) {
    (void)cudaStreamDestroy(c->copy_stream);
  }
  host_copy_destroy(c->copier);
  (void)cudaGetLastError();
  if (c->lock_ready) {
    pthread_mutex_destroy(&c->stage_lock);
    pthread_mutex_destroy(&c->cache_lock);
    pthread_mutex_destroy(&c->ipc_lock);
    pthread_mutex_destroy(&c->blas_lock);
  }
  free(c);
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
static void format_uuid(const cudaUUID_t *u, char *buf, size_t size) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(buf, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

static qdp_status device_create(int ordinal, uint64_t budget_cfg, double fraction,
                                uint64_t stage_bytes, unsigned copy_threads,
                                struct cuda_device **ret_dev, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct cuda_device *c = calloc(1, sizeof *c);
  if (!c) {
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, ordinal, ENOMEM,
                            "cannot allocate the description of cuda:%d", ordinal);
  }
  struct runtime_device *d = &c->base;
  d->ops = &runtime_cuda_ops;
  snprintf(d->info.name, sizeof d->info.name, "cuda:%d", ordinal);
  d->info.kind = RUNTIME_DEVICE_CUDA;
  d->info.ordinal = ordinal;
  c->stage_bytes = stage_bytes;
  if (pthread_mutex_init(&c->stage_lock, NULL) != 0) {
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, ordinal, errno, "%s: cannot create a mutex",
                          d->info.name);
    goto out;
  }
  if (pthread_mutex_init(&c->cache_lock, NULL) != 0) {
    pthread_mutex_destroy(&c->stage_lock);
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, ordinal, errno, "%s: cannot create a mutex",
                          d->info.name);
    goto out;
  }
  if (pthread_mutex_init(&c->ipc_lock, NULL) != 0) {
    pthread_mutex_destroy(&c->stage_lock);
    pthread_mutex_destroy(&c->cache_lock);
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, ordinal, errno, "%s: cannot create a mutex",
                          d->info.name);
    goto out;
  }
  if (pthread_mutex_init(&c->blas_lock, NULL) != 0) {
    pthread_mutex_destroy(&c->stage_lock);
    pthread_mutex_destroy(&c->cache_lock);
    pthread_mutex_destroy(&c->ipc_lock);
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, ordinal, errno, "%s: cannot create a mutex",
                          d->info.name);
    goto out;
  }
  c->lock_ready = 1;
  QDP_TRY(rc, cuda_use_device(d, reterr));

  struct cudaDeviceProp prop;
  CU_TRY(rc, reterr, d, "cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, ordinal));
  snprintf(d->info.model, sizeof d->info.model, "%.63s", prop.name);
  format_uuid(&prop.uuid, d->info.uuid, sizeof d->info.uuid);
  d->info.cc_major = prop.major;
  d->info.cc_minor = prop.minor;
  size_t free_b = 0, total_b = 0;
  CU_TRY(rc, reterr, d, "cudaMemGetInfo", cudaMemGetInfo(&free_b, &total_b));
  d->info.total_bytes = total_b;
  d->info.free_bytes = free_b;
  /* The budget is taken from what was free before qdp's own staging: the staging lives inside
   * it, and the planner counts it in every job's need. */
  d->info.budget_bytes = budget_cfg ? budget_cfg : (uint64_t)((double)free_b * fraction);

  CU_TRY(rc, reterr, d, "cudaStreamCreateWithFlags",
         cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CU_TRY(rc, reterr, d, "cudaStreamCreateWithFlags",
         cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
  QDP_TRY(rc, host_copy_create(copy_threads, &c->copier, reterr));
  for (int i = 0; i < 2; i++) {
    cudaError_t err = cudaMallocHost(&c->stage_host[i], (size_t)stage_bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      c->stage_host[i] = NULL;
      if (reterr) {
        reterr->need_bytes = stage_bytes;
      }
      rc = qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, ordinal, (int)err,
                            "%s cannot pin %s of host memory for its input staging; lower "
                            "staging_bytes",
                            d->info.name, QDP_SIZE_STR(stage_bytes));
      goto out;
    }
    if (err != cudaSuccess) {
      c->stage_host[i] = NULL;
      rc = cuda_failed(d, err, "cudaMallocHost", reterr);
      goto out;
    }
    /* Pinned memory is mapped into every device under unified addressing; without a mapping the
     * small-input path copies instead. */
    if (cudaHostGetDevicePointer(&c->stage_mapped[i], c->stage_host[i], 0) != cudaSuccess) {
      (void)cudaGetLastError();
      c->stage_mapped[i] = NULL;
    }
    QDP_TRY(rc, cuda_dev_malloc(d, stage_bytes, &c->stage_dev[i], reterr));
    CU_TRY(rc, reterr, d, "cudaEventCreateWithFlags",
           cudaEventCreateWithFlags(&c->stage_free[i], cudaEventDisableTiming));
  }
  *ret_dev = c;
  c = NULL;
out:
  if (c) {
    cuda_device_destroy(&c->base);
  }
  return rc;
}

/* Parses "0,1" / "cuda:0,cuda:1" (NULL: every GPU) into ordinals, refusing unknown and repeated
 * ones. */
static qdp_status parse_spec(const char *spec, int ngpu, int *ret_ords, size_t *ret_n,
                             struct qdp_error *reterr) {
  size_t n = 0;
  if (!spec) {
    for (int i = 0; i < ngpu && i < QDP_DEVICES_MAX; i++) {
      ret_ords[n++] = i;
    }
    *ret_n = n;
    return QDP_OK;
  }
  const char *tok = spec;
  for (;;) {
    struct runtime_device_token t;
    if (runtime_device_token(tok, &t) != 0 || t.kind == RUNTIME_TOKEN_CPU) {
      size_t tl = strcspn(tok, ",");
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices '%s': '%.*s' is not a GPU (expected cpu:N, auto, or GPU "
                           "ordinals such as 0,1 or cuda:0,cuda:1)",
                           spec, (int)tl, tok);
    }
    unsigned long v = t.n;
    if (v >= (unsigned long)ngpu || v >= QDP_DEVICES_MAX) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices '%s' names cuda:%lu, but this node has %d GPU%s (cuda:0.."
                           "cuda:%d)",
                           spec, v, ngpu, ngpu == 1 ? "" : "s", ngpu - 1);
    }
    for (size_t i = 0; i < n; i++) {
      if (ret_ords[i] == (int)v) {
        return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                             "devices '%s' names cuda:%lu twice", spec, v);
      }
    }
    if (n == QDP_DEVICES_MAX) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices '%s' names more than %d GPUs", spec, QDP_DEVICES_MAX);
    }
    ret_ords[n++] = (int)v;
    if (*t.end == '\0') {
      break;
    }
    tok = t.end + 1;
  }
  *ret_n = n;
  return QDP_OK;
}

/* Peer access for every ordered pair that supports it; where it is missing, the butterfly goes
 * through a buffer instead (about 10x slower, but correct). Already-enabled access (another mesh
 * of this process enabled it) counts as enabled. Never disabled again: peer access is process-wide
 * and another mesh may rely on it. */
static void enable_peers(struct runtime_device **devs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int oi = devs[i]->info.ordinal;
    if (cudaSetDevice(oi) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    for (size_t j = 0; j < n; j++) {
      int oj = devs[j]->info.ordinal, can = 0;
      if (i == j) {
        continue;
      }
      if (cudaDeviceCanAccessPeer(&can, oi, oj) != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;
      }
      if (can) {
        cudaError_t err = cudaDeviceEnablePeerAccess(oj, 0);
        can = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
        (void)cudaGetLastError();
      }
      cuda_of(devs[i])->peer[oj] = (unsigned char)can;
      cuda_of(devs[j])->accessed_by[oi] = (unsigned char)can;
    }
  }
}

bool runtime_cuda_peer_enabled(const struct runtime_device *a, const struct runtime_device *b) {
  const struct cuda_device *c = (const struct cuda_device *)a;
  return b->info.ordinal < QDP_DEVICES_MAX && c->peer[b->info.ordinal];
}

/* Page-locks a registered input region once, so that every job reading it uploads from pinned
 * memory (no bounce through the staging copy, full PCIe rate). Portable: the pinning holds for the
 * contexts of every device of the mesh, not only the current one, so one call covers them all;
 * each device is made current first so a failure names the device whose context refused.
 * ReadOnly unless writable: an input region is mapped PROT_READ, which cudaHostRegister refuses
 * without it; an output region (FetchInto) is mapped read-write and must take device writes. */
static qdp_status cuda_register_host(struct runtime_mesh *m, void *ptr, uint64_t bytes,
                                     bool writable, struct qdp_error *reterr) {
  if (m->count == 0) {
    return QDP_OK;
  }
  struct runtime_device *d = m->devs[0];
  qdp_status rc = cuda_use_device(d, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  unsigned flags = cudaHostRegisterPortable;
#ifdef cudaHostRegisterReadOnly
  if (!writable) {
    flags |= cudaHostRegisterReadOnly;
  }
#endif
  cudaError_t err = cudaHostRegister(ptr, (size_t)bytes, flags);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return qdp_error_set_at(reterr, QDP_ERR_CUDA, d->info.ordinal, (int)err,
                            "%s: cudaHostRegister of a %llu B input region failed: %s (%s)",
                            d->info.name, (unsigned long long)bytes, cudaGetErrorName(err),
                            cudaGetErrorString(err));
  }
  /* Every other device must be able to use it too; a device whose context cannot is reported
   * by name and the pinning is undone, so the region is either usable everywhere or refused. */
  for (size_t i = 1; i < m->count; i++) {
    struct runtime_device *o = m->devs[i];
    unsigned got = 0;
    if ((rc = cuda_use_device(o, reterr)) != QDP_OK) {
      break;
    }
    err = cudaHostGetFlags(&got, ptr);
    if (err != cudaSuccess) {
      rc = qdp_error_set_at(reterr, QDP_ERR_CUDA, o->info.ordinal, (int)err,
                            "%s: the %llu B input region pinned on %s is not visible here: "
                            "cudaHostGetFlags failed: %s (%s)",
                            o->info.name, (unsigned long long)bytes, d->info.name,
                            cudaGetErrorName(err), cudaGetErrorString(err));
      (void)cudaGetLastError();
      break;
    }
  }
  if (rc != QDP_OK) {
    if (cudaSetDevice(d->info.ordinal) == cudaSuccess) {
      (void)cudaHostUnregister(ptr);
    }
    (void)cudaGetLastError();
  }
  return rc;
}

static void cuda_unregister_host(struct runtime_mesh *m, void *ptr) {
  if (m->count == 0) {
    return;
  }
  /* Nothing to report to: the region is going either way, and a failure here (the driver already
   * torn down at exit) leaves nothing pinned that outlives the process. */
  if (cudaSetDevice(m->devs[0]->info.ordinal) == cudaSuccess) {
    (void)cudaHostUnregister(ptr);
  }
  (void)cudaGetLastError();
}

/* Every device's member of the mesh's group is its index in the mesh. */
static void cuda_set_group(struct runtime_mesh *m, struct device_comm *comm) {
  for (size_t i = 0; i < m->count; i++) {
    struct cuda_device *c = cuda_of(m->devs[i]);
    c->comm = comm;
    c->member = i;
  }
}

/* The copy helpers per GPU (the encoding thread is the other copier): copy_threads - 1 as
 * configured, or (0) the CPUs this process may run on shared among the GPUs, at most
 * CUDA_COPY_THREADS_AUTO. */
static qdp_status copy_threads_for(unsigned configured, size_t ngpu, unsigned *ret,
                                   struct qdp_error *reterr) {
  if (configured > HOST_COPY_THREADS_MAX + 1) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "copy_threads",
                         "copy_threads = %u is above the most a GPU takes, %u", configured,
                         HOST_COPY_THREADS_MAX + 1);
  }
  if (configured == 0) {
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    long share = cpus / (long)(ngpu ? ngpu : 1);
    configured = share < 1                        ? 1
                 : share < CUDA_COPY_THREADS_AUTO ? (unsigned)share
                                                  : CUDA_COPY_THREADS_AUTO;
  }
  *ret = configured - 1;
  return QDP_OK;
}

qdp_status runtime_cuda_mesh_create(const struct runtime_mesh_config *cfg, const char *spec,
                                    double fraction, struct runtime_mesh **ret_mesh,
                                    struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct runtime_mesh *m = NULL;
  struct runtime_device **devs = NULL;
  size_t n = 0, made = 0;
  int ords[QDP_DEVICES_MAX];
  int ngpu = 0;
  cudaError_t err = cudaGetDeviceCount(&ngpu);
  if (err != cudaSuccess || ngpu <= 0) {
    (void)cudaGetLastError();
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "devices",
                         "devices '%s' asks for GPUs, but CUDA reports none (cudaGetDeviceCount: "
                         "%s); use cpu:N",
                         spec ? spec : "auto", err != cudaSuccess ? cudaGetErrorName(err) : "0");
  }
  QDP_TRY(rc, parse_spec(spec, ngpu, ords, &n, reterr));
  unsigned copy_threads = 0;
  QDP_TRY(rc, copy_threads_for(cfg->copy_threads, n, &copy_threads, reterr));
  /* Two slots of half the configured staging each, in whole 4 KiB pages. */
  uint64_t slot = cfg->staging_bytes ? cfg->staging_bytes / 2 : CUDA_STAGE_DEFAULT;
  slot &= ~(uint64_t)4095;
  slot = slot < CUDA_STAGE_MIN ? CUDA_STAGE_MIN : slot;

  m = calloc(1, sizeof *m);
  devs = calloc(n, sizeof *devs);
  if (!m || !devs) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the mesh");
    goto out;
  }
  for (made = 0; made < n; made++) {
    struct cuda_device *c = NULL;
    QDP_TRY(rc, device_create(ords[made], cfg->device_budget_bytes, fraction, slot, copy_threads,
                              &c, reterr));
    c->nccl_exchange = cfg->nccl_exchange;
    devs[made] = &c->base;
  }
  enable_peers(devs, n);
  for (size_t i = 0; i < n && !cfg->legacy_ipc_views; i++) {
    bool supported = false;
    QDP_TRY(rc, cuda_vmm_create(cuda_of(devs[i]), &supported, reterr));
  }
  m->devs = devs;
  m->count = n;
  made = 0; /* the mesh owns the devices now */
  devs = NULL;
  m->backend = "cuda";
  m->staging_bytes = 2 * slot;
  m->destroy_device = cuda_device_destroy;
  m->register_host = cuda_register_host;
  m->unregister_host = cuda_unregister_host;
  m->set_group = cuda_set_group;
  QDP_TRY(rc, runtime_cuda_topology(m, reterr));
  *ret_mesh = m;
  m = NULL;
out:
  for (size_t i = 0; devs && i < made; i++) {
    cuda_device_destroy(devs[i]);
  }
  free(devs);
  runtime_mesh_destroy(m);
  return rc;
}
