/* state.h — the insides of a runtime_state, shared by the executor (encode.h) and the views and
 * gather (views.c). Internal to runtime/. */
#ifndef QDP_RUNTIME_STATE_H
#define QDP_RUNTIME_STATE_H

#include "runtime/mesh.h"

struct runtime_state {
  struct runtime_mesh *mesh;
  struct plan plan; /* a private copy: shards and needs arrays owned here */
  void **bufs;      /* per shard of plan.shards; NULL for shards of other ranks */
  bool external;    /* bufs[0] is runtime_encode_into's output: never the mesh's to free */
  uint64_t bytes;
  const char *collective;
  double encode_ms;
  double norm_us; /* amplitude across devices: the norm's exchange and combine (wall time) */
  double exchange_us; /* sharded iqp: the global-bit stages, their agreement across ranks too */
  uint64_t world_job; /* the coordinator's name for the state on the other ranks; 0: none */
};

#endif /* QDP_RUNTIME_STATE_H */
