/* measure.c — measurements of a state (runtime.h, "measurements"), on devices of this rank:
 * windows of other ranks' shards come through the world's reads.
 *
 * The amplitudes of each row group (the rows one shard, or a run of amplitude shards, holds) go in
 * windows of 2^min(n, window_log2). A window that one shard holds whole is measured in place on
 * that shard's device; one that shards cut is gathered onto the device of its first piece first.
 * A window's value is its subtree of the one tree over [0, 2^n) (kernels/qdpk.h), whatever
 * memory holds it, and the windows' values are combined on the host along the rest of the tree
 * (a binary counter over the windows, the earlier always on the left). Pauli strings go in groups
 * of one X mask: a group reads each window once, and with an X mask above the window also the
 * window that the mask maps it to.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_size.h"
#include "qdpk.h"
#include "runtime/mesh.h"
#include "runtime/state.h"

/* Row runs are cut so that a run's gathered window and its leaf partials stay within these. */
#define MEASURE_WINDOW_BYTES (1ull << 30)
#define MEASURE_SCRATCH_BYTES (256ull << 20)
/* A row's probabilities of every basis state go to the host in runs of at most this. */
#define MEASURE_ABS2_BYTES (256ull << 20)

/* One device's workspace, made when a window first needs it. */
struct measure_ws {
  void *scratch, *win, *partner;
  uint64_t scratch_bytes, win_bytes, partner_bytes;
};

struct measure_job {
  struct runtime_mesh *m;
  const struct runtime_state *s;
  const struct plan *p;
  unsigned es;
  uint64_t len, nwin;
  unsigned levels;
  uint64_t run;        /* rows per run */
  uint64_t cols;       /* the widest group's columns */
  uint64_t scratch;    /* bytes of each device's scratch: for the widest group, or sampling's */
  int host_log2;       /* sampling: ranges of up to 2^host_log2 amplitudes may go to the host */
  size_t home;         /* mesh index of runtime_state_home's device */
  bool home_set;
  struct measure_ws *ws; /* per mesh device */
};

/* Device memory of `bytes` in *buf (of *have bytes) on device d, reserved and allocated once. */
static qdp_status ws_take(struct runtime_device *d, void **buf, uint64_t *have, uint64_t bytes,
                          struct qdp_error *err) {
  if (*buf) {
    return QDP_OK;
  }
  qdp_status rc = runtime_device_reserve(d, bytes, err);
  if (rc != QDP_OK) {
    qdp_error_prefix(err, "a measurement's workspace on %s", d->info.name);
    return rc;
  }
  rc = d->ops->alloc(d, bytes, buf, err);
  if (rc != QDP_OK) {
    runtime_device_unreserve(d, bytes);
    return rc;
  }
  *have = bytes;
  return QDP_OK;
}

/* A job over s in windows of 2^wl amplitudes, with an empty workspace table; false without host
 * memory for the table. */
static bool job_start(struct measure_job *j, struct runtime_mesh *m, const struct runtime_state *s,
                      unsigned wl) {
  *j = (struct measure_job){.m = m, .s = s, .p = &s->plan,
                            .es = qdp_dtype_size(s->plan.out_dtype)};
  j->len = (uint64_t)1 << wl;
  j->nwin = s->plan.amplitudes / j->len;
  j->levels = s->plan.qubits - wl + 1;
  j->ws = calloc(m->count, sizeof *j->ws);
  /* Windows of other ranks' shards are brought to the first device here holding a shard. */
  for (size_t i = 0; i < s->plan.nshards && !j->home_set; i++) {
    if (s->bufs[i]) {
      j->home = s->plan.shards[i].device;
      j->home_set = true;
    }
  }
  return j->ws != NULL;
}

static void ws_free(struct runtime_mesh *m, struct measure_ws *ws) {
  for (size_t i = 0; ws && i < m->count; i++) {
    struct runtime_device *d = m->devs[i];
    void *bufs[3] = {ws[i].scratch, ws[i].win, ws[i].partner};
    uint64_t bytes[3] = {ws[i].scratch_bytes, ws[i].win_bytes, ws[i].partner_bytes};
    for (int k = 0; k < 3; k++) {
      if (bufs[k]) {
        d->ops->free(d, bufs[k], bytes[k]);
        runtime_device_unreserve(d, bytes[k]);
      }
    }
  }
  free(ws);
}

/* Rows [r0, r0 + nr) and amplitudes [a, a + len) (len at most j->len): held whole by one shard
 * (*ret_ptr, *ret_ld there, *ret_dev its device), else gathered into *buf on the device of the
 * first piece. */
static qdp_status window(struct measure_job *j, uint64_t r0, uint64_t nr, uint64_t a,
                         uint64_t len, size_t want_dev, bool partner, const void **ret_ptr,
                         uint64_t *ret_ld, size_t *ret_dev, struct qdp_error *err) {
  const struct plan *p = j->p;
  size_t first = SIZE_MAX;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    bool rows = sh->row_first <= r0 && r0 + nr <= sh->row_first + sh->rows;
    bool amps = sh->first <= a && a + len <= sh->first + sh->count;
    size_t at = j->s->bufs[i] ? sh->device : j->home; /* where its rows would be brought */
    if (j->s->bufs[i] && rows && amps && (want_dev == SIZE_MAX || sh->device == want_dev)) {
      *ret_ptr = (const char *)j->s->bufs[i] +
                 ((r0 - sh->row_first) * sh->count + (a - sh->first)) * j->es;
      *ret_ld = sh->count;
      *ret_dev = sh->device;
      return QDP_OK;
    }
    bool meets = sh->row_first < r0 + nr && r0 < sh->row_first + sh->rows &&
                 sh->first < a + len && a < sh->first + sh->count;
    if (meets && first == SIZE_MAX) {
      first = at;
    }
  }
  size_t dev = want_dev != SIZE_MAX ? want_dev : first;
  struct runtime_device *d = j->m->devs[dev];
  struct measure_ws *w = &j->ws[dev];
  void **buf = partner ? &w->partner : &w->win;
  uint64_t *have = partner ? &w->partner_bytes : &w->win_bytes;
  qdp_status rc = ws_take(d, buf, have, j->run * j->len * j->es, err);
  if (rc == QDP_OK) {
    rc = runtime_state_gather_block(j->s, d, r0, nr, a, len, *buf, err);
  }
  *ret_ptr = *buf;
  *ret_ld = len;
  *ret_dev = dev;
  return rc;
}

/* One group of columns (qm) over rows [r0, r0 + nr): every window, combined along the tree, into
 * out (rows `cols` apart). */
static qdp_status group(struct measure_job *j, const struct qdpk_measure *qm, uint64_t r0,
                        uint64_t nr, double *out, uint64_t cols, struct qdp_error *err) {
  uint64_t part = nr * qm->cols;
  double *stack = calloc((size_t)(j->levels + 1) * part, sizeof *stack);
  if (!stack) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a measurement's partial sums (%s)",
                         QDP_SIZE_STR((j->levels + 1) * part * sizeof *stack));
  }
  uint64_t xh = qm->kind == QDPK_MEASURE_PAULI ? qm->xmask & ~(j->len - 1) : 0;
  /* With X or Y qubits above the window, windows pair up (w and w ^ xw), and the value of the
   * later one equals the earlier's: substituting b ^ xmask for b turns one sum into the other's
   * conjugate, the signs matching because a Y is both an X and a Z (its i^ny conjugated, (-1)^ny
   * from the Z mask). So only the earlier of each pair is measured, reading both windows: the
   * state is read once. */
  uint64_t xw = xh / j->len;
  double *earlier = xw ? calloc((size_t)j->nwin * part, sizeof *earlier) : NULL;
  unsigned depth = 0;
  qdp_status rc = xw && !earlier ? qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                                                 "no host memory for a measurement's windows")
                                 : QDP_OK;
  for (uint64_t w = 0; w < j->nwin && rc == QDP_OK; w++) {
    double *slot = stack + depth * part;
    if (xw && (w ^ xw) < w) {
      memcpy(slot, earlier + (w ^ xw) * part, part * sizeof *slot);
    } else {
      const void *x = NULL, *px = NULL;
      uint64_t ld = 0, pld = 0;
      size_t dev = 0, pdev = 0;
      rc = window(j, r0, nr, w * j->len, j->len, SIZE_MAX, false, &x, &ld, &dev, err);
      if (rc == QDP_OK && xh) {
        rc = window(j, r0, nr, (w * j->len) ^ xh, j->len, dev, true, &px, &pld, &pdev, err);
      }
      struct runtime_device *d = j->m->devs[dev];
      struct measure_ws *ws = &j->ws[dev];
      if (rc == QDP_OK) {
        rc = ws_take(d, &ws->scratch, &ws->scratch_bytes, j->scratch, err);
      }
      if (rc == QDP_OK) {
        rc = d->ops->measure(d, qm, x, ld, xh ? px : NULL, pld, nr, w * j->len, j->len,
                             ws->scratch, slot, err);
      }
      if (rc == QDP_OK && xw) {
        memcpy(earlier + w * part, slot, part * sizeof *slot);
      }
    }
    depth++;
    /* The tree: a window of odd index closes a pair at each level its trailing ones count. */
    for (uint64_t t = w; rc == QDP_OK && (t & 1); t >>= 1) {
      double *left = stack + (depth - 2) * part, *right = left + part;
      for (uint64_t i = 0; i < part; i++) {
        left[i] += right[i];
      }
      depth--;
    }
  }
  for (uint64_t r = 0; rc == QDP_OK && r < nr; r++) {
    memcpy(out + (r0 + r) * cols, stack + r * qm->cols, qm->cols * sizeof *stack);
  }
  free(earlier);
  free(stack);
  return rc;
}

/* Every basis state's probability, shard by shard straight into out; another rank's shard a
 * piece at a time through the home device's window buffer. */
static qdp_status all_probabilities(struct measure_job *j, double *out, struct qdp_error *err) {
  const struct plan *p = j->p;
  qdp_status rc = QDP_OK;
  for (size_t i = 0; i < p->nshards && rc == QDP_OK; i++) {
    const struct plan_shard *sh = &p->shards[i];
    bool here = j->s->bufs[i] != NULL;
    size_t dev = here ? sh->device : j->home;
    struct runtime_device *d = j->m->devs[dev];
    struct measure_ws *ws = &j->ws[dev];
    uint64_t per = MEASURE_ABS2_BYTES / sizeof(double);
    uint64_t span = sh->count < per ? sh->count : per; /* amplitudes of a row per call */
    uint64_t rows = per / span < sh->rows ? per / span : sh->rows;
    rc = ws_take(d, &ws->scratch, &ws->scratch_bytes, rows * span * sizeof(double), err);
    if (rc == QDP_OK && !here) {
      rc = ws_take(d, &ws->win, &ws->win_bytes, rows * span * j->es, err);
    }
    for (uint64_t r = 0; r < sh->rows && rc == QDP_OK; r += rows) {
      uint64_t nr = sh->rows - r < rows ? sh->rows - r : rows;
      for (uint64_t c = 0; c < sh->count && rc == QDP_OK; c += span) {
        uint64_t nc = sh->count - c < span ? sh->count - c : span;
        const char *x = here ? (const char *)j->s->bufs[i] + (r * sh->count + c) * j->es : ws->win;
        uint64_t ld = here ? sh->count : nc;
        struct runtime_piece pc;
        if (!here && runtime_state_piece(j->s, i, sh->row_first + r, nr, sh->first + c, nc, &pc)) {
          rc = runtime_state_piece_rows(j->s, i, &pc, 0, nr, d, ws->win, nc * j->es, err);
        }
        if (rc == QDP_OK) {
          rc = d->ops->abs2(d, x, ld, nr, nc, p->out_dtype, ws->scratch,
                            out + (sh->row_first + r) * p->amplitudes + sh->first + c,
                            p->amplitudes, err);
        }
      }
    }
  }
  return rc;
}

/* What every measurement needs of s and the request; *ret_dev: runtime_state_home's device,
 * whose backend must make measurements. */
static qdp_status check(const struct runtime_state *s,
                        const struct runtime_measure *req, struct runtime_device **ret_dev,
                        struct qdp_error *err) {
  const struct plan *p = &s->plan;
  struct runtime_device *d0 = *ret_dev = runtime_state_home(s);
  if (!d0->ops->measure) {
    return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "the %s backend of %s makes no measurements", d0->ops->backend,
                         d0->info.name);
  }
  qdp_status rc = runtime_state_check_reachable(s, "state", err);
  if (rc != QDP_OK) {
    return rc;
  }
  if (req->nqubits > QDPK_MEASURE_QUBITS_MAX) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "qubits",
                         "%u qubits measured: at most %u (%u outcomes), or none for every basis "
                         "state",
                         req->nqubits, QDPK_MEASURE_QUBITS_MAX, 1u << QDPK_MEASURE_QUBITS_MAX);
  }
  uint64_t seen = 0;
  for (uint32_t i = 0; i < req->nqubits; i++) {
    uint32_t q = req->qubits[i];
    if (q >= p->qubits || (seen >> q & 1u)) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "qubits",
                           "qubit %u %s: the state has qubits 0 to %u, each measured once", q,
                           q >= p->qubits ? "is not one of the state's" : "is named twice",
                           p->qubits - 1);
    }
    seen |= (uint64_t)1 << q;
  }
  uint64_t all = p->qubits >= 64 ? UINT64_MAX : ((uint64_t)1 << p->qubits) - 1;
  for (uint32_t i = 0; i < req->npaulis; i++) {
    if ((req->paulis[i].xmask | req->paulis[i].zmask) & ~all) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "paulis",
                           "Pauli string %u acts on qubits the %u-qubit state does not have", i,
                           p->qubits);
    }
  }
  return QDP_OK;
}

/* Every row group of the state (each shard's rows, in plan order, once) through group(). */
static qdp_status rows(struct measure_job *j, const struct qdpk_measure *qm, double *out,
                       uint64_t cols, struct qdp_error *err) {
  const struct plan *p = j->p;
  uint64_t next = 0;
  qdp_status rc = QDP_OK;
  for (size_t i = 0; i < p->nshards && rc == QDP_OK; i++) {
    const struct plan_shard *sh = &p->shards[i];
    uint64_t end = sh->row_first + sh->rows;
    for (uint64_t r = sh->row_first > next ? sh->row_first : next; r < end && rc == QDP_OK;
         r += j->run) {
      rc = group(j, qm, r, end - r < j->run ? end - r : j->run, out, cols, err);
    }
    next = end > next ? end : next;
  }
  return rc;
}

/* The strings in groups of one X mask, each group's columns put back in the request's order. */
static qdp_status paulis(struct measure_job *j, const struct runtime_measure *req, double *out,
                         struct qdp_error *err) {
  uint32_t n = req->npaulis;
  uint64_t *zm = calloc(n, sizeof *zm);
  uint32_t *ny = calloc(n, sizeof *ny), *which = calloc(n, sizeof *which);
  bool *taken = calloc(n, sizeof *taken);
  double *vals = calloc(j->p->batch * n, sizeof *vals);
  qdp_status rc = QDP_OK;
  if (!zm || !ny || !which || !taken || !vals) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for a measurement");
  }
  for (uint32_t g = 0; g < n && rc == QDP_OK; g++) {
    if (taken[g]) {
      continue;
    }
    struct qdpk_measure qm = {.kind = QDPK_MEASURE_PAULI, .dt = j->p->out_dtype,
                              .xmask = req->paulis[g].xmask, .zmask = zm, .ny = ny};
    for (uint32_t i = g; i < n; i++) {
      if (!taken[i] && req->paulis[i].xmask == qm.xmask) {
        zm[qm.cols] = req->paulis[i].zmask;
        ny[qm.cols] = req->paulis[i].ny;
        which[qm.cols++] = i;
        taken[i] = true;
      }
    }
    rc = rows(j, &qm, vals, qm.cols, err);
    for (uint64_t r = 0; r < j->p->batch && rc == QDP_OK; r++) {
      for (uint32_t c = 0; c < qm.cols; c++) {
        out[r * n + which[c]] = vals[r * qm.cols + c];
      }
    }
  }
  free(zm);
  free(ny);
  free(which);
  free(taken);
  free(vals);
  return rc;
}

qdp_status runtime_state_measure(struct runtime_mesh *m, const struct runtime_state *s,
                                 const struct runtime_measure *req, double *out,
                                 const char **ret_device, struct qdp_error *reterr) {
  const struct plan *p = &s->plan;
  struct runtime_device *d0 = NULL;
  qdp_status rc = check(s, req, &d0, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  /* Windows of 2^min(n, window_log2) amplitudes, fewer for many columns so that a window's leaf
   * partials stay within MEASURE_SCRATCH_BYTES for one row: a function of the request alone. */
  uint64_t cols = req->npaulis ? req->npaulis : (uint64_t)1 << req->nqubits;
  unsigned wl = p->qubits < req->window_log2 ? p->qubits : req->window_log2;
  while (wl > 10 && ((uint64_t)1 << wl) / QDPK_MEASURE_LEAF * cols * sizeof(double) >
                        MEASURE_SCRATCH_BYTES / 2) {
    wl--;
  }
  struct measure_job j;
  if (!job_start(&j, m, s, wl)) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a measurement");
  }
  /* Rows in runs whose gathered window and leaf partials (for the widest group) stay within
   * their bounds. */
  uint64_t leaves = j.len < QDPK_MEASURE_LEAF ? 1 : j.len / QDPK_MEASURE_LEAF;
  uint64_t by_win = MEASURE_WINDOW_BYTES / (j.len * j.es);
  uint64_t by_scratch = MEASURE_SCRATCH_BYTES / ((leaves + 3) * cols * sizeof(double));
  j.run = by_win < by_scratch ? by_win : by_scratch;
  j.run = j.run < p->batch ? (j.run ? j.run : 1) : p->batch;
  j.cols = cols;
  j.scratch = (leaves + 3) * j.run * j.cols * sizeof(double);
  if (req->npaulis) {
    rc = paulis(&j, req, out, reterr);
  } else if (req->nqubits) {
    struct qdpk_measure qm = {.kind = QDPK_MEASURE_PROBS, .dt = p->out_dtype,
                              .nq = req->nqubits, .qubits = req->qubits, .cols = (uint32_t)cols};
    rc = rows(&j, &qm, out, cols, reterr);
  } else {
    rc = all_probabilities(&j, out, reterr);
  }
  ws_free(m, j.ws);
  if (rc == QDP_OK && ret_device) {
    *ret_device = d0->info.name;
  }
  return rc;
}

/* ---- samples ---- */

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Shot i of row r of `seed`: a uniform double in [0, 1), a function of the three alone. */
static double uniform(uint64_t seed, uint64_t r, uint64_t i) {
  uint64_t z = splitmix64(splitmix64(seed ^ splitmix64(r)) + i);
  return (double)(z >> 11) * 0x1.0p-53;
}

struct shot {
  double t;   /* its target mass, from the start of the range it is in */
  uint64_t i; /* its place in the row's output */
};

static int by_target(const void *a, const void *b) {
  double x = ((const struct shot *)a)->t, y = ((const struct shot *)b)->t;
  return x < y ? -1 : x > y;
}

/* A measurement of a chunk of `chunk` amplitudes into 2^p outcomes keeps its leaves' partial sums
 * within this many doubles. */
#define SAMPLE_SCRATCH_DOUBLES (1ull << 22)

/* The masses of the 2^k equal children of [a, a + len) of row r (len a power of two, a multiple
 * of it), into mass[]: chunks of 2^p children each measured as one window into the outcome
 * probabilities of the qubits that number its children, p as large as the scratch allows. The
 * chunks depend on len and k alone: so do the masses' bits. */
static qdp_status children(struct measure_job *j, uint64_t r, uint64_t a, uint64_t len,
                           unsigned k, double *mass, struct qdp_error *err) {
  unsigned lc = 0; /* log2 of a child's size */
  while (((uint64_t)1 << (lc + k)) < len) {
    lc++;
  }
  unsigned per = k;
  for (;;) {
    uint64_t chunk = (uint64_t)1 << (lc + per);
    uint64_t leaves = chunk < QDPK_MEASURE_LEAF ? 1 : chunk / QDPK_MEASURE_LEAF;
    if (per == 0 || (chunk <= j->len && (leaves + 1) << per <= SAMPLE_SCRATCH_DOUBLES)) {
      break;
    }
    per--;
  }
  uint64_t chunk = (uint64_t)1 << (lc + per);
  uint32_t qubits[QDPK_MEASURE_QUBITS_MAX];
  for (unsigned q = 0; q < per; q++) {
    qubits[q] = lc + q;
  }
  struct qdpk_measure qm = {.kind = QDPK_MEASURE_PROBS, .dt = j->p->out_dtype, .nq = per,
                            .qubits = qubits, .cols = 1u << per};
  qdp_status rc = QDP_OK;
  for (uint64_t w = a; w < a + len && rc == QDP_OK; w += chunk) {
    const void *x = NULL;
    uint64_t ld = 0;
    size_t dev = 0;
    rc = window(j, r, 1, w, chunk, SIZE_MAX, false, &x, &ld, &dev, err);
    struct runtime_device *d = j->m->devs[dev];
    if (rc == QDP_OK) {
      rc = ws_take(d, &j->ws[dev].scratch, &j->ws[dev].scratch_bytes, j->scratch, err);
    }
    if (rc == QDP_OK) {
      rc = d->ops->measure(d, &qm, x, ld, NULL, 0, 1, w, chunk, j->ws[dev].scratch,
                           mass + ((w - a) >> lc), err);
    }
  }
  return rc;
}

/* The pairwise sum of p[0, len) (len a power of two), runs of 16 summed in order at the leaves. */
static double pairwise(const double *p, uint64_t len) {
  if (len <= 16) {
    double t = 0;
    for (uint64_t i = 0; i < len; i++) {
      t += p[i];
    }
    return t;
  }
  return pairwise(p, len / 2) + pairwise(p + len / 2, len / 2);
}

/* A range this small (a 256th of a window: 2^20 amplitudes, 8 MiB of probabilities, for the
 * daemon's windows) that this many shots reach is searched on the host, from its probabilities
 * read once, rather than with a device call for each of its child ranges that shots reach. */
#define SAMPLE_HOST_SHOTS 16
static bool on_host(const struct measure_job *j, uint64_t len, uint64_t n) {
  return n >= SAMPLE_HOST_SHOTS && j->host_log2 >= 0 && len <= ((uint64_t)1 << j->host_log2);
}

/* Shots [0, n) of `sh` (ascending targets, relative to a) fall in [a, a + len) of row r: each
 * child of the range takes those whose targets fall within its mass, in order, and the children
 * with shots are searched the same way down to single amplitudes. hp: NULL, or the host's
 * probabilities of the range that holds this one, from index ha: the masses are then their
 * pairwise sums. The path a range takes depends on its size and shots alone, never on where its
 * amplitudes are: the samples stay the same on any sharding. */
static qdp_status descend(struct measure_job *j, uint64_t r, uint64_t a, uint64_t len,
                          struct shot *sh, uint64_t n, int64_t *out, const double *hp,
                          uint64_t ha, struct qdp_error *err) {
  if (len == 1) {
    for (uint64_t i = 0; i < n; i++) {
      out[sh[i].i] = (int64_t)a;
    }
    return QDP_OK;
  }
  if (!hp && on_host(j, len, n)) {
    const void *x = NULL;
    uint64_t ld = 0;
    size_t dev = 0;
    double *probs = malloc(len * sizeof *probs);
    if (!probs) {
      return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for sampling");
    }
    qdp_status rc = window(j, r, 1, a, len, SIZE_MAX, false, &x, &ld, &dev, err);
    struct runtime_device *d = j->m->devs[dev];
    if (rc == QDP_OK) {
      rc = ws_take(d, &j->ws[dev].scratch, &j->ws[dev].scratch_bytes, j->scratch, err);
    }
    if (rc == QDP_OK) {
      rc = d->ops->abs2(d, x, ld, 1, len, j->p->out_dtype, j->ws[dev].scratch, probs, len, err);
    }
    if (rc == QDP_OK) {
      rc = descend(j, r, a, len, sh, n, out, probs, a, err);
    }
    free(probs);
    return rc;
  }
  unsigned k = 0;
  while (k < QDPK_MEASURE_QUBITS_MAX && ((uint64_t)1 << (k + 1)) <= len) {
    k++;
  }
  uint64_t nc = (uint64_t)1 << k, csize = len >> k;
  /* On the host, children of one amplitude are their probabilities: read where they are. */
  bool direct = hp && csize == 1;
  double *own = direct ? NULL : calloc(nc, sizeof *own);
  const double *mass = direct ? hp + (a - ha) : own;
  if (!mass) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for sampling");
  }
  qdp_status rc = QDP_OK;
  if (hp && !direct) {
    for (uint64_t c = 0; c < nc; c++) {
      own[c] = pairwise(hp + (a - ha) + c * csize, csize);
    }
  } else if (!hp) {
    rc = children(j, r, a, len, k, own, err);
  }
  uint64_t last = 0; /* the last child with any mass: where rounding's leftovers go */
  for (uint64_t c = 0; c < nc; c++) {
    last = mass[c] > 0 ? c : last;
  }
  double prefix = 0;
  uint64_t c = 0, i = 0;
  while (rc == QDP_OK && i < n) {
    while (c < last && sh[i].t >= prefix + mass[c]) {
      prefix += mass[c++];
    }
    uint64_t i1 = i;
    while (i1 < n && (c == last || sh[i1].t < prefix + mass[c])) {
      double t = sh[i1].t - prefix;
      sh[i1].t = t < mass[c] ? t : mass[c] * (1 - 0x1.0p-52); /* inside the child */
      i1++;
    }
    if (i1 > i) {
      rc = descend(j, r, a + c * csize, csize, sh + i, i1 - i, out, hp, ha, err);
    }
    i = i1;
  }
  free(own);
  return rc;
}

qdp_status runtime_state_sample(struct runtime_mesh *m, const struct runtime_state *s,
                                uint64_t shots, uint64_t seed, unsigned window_log2,
                                int64_t *out, const char **ret_device,
                                struct qdp_error *reterr) {
  const struct plan *p = &s->plan;
  struct runtime_measure none = {0, NULL, 0, NULL, window_log2};
  struct runtime_device *d0 = NULL;
  qdp_status rc = check(s, &none, &d0, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  unsigned wl = p->qubits < window_log2 ? p->qubits : window_log2;
  if (p->qubits > wl + QDPK_MEASURE_QUBITS_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "state",
                         "sampling takes states of up to %u qubits; this one has %u",
                         wl + QDPK_MEASURE_QUBITS_MAX, p->qubits);
  }
  struct measure_job j;
  bool table = job_start(&j, m, s, wl);
  j.run = 1;
  j.cols = 1;
  j.host_log2 = (int)window_log2 - 8;
  /* The scratch of the total's windows, or of the children's chunks, whichever is larger. */
  uint64_t total_leaves = j.len < QDPK_MEASURE_LEAF ? 1 : j.len / QDPK_MEASURE_LEAF;
  j.scratch = (SAMPLE_SCRATCH_DOUBLES + 3 * ((uint64_t)1 << QDPK_MEASURE_QUBITS_MAX)) *
              sizeof(double);
  if ((total_leaves + 3) * sizeof(double) > j.scratch) {
    j.scratch = (total_leaves + 3) * sizeof(double);
  }
  if (j.host_log2 >= 0 && ((uint64_t)sizeof(double) << j.host_log2) > j.scratch) {
    j.scratch = (uint64_t)sizeof(double) << j.host_log2; /* abs2's of a range for the host */
  }
  struct shot *sh = calloc(shots, sizeof *sh);
  double *totals = calloc(p->batch, sizeof *totals);
  if (!table || !sh || !totals) {
    free(j.ws);
    free(sh);
    free(totals);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for %" PRIu64 " shots", shots);
  }
  /* Each row's total along the windows' tree (the identity string); then, row by row, the
   * shots' targets sorted, and the search. */
  const struct runtime_pauli one = {0, 0, 0};
  struct qdpk_measure total = {.kind = QDPK_MEASURE_PAULI, .dt = p->out_dtype, .cols = 1,
                               .zmask = &one.zmask, .ny = &one.ny};
  rc = rows(&j, &total, totals, 1, reterr);
  for (uint64_t r = 0; r < p->batch && rc == QDP_OK; r++) {
    for (uint64_t i = 0; i < shots; i++) {
      sh[i] = (struct shot){uniform(seed, r, i) * totals[r], i};
    }
    if (rc == QDP_OK) {
      qsort(sh, shots, sizeof *sh, by_target);
      rc = descend(&j, r, 0, p->amplitudes, sh, shots, out + r * shots, NULL, 0, reterr);
    }
  }
  free(sh);
  free(totals);
  ws_free(m, j.ws);
  if (rc == QDP_OK && ret_device) {
    *ret_device = d0->info.name;
  }
  return rc;
}
