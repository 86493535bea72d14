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
  bool written;       /* runtime_state_mark_written */
};

/* The part of shard i of s inside rows [r0, r0 + nr) and amplitudes [a, a + len): false when
 * they do not meet. */
struct runtime_piece {
  uint64_t row, rows;  /* rows [row, row + rows) */
  uint64_t amp, width; /* amplitudes [amp, amp + width) of each */
  const char *src;     /* its first amplitude in the shard's buffer */
  uint64_t pitch;      /* bytes from one of its rows to the next there */
};
static inline bool runtime_state_piece(const struct runtime_state *s, size_t i, uint64_t r0,
                                       uint64_t nr, uint64_t a, uint64_t len,
                                       struct runtime_piece *ret) {
  const struct plan_shard *sh = &s->plan.shards[i];
  uint64_t lo = r0 > sh->row_first ? r0 : sh->row_first;
  uint64_t hi = r0 + nr < sh->row_first + sh->rows ? r0 + nr : sh->row_first + sh->rows;
  uint64_t alo = a > sh->first ? a : sh->first;
  uint64_t ahi = a + len < sh->first + sh->count ? a + len : sh->first + sh->count;
  if (lo >= hi || alo >= ahi) {
    return false;
  }
  unsigned es = qdp_dtype_size(s->plan.out_dtype);
  *ret = (struct runtime_piece){lo, hi - lo, alo, ahi - alo, NULL, sh->count * es};
  /* NULL for another rank's shard: its rows are read through the world (piece_rows). */
  ret->src = s->bufs[i] ? (const char *)s->bufs[i] +
                              ((lo - sh->row_first) * sh->count + (alo - sh->first)) * es
                        : NULL;
  return true;
}

/* Rows [k0, k0 + n) of piece pc of shard i of s into dst on device d (rows dst_pitch apart):
 * device to device from a shard of this rank, from another rank's through the world's reads
 * and host memory (views.c). */
qdp_status runtime_state_piece_rows(const struct runtime_state *s, size_t i,
                                    const struct runtime_piece *pc, uint64_t k0, uint64_t n,
                                    struct runtime_device *d, void *dst, uint64_t dst_pitch,
                                    struct qdp_error *reterr);
/* INTERNAL (field `which`) unless every shard of s is this rank's or readable from its rank
 * (the coordinator's state of a world job). */
qdp_status runtime_state_check_reachable(const struct runtime_state *s, const char *which,
                                         struct qdp_error *reterr);
/* The device of s's first shard on this rank; the mesh's first device when it has none here. */
struct runtime_device *runtime_state_home(const struct runtime_state *s);

/* Rows [r0, r0 + nr) and amplitudes [a, a + len) of s, from whichever shards hold them (another
 * rank's too), into dst on device d ([nr][len] of the state's dtype) (views.c). */
qdp_status runtime_state_gather_block(const struct runtime_state *s, struct runtime_device *d,
                                      uint64_t r0, uint64_t nr, uint64_t a, uint64_t len,
                                      void *dst, struct qdp_error *reterr);

#endif /* QDP_RUNTIME_STATE_H */
