/* mesh.h — the mesh's insides, shared by the executor and the backends. Internal to runtime/. */
#ifndef QDP_RUNTIME_MESH_H
#define QDP_RUNTIME_MESH_H

#include "runtime/device.h"
#include "runtime/workers.h"

struct runtime_mesh {
  size_t count;
  struct runtime_device **devs;
  const char *backend;
  uint64_t staging_bytes;
  void (*destroy_device)(struct runtime_device *d); /* NULL: the CPU backend's */
  void (*backend_fini)(struct runtime_mesh *m);     /* backend-wide teardown, may be NULL */
  /* Page-locks host memory for every device and undoes it; NULL: nothing to do (host devices
   * read host memory as it is). */
  qdp_status (*register_host)(struct runtime_mesh *m, void *ptr, uint64_t bytes, bool writable,
                              struct qdp_error *reterr);
  void (*unregister_host)(struct runtime_mesh *m, void *ptr);
  /* Hands every device its member of the mesh's group (runtime_mesh_set_device_group); NULL: the
   * backend has no device collectives. */
  void (*set_group)(struct runtime_mesh *m, struct device_comm *c);
  struct runtime_workers *workers; /* one per device beyond the first: every job's shard tasks */
  void *backend_data;
  bool nccl_exchange;              /* the config's: global-bit stages over the group */
  struct device_comm *device_comm; /* the owner's, over every device in mesh order; NULL: host */
  char collectives[192];           /* what reductions use and why (runtime_mesh_collectives) */
  struct runtime_link *links;      /* [count][count]; NULL: all host links (CPU backend) */
  uint8_t *link_costs;             /* [count][count], from the links (runtime_mesh_link_costs) */
  const char *topology_source;     /* "nvml", "cuda"; NULL: "host" */
  /* The world this mesh is a rank of (runtime_mesh_set_world); world_ops NULL: a world of one. */
  int rank;
  const struct runtime_world_ops *world_ops;
  void *world_ctx;
};

/* Reserves bytes of device d's budget (atomic); RESOURCE_EXHAUSTED with the numbers. */
qdp_status runtime_device_reserve(struct runtime_device *d, uint64_t bytes,
                                  struct qdp_error *reterr);
void runtime_device_unreserve(struct runtime_device *d, uint64_t bytes);

/* One device as a device specification or a request names it, up to the next ',' or the end:
 * "cpu:N", "cuda:N" or a bare N (a GPU ordinal in a specification, a mesh index in a request).
 * The one parser of device names: the mesh's specification (cpu:N), the CUDA backend's ordinal
 * lists and runtime_mesh_find_device all read them here. */
enum runtime_token_kind { RUNTIME_TOKEN_INDEX = 0, RUNTIME_TOKEN_CPU = 1, RUNTIME_TOKEN_CUDA = 2 };
struct runtime_device_token {
  enum runtime_token_kind kind; /* from the prefix, set even when the number is malformed */
  unsigned long n;
  const char *end; /* the ',' or NUL after the token */
};
/* 0, or -1 when no number follows the prefix or something other than ',' or the end follows it. */
int runtime_device_token(const char *s, struct runtime_device_token *ret);

/* The CUDA backend (runtime/cuda_*.c where built, else a stub that says it is absent):
 * how many GPUs the driver reports (0 without a driver), and a mesh of the GPUs named in spec
 * ("0,1", "cuda:0,cuda:1"; NULL = all), each with `fraction` of its free memory as its budget
 * unless cfg gives one (the mesh checked the fraction's range). */
int runtime_cuda_device_count(void);
qdp_status runtime_cuda_mesh_create(const struct runtime_mesh_config *cfg, const char *spec,
                                    double fraction, struct runtime_mesh **ret_mesh,
                                    struct qdp_error *reterr);

/* CUDA backend internals: fills m->links, m->topology_source and each device's numa_node
 * (runtime/cuda_topology.c), and whether peer access from a to b was enabled. */
qdp_status runtime_cuda_topology(struct runtime_mesh *m, struct qdp_error *reterr);
bool runtime_cuda_peer_enabled(const struct runtime_device *a, const struct runtime_device *b);

#endif /* QDP_RUNTIME_MESH_H */
