/* plan.c — validation, policy resolution, shard placement and per-device feasibility.
 *
 * Every byte and amplitude count is a uint64; each product is overflow-checked, and ranges are
 * computed by division (never by multiplying an index by a shard size that could overflow), so
 * plans stay exact up to PLAN_MAX_QUBITS. See plan.h for the contract.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "qdp_encodings.h"
#include "qdp_size.h"

__extension__ typedef unsigned __int128 plan_u128;

static const char *const policy_names[] = {
    [PLAN_AUTO] = "auto",     [PLAN_SINGLE] = "single",     [PLAN_EVEN] = "even",
    [PLAN_UNEVEN] = "uneven", [PLAN_CAPACITY] = "capacity", [PLAN_BATCH] = "batch",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *plan_policy_name(enum plan_policy p) {
  return (unsigned)p < COUNT(policy_names) ? policy_names[p] : "unknown";
}

int plan_policy_from_name(const char *name, enum plan_policy *ret) {
  for (unsigned i = 0; name && i < COUNT(policy_names); i++) {
    if (strcmp(name, policy_names[i]) == 0) {
      if (ret) {
        *ret = (enum plan_policy)i;
      }
      return 1;
    }
  }
  return 0;
}

static unsigned long long ull(uint64_t v) {
  return (unsigned long long)v;
}

static int is_pow2(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

static uint32_t log2_floor(uint64_t v) {
  uint32_t g = 0;
  while (v > 1) {
    v >>= 1;
    g++;
  }
  return g;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Whether e's Walsh-Hadamard stages exchange over the global bits (iqp): its shards must pair. */
static int exchanges(qdp_encoding e) {
  const struct qdp_encoding_desc *d = qdp_encoding_desc(e);
  return d && d->exchange == QDP_EXCHANGE_WHT;
}

/* ---- the device set ---------------------------------------------------------------------------
 * The devices a request may use, in the order shards take them: a subset's own order, or the
 * world's devices by (rank, ordinal). */

struct devset {
  size_t *idx; /* world indices */
  size_t n;
};

static int world_before(const struct plan_device *a, const struct plan_device *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->ordinal < b->ordinal;
}

static qdp_status world_order(const struct plan_world *w, struct devset *ret,
                              struct qdp_error *reterr) {
  size_t *idx = malloc(w->count * sizeof *idx);
  if (!idx) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "planning could not allocate %zu B of host memory for the device order",
                         w->count * sizeof *idx);
  }
  /* Insertion sort: stable, allocation-free, and worlds hold at most a few thousand devices. */
  for (size_t i = 0; i < w->count; i++) {
    size_t j = i;
    while (j > 0 && world_before(&w->devices[i], &w->devices[idx[j - 1]])) {
      idx[j] = idx[j - 1];
      j--;
    }
    idx[j] = i;
  }
  for (size_t i = 1; i < w->count; i++) {
    const struct plan_device *a = &w->devices[idx[i - 1]], *b = &w->devices[idx[i]];
    if (a->rank == b->rank && a->ordinal == b->ordinal) {
      qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                    "the planner's world lists rank %d device ordinal %d twice (entries %zu and "
                    "%zu)",
                    a->rank, a->ordinal, idx[i - 1], idx[i]);
      free(idx);
      return QDP_ERR_INTERNAL;
    }
  }
  ret->idx = idx;
  ret->n = w->count;
  return QDP_OK;
}

static qdp_status subset_order(const struct plan_request *req, const struct plan_world *w,
                               struct devset *ret, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  size_t *idx = NULL;
  unsigned char *seen = NULL;
  if (!req->device_subset) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "the device subset has %zu entries but no list", req->device_subset_count);
  }
  seen = calloc(w->count, 1);
  if (!seen) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "planning could not allocate %zu B of host memory for the device subset",
                       w->count);
    goto out;
  }
  /* A list longer than the world must repeat or stray: this walk stops at the first such entry
   * before the list's own size matters. */
  for (size_t i = 0; i < req->device_subset_count; i++) {
    size_t d = req->device_subset[i];
    if (d >= w->count) {
      rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "device subset entry %zu is device index %zu, but the world has devices "
                         "0..%zu",
                         i, d, w->count - 1);
      goto out;
    }
    if (seen[d]) {
      rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "device subset entry %zu repeats device '%.32s' (index %zu)", i,
                         w->devices[d].name, d);
      goto out;
    }
    seen[d] = 1;
  }
  idx = malloc(req->device_subset_count * sizeof *idx);
  if (!idx) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "planning could not allocate %zu B of host memory for the device subset",
                       req->device_subset_count * sizeof *idx);
    goto out;
  }
  memcpy(idx, req->device_subset, req->device_subset_count * sizeof *idx);
  ret->idx = idx;
  ret->n = req->device_subset_count;
  idx = NULL;
out:
  free(seen);
  free(idx);
  return rc;
}

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

/* ---- validation ------------------------------------------------------------------------------ */

/* Qubits within the hard ceiling and the configured one, and a batch of 1..max_batch samples. */
static qdp_status check_qubits_batch(const struct plan_request *req, const struct plan_limits *lim,
                                     struct qdp_error *reterr) {
  /* The configured ceiling is trusted only below the hard one: past 60 qubits a complex64 state's
   * byte count no longer fits 64 bits. */
  uint32_t max_q = PLAN_MAX_QUBITS;
  if (lim && lim->max_qubits != 0 && lim->max_qubits < max_q) {
    max_q = lim->max_qubits;
  }
  if (req->qubits == 0 || req->qubits > max_q) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "qubits",
                         "qubits %u is out of range: expected 1..%u", req->qubits, max_q);
  }
  if (req->batch == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input.rows",
                         "batch 0 is out of range: expected at least 1 sample");
  }
  if (lim && lim->max_batch != 0 && req->batch > lim->max_batch) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input.rows",
                         "batch %llu is out of range: max_batch is %llu samples", ull(req->batch),
                         ull(lim->max_batch));
  }
  return QDP_OK;
}

/* The values a sample carries against what the encoding of req->qubits takes: up to one per
 * amplitude, or exactly its parameters. */
static qdp_status check_values(const struct plan_request *req, const struct qdp_encoding_desc *e,
                               struct qdp_error *reterr) {
  const char *enc = e->name;
  const uint32_t n = req->qubits;
  const uint64_t want = qdp_values_per_sample(req->encoding, n);
  const uint64_t got = req->values_per_sample;
  if (e->layout == QDP_LAYOUT_AMPLITUDES) {
    if (got == 0) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input.cols",
                           "empty input: %s encoding of %u qubits expects 1..%llu values per "
                           "sample, got 0",
                           enc, n, ull(want));
    }
    if (got > want) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input.cols",
                           "length mismatch: %s encoding of %u qubits expects at most %llu values "
                           "per sample, got %llu",
                           enc, n, ull(want), ull(got));
    }
  } else if (got != want) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input.cols",
                         "length mismatch: %s encoding of %u qubits expects %llu values per "
                         "sample, got %llu",
                         enc, n, ull(want), ull(got));
  }
  return QDP_OK;
}

/* An input dtype the encoding takes, and a complex output dtype. */
static qdp_status check_dtypes(const struct plan_request *req, const struct qdp_encoding_desc *e,
                               struct qdp_error *reterr) {
  if (!qdp_encoding_takes(e, req->in_dtype)) {
    const char *name = qdp_dtype_name(req->in_dtype);
    char takes[64];
    qdp_dtype_names(e->dtypes, takes, sizeof takes, " or ");
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input.dtype",
                         "input dtype %s (%d) is not accepted by %s encoding: expected %s",
                         name ? name : "unknown", (int)req->in_dtype, e->name, takes);
  }
  if (req->out_dtype != QDP_DTYPE_COMPLEX64 && req->out_dtype != QDP_DTYPE_COMPLEX128) {
    const char *name = qdp_dtype_name(req->out_dtype);
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "output_dtype",
                         "output dtype %s (%d) is not accepted: expected complex64 or complex128",
                         name ? name : "unknown", (int)req->out_dtype);
  }
  return QDP_OK;
}

/* The state's byte count, batch * 2^n * element size: a uint64 and within max_state_bytes. */
static qdp_status check_size(const struct plan_request *req, const struct plan_limits *lim,
                             struct qdp_error *reterr) {
  const uint32_t n = req->qubits;
  const unsigned esz = qdp_dtype_size(req->out_dtype);
  const uint64_t amps = (uint64_t)1 << n;
  const char *field = req->batch > 1 ? "input.rows" : "qubits";
  uint64_t per_sample, total;
  if (__builtin_mul_overflow(amps, (uint64_t)esz, &per_sample) ||
      __builtin_mul_overflow(per_sample, req->batch, &total)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "size overflow: %llu samples x 2^%u amplitudes x %u B exceeds %llu B, "
                         "the largest size a 64-bit byte count can hold",
                         ull(req->batch), n, esz, ull(UINT64_MAX));
  }
  if (lim && lim->max_state_bytes != 0 && total > lim->max_state_bytes) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "size overflow: %llu samples x 2^%u amplitudes x %u B = %llu B exceeds "
                         "max_state_bytes %llu B",
                         ull(req->batch), n, esz, ull(total), ull(lim->max_state_bytes));
  }
  return QDP_OK;
}

static qdp_status check_request(const struct plan_request *req, const struct plan_limits *lim,
                                struct qdp_error *reterr) {
  const struct qdp_encoding_desc *enc = qdp_encoding_desc(req->encoding);
  if (!enc) {
    char names[128];
    qdp_encoding_names(names, sizeof names, " or ");
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "encoding",
                         "encoding %d is unknown: expected %s", (int)req->encoding, names);
  }
  qdp_status rc;
  QDP_TRY(rc, check_qubits_batch(req, lim, reterr));
  QDP_TRY(rc, check_values(req, enc, reterr));
  QDP_TRY(rc, check_dtypes(req, enc, reterr));
  if ((unsigned)req->policy >= COUNT(policy_names)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                         "placement policy %d is unknown: expected auto, single, even, uneven, "
                         "capacity or batch",
                         (int)req->policy);
  }
  QDP_TRY(rc, check_size(req, lim, reterr));
out:
  return rc;
}

static qdp_status check_world(const struct plan_world *w, struct qdp_error *reterr) {
  if (w->count == 0 || !w->devices) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "there is no device to place the state on: the world has 0 devices");
  }
  if (w->ranks < 1) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                         "the planner's world has %d ranks: expected at least 1", w->ranks);
  }
  for (size_t i = 0; i < w->count; i++) {
    if (w->devices[i].rank < 0 || w->devices[i].rank >= w->ranks) {
      return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "the planner's world device %zu ('%.32s') is on rank %d, outside 0..%d",
                           i, w->devices[i].name, w->devices[i].rank, w->ranks - 1);
    }
  }
  return QDP_OK;
}

/* What the policy asks of the device set, for the policies the request names explicitly. */
static qdp_status check_policy(const struct plan_request *req, size_t d, struct qdp_error *reterr) {
  const enum plan_policy pol = req->policy;
  const char *pname = plan_policy_name(pol);
  const uint64_t amps = (uint64_t)1 << req->qubits;
  if (pol != PLAN_EVEN && pol != PLAN_UNEVEN && pol != PLAN_CAPACITY) {
    return QDP_OK;
  }
  if (req->batch > 1) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                         "placement policy %s shards one state, but the request holds %llu "
                         "samples: use policy batch (whole samples per device), single or auto",
                         pname, ull(req->batch));
  }
  if (pol == PLAN_EVEN && !is_pow2(d)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "placement policy even needs a power-of-two number of devices, got %zu: "
                         "choose 2^g devices or use policy uneven or capacity",
                         d);
  }
  if (d > amps) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "placement policy %s over %zu devices needs at least %zu amplitudes, but "
                         "%u qubits give %llu: use fewer devices or policy single",
                         pname, d, d, req->qubits, ull(amps));
  }
  return QDP_OK;
}

/* Validates everything and returns the device set the request may use. */
static qdp_status validate(const struct plan_request *req, const struct plan_world *world,
                           const struct plan_limits *lim, struct devset *ret_set,
                           struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct devset set = {NULL, 0};
  if (!req || !world) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL, "the planner was given no %s",
                         req ? "world" : "request");
  }
  QDP_TRY(rc, check_request(req, lim, reterr));
  QDP_TRY(rc, check_world(world, reterr));
  /* The world order is built even for a subset: it is where duplicate devices are found. */
  QDP_TRY(rc, world_order(world, &set, reterr));
  if (req->device_subset_count > 0) {
    free(set.idx);
    set.idx = NULL;
    QDP_TRY(rc, subset_order(req, world, &set, reterr));
  }
  QDP_TRY(rc, check_policy(req, set.n, reterr));
  *ret_set = set;
  set.idx = NULL;
out:
  free(set.idx);
  return rc;
}

qdp_status plan_validate(const struct plan_request *req, const struct plan_world *world,
                         const struct plan_limits *lim, struct qdp_error *reterr) {
  struct devset set = {NULL, 0};
  qdp_status rc = validate(req, world, lim, &set, reterr);
  free(set.idx);
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

uint64_t plan_workspace_bytes(const struct plan *p, const struct plan_shard *s) {
  const struct qdp_encoding_desc *e = p && s ? qdp_encoding_desc(p->encoding) : NULL;
  if (!e) {
    return 0;
  }
  if (e->reduction == QDP_REDUCTION_NORM) {
    uint64_t leaves = s->count / PLAN_NORM_LEAF + (s->count % PLAN_NORM_LEAF ? 1 : 0);
    return sat_mul(sat_mul(8, s->rows), sat_add(1, leaves));
  }
  if (e->exchange == QDP_EXCHANGE_WHT && p->global_bits > p->iqp_top_bits) {
    return s->bytes < PLAN_EXCHANGE_CHUNK_BYTES ? s->bytes : PLAN_EXCHANGE_CHUNK_BYTES;
  }
  return 0;
}

static void compute_needs(struct plan *p, const struct plan_world *w) {
  p->feasible = 1;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *s = &p->shards[i];
    const struct plan_device *dev = &w->devices[s->device];
    struct plan_need *n = &p->needs[i];
    n->device = s->device;
    n->rank = s->rank;
    n->ordinal = s->ordinal;
    if (dev->name[0]) {
      snprintf(n->name, sizeof n->name, "%.*s", (int)sizeof dev->name, dev->name);
    } else {
      snprintf(n->name, sizeof n->name, "r%d/device %d", dev->rank, dev->ordinal);
    }
    n->shard_bytes = p->output_external ? 0 : s->bytes;
    n->staging_bytes = p->staging_bytes;
    n->workspace_bytes = plan_workspace_bytes(p, s);
    n->need_bytes = sat_add(sat_add(n->shard_bytes, n->staging_bytes), n->workspace_bytes);
    n->budget_bytes = dev->budget_bytes;
    n->fits = n->need_bytes <= n->budget_bytes;
    if (!n->fits) {
      p->feasible = 0;
    }
  }
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
  compute_needs(p, w);
  if (p->feasible || set->n == 1) {
    goto out;
  }
  const uint64_t cap = set->n < p->amplitudes ? set->n : p->amplitudes;
  if (exchanges(p->encoding)) {
    /* The global-bit exchange needs equal shard pairs: the largest power-of-two set, of the
     * devices with the most room since an even shard must fit the smallest of them. */
    QDP_TRY(rc, pick_largest(w, set, (size_t)1 << log2_floor(cap), &use, reterr));
    QDP_TRY(rc, place_even(p, w, &use, reterr));
    compute_needs(p, w);
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
    compute_needs(p, w);
    if (p->feasible) {
      goto out;
    }
  }
  QDP_TRY(rc, pick_largest(w, set, (size_t)cap, &use, reterr));
  QDP_TRY(rc, place_capacity(p, w, &use, reterr));
  compute_needs(p, w);
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
  QDP_TRY(rc, validate(req, world, lim, &set, reterr));
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
  compute_needs(p, world);
  *ret_plan = p;
  p = NULL;
out:
  plan_destroy(p);
  free(set.idx);
  return rc;
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

/* ---- feasibility message --------------------------------------------------------------------- */

struct text {
  char *buf;
  size_t cap, len;
};

/* Appends only if the whole piece fits within `limit` bytes (NUL excluded); returns 1 if it did. */
static int text_add(struct text *t, size_t limit, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int text_add(struct text *t, size_t limit, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n < 0 || t->len + (size_t)n > limit || t->len + (size_t)n >= t->cap) {
    t->buf[t->len] = '\0';
    return 0;
  }
  t->len += (size_t)n;
  return 1;
}

qdp_status plan_check_feasible(const struct plan *p, struct qdp_error *reterr) {
  if (!p) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL, "no plan to check");
  }
  if (p->feasible) {
    return QDP_OK;
  }
  /* The worst device: the largest shortfall, ties to the earliest. */
  size_t worst = p->nneeds;
  for (size_t i = 0; i < p->nneeds; i++) {
    const struct plan_need *n = &p->needs[i];
    if (!n->fits &&
        (worst == p->nneeds || n->need_bytes - n->budget_bytes >
                                   p->needs[worst].need_bytes - p->needs[worst].budget_bytes)) {
      worst = i;
    }
  }
  if (!reterr) {
    return QDP_ERR_RESOURCE_EXHAUSTED;
  }
  char msg[sizeof reterr->msg];
  char tail[160];
  struct text t = {msg, sizeof msg, 0};
  const char *dt = qdp_dtype_name(p->out_dtype);
  const int c128 = p->out_dtype == QDP_DTYPE_COMPLEX128;
  snprintf(tail, sizeof tail, "; lower 'qubits'%s%s, or add devices",
           p->batch > 1 ? " or the batch size" : "", c128 ? ", use complex64" : "");
  if (p->batch > 1) {
    text_add(&t, sizeof msg - 1,
             "a batch of %llu %u-qubit %s states (%s) does not fit: ", ull(p->batch), p->qubits,
             dt ? dt : "?", QDP_SIZE_STR(p->total_bytes));
  } else {
    text_add(&t, sizeof msg - 1, "%u-qubit %s state (%s) does not fit: ", p->qubits, dt ? dt : "?",
             QDP_SIZE_STR(p->total_bytes));
  }
  /* Room for the list: what the hint and a closing "; ..." leave. */
  const size_t limit = sizeof msg - 1 - strlen(tail) - strlen("; ...");
  int listed = 0;
  for (size_t i = 0; i < p->nneeds; i++) {
    const struct plan_need *n = &p->needs[i];
    if (n->fits) {
      continue;
    }
    char need[QDP_SIZE_TEXT], budget[QDP_SIZE_TEXT];
    qdp_size_text_pair(need, budget, sizeof need, n->need_bytes, n->budget_bytes);
    if (!text_add(&t, limit,
                  "%s%s needs %s (shard %s + staging %s + workspace %s) but its budget is %s",
                  listed ? "; " : "", n->name, need, QDP_SIZE_STR(n->shard_bytes),
                  QDP_SIZE_STR(n->staging_bytes), QDP_SIZE_STR(n->workspace_bytes), budget)) {
      text_add(&t, sizeof msg - 1, "%s...", listed ? "; " : "");
      break;
    }
    listed++;
  }
  text_add(&t, sizeof msg - 1, "%s", tail);
  qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "%s", msg);
  if (worst < p->nneeds) {
    reterr->need_bytes = p->needs[worst].need_bytes;
    reterr->free_bytes = p->needs[worst].budget_bytes;
    reterr->device = p->needs[worst].ordinal;
    reterr->rank = p->needs[worst].rank;
  }
  return QDP_ERR_RESOURCE_EXHAUSTED;
}
