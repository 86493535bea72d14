/* The topology of a CUDA mesh: for every pair of its GPUs, whether peer access is on and what
 * joins them (NVLink with its link count, PCIe, or nothing usable), and each GPU's NUMA node.
 *
 * NVML, which ships with the driver, is the only source that tells NVLink from PCIe and counts
 * links, so it is loaded at run time (dlopen: no build or link dependency, and a node without it
 * still works). Without it the CUDA peer attributes give access and a performance rank, and the
 * link kind is reported as "peer" (some peer path, kind unknown) rather than guessed.
 *
 * The NVML declarations below are the few entry points and the one structure used, as the NVML
 * reference documents them (stable since the _v2/_v3 versions named).
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cuda_runtime_api.h>

#include "runtime/mesh.h"

typedef int nvml_return;
typedef struct nvml_device_opaque *nvml_device;
struct nvml_pci_info {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
#define NVML_OK 0
#define NVML_NVLINK_LINKS_MAX 18 /* links per GPU the API enumerates */
#define NVML_P2P_CAPS_INDEX_NVLINK 2
#define NVML_P2P_STATUS_OK 0
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 2

struct nvml {
  void *lib;
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  nvml_return (*by_uuid)(const char *uuid, nvml_device *ret);
  nvml_return (*pci_info)(nvml_device dev, struct nvml_pci_info *ret);
  nvml_return (*link_state)(nvml_device dev, unsigned link, int *ret_active);
  nvml_return (*link_remote_pci)(nvml_device dev, unsigned link, struct nvml_pci_info *ret);
  nvml_return (*p2p_status)(nvml_device a, nvml_device b, int caps_index, int *ret_status);
  nvml_return (*link_remote_type)(nvml_device dev, unsigned link, int *ret_type); /* may be NULL */
};

/* Loads and initializes NVML; 0 on success. */
static int nvml_open(struct nvml *n) {
  memset(n, 0, sizeof *n);
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) {
    return -1;
  }
  /* Assigning dlsym's void * to function pointers goes through memcpy: ISO C has no conversion
   * between the two, POSIX guarantees the representation. */
  static const struct {
    const char *name;
    size_t offset;
  } syms[] = {
      {"nvmlInit_v2", offsetof(struct nvml, init)},
      {"nvmlShutdown", offsetof(struct nvml, shutdown)},
      {"nvmlDeviceGetHandleByUUID", offsetof(struct nvml, by_uuid)},
      {"nvmlDeviceGetPciInfo_v3", offsetof(struct nvml, pci_info)},
      {"nvmlDeviceGetNvLinkState", offsetof(struct nvml, link_state)},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2", offsetof(struct nvml, link_remote_pci)},
      {"nvmlDeviceGetP2PStatus", offsetof(struct nvml, p2p_status)},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(n->lib, syms[i].name);
    if (!f) {
      dlclose(n->lib);
      n->lib = NULL;
      return -1;
    }
    memcpy((char *)n + syms[i].offset, &f, sizeof f);
  }
  /* Newer than the rest (NVML 11.4): optional. */
  void *rt = dlsym(n->lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  memcpy(&n->link_remote_type, &rt, sizeof rt);
  if (n->init() != NVML_OK) {
    dlclose(n->lib);
    n->lib = NULL;
    return -1;
  }
  return 0;
}

static void nvml_close(struct nvml *n) {
  if (n->lib) {
    (void)n->shutdown();
    dlclose(n->lib);
  }
}

/* The far end of a link may be reported with its numeric fields or only its bus id string
 * ("00000000:19:00.0"), depending on the driver: either match counts. */
static int same_pci(const struct nvml_pci_info *a, const struct nvml_pci_info *b) {
  if (a->bus_id[0] && strncasecmp(a->bus_id, b->bus_id, sizeof a->bus_id) == 0) {
    return 1;
  }
  return (a->domain | a->bus | a->device) != 0 && a->domain == b->domain && a->bus == b->bus &&
         a->device == b->device;
}

/* NVLink between a and b by NVML: *ret_links counts a's active links whose far end is b or, when
 * they meet through NVSwitch, a's active links into the switch fabric (as nvidia-smi's NV#
 * does). Returns 1 for an NVLink path, 0 for none, -1 when NVML cannot say. */
static int nvml_nvlink(struct nvml *n, nvml_device a, nvml_device b, int *ret_links) {
  struct nvml_pci_info pb;
  int status = -1;
  *ret_links = 0;
  if (n->pci_info(b, &pb) != NVML_OK ||
      n->p2p_status(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &status) != NVML_OK) {
    return -1;
  }
  int to_switch = 0;
  for (unsigned l = 0; l < NVML_NVLINK_LINKS_MAX; l++) {
    int active = 0, type = -1;
    struct nvml_pci_info far;
    if (n->link_state(a, l, &active) != NVML_OK || !active) {
      continue; /* NOT_SUPPORTED past the last link, or an inactive one */
    }
    if (n->link_remote_pci(a, l, &far) == NVML_OK && same_pci(&far, &pb)) {
      (*ret_links)++;
    } else if (n->link_remote_type && n->link_remote_type(a, l, &type) == NVML_OK &&
               type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
      to_switch++;
    }
  }
  int nvlink = status == NVML_P2P_STATUS_OK || *ret_links > 0;
  if (nvlink && *ret_links == 0) {
    *ret_links = to_switch;
  }
  return nvlink;
}

/* The NUMA node of a GPU from sysfs (by its PCI bus id), -1 when unknown. */
static int gpu_numa_node(int ordinal) {
  char bus[32];
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  for (char *p = bus; *p; p++) {
    *p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p); /* sysfs names are lower case */
  }
  char path[96];
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", bus);
  FILE *f = fopen(path, "re");
  int node = -1;
  if (f) {
    if (fscanf(f, "%d", &node) != 1) {
      node = -1;
    }
    fclose(f);
  }
  return node;
}

qdp_status runtime_cuda_topology(struct runtime_mesh *m, struct qdp_error *reterr) {
  size_t n = m->count;
  struct runtime_link *links = calloc(n * n, sizeof *links);
  nvml_device *nd = calloc(n, sizeof *nd);
  if (!links || !nd) {
    free(links);
    free(nd);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate the topology of %zu GPUs", n);
  }
  struct nvml nv;
  int have_nvml = nvml_open(&nv) == 0;
  for (size_t i = 0; have_nvml && i < n; i++) {
    have_nvml = nv.by_uuid(m->devs[i]->info.uuid, &nd[i]) == NVML_OK;
  }
  for (size_t i = 0; i < n; i++) {
    struct runtime_device *a = m->devs[i];
    a->info.numa_node = gpu_numa_node(a->info.ordinal);
    for (size_t j = 0; j < n; j++) {
      struct runtime_device *b = m->devs[j];
      struct runtime_link *l = &links[i * n + j];
      l->perf_rank = -1;
      if (i == j) {
        l->kind = RUNTIME_LINK_SELF;
        l->peer = true;
        continue;
      }
      int access = 0, rank = -1;
      if (cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, a->info.ordinal,
                                    b->info.ordinal) != cudaSuccess ||
          cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a->info.ordinal,
                                    b->info.ordinal) != cudaSuccess) {
        (void)cudaGetLastError();
        access = 0;
        rank = -1;
      }
      l->perf_rank = rank;
      l->peer = runtime_cuda_peer_enabled(a, b);
      int nvlink = have_nvml ? nvml_nvlink(&nv, nd[i], nd[j], &l->nvlinks) : -1;
      if (nvlink == 1) {
        l->kind = RUNTIME_LINK_NVLINK;
      } else if (!access) {
        l->kind = RUNTIME_LINK_NONE;
      } else {
        l->kind = nvlink == 0 ? RUNTIME_LINK_PCIE : RUNTIME_LINK_PEER;
      }
    }
  }
  free(nd);
  if (have_nvml) {
    nvml_close(&nv);
  }
  free(m->links);
  m->links = links;
  m->topology_source = have_nvml ? "nvml" : "cuda";
  return QDP_OK;
}
