/* kernel.c — the kernel matrix of two states of this rank (runtime.h, "the kernel matrix").
 *
 * The matrix is cut into tiles of rows of a by rows of b, and the amplitudes into blocks of
 * 2^min(n, block_log2). For each tile, each block's rows are gathered from
 * whichever shards hold them into the computing device's workspace, always into the same
 * [tile][block] layout, so that each block's product sees the same shape and values however the
 * states are sharded; the products are summed along the pairwise tree over the blocks (a binary
 * counter: one partial per level, the left one always the earlier), then finished into the
 * caller's memory. Same bits on any sharding follows (docs/design.md, invariants).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_size.h"
#include "runtime/mesh.h"
#include "runtime/state.h"

/* The tiles' bounds: the two gathered operands, and the tree's partials with the finished tile.
 * Large tiles keep the block products long. */
#define KERNEL_OPERANDS_BYTES (2ull << 30)
#define KERNEL_PARTIALS_BYTES (1ull << 30)

struct kernel_job {
  struct runtime_mesh *m;
  struct runtime_device *d;
  const struct runtime_state *a, *b;
  bool same, overlaps;
  qdp_dtype dt;
  unsigned es;       /* bytes per amplitude */
  unsigned out_es;   /* bytes per value of the matrix */
  uint64_t block;    /* amplitudes per block */
  uint64_t blocks;   /* 2^n / block, a power of two */
  unsigned levels;   /* log2(blocks) + 1 partials */
  uint64_t tile;     /* rows of a (and of b) per tile */
  void *ws;          /* the workspace: ta, tb, the partials, then the finished tile */
  uint64_t ws_bytes;
  char *ta, *tb, *partials, *finished;
};

static unsigned log2_of(uint64_t x) {
  unsigned k = 0;
  while ((x >> k) > 1) {
    k++;
  }
  return k;
}

/* Whether tiles of `tile` rows stay within the bounds. */
static bool tile_fits(const struct kernel_job *k, uint64_t tile) {
  unsigned __int128 ops = (unsigned __int128)2 * tile * k->block * k->es;
  unsigned __int128 parts = (unsigned __int128)(k->levels + 1) * tile * tile * k->es;
  return ops <= KERNEL_OPERANDS_BYTES && parts <= KERNEL_PARTIALS_BYTES;
}

/* The rows of a tile: a function of the shapes alone, never of the memory free (a GPU's block
 * product may round by its shape): all the rows when they fit the bounds, else the largest power
 * of two that does, at least one. */
static uint64_t tile_rows(const struct kernel_job *k, uint64_t rows) {
  if (tile_fits(k, rows)) {
    return rows;
  }
  uint64_t t = 1;
  while (t * 2 < rows && tile_fits(k, t * 2)) {
    t *= 2;
  }
  return t;
}

/* Rows [r0, r0 + nr) and amplitudes [k0, k0 + block) of s into dst ([nr][block] on k->d). */
static qdp_status gather(const struct kernel_job *k, const struct runtime_state *s, uint64_t r0,
                         uint64_t nr, uint64_t k0, char *dst, struct qdp_error *err) {
  const struct plan *p = &s->plan;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    uint64_t lo = r0 > sh->row_first ? r0 : sh->row_first;
    uint64_t hi = r0 + nr < sh->row_first + sh->rows ? r0 + nr : sh->row_first + sh->rows;
    uint64_t alo = k0 > sh->first ? k0 : sh->first;
    uint64_t ahi = k0 + k->block < sh->first + sh->count ? k0 + k->block : sh->first + sh->count;
    if (lo >= hi || alo >= ahi) {
      continue;
    }
    const char *src = (const char *)s->bufs[i] + ((lo - sh->row_first) * sh->count +
                                                  (alo - sh->first)) * k->es;
    char *at = dst + ((lo - r0) * k->block + (alo - k0)) * k->es;
    qdp_status rc = k->d->ops->copy_rows(k->d, at, k->block * k->es, k->m->devs[sh->device], src,
                                         sh->count * k->es, (ahi - alo) * k->es, hi - lo, err);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  return QDP_OK;
}

/* One tile: rows [r0, r0 + nr) of a by [c0, c0 + nc) of b, summed over every block, finished into
 * out (cols values per row). */
static qdp_status tile(const struct kernel_job *k, uint64_t r0, uint64_t nr, uint64_t c0,
                       uint64_t nc, uint64_t cols, char *out, struct qdp_error *err) {
  const struct runtime_device_ops *ops = k->d->ops;
  bool diag = k->same && r0 == c0; /* a with itself: the upper half, from one gathered operand */
  uint64_t part = k->tile * k->tile * k->es;
  unsigned depth = 0;
  qdp_status rc;
  for (uint64_t blk = 0; blk < k->blocks; blk++) {
    uint64_t k0 = blk * k->block;
    QDP_TRY(rc, gather(k, k->a, r0, nr, k0, k->ta, err));
    if (!diag) {
      QDP_TRY(rc, gather(k, k->same ? k->a : k->b, c0, nc, k0, k->tb, err));
    }
    char *g = k->partials + depth * part;
    QDP_TRY(rc, ops->gram(k->d, k->ta, k->block, nr, diag ? k->ta : k->tb, k->block, nc, k->block,
                          k->dt, diag, g, err));
    depth++;
    /* The tree: a block of odd index closes a pair at each level its trailing ones count. */
    for (uint64_t t = blk; t & 1; t >>= 1) {
      char *left = k->partials + (depth - 2) * part;
      QDP_TRY(rc, ops->gram_add(k->d, left, left + part, nr * nc, k->dt, err));
      depth--;
    }
  }
  rc = ops->gram_finish(k->d, k->partials, nr, nc, k->dt, k->overlaps, diag, k->finished,
                        out + (r0 * cols + c0) * k->out_es, cols * k->out_es, err);
out:
  return rc;
}

/* a with itself: the lower half from the upper (conjugated for overlaps). */
static void mirror(const struct kernel_job *k, uint64_t n, char *out) {
  for (uint64_t i = 1; i < n; i++) {
    for (uint64_t j = 0; j < i; j++) {
      char *to = out + (i * n + j) * k->out_es;
      const char *from = out + (j * n + i) * k->out_es;
      memcpy(to, from, k->out_es);
      if (k->overlaps && k->dt == QDP_DTYPE_COMPLEX64) {
        ((float *)to)[1] = -((float *)to)[1];
      } else if (k->overlaps) {
        ((double *)to)[1] = -((double *)to)[1];
      }
    }
  }
}

static qdp_status check_local(const struct runtime_state *s, const char *which,
                              struct qdp_error *err) {
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (!s->bufs[i]) {
      return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, which,
                           "shard %zu of state %s is on rank %d: a kernel matrix is computed from "
                           "states of one rank",
                           i, which, s->plan.shards[i].rank);
    }
  }
  return QDP_OK;
}

qdp_status runtime_state_kernel(struct runtime_mesh *m, const struct runtime_state *a,
                                const struct runtime_state *b, bool overlaps, unsigned block_log2,
                                void *out, const char **ret_device, struct qdp_error *reterr) {
  const struct plan *pa = &a->plan, *pb = b ? &b->plan : pa;
  qdp_status rc;
  if (pb->qubits != pa->qubits || pb->out_dtype != pa->out_dtype) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "b",
                         "b is %u qubits of %s but a is %u qubits of %s: a kernel matrix pairs "
                         "states of the same qubits and dtype",
                         pb->qubits, qdp_dtype_name(pb->out_dtype), pa->qubits,
                         qdp_dtype_name(pa->out_dtype));
  }
  QDP_TRY(rc, check_local(a, "a", reterr));
  if (b) {
    QDP_TRY(rc, check_local(b, "b", reterr));
  }
  struct kernel_job k = {.m = m, .a = a, .b = b, .same = b == NULL, .overlaps = overlaps};
  k.d = m->devs[pa->shards[0].device];
  if (!k.d->ops->gram) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "the %s backend of %s computes no kernel matrix", k.d->ops->backend,
                         k.d->info.name);
  }
  k.dt = pa->out_dtype;
  k.es = qdp_dtype_size(k.dt);
  k.out_es = overlaps ? k.es : k.es / 2;
  unsigned bl = pa->qubits < block_log2 ? pa->qubits : block_log2;
  k.block = (uint64_t)1 << bl;
  k.blocks = pa->amplitudes / k.block;
  k.levels = log2_of(k.blocks) + 1;
  k.tile = tile_rows(&k, pa->batch > pb->batch ? pa->batch : pb->batch);
  /* Within the bounds: the operands, the partials and the finished tile. */
  k.ws_bytes = (2 * k.tile * k.block + (k.levels + 1) * k.tile * k.tile) * k.es;
  rc = runtime_device_reserve(k.d, k.ws_bytes, reterr);
  if (rc != QDP_OK) {
    qdp_error_prefix(reterr, "the kernel matrix's workspace (tiles of %" PRIu64 " rows of 2^%u "
                     "amplitudes) on %s", k.tile, bl, k.d->info.name);
    return rc;
  }
  rc = k.d->ops->alloc(k.d, k.ws_bytes, &k.ws, reterr);
  if (rc != QDP_OK) {
    runtime_device_unreserve(k.d, k.ws_bytes);
    return rc;
  }
  k.ta = k.ws;
  k.tb = k.ta + k.tile * k.block * k.es;
  k.partials = k.tb + k.tile * k.block * k.es;
  k.finished = k.partials + k.levels * k.tile * k.tile * k.es;
  for (uint64_t r0 = 0; r0 < pa->batch && rc == QDP_OK; r0 += k.tile) {
    uint64_t nr = pa->batch - r0 < k.tile ? pa->batch - r0 : k.tile;
    for (uint64_t c0 = k.same ? r0 : 0; c0 < pb->batch && rc == QDP_OK; c0 += k.tile) {
      uint64_t nc = pb->batch - c0 < k.tile ? pb->batch - c0 : k.tile;
      rc = tile(&k, r0, nr, c0, nc, pb->batch, out, reterr);
    }
  }
  if (rc == QDP_OK && k.same) {
    mirror(&k, pa->batch, out);
  }
  k.d->ops->free(k.d, k.ws, k.ws_bytes);
  runtime_device_unreserve(k.d, k.ws_bytes);
  if (rc == QDP_OK && ret_device) {
    *ret_device = k.d->info.name;
  }
out:
  return rc;
}
