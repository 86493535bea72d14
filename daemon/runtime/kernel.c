/* kernel.c — the kernel matrix of two states (runtime.h, "the kernel matrix"), on a device of
 * this rank: other ranks' shards come through the world's reads.
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
 *
 * From inputs (runtime_inputs_kernel), no state is ever whole: windows of the inputs' plans are
 * encoded into the workspace as the loop reaches them, by blocks (each block of each tile straight
 * into its operand, where the resident form would gather it) or by rows (each tile of rows whole,
 * the operands taken from it), so the device holds operands or two tiles, not the batches.
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
  /* From inputs instead: the sources; by blocks (each operand encoded) or by rows (the buffers
   * that hold a tile of rows of each, whole). */
  const struct runtime_kernel_input *ia, *ib;
  bool by_blocks;
  bool gathered; /* by rows: each block taken from the tiles into operands (as the resident form
                    gathers it), not read in place */
  char *bufa, *bufb;
  uint64_t amps;   /* 2^n */
  size_t dev;      /* from inputs: the mesh index of the computing device */
  bool same, overlaps;
  bool real; /* both states' amplitudes are real */
  qdp_dtype dt;
  unsigned es;       /* bytes per amplitude */
  unsigned out_es;   /* bytes per value of the matrix */
  uint64_t block;    /* amplitudes per block */
  uint64_t blocks;   /* 2^n / block, a power of two */
  unsigned levels;   /* log2(blocks) + 1 partials */
  uint64_t tile;     /* rows of a (and of b) per tile */
  /* The workspace: the tiles of whole states (by rows), the operands ta and tb (complex; the real
   * parts of real states), the bounce buffer (real parts from other devices or ranks; by blocks,
   * a real state's encoded block), the partials, the finished tile and its mirror. */
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

/* The tiles and blocks: a function of the shapes, t and the bound alone, never of the memory free
 * (a GPU's block product may round by its shape). Tiles of all the rows up to t.tile_rows; blocks
 * of 2^min(n, t.block_log2) amplitudes, halved until the operands (`per` bytes for each row and
 * amplitude of a tile's block) fit `bound`; tiles halved until the partials fit theirs, or the
 * operands of blocks of one amplitude fit. */
static void shape_tiles(struct kernel_job *k, uint64_t rows, uint32_t n,
                        struct runtime_kernel_tiles t, uint64_t per, uint64_t bound) {
  uint64_t most = t.tile_rows ? t.tile_rows : 1;
  k->tile = rows < most ? rows : most;
  for (;;) {
    unsigned bl = n < t.block_log2 ? n : t.block_log2;
    while (bl > 0 && per * k->tile * ((uint64_t)1 << bl) > bound) {
      bl--;
    }
    k->block = (uint64_t)1 << bl;
    k->blocks = ((uint64_t)1 << n) / k->block;
    k->levels = n - bl + 1;
    bool partials = (k->levels + 2) * k->tile * k->tile * (uint64_t)k->es > KERNEL_PARTIALS_BYTES;
    if (k->tile == 1 || (!partials && per * k->tile * k->block <= bound)) {
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
 * a shard on the computing device straight, from one elsewhere (another device or rank) brought
 * over in runs of rows through the bounce buffer first. */
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
    bool here = s->bufs[i] && k->m->devs[s->plan.shards[i].device] == d;
    qdp_status rc = QDP_OK;
    if (here) {
      rc = d->ops->real_rows(d, at, pitch, pc.src, pc.pitch, pc.width, pc.rows, k->dt, err);
    }
    uint64_t row = pc.width * k->es, run = k->bounce_bytes / row; /* rows a bounce holds: >= 1 */
    for (uint64_t r = 0; !here && r < pc.rows && rc == QDP_OK; r += run) {
      uint64_t n = pc.rows - r < run ? pc.rows - r : run;
      rc = runtime_state_piece_rows(s, i, &pc, r, n, d, k->bounce, row, err);
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

/* Block k0 of rows [r0, r0 + nr) of a (side 0) or of b into a block product's operand: *ret and
 * its leading dimension in values. A resident state's rows are gathered into dst; a tile encoded
 * from inputs is read where it is. */
static qdp_status encode_piece(const struct kernel_job *k, int side, uint64_t r0, uint64_t nr,
                               uint64_t first, uint64_t count, char *dst, struct qdp_error *err);

static qdp_status operand(const struct kernel_job *k, int side, uint64_t r0, uint64_t nr,
                          uint64_t k0, char *dst, const char **ret, uint64_t *ret_ld,
                          struct qdp_error *err) {
  if (k->ia && !k->by_blocks) {
    /* From the tile of whole states: in place, or into the operand (a real state's real parts,
     * or the complex values as the resident form gathers them). */
    const char *at = (side ? k->bufb : k->bufa) + k0 * k->es;
    uint64_t pitch = k->amps * k->es;
    *ret = k->gathered ? dst : at;
    *ret_ld = k->gathered ? k->block : k->amps;
    if (!k->gathered) {
      return QDP_OK;
    }
    return k->real ? k->d->ops->real_rows(k->d, dst, k->block * k->op_es, at, pitch, k->block, nr,
                                          k->dt, err)
                   : k->d->ops->copy_rows(k->d, dst, k->block * k->es, k->d, at, pitch,
                                          k->block * k->es, nr, err);
  }
  if (k->ia) {
    /* Encoded in place, or (real states) through the bounce buffer to take the real parts. */
    *ret = dst;
    *ret_ld = k->block;
    qdp_status rc = encode_piece(k, side, r0, nr, k0, k->block, k->real ? k->bounce : dst, err);
    if (rc == QDP_OK && k->real) {
      rc = k->d->ops->real_rows(k->d, dst, k->block * k->op_es, k->bounce, k->block * k->es,
                                k->block, nr, k->dt, err);
    }
    return rc;
  }
  const struct runtime_state *s = side && !k->same ? k->b : k->a;
  *ret = dst;
  *ret_ld = k->block;
  return k->real ? gather_real(k, s, r0, nr, k0, dst, err) : gather(k, s, r0, nr, k0, dst, err);
}

/* One tile: rows [r0, r0 + nr) of a by [c0, c0 + nc) of b, summed over every block, finished into
 * out (cols values per row); for a with itself, off the diagonal, its mirror image too. */
static qdp_status tile(const struct kernel_job *k, uint64_t r0, uint64_t nr, uint64_t c0,
                       uint64_t nc, uint64_t cols, char *out, struct qdp_error *err) {
  const struct runtime_device_ops *ops = k->d->ops;
  bool diag = k->same && r0 == c0; /* a with itself: the upper half, from one operand */
  uint64_t part = k->tile * k->tile * k->es;
  unsigned depth = 0;
  qdp_status rc;
  for (uint64_t blk = 0; blk < k->blocks; blk++) {
    uint64_t k0 = blk * k->block, lda, ldb;
    const char *ta, *tb;
    QDP_TRY(rc, operand(k, 0, r0, nr, k0, k->ta, &ta, &lda, err));
    if (diag) {
      tb = ta;
      ldb = lda;
    } else {
      QDP_TRY(rc, operand(k, 1, c0, nc, k0, k->tb, &tb, &ldb, err));
    }
    char *g = k->partials + depth * part;
    QDP_TRY(rc, ops->gram(k->d, ta, lda, nr, tb, ldb, nc, k->block, k->dt, diag, k->real, g, err));
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

/* Whether a shard of s is on a device other than d (or another rank). */
static bool elsewhere(const struct runtime_state *s, const struct runtime_device *d,
                      const struct runtime_mesh *m) {
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (!s->bufs[i] || m->devs[s->plan.shards[i].device] != d) {
      return true;
    }
  }
  return false;
}

/* The tiles' loop over k's workspace, reserved and allocated here (the tiles already shaped):
 * rows_a of a by rows_b of b into out. Tiles from inputs are encoded as the loop reaches them:
 * a's tile once per row of tiles, b's once per tile. */
static qdp_status run_tiles(struct kernel_job *k, uint64_t rows_a, uint64_t rows_b, void *out,
                            struct qdp_error *err) {
  qdp_status rc = k->d->ops->alloc(k->d, k->ws_bytes, &k->ws, err);
  if (rc != QDP_OK) {
    runtime_device_unreserve(k->d, k->ws_bytes);
    return rc;
  }
  char *at = k->ws;
  if (k->ia && !k->by_blocks) {
    uint64_t buf = k->tile * k->amps * k->es;
    k->bufa = at;
    k->bufb = at + buf;
    at += 2 * buf;
  }
  if (!k->ia || k->by_blocks || k->gathered) {
    uint64_t operand = k->tile * k->block * k->op_es;
    k->ta = at;
    k->tb = at + operand;
    k->bounce = at + 2 * operand;
    at = k->bounce + k->bounce_bytes;
  }
  k->partials = at;
  k->finished = k->partials + k->levels * k->tile * k->tile * k->es;
  for (uint64_t r0 = 0; r0 < rows_a && rc == QDP_OK; r0 += k->tile) {
    uint64_t nr = rows_a - r0 < k->tile ? rows_a - r0 : k->tile;
    if (k->ia && !k->by_blocks) {
      rc = encode_piece(k, 0, r0, nr, 0, k->amps, k->bufa, err);
    }
    for (uint64_t c0 = k->same ? r0 : 0; c0 < rows_b && rc == QDP_OK; c0 += k->tile) {
      uint64_t nc = rows_b - c0 < k->tile ? rows_b - c0 : k->tile;
      if (k->ia && !k->by_blocks && !(k->same && c0 == r0)) {
        rc = encode_piece(k, 1, c0, nc, 0, k->amps, k->bufb, err);
      }
      if (rc == QDP_OK) {
        rc = tile(k, r0, nr, c0, nc, rows_b, out, err);
      }
    }
  }
  k->d->ops->free(k->d, k->ws, k->ws_bytes);
  runtime_device_unreserve(k->d, k->ws_bytes);
  return rc;
}

/* Fills what both forms share from the rows' plans (a's, and b's or a's), computed on d. */
static qdp_status kernel_start(struct kernel_job *k, const struct plan *pa, const struct plan *pb,
                               struct runtime_device *d, struct qdp_error *err) {
  if (pb->qubits != pa->qubits || pb->out_dtype != pa->out_dtype) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "b",
                         "b is %u qubits of %s but a is %u qubits of %s: a kernel matrix pairs "
                         "states of the same qubits and dtype",
                         pb->qubits, qdp_dtype_name(pb->out_dtype), pa->qubits,
                         qdp_dtype_name(pa->out_dtype));
  }
  k->d = d;
  if (!k->d->ops->gram) {
    return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "the %s backend of %s computes no kernel matrix", k->d->ops->backend,
                         k->d->info.name);
  }
  k->dt = pa->out_dtype;
  k->es = qdp_dtype_size(k->dt);
  k->out_es = k->overlaps ? k->es : k->es / 2;
  k->amps = pa->amplitudes;
  return QDP_OK;
}

qdp_status runtime_state_kernel(struct runtime_mesh *m, const struct runtime_state *a,
                                const struct runtime_state *b, bool overlaps,
                                struct runtime_kernel_tiles tiles, void *out,
                                const char **ret_device, struct qdp_error *reterr) {
  const struct plan *pa = &a->plan, *pb = b ? &b->plan : pa;
  struct kernel_job k = {.m = m, .a = a, .b = b, .same = b == NULL, .overlaps = overlaps};
  qdp_status rc;
  QDP_TRY(rc, kernel_start(&k, pa, pb, runtime_state_home(a), reterr));
  QDP_TRY(rc, runtime_state_check_reachable(a, "a", reterr));
  if (b) {
    QDP_TRY(rc, runtime_state_check_reachable(b, "b", reterr));
  }
  const struct qdp_encoding_desc *ea = qdp_encoding_desc(pa->encoding);
  const struct qdp_encoding_desc *eb = qdp_encoding_desc(pb->encoding);
  /* Real amplitudes are the encoding's promise, which a write lease's holder may have broken. */
  k.real = ea && ea->real && eb && eb->real && !a->written && !(b && b->written);
  k.op_es = k.real ? k.es / 2 : k.es;
  k.remote = k.real && (elsewhere(a, k.d, m) || (b && elsewhere(b, k.d, m)));
  shape_tiles(&k, pa->batch > pb->batch ? pa->batch : pb->batch, pa->qubits, tiles,
              2 * (uint64_t)k.op_es, KERNEL_OPERANDS_BYTES);
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
  QDP_TRY(rc, run_tiles(&k, pa->batch, pb->batch, out, reterr));
  if (ret_device) {
    *ret_device = k.d->info.name;
  }
out:
  return rc;
}

/* ---- from inputs ---- */

/* Rows [r0, r0 + nr) and amplitudes [first, first + count) of a's (side 0) or b's states, encoded
 * into dst on the computing device ([nr][count]): a window of its plan, on the rows of its input
 * from r0. */
static qdp_status encode_piece(const struct kernel_job *k, int side, uint64_t r0, uint64_t nr,
                               uint64_t first, uint64_t count, char *dst, struct qdp_error *err) {
  const struct runtime_kernel_input *src = side && !k->same ? k->ib : k->ia;
  const char *which = side && !k->same ? "b" : "a";
  struct runtime_input win = *src->in;
  win.data = (const char *)win.data + r0 * win.cols * qdp_dtype_size(win.dtype);
  win.rows = nr;
  win.file = NULL; /* for other ranks' windows: this one reads here */
  struct plan *w = NULL;
  struct runtime_state *st = NULL;
  qdp_status rc = plan_window(src->plan, nr, first, count, &w, err);
  if (rc == QDP_OK) {
    struct runtime_output o = {.data = dst, .device = k->dev, .bytes = w->total_bytes};
    rc = runtime_encode_into(k->m, w, &win, &o, &st, err);
  }
  runtime_state_destroy(st);
  plan_destroy(w);
  if (rc != QDP_OK) {
    qdp_error_prefix(err, "%s's rows %" PRIu64 " to %" PRIu64, which, r0, r0 + nr - 1);
  }
  return rc;
}

/* The tiles by rows: the most rows (up to the tiling's) whose two tiles of whole states, and the
 * operands when gathered, fit max_bytes; the blocks, and the tiles' shrink for the partials, as
 * the resident form's (shape_tiles), so one tile of every row has its bits. Sets k->ws_bytes;
 * false when not one row fits. */
static bool shape_rows(struct kernel_job *k, uint64_t rows, uint32_t n,
                       struct runtime_kernel_tiles t, uint64_t max_bytes) {
  uint64_t most = t.tile_rows ? t.tile_rows : 1;
  for (uint64_t want = rows < most ? rows : most; want > 0;) {
    shape_tiles(k, want, n, (struct runtime_kernel_tiles){t.block_log2, want},
                2 * (uint64_t)k->op_es, KERNEL_OPERANDS_BYTES);
    uint64_t held = 2 * k->tile * k->amps * k->es +
                    (k->gathered ? 2 * k->tile * k->block * k->op_es : 0);
    if (!max_bytes || held <= max_bytes) {
      k->ws_bytes = held + (k->levels + 2) * k->tile * k->tile * k->es;
      return true;
    }
    /* The rows in proportion to what fits (at least one fewer). */
    uint64_t fit = (uint64_t)((unsigned __int128)k->tile * max_bytes / held);
    want = fit < k->tile ? fit : k->tile - 1;
  }
  k->tile = 0;
  return false;
}

/* The form from inputs' tiles (k's encoding, dtype and sources set) for `rows` rows of n qubits
 * under max_bytes: by blocks or by rows (runtime.h), k->ws_bytes the workspace; k->tile 0 when not
 * one row fits, *ret_need then the least max_bytes that does. */
static void shape_inputs(struct kernel_job *k, uint64_t rows, uint32_t n,
                         struct runtime_kernel_tiles t, uint64_t max_bytes, uint64_t *ret_need) {
  if (k->by_blocks) {
    /* Each block of each tile encoded into its operand (real states: into the bounce buffer,
     * then their real parts into the operand), as the resident form gathers it: with no bound,
     * its very tiles. A bound counts the bounce buffer too. */
    uint64_t per = 2 * (uint64_t)k->op_es + (max_bytes && k->real ? k->es : 0);
    shape_tiles(k, rows, n, t, per, max_bytes ? max_bytes : KERNEL_OPERANDS_BYTES);
    *ret_need = per;
    uint64_t operand = k->tile * k->block * k->op_es;
    k->bounce_bytes = k->real ? k->tile * k->block * k->es : 0;
    k->ws_bytes = 2 * operand + k->bounce_bytes + (k->levels + 2) * k->tile * k->tile * k->es;
    if (max_bytes && per * k->tile * k->block > max_bytes) {
      k->tile = 0;
    }
    return;
  }
  unsigned bl = n < t.block_log2 ? n : t.block_log2;
  *ret_need = 2 * k->amps * k->es + (k->gathered ? 2 * ((uint64_t)1 << bl) * k->op_es : 0);
  shape_rows(k, rows, n, t, max_bytes);
}

qdp_status runtime_inputs_kernel(struct runtime_mesh *m, const struct runtime_kernel_input *a,
                                 const struct runtime_kernel_input *b, bool overlaps,
                                 struct runtime_kernel_tiles tiles, uint64_t max_bytes, void *out,
                                 const char **ret_device, struct qdp_error *reterr) {
  const struct plan *pa = a->plan, *pb = b ? b->plan : pa;
  struct kernel_job k = {.m = m, .ia = a, .ib = b, .same = b == NULL, .overlaps = overlaps};
  qdp_status rc;
  if (pa->nshards != 1 || pb->nshards != 1 || pb->shards[0].device != pa->shards[0].device ||
      pa->shards[0].rank != m->rank || pa->encoding != pb->encoding || a->in->windowed ||
      (b && b->in->windowed)) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                         "a kernel from inputs takes plans of one shard each, on one device of "
                         "this rank, of one encoding");
  }
  k.dev = pa->shards[0].device;
  QDP_TRY(rc, kernel_start(&k, pa, pb, m->devs[k.dev], reterr));
  uint64_t rows = a->in->rows > (b ? b : a)->in->rows ? a->in->rows : (b ? b : a)->in->rows;
  const struct qdp_encoding_desc *e = qdp_encoding_desc(pa->encoding);
  k.by_blocks = plan_windows_amplitudes(pa->encoding);
  k.real = e && e->real;
  k.op_es = k.real ? k.es / 2 : k.es;
  /* By rows, real states always take operands of their real parts; complex ones, with no bound,
   * the resident form's gathered operands too (its very products), under one the tiles in
   * place. */
  k.gathered = !k.by_blocks && (k.real || !max_bytes);
  /* A device too full for the workspace takes smaller tiles, as the resident form does. */
  uint64_t need = 0; /* the least max_bytes that holds a tile */
  for (;;) {
    shape_inputs(&k, rows, pa->qubits, tiles, max_bytes, &need);
    if (k.tile == 0) {
      rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "max_bytes",
                         "max_bytes %" PRIu64 " holds no tile of %u-qubit states: the least is %s",
                         max_bytes, pa->qubits, QDP_SIZE_STR(need));
      if (reterr) {
        reterr->need_bytes = need;
        reterr->free_bytes = max_bytes;
      }
      return rc;
    }
    rc = runtime_device_reserve(k.d, k.ws_bytes, reterr);
    if (rc == QDP_OK || k.tile == 1 || rc != QDP_ERR_RESOURCE_EXHAUSTED) {
      break;
    }
    tiles.tile_rows = (k.tile + 1) / 2;
  }
  if (rc != QDP_OK) {
    qdp_error_prefix(reterr, "the kernel matrix's tiles (%" PRIu64 " rows of %u qubits) on %s",
                     k.tile, pa->qubits, k.d->info.name);
    return rc;
  }
  QDP_TRY(rc, run_tiles(&k, a->in->rows, (b ? b : a)->in->rows, out, reterr));
  if (ret_device) {
    *ret_device = k.d->info.name;
  }
out:
  return rc;
}
