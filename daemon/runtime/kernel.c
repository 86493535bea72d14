/* kernel.c — the kernel matrix of two states of this rank (runtime.h, "the kernel matrix").
 *
 * The matrix is cut into tiles of rows of a by rows of b, and the amplitudes into blocks of
 * 2^min(n, the tiling's block_log2). For each tile, each block's rows are gathered from
 * whichever shards hold them into the computing device's workspace, always into the same
 * [tile][block] layout, so that each block's product sees the same shape and values however the
 * states are sharded; the products are summed along the pairwise tree over the blocks (a binary
 * counter: one partial per level, the left one always the earlier), then finished into the
 * caller's memory, with its mirror image for a state with itself. Same bits on any sharding
 * follows (docs/design.md, invariants). States whose amplitudes are all real (the encodings'
 * table says which) take products of their real parts: a quarter of the complex work.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_encodings.h"
#include "qdp_size.h"
#include "runtime/mesh.h"
#include "runtime/state.h"

/* The tiles' bounds: the two gathered operands (and their real parts), and the tree's partials
 * with the finished tile and its mirror. Large tiles keep the block products long; the blocks
 * shrink to keep the operands within their bound. */
#define KERNEL_OPERANDS_BYTES (2ull << 30)
#define KERNEL_PARTIALS_BYTES (2ull << 30)

struct kernel_job {
  struct runtime_mesh *m;
  struct runtime_device *d;
  const struct runtime_state *a, *b;
  bool same, overlaps;
  bool real; /* both states' amplitudes are real */
  qdp_dtype dt;
  unsigned es;       /* bytes per amplitude */
  unsigned out_es;   /* bytes per value of the matrix */
  uint64_t block;    /* amplitudes per block */
  uint64_t blocks;   /* 2^n / block, a power of two */
  unsigned levels;   /* log2(blocks) + 1 partials */
  uint64_t tile;     /* rows of a (and of b) per tile */
  /* The workspace: the operands ta and tb (complex; the real parts of real states), the bounce
   * buffer of real parts from other devices, the partials, the finished tile and its mirror. */
  void *ws;
  uint64_t ws_bytes;
  unsigned op_es; /* bytes per value of an operand */
  char *ta, *tb, *bounce, *partials, *finished;
  bool remote;           /* real states with a shard on another device: a bounce buffer */
  uint64_t bounce_bytes; /* 0 without one */
};

/* Real parts of shards on other devices come over through a bounce buffer of at most this size, in
 * runs of rows: its size never changes the tiles, so neither the bits. */
#define KERNEL_BOUNCE_BYTES (64ull << 20)

/* The workspace of tiles of `tile` rows (blocks of k->block amplitudes), and its bounce buffer's
 * share (one operand's complex rows at most). */
static uint64_t workspace_bytes(struct kernel_job *k, uint64_t tile) {
  uint64_t rows = tile * k->block * k->es;
  k->bounce_bytes = !k->remote ? 0 : rows < KERNEL_BOUNCE_BYTES ? rows : KERNEL_BOUNCE_BYTES;
  return 2 * tile * k->block * k->op_es + k->bounce_bytes +
         (k->levels + 2) * tile * tile * k->es;
}

/* The tiles and blocks: a function of the shapes and t alone, never of the memory free (a GPU's
 * block product may round by its shape). Tiles of all the rows up to t.tile_rows; blocks of
 * 2^min(n, t.block_log2) amplitudes, halved until the operands fit their bound; tiles halved
 * until the partials fit theirs. */
static void shape_tiles(struct kernel_job *k, uint64_t rows, uint32_t n,
                        struct runtime_kernel_tiles t) {
  uint64_t ops = 2 * (uint64_t)k->op_es;
  uint64_t most = t.tile_rows ? t.tile_rows : 1;
  k->tile = rows < most ? rows : most;
  for (;;) {
    unsigned bl = n < t.block_log2 ? n : t.block_log2;
    while (bl > 0 && ops * k->tile * ((uint64_t)1 << bl) > KERNEL_OPERANDS_BYTES) {
      bl--;
    }
    k->block = (uint64_t)1 << bl;
    k->blocks = ((uint64_t)1 << n) / k->block;
    k->levels = n - bl + 1;
    if (k->tile == 1 ||
        (k->levels + 2) * k->tile * k->tile * (uint64_t)k->es <= KERNEL_PARTIALS_BYTES) {
      return;
    }
    k->tile = (k->tile + 1) / 2;
  }
}

/* Rows [r0, r0 + nr) and amplitudes [k0, k0 + block) of s into dst ([nr][block] on k->d). */
static qdp_status gather(const struct kernel_job *k, const struct runtime_state *s, uint64_t r0,
                         uint64_t nr, uint64_t k0, char *dst, struct qdp_error *err) {
  return runtime_state_gather_block(s, k->d, r0, nr, k0, k->block, dst, err);
}

/* gather's, for real states: the real parts of the same rows into dst ([nr][block] reals): from
 * a shard on the computing device straight, from one elsewhere copied over in runs of rows
 * through the bounce buffer first. */
static qdp_status gather_real(const struct kernel_job *k, const struct runtime_state *s,
                              uint64_t r0, uint64_t nr, uint64_t k0, char *dst,
                              struct qdp_error *err) {
  struct runtime_device *d = k->d;
  uint64_t pitch = k->block * k->op_es; /* of dst */
  struct runtime_piece pc;
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (!runtime_state_piece(s, i, r0, nr, k0, k->block, &pc)) {
      continue;
    }
    char *at = dst + ((pc.row - r0) * k->block + (pc.amp - k0)) * k->op_es;
    struct runtime_device *from = k->m->devs[s->plan.shards[i].device];
    qdp_status rc = QDP_OK;
    if (from == d) {
      rc = d->ops->real_rows(d, at, pitch, pc.src, pc.pitch, pc.width, pc.rows, k->dt, err);
    }
    uint64_t row = pc.width * k->es, run = k->bounce_bytes / row; /* rows a bounce holds: >= 1 */
    for (uint64_t r = 0; from != d && r < pc.rows && rc == QDP_OK; r += run) {
      uint64_t n = pc.rows - r < run ? pc.rows - r : run;
      rc = d->ops->copy_rows(d, k->bounce, row, from, pc.src + r * pc.pitch, pc.pitch, row, n, err);
      if (rc == QDP_OK) {
        rc = d->ops->real_rows(d, at + r * pitch, pitch, k->bounce, row, pc.width, n, k->dt, err);
      }
    }
    if (rc != QDP_OK) {
      return rc;
    }
  }
  return QDP_OK;
}

/* One tile: rows [r0, r0 + nr) of a by [c0, c0 + nc) of b, summed over every block, finished into
 * out (cols values per row); for a with itself, off the diagonal, its mirror image too. */
static qdp_status tile(const struct kernel_job *k, uint64_t r0, uint64_t nr, uint64_t c0,
                       uint64_t nc, uint64_t cols, char *out, struct qdp_error *err) {
  const struct runtime_device_ops *ops = k->d->ops;
  bool diag = k->same && r0 == c0; /* a with itself: the upper half, from one gathered operand */
  uint64_t part = k->tile * k->tile * k->es;
  unsigned depth = 0;
  qdp_status rc;
  for (uint64_t blk = 0; blk < k->blocks; blk++) {
    uint64_t k0 = blk * k->block;
    qdp_status (*take)(const struct kernel_job *, const struct runtime_state *, uint64_t,
                       uint64_t, uint64_t, char *, struct qdp_error *) =
        k->real ? gather_real : gather;
    QDP_TRY(rc, take(k, k->a, r0, nr, k0, k->ta, err));
    if (!diag) {
      QDP_TRY(rc, take(k, k->same ? k->a : k->b, c0, nc, k0, k->tb, err));
    }
    char *g = k->partials + depth * part;
    QDP_TRY(rc, ops->gram(k->d, k->ta, k->block, nr, diag ? k->ta : k->tb, k->block, nc, k->block,
                          k->dt, diag, k->real, g, err));
    depth++;
    /* The tree: a block of odd index closes a pair at each level its trailing ones count. */
    for (uint64_t t = blk; t & 1; t >>= 1) {
      char *left = k->partials + (depth - 2) * part;
      QDP_TRY(rc, ops->gram_add(k->d, left, left + part, nr * nc, k->dt, k->real, err));
      depth--;
    }
  }
  char *mirror = k->same && !diag ? out + (c0 * cols + r0) * k->out_es : NULL;
  rc = ops->gram_finish(k->d, k->partials, nr, nc, k->dt, k->real, k->overlaps, diag, k->finished,
                        out + (r0 * cols + c0) * k->out_es, mirror, cols * k->out_es, err);
out:
  return rc;
}

/* Whether a shard of s is on a device other than d. */
static bool elsewhere(const struct runtime_state *s, const struct runtime_device *d,
                      const struct runtime_mesh *m) {
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (m->devs[s->plan.shards[i].device] != d) {
      return true;
    }
  }
  return false;
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
                                const struct runtime_state *b, bool overlaps,
                                struct runtime_kernel_tiles tiles, void *out,
                                const char **ret_device, struct qdp_error *reterr) {
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
  const struct qdp_encoding_desc *ea = qdp_encoding_desc(pa->encoding);
  const struct qdp_encoding_desc *eb = qdp_encoding_desc(pb->encoding);
  k.real = ea && ea->real && eb && eb->real;
  k.op_es = k.real ? k.es / 2 : k.es;
  k.remote = k.real && (elsewhere(a, k.d, m) || (b && elsewhere(b, k.d, m)));
  shape_tiles(&k, pa->batch > pb->batch ? pa->batch : pb->batch, pa->qubits, tiles);
  /* A device too full for the tiles' workspace takes smaller tiles (on GPUs their bits may then
   * differ in the last place from a run that had the room); none at all is refused. */
  for (;;) {
    k.ws_bytes = workspace_bytes(&k, k.tile);
    rc = runtime_device_reserve(k.d, k.ws_bytes, reterr);
    if (rc == QDP_OK || k.tile == 1 || rc != QDP_ERR_RESOURCE_EXHAUSTED) {
      break;
    }
    k.tile = (k.tile + 1) / 2;
  }
  if (rc != QDP_OK) {
    qdp_error_prefix(reterr, "the kernel matrix's workspace (tiles of %" PRIu64 " rows of %" PRIu64
                     " amplitudes) on %s", k.tile, k.block, k.d->info.name);
    return rc;
  }
  rc = k.d->ops->alloc(k.d, k.ws_bytes, &k.ws, reterr);
  if (rc != QDP_OK) {
    runtime_device_unreserve(k.d, k.ws_bytes);
    return rc;
  }
  uint64_t operand = k.tile * k.block * k.op_es;
  k.ta = k.ws;
  k.tb = k.ta + operand;
  k.bounce = k.tb + operand;
  k.partials = k.bounce + k.bounce_bytes;
  k.finished = k.partials + k.levels * k.tile * k.tile * k.es;
  for (uint64_t r0 = 0; r0 < pa->batch && rc == QDP_OK; r0 += k.tile) {
    uint64_t nr = pa->batch - r0 < k.tile ? pa->batch - r0 : k.tile;
    for (uint64_t c0 = k.same ? r0 : 0; c0 < pb->batch && rc == QDP_OK; c0 += k.tile) {
      uint64_t nc = pb->batch - c0 < k.tile ? pb->batch - c0 : k.tile;
      rc = tile(&k, r0, nr, c0, nc, pb->batch, out, reterr);
    }
  }
  k.d->ops->free(k.d, k.ws, k.ws_bytes);
  runtime_device_unreserve(k.d, k.ws_bytes);
  if (rc == QDP_OK && ret_device) {
    *ret_device = k.d->info.name;
  }
out:
  return rc;
}
