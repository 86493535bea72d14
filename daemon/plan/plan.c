/* plan.c — placement: the policies (single, even, uneven, capacity, batch, auto) that cut a
 * validated request's state into shards over its device set, the iqp plans' block edges and
 * exchange check, and plan_compute, which validates (validate.c), places and counts each device's
 * needs (feasible.c).
 *
 * Every byte and amplitude count is a uint64; each product is overflow-checked, and ranges are
 * computed by division (never by multiplying an index by a shard size that could overflow), so
 * plans stay exact up to PLAN_MAX_QUBITS. See plan.h for the contract.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

__extension__ typedef unsigned __int128 plan_u128;

/* The k devices of the set with the largest budgets (ties: earliest), kept in the set's order. */
static qdp_status pick_largest(const struct plan_world *w, const struct devset *set, size_t k,
                               struct devset *ret, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  unsigned char *chosen = calloc(set->n, 1);
  size_t *idx = malloc(k * sizeof *idx);
  if (!chosen || !idx) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "planning could not allocate %zu B of host memory for a device choice",
                       set->n + k * sizeof *idx);
    goto out;
  }
  for (size_t c = 0; c < k; c++) {
    size_t best = set->n;
    for (size_t i = 0; i < set->n; i++) {
      if (!chosen[i] && (best == set->n || w->devices[set->idx[i]].budget_bytes >
                                               w->devices[set->idx[best]].budget_bytes)) {
        best = i;
      }
    }
    chosen[best] = 1;
  }
  size_t m = 0;
  for (size_t i = 0; i < set->n; i++) {
    if (chosen[i]) {
      idx[m++] = set->idx[i];
    }
  }
  ret->idx = idx;
  ret->n = k;
  idx = NULL;
out:
  free(idx);
  free(chosen);
  return rc;
}

/* ---- placement ------------------------------------------------------------------------------- */

/* g when the shards are 2^g equal ranges of the index in order, so that the top g bits of an index
 * pick its shard: every even plan, and an uneven or capacity plan whose ranges come out so (uneven
 * over 2^g devices always does); else 0. */
static void set_global_bits(struct plan *p) {
  p->global_bits = 0;
  if (p->nshards < 2 || !is_pow2(p->nshards)) {
    return;
  }
  const uint32_t g = log2_floor(p->nshards);
  const uint64_t size = p->amplitudes >> g;
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].first != (uint64_t)i * size || p->shards[i].count != size) {
      return;
    }
  }
  p->global_bits = g;
}

static void set_shard(struct plan *p, size_t i, const struct plan_world *w, size_t dev,
                      uint64_t first, uint64_t count, uint64_t row_first, uint64_t rows);

/* Whether `count` amplitudes of shard i's rows and the staging fit its device's budget (an iqp
 * shard of whole blocks has no workspace). */
static int shard_fits(const struct plan *p, const struct plan_world *w, size_t i, uint64_t count) {
  const struct plan_shard *s = &p->shards[i];
  uint64_t bytes = p->output_external ? 0 : count * s->rows * qdp_dtype_size(p->out_dtype);
  return sat_add(bytes, p->staging_bytes) <= w->devices[s->device].budget_bytes;
}

/* An iqp plan that splits a sample into unequal ranges, over devices that transform its top K bits
 * alone: each range edge moves to the nearest multiple of the block 2^(n-K) (to the other one when
 * only that keeps the shard within its budget), keeping every shard at least one block, so that
 * every shard holds whole blocks and no stage crosses shards. Nothing for other plans; more
 * shards than blocks stay as they are (check_exchange refuses them). */
static void snap_iqp_to_blocks(struct plan *p, const struct plan_world *w) {
  uint32_t k = p->iqp_top_bits;
  size_t d = p->nshards;
  if (!exchanges(p->encoding) || k == 0 || d < 2 || p->global_bits > 0 ||
      p->shards[0].count == p->amplitudes || d > ((size_t)1 << k)) {
    return;
  }
  const uint64_t block = p->amplitudes >> k;
  uint64_t first = 0;
  for (size_t i = 0; i < d; i++) {
    uint64_t end = p->shards[i].first + p->shards[i].count;
    uint64_t lo = first + block, hi = p->amplitudes - (uint64_t)(d - 1 - i) * block;
    uint64_t near = (end + block / 2) / block * block;
    uint64_t other = near > end ? near - block : near + block;
    near = near < lo ? lo : near > hi ? hi : near;
    other = other < lo ? lo : other > hi ? hi : other;
    uint64_t snapped = near;
    if (!shard_fits(p, w, i, near - first) && shard_fits(p, w, i, other - first)) {
      snapped = other;
    }
    snapped = i == d - 1 ? p->amplitudes : snapped;
    set_shard(p, i, w, p->shards[i].device, first, snapped - first, p->shards[i].row_first,
              p->shards[i].rows);
    first = snapped;
  }
}

/* iqp's Walsh-Hadamard transform crosses shards by pairwise exchanges over the global bits below
 * the top ones the devices transform alone, which exist only when the shards are 2^g equal
 * ranges; shards of whole blocks of those top bits need none. A plan that splits a sample any
 * other way is refused with the ranges it made (whole samples per device need no exchange). */
static qdp_status check_exchange(const struct plan *p, struct qdp_error *reterr) {
  uint64_t lo = UINT64_MAX, hi = 0;
  const uint64_t block = p->amplitudes >> p->iqp_top_bits;
  int whole_blocks = p->iqp_top_bits > 0;
  for (size_t i = 0; i < p->nshards; i++) {
    lo = p->shards[i].count < lo ? p->shards[i].count : lo;
    hi = p->shards[i].count > hi ? p->shards[i].count : hi;
    whole_blocks =
        whole_blocks && p->shards[i].first % block == 0 && p->shards[i].count % block == 0;
  }
  if (!exchanges(p->encoding) || p->global_bits > 0 || hi == p->amplitudes || whole_blocks) {
    return QDP_OK;
  }
  if (p->iqp_top_bits > 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                         "placement policy %s cuts the state of %llu amplitudes into %zu ranges, "
                         "but %s encoding splits a sample into unequal ranges only on its top %u "
                         "bits: at most %llu shards of whole blocks of %llu amplitudes; use at "
                         "most %llu devices, or policy even",
                         plan_policy_name(p->policy), ull(p->amplitudes), p->nshards,
                         qdp_encoding_name(p->encoding), p->iqp_top_bits,
                         ull(UINT64_C(1) << p->iqp_top_bits), ull(block),
                         ull(UINT64_C(1) << p->iqp_top_bits));
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                       "placement policy %s cuts the state of %llu amplitudes into %zu ranges of "
                       "%llu to %llu, but %s encoding's Walsh-Hadamard stages exchange between "
                       "pairs of equal shards: they need 2^g equal ranges (policy even, or uneven "
                       "over 2^g devices); use policy even or auto",
                       plan_policy_name(p->policy), ull(p->amplitudes), p->nshards, ull(lo),
                       ull(hi), qdp_encoding_name(p->encoding));
}

static qdp_status alloc_shards(struct plan *p, size_t k, struct qdp_error *reterr) {
  free(p->shards);
  free(p->needs);
  p->shards = NULL;
  p->needs = NULL;
  p->nshards = p->nneeds = 0;
  p->global_bits = 0;
  p->shards = calloc(k, sizeof *p->shards);
  p->needs = calloc(k, sizeof *p->needs);
  if (!p->shards || !p->needs) {
    free(p->shards);
    free(p->needs);
    p->shards = NULL;
    p->needs = NULL;
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "planning could not allocate %zu B of host memory for %zu shards",
                         k * (sizeof *p->shards + sizeof *p->needs), k);
  }
  p->nshards = p->nneeds = k;
  return QDP_OK;
}

static void set_shard(struct plan *p, size_t i, const struct plan_world *w, size_t dev,
                      uint64_t first, uint64_t count, uint64_t row_first, uint64_t rows) {
  struct plan_shard *s = &p->shards[i];
  s->device = dev;
  s->rank = w->devices[dev].rank;
  s->ordinal = w->devices[dev].ordinal;
  s->first = first;
  s->count = count;
  s->row_first = row_first;
  s->rows = rows;
  /* count * rows <= batch * 2^n, whose byte size validation proved to fit. */
  s->bytes = count * rows * qdp_dtype_size(p->out_dtype);
}

/* Near-equal split of `total` items into k parts: the first total mod k take one more. */
static uint64_t split_size(uint64_t total, uint64_t k, uint64_t i) {
  return total / k + (i < total % k ? 1 : 0);
}

static qdp_status place_single(struct plan *p, const struct plan_world *w, const struct devset *set,
                               struct qdp_error *reterr) {
  size_t best = 0;
  for (size_t i = 1; i < set->n; i++) {
    if (w->devices[set->idx[i]].budget_bytes > w->devices[set->idx[best]].budget_bytes) {
      best = i;
    }
  }
  qdp_status rc = alloc_shards(p, 1, reterr);
  if (rc == QDP_OK) {
    p->policy = PLAN_SINGLE;
    set_shard(p, 0, w, set->idx[best], 0, p->amplitudes, 0, p->batch);
  }
  return rc;
}

/* The cost of the global-bit stages with order[i] holding shard i: the shards whose indices
 * differ in bit b exchange in stage b, all pairs at once, so a stage costs its worst pair. */
static unsigned stages_cost(const struct plan_world *w, const size_t *order, size_t n) {
  unsigned total = 0;
  for (size_t bit = 1; bit < n; bit <<= 1) {
    unsigned worst = 0;
    for (size_t i = 0; i < n; i++) {
      if (!(i & bit)) {
        unsigned c = w->link_cost[order[i] * w->count + order[i | bit]];
        worst = c > worst ? c : worst;
      }
    }
    total += worst;
  }
  return total;
}

/* Reorders idx (4 to 8 devices) to the cheapest stages, trying every order that keeps the
 * first device first (the stages are symmetric under relabelling the shards by xor, so that loses
 * nothing); the first of equally cheap orders wins, so a uniform topology keeps S's order. */
static void order_for_exchange(const struct plan_world *w, size_t *idx, size_t n) {
  size_t cur[8], best[8];
  memcpy(cur, idx, n * sizeof *cur);
  memcpy(best, cur, n * sizeof *best);
  unsigned best_cost = stages_cost(w, cur, n);
  /* Heap's algorithm over positions 1..n-1, iteratively. */
  size_t c[8] = {0};
  for (size_t i = 1; i < n - 1;) {
    if (c[i] < i) {
      size_t j = i % 2 ? c[i] : 0;
      size_t t = cur[1 + j];
      cur[1 + j] = cur[1 + i];
      cur[1 + i] = t;
      unsigned cost = stages_cost(w, cur, n);
      if (cost < best_cost) {
        best_cost = cost;
        memcpy(best, cur, n * sizeof *best);
      }
      c[i]++;
      i = 1;
    } else {
      c[i] = 0;
      i++;
    }
  }
  memcpy(idx, best, n * sizeof *best);
}

static qdp_status place_even(struct plan *p, const struct plan_world *w, const struct devset *set,
                             struct qdp_error *reterr) {
  qdp_status rc = alloc_shards(p, set->n, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  size_t order[8];
  int ordered = w->link_cost && set->n >= 4 && set->n <= 8;
  if (ordered) {
    memcpy(order, set->idx, set->n * sizeof *order);
    order_for_exchange(w, order, set->n);
  }
  p->policy = PLAN_EVEN;
  p->global_bits = log2_floor(set->n);
  const uint64_t size = p->amplitudes >> p->global_bits;
  for (size_t i = 0; i < set->n; i++) {
    set_shard(p, i, w, ordered ? order[i] : set->idx[i], (uint64_t)i * size, size, 0, p->batch);
  }
  return QDP_OK;
}

static qdp_status place_uneven(struct plan *p, const struct plan_world *w, const struct devset *set,
                               struct qdp_error *reterr) {
  qdp_status rc = alloc_shards(p, set->n, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  p->policy = PLAN_UNEVEN;
  uint64_t first = 0;
  for (size_t i = 0; i < set->n; i++) {
    uint64_t c = split_size(p->amplitudes, set->n, i);
    set_shard(p, i, w, set->idx[i], first, c, 0, p->batch);
    first += c;
  }
  return QDP_OK;
}

static qdp_status place_capacity(struct plan *p, const struct plan_world *w,
                                 const struct devset *set, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  const size_t d = set->n;
  uint64_t *cnt = calloc(d, sizeof *cnt);
  plan_u128 *rem = calloc(d, sizeof *rem);
  unsigned char *bumped = calloc(d, 1);
  if (!cnt || !rem || !bumped) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "planning could not allocate %zu B of host memory for capacity weights",
                       d * (sizeof *cnt + sizeof *rem + 1));
    goto out;
  }
  /* Weights are the bytes a device can give its shard: budget minus staging. When none has any
   * (the plan is infeasible anyway), equal weights keep the shards well defined. */
  plan_u128 wsum = 0;
  for (size_t i = 0; i < d; i++) {
    uint64_t b = w->devices[set->idx[i]].budget_bytes;
    wsum += b > p->staging_bytes ? b - p->staging_bytes : 0;
  }
  const int equal = wsum == 0;
  if (equal) {
    wsum = d;
  }
  /* Exact quotas N * w_i / W in 128 bits (N <= 2^60 and w_i < 2^64), floored; the amplitudes the
   * floors leave (fewer than d) go one each to the largest remainders, ties to the earliest. */
  uint64_t assigned = 0;
  for (size_t i = 0; i < d; i++) {
    uint64_t b = w->devices[set->idx[i]].budget_bytes;
    plan_u128 wi = equal ? 1 : (b > p->staging_bytes ? b - p->staging_bytes : 0);
    plan_u128 num = (plan_u128)p->amplitudes * wi;
    cnt[i] = (uint64_t)(num / wsum);
    rem[i] = num % wsum;
    assigned += cnt[i];
  }
  for (uint64_t left = p->amplitudes - assigned; left > 0; left--) {
    size_t best = d;
    for (size_t i = 0; i < d; i++) {
      if (!bumped[i] && (best == d || rem[i] > rem[best])) {
        best = i;
      }
    }
    bumped[best] = 1;
    cnt[best]++;
  }
  /* No empty shard: a device whose quota rounded to zero takes one amplitude from the largest
   * shard (which holds at least two, since d <= N). */
  for (size_t i = 0; i < d; i++) {
    if (cnt[i] == 0) {
      size_t big = 0;
      for (size_t j = 1; j < d; j++) {
        if (cnt[j] > cnt[big]) {
          big = j;
        }
      }
      cnt[big]--;
      cnt[i] = 1;
    }
  }
  QDP_TRY(rc, alloc_shards(p, d, reterr));
  p->policy = PLAN_CAPACITY;
  uint64_t first = 0;
  for (size_t i = 0; i < d; i++) {
    set_shard(p, i, w, set->idx[i], first, cnt[i], 0, p->batch);
    first += cnt[i];
  }
out:
  free(bumped);
  free(rem);
  free(cnt);
  return rc;
}

static qdp_status place_batch(struct plan *p, const struct plan_world *w, const struct devset *set,
                              struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct devset use = {NULL, 0};
  const size_t k = p->batch < set->n ? (size_t)p->batch : set->n;
  QDP_TRY(rc, pick_largest(w, set, k, &use, reterr));
  QDP_TRY(rc, alloc_shards(p, k, reterr));
  p->policy = PLAN_BATCH;
  uint64_t row = 0;
  for (size_t i = 0; i < k; i++) {
    uint64_t r = split_size(p->batch, k, i);
    set_shard(p, i, w, use.idx[i], 0, p->amplitudes, row, r);
    row += r;
  }
out:
  free(use.idx);
  return rc;
}

/* AUTO: batches go data parallel; a single state goes to one device when it fits, then to the
 * cheapest sharding that fits (even needs no uneven bookkeeping and suits every exchange), and
 * last to capacity weights, which fit whatever fits the set's total usable bytes. */
static qdp_status place_auto(struct plan *p, const struct plan_world *w, const struct devset *set,
                             struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct devset use = {NULL, 0};
  if (p->batch > 1) {
    return place_batch(p, w, set, reterr);
  }
  QDP_TRY(rc, place_single(p, w, set, reterr));
  plan_count_needs(p, w);
  if (p->feasible || set->n == 1) {
    goto out;
  }
  const uint64_t cap = set->n < p->amplitudes ? set->n : p->amplitudes;
  if (exchanges(p->encoding)) {
    /* The global-bit exchange needs equal shard pairs: the largest power-of-two set, of the
     * devices with the most room since an even shard must fit the smallest of them. */
    QDP_TRY(rc, pick_largest(w, set, (size_t)1 << log2_floor(cap), &use, reterr));
    QDP_TRY(rc, place_even(p, w, &use, reterr));
    plan_count_needs(p, w);
    if (p->feasible || p->iqp_top_bits == 0) {
      goto out;
    }
    /* Devices that transform its top K bits alone also take it in unequal whole blocks: capacity
     * weights over the 2^K (at most) with the most room, their edges moved to blocks later. */
    size_t most = (size_t)1 << p->iqp_top_bits;
    free(use.idx);
    use = (struct devset){NULL, 0};
    QDP_TRY(rc, pick_largest(w, set, (size_t)cap < most ? (size_t)cap : most, &use, reterr));
    QDP_TRY(rc, place_capacity(p, w, &use, reterr));
    goto out;
  }
  if (is_pow2(set->n) && set->n <= p->amplitudes) {
    QDP_TRY(rc, place_even(p, w, set, reterr));
    plan_count_needs(p, w);
    if (p->feasible) {
      goto out;
    }
  }
  QDP_TRY(rc, pick_largest(w, set, (size_t)cap, &use, reterr));
  QDP_TRY(rc, place_capacity(p, w, &use, reterr));
  plan_count_needs(p, w);
out:
  free(use.idx);
  return rc;
}

qdp_status plan_compute(const struct plan_request *req, const struct plan_world *world,
                        const struct plan_limits *lim, struct plan **ret_plan,
                        struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct devset set = {NULL, 0};
  struct plan *p = NULL;
  QDP_TRY(rc, plan_validate_set(req, world, lim, &set, reterr));
  p = calloc(1, sizeof *p);
  if (!p) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "planning could not allocate %zu B of host memory for a plan", sizeof *p);
    goto out;
  }
  p->encoding = req->encoding;
  p->qubits = req->qubits;
  p->batch = req->batch;
  p->in_dtype = req->in_dtype;
  p->out_dtype = req->out_dtype;
  p->amplitudes = (uint64_t)1 << req->qubits;
  p->total_bytes = p->amplitudes * qdp_dtype_size(req->out_dtype) * req->batch; /* validated */
  p->ranks = world->ranks;
  p->staging_bytes = req->staging_bytes;
  p->output_external = req->output_external != 0;
  if (exchanges(req->encoding)) {
    p->iqp_top_bits = req->iqp_top_bits < req->qubits ? req->iqp_top_bits : req->qubits;
  }
  switch (req->policy) {
  case PLAN_SINGLE:
    QDP_TRY(rc, place_single(p, world, &set, reterr));
    break;
  case PLAN_EVEN:
    QDP_TRY(rc, place_even(p, world, &set, reterr));
    break;
  case PLAN_UNEVEN:
    QDP_TRY(rc, place_uneven(p, world, &set, reterr));
    break;
  case PLAN_CAPACITY:
    QDP_TRY(rc, place_capacity(p, world, &set, reterr));
    break;
  case PLAN_BATCH:
    /* One sample is one state: whole-sample placement of it is the single-device plan. */
    if (req->batch == 1) {
      QDP_TRY(rc, place_single(p, world, &set, reterr));
    } else {
      QDP_TRY(rc, place_batch(p, world, &set, reterr));
    }
    break;
  case PLAN_AUTO:
  default:
    QDP_TRY(rc, place_auto(p, world, &set, reterr));
    break;
  }
  set_global_bits(p);
  snap_iqp_to_blocks(p, world);
  QDP_TRY(rc, check_exchange(p, reterr));
  plan_count_needs(p, world);
  *ret_plan = p;
  p = NULL;
out:
  plan_destroy(p);
  free(set.idx);
  return rc;
}

bool plan_windows_amplitudes(qdp_encoding e) {
  const struct qdp_encoding_desc *d = qdp_encoding_desc(e);
  return d && d->layout == QDP_LAYOUT_PARAMETERS && d->reduction == QDP_REDUCTION_NONE &&
         d->exchange == QDP_EXCHANGE_NONE;
}

qdp_status plan_window(const struct plan *p, uint64_t rows, uint64_t first, uint64_t count,
                       struct plan **ret, struct qdp_error *err) {
  *ret = NULL;
  bool whole = first == 0 && count == p->amplitudes;
  if (p->nshards != 1 || p->shards[0].first != 0 || p->shards[0].count != p->amplitudes ||
      rows == 0 || rows > p->batch || count == 0 || first > p->amplitudes ||
      count > p->amplitudes - first || (!whole && !plan_windows_amplitudes(p->encoding))) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "no window of %" PRIu64 " rows and amplitudes [%" PRIu64 ", %" PRIu64
                         ") of a %zu-shard plan of %" PRIu64 " x 2^%u %s amplitudes",
                         rows, first, first + count, p->nshards, p->batch, p->qubits,
                         qdp_encoding_name(p->encoding));
  }
  struct plan *w = calloc(1, sizeof *w);
  if (!w || !(w->shards = calloc(1, sizeof *w->shards)) ||
      !(w->needs = calloc(1, sizeof *w->needs))) {
    plan_destroy(w);
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for a plan");
  }
  struct plan_shard *sh = w->shards;
  struct plan_need *need = w->needs;
  *w = *p; /* p's encoding, dtypes, qubits, policy and world, with the window's one shard */
  w->shards = sh;
  w->needs = need;
  w->nshards = w->nneeds = 1;
  *sh = p->shards[0];
  sh->first = first;
  sh->count = count;
  sh->row_first = 0;
  sh->rows = rows;
  sh->bytes = rows * count * qdp_dtype_size(p->out_dtype);
  *need = p->nneeds ? p->needs[0] : (struct plan_need){.device = sh->device};
  need->shard_bytes = 0;
  w->batch = rows;
  w->global_bits = 0;
  w->total_bytes = sh->bytes;
  w->output_external = 1;
  w->feasible = 1;
  *ret = w;
  return QDP_OK;
}

void plan_destroy(struct plan *p) {
  if (!p) {
    return;
  }
  free(p->shards);
  free(p->needs);
  free(p);
}

size_t plan_rank_shards(const struct plan *p, int rank, size_t *ret_idx, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; p && i < p->nshards; i++) {
    if (p->shards[i].rank == rank) {
      if (n < cap && ret_idx) {
        ret_idx[n] = i;
      }
      n++;
    }
  }
  return n;
}
