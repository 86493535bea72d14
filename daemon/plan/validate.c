/* validate.c — the planner's checks before any placement: the request (encoding, qubits, batch,
 * values per sample, dtypes, size), the world (devices on existing ranks, none listed twice), the
 * device subset a request names, and what an explicit policy asks of that set. Every refusal names
 * the request field and its value. Also the policies' names.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

qdp_status plan_validate_set(const struct plan_request *req, const struct plan_world *world,
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
  qdp_status rc = plan_validate_set(req, world, lim, &set, reterr);
  free(set.idx);
  return rc;
}
