/* transport_impl.h — what the two families of transport.h implement. transport.c checks the
 * arguments, composes the allocating collectives (bcast_bytes, allgatherv, agree) from these
 * primitives, and calls a family only with valid arguments: roots and peers in range, no self
 * send, non-NULL buffers where bytes > 0. Private to daemon/transport.
 */
#ifndef QDP_TRANSPORT_IMPL_H
#define QDP_TRANSPORT_IMPL_H

#include "transport.h"

struct transport_ops {
  void (*destroy)(struct transport *t);
  qdp_status (*barrier)(struct transport *t, struct qdp_error *reterr);
  qdp_status (*bcast)(struct transport *t, void *buf, size_t bytes, int root,
                      struct qdp_error *reterr);
  qdp_status (*allgather)(struct transport *t, const void *mine, size_t bytes, void *ret,
                          struct qdp_error *reterr);
  /* g->offsets, g->lengths and g->data are in place and agreed; mine is lengths[rank] bytes. */
  qdp_status (*allgatherv)(struct transport *t, const void *mine, struct transport_gathered *g,
                           struct qdp_error *reterr);
  qdp_status (*allreduce_u64)(struct transport *t, const uint64_t *mine, size_t n,
                              enum transport_op op, uint64_t *ret, struct qdp_error *reterr);
  qdp_status (*send)(struct transport *t, const void *buf, size_t bytes, int to, int tag,
                     struct qdp_error *reterr);
  qdp_status (*recv)(struct transport *t, void *buf, size_t bytes, int from, int tag,
                     struct qdp_error *reterr);
  /* Items checked (peers, tags, buffers); timeout_ms 0 = none. */
  qdp_status (*io_within)(struct transport *t, struct transport_io *items, size_t n,
                          uint64_t timeout_ms, int *ret_pinned, struct qdp_error *reterr);
};

struct transport {
  const struct transport_ops *ops;
  enum transport_kind kind;
  int rank, size;
  enum transport_threads threads;
  size_t chunk_bytes;
  char host[256];
  void *impl; /* the family's own state (the MPI communicator) */
};

#endif /* QDP_TRANSPORT_IMPL_H */
