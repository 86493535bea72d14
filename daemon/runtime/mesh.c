/* The DeviceMesh: parsing the device specification, creating the backend's devices, reporting
 * capacity, and per-device byte reservations. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_size.h"
#include "launcher.h"
#include "qdp_limits.h"
#include "runtime/device.h"
#include "runtime/mesh.h"

/* MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read. */
static uint64_t host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "re");
  if (!f) {
    return 0;
  }
  char line[256];
  uint64_t kib = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) {
      break;
    }
  }
  fclose(f);
  return kib * 1024;
}

int runtime_device_token(const char *s, struct runtime_device_token *ret) {
  const char *p = s;
  ret->kind = RUNTIME_TOKEN_INDEX;
  if (strncmp(p, "cpu:", 4) == 0) {
    ret->kind = RUNTIME_TOKEN_CPU;
    p += 4;
  } else if (strncmp(p, "cuda:", 5) == 0) {
    ret->kind = RUNTIME_TOKEN_CUDA;
    p += 5;
  }
  char *end = NULL;
  errno = 0;
  unsigned long v = (*p >= '0' && *p <= '9') ? strtoul(p, &end, 10) : 0;
  if (!end || end == p || errno || (*end != ',' && *end != '\0')) {
    ret->n = 0;
    ret->end = s + strcspn(s, ",");
    return -1;
  }
  ret->n = v;
  ret->end = end;
  return 0;
}

/* Parses "cpu:N" into N (1..QDP_DEVICES_MAX); returns 0 when spec is not of that form. */
static int parse_cpu_spec(const char *spec, unsigned *ret_n) {
  struct runtime_device_token t;
  int rc = runtime_device_token(spec, &t);
  if (t.kind != RUNTIME_TOKEN_CPU) {
    return 0;
  }
  if (rc != 0 || *t.end != '\0' || t.n < 1 || t.n > QDP_DEVICES_MAX) {
    return -1;
  }
  *ret_n = (unsigned)t.n;
  return 1;
}

/* The backend's mesh for cfg: the CUDA backend's or the CPU backend's. */
static qdp_status mesh_create_backend(const struct runtime_mesh_config *cfg,
                                      struct runtime_mesh **ret_mesh, struct qdp_error *reterr) {
  const char *spec = cfg->devices && cfg->devices[0] ? cfg->devices : "auto";
  double fraction = cfg->mem_fraction > 0 ? cfg->mem_fraction : QDP_MEM_FRACTION_DEFAULT;
  if (fraction < QDP_MEM_FRACTION_MIN || fraction > QDP_MEM_FRACTION_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "mem_fraction",
                         "mem_fraction %g is outside [%g, %g]", fraction, QDP_MEM_FRACTION_MIN,
                         QDP_MEM_FRACTION_MAX);
  }
  /* One GPU per rank on a node: the rank's index among the node's ranks, as the launcher tells. */
  char local[32];
  if (strcmp(spec, "local-rank") == 0) {
    int n = launcher_local_rank();
    if (n < 0) {
      char names[160];
      launcher_local_rank_names(names, sizeof names);
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                           "devices 'local-rank' takes the GPU of the rank's index on its node, "
                           "which the launcher did not give (%s)",
                           names);
    }
    snprintf(local, sizeof local, "cuda:%d", n);
    spec = local;
  }
  unsigned ncpu = 0;
  int cpu = parse_cpu_spec(spec, &ncpu);
  if (cpu < 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "devices",
                         "devices '%s': expected cpu:N with 1 <= N <= %d", spec, QDP_DEVICES_MAX);
  }
  if (cpu == 0 && strcmp(spec, "auto") == 0) {
    if (runtime_cuda_device_count() > 0) {
      return runtime_cuda_mesh_create(cfg, NULL, fraction, ret_mesh, reterr);
    }
    ncpu = 1; /* no GPU: the CPU backend */
  } else if (cpu == 0) {
    return runtime_cuda_mesh_create(cfg, spec, fraction, ret_mesh, reterr);
  }

  uint64_t each = cfg->device_budget_bytes;
  if (each == 0) {
    uint64_t avail = host_available_bytes();
    if (avail == 0) {
      return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "device_budget",
                           "cannot read MemAvailable from /proc/meminfo; set device_budget");
    }
    each = (uint64_t)((double)avail * fraction) / ncpu;
  }
  struct runtime_mesh *m = calloc(1, sizeof *m);
  struct runtime_device **devs = calloc(ncpu, sizeof *devs);
  qdp_status rc = QDP_OK;
  if (!m || !devs) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the mesh");
    goto out;
  }
  QDP_TRY(rc, runtime_cpu_devices_create(ncpu, each, devs, reterr));
  m->devs = devs;
  m->count = ncpu;
  m->backend = "cpu";
  m->staging_bytes = 0; /* host input is read in place */
  *ret_mesh = m;
  m = NULL;
  devs = NULL;
out:
  free(devs);
  free(m);
  return rc;
}

void runtime_mesh_destroy(struct runtime_mesh *m) {
  if (!m) {
    return;
  }
  runtime_workers_destroy(m->workers);
  for (size_t i = 0; i < m->count; i++) {
    if (m->destroy_device) {
      m->destroy_device(m->devs[i]);
    } else {
      runtime_cpu_device_destroy(m->devs[i]);
    }
  }
  free(m->devs);
  free(m->links);
  free(m->link_costs);
  if (m->backend_fini) {
    m->backend_fini(m);
  }
  free(m);
}

const char *runtime_mesh_backend(const struct runtime_mesh *m) {
  return m->backend;
}

size_t runtime_mesh_count(const struct runtime_mesh *m) {
  return m->count;
}

const char *runtime_link_kind_name(enum runtime_link_kind k) {
  static const char *const names[] = {
      [RUNTIME_LINK_SELF] = "self", [RUNTIME_LINK_HOST] = "host", [RUNTIME_LINK_NVLINK] = "nvlink",
      [RUNTIME_LINK_PCIE] = "pcie", [RUNTIME_LINK_PEER] = "peer", [RUNTIME_LINK_NONE] = "none"};
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

void runtime_mesh_trim(struct runtime_mesh *m) {
  for (size_t i = 0; m && i < m->count; i++) {
    if (m->devs[i]->ops->trim) {
      m->devs[i]->ops->trim(m->devs[i]);
    }
  }
}

void runtime_mesh_link(const struct runtime_mesh *m, size_t i, size_t j, struct runtime_link *ret) {
  if (m->links) {
    *ret = m->links[i * m->count + j];
  } else {
    *ret = (struct runtime_link){
        .kind = i == j ? RUNTIME_LINK_SELF : RUNTIME_LINK_HOST, .peer = true, .perf_rank = -1};
  }
}

void runtime_mesh_set_device_group(struct runtime_mesh *m, struct device_comm *c, const char *why) {
  if (!m->set_group) {
    return; /* host-memory devices reduce in their one memory */
  }
  m->device_comm = c;
  m->set_group(m, c);
  snprintf(m->collectives, sizeof m->collectives, "%s%s", why ? why : "",
           c && m->nccl_exchange ? "; global-bit stages over NCCL" : "");
}

const char *runtime_mesh_collectives(const struct runtime_mesh *m) {
  return m->collectives[0] ? m->collectives : "host (one memory)";
}

qdp_status runtime_mesh_create(const struct runtime_mesh_config *cfg,
                               struct runtime_mesh **ret_mesh, struct qdp_error *reterr) {
  static const uint8_t cost[] = {
      [RUNTIME_LINK_SELF] = 0, [RUNTIME_LINK_HOST] = 1, [RUNTIME_LINK_NVLINK] = 1,
      [RUNTIME_LINK_PCIE] = 2, [RUNTIME_LINK_PEER] = 2, [RUNTIME_LINK_NONE] = 3};
  struct runtime_mesh *m = NULL;
  qdp_status rc = mesh_create_backend(cfg, &m, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  m->nccl_exchange = cfg->nccl_exchange;
  /* The workers live as long as the mesh: no job starts a thread. */
  rc = runtime_workers_create(m->count > 1 ? m->count - 1 : 0, &m->workers, reterr);
  if (rc != QDP_OK) {
    runtime_mesh_destroy(m);
    return rc;
  }
  /* The links are fixed for the mesh's life: their costs are worked out once, not per plan. */
  m->link_costs = malloc(m->count * m->count);
  if (!m->link_costs) {
    runtime_mesh_destroy(m);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate the link costs of the mesh");
  }
  for (size_t i = 0; i < m->count; i++) {
    for (size_t j = 0; j < m->count; j++) {
      struct runtime_link l;
      runtime_mesh_link(m, i, j, &l);
      m->link_costs[i * m->count + j] = cost[l.kind];
    }
  }
  *ret_mesh = m;
  return QDP_OK;
}

const uint8_t *runtime_mesh_link_costs(const struct runtime_mesh *m) {
  return m->link_costs;
}

const char *runtime_mesh_topology_source(const struct runtime_mesh *m) {
  return m->topology_source ? m->topology_source : "host";
}

void runtime_mesh_set_world(struct runtime_mesh *m, int rank, const struct runtime_world_ops *ops,
                            void *ctx) {
  m->rank = ops ? rank : 0;
  m->world_ops = ops;
  m->world_ctx = ops ? ctx : NULL;
}

uint64_t runtime_mesh_staging_bytes(const struct runtime_mesh *m) {
  return m->staging_bytes;
}

uint32_t runtime_mesh_iqp_top_bits(const struct runtime_mesh *m) {
  uint32_t top = m->count ? UINT32_MAX : 0;
  for (size_t i = 0; i < m->count; i++) {
    uint32_t t = m->devs[i]->ops->iqp_top_bits;
    top = t < top ? t : top;
  }
  return top;
}

qdp_status runtime_mesh_register_host(struct runtime_mesh *m, void *ptr, uint64_t bytes,
                                      bool writable, bool *ret_registered,
                                      struct qdp_error *reterr) {
  *ret_registered = false;
  if (!m->register_host || !ptr || bytes == 0) {
    return QDP_OK;
  }
  qdp_status rc = m->register_host(m, ptr, bytes, writable, reterr);
  *ret_registered = rc == QDP_OK;
  return rc;
}

void runtime_mesh_unregister_host(struct runtime_mesh *m, void *ptr) {
  if (m->unregister_host && ptr) {
    m->unregister_host(m, ptr);
  }
}

void runtime_mesh_device_info(struct runtime_mesh *m, size_t i, struct runtime_device_info *ret) {
  struct runtime_device *d = m->devs[i];
  *ret = d->info;
  d->ops->query(d, &ret->total_bytes, &ret->free_bytes);
  ret->used_bytes = __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED);
}

void runtime_mesh_plan_devices(struct runtime_mesh *m, int rank, struct plan_device *devs) {
  for (size_t i = 0; i < m->count; i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(m, i, &info);
    memset(&devs[i], 0, sizeof devs[i]);
    devs[i].rank = rank;
    devs[i].ordinal = info.ordinal;
    snprintf(devs[i].name, sizeof devs[i].name, "%s", info.name);
    uint64_t room = info.budget_bytes > info.used_bytes ? info.budget_bytes - info.used_bytes : 0;
    /* A GPU shared with other processes may have less free than qdp's budget says. */
    devs[i].budget_bytes = room < info.free_bytes ? room : info.free_bytes;
  }
}

qdp_status runtime_device_reserve(struct runtime_device *d, uint64_t bytes,
                                  struct qdp_error *reterr) {
  uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED);
  for (;;) {
    if (used > d->info.budget_bytes || bytes > d->info.budget_bytes - used) {
      const uint64_t left = used < d->info.budget_bytes ? d->info.budget_bytes - used : 0;
      if (reterr) {
        reterr->need_bytes = bytes;
        reterr->free_bytes = left;
      }
      char need[QDP_SIZE_TEXT], have[QDP_SIZE_TEXT];
      qdp_size_text_pair(need, have, sizeof need, bytes, left);
      return qdp_error_set_at(
          reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, -1,
          "%s needs %s for its shard but only %s of its %s budget are left (%s in use)",
          d->info.name, need, have, QDP_SIZE_STR(d->info.budget_bytes), QDP_SIZE_STR(used));
    }
    if (__atomic_compare_exchange_n(&d->used_bytes, &used, used + bytes, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      return QDP_OK;
    }
  }
}

void runtime_device_unreserve(struct runtime_device *d, uint64_t bytes) {
  __atomic_sub_fetch(&d->used_bytes, bytes, __ATOMIC_RELAXED);
}
