/* internal.h — what the planner's files share (plan.h is the module's contract): overflow-safe
 * arithmetic, the device set a request may use, and the steps plan_compute calls in the other
 * files. Nothing here is for callers outside daemon/plan/.
 */
#ifndef QDP_PLAN_INTERNAL_H
#define QDP_PLAN_INTERNAL_H

#include <stdint.h>

#include "plan.h"
#include "qdp_encodings.h"

static inline unsigned long long ull(uint64_t v) {
  return (unsigned long long)v;
}

static inline int is_pow2(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

static inline uint32_t log2_floor(uint64_t v) {
  uint32_t g = 0;
  while (v > 1) {
    v >>= 1;
    g++;
  }
  return g;
}

static inline uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Whether e's Walsh-Hadamard stages exchange over the global bits (iqp): its shards must pair. */
static inline int exchanges(qdp_encoding e) {
  const struct qdp_encoding_desc *d = qdp_encoding_desc(e);
  return d && d->exchange == QDP_EXCHANGE_WHT;
}

/* The devices a request may use, in the order shards take them: a subset's own order, or the
 * world's devices by (rank, ordinal). */
struct devset {
  size_t *idx; /* world indices */
  size_t n;
};

/* validate.c: checks the request, the world and the policy against each other (every bad field
 * named with its value); on success *ret_set is the device set, in the order shards take it,
 * which the caller frees (free(ret_set->idx)). */
qdp_status plan_validate_set(const struct plan_request *req, const struct plan_world *world,
                             const struct plan_limits *lim, struct devset *ret_set,
                             struct qdp_error *reterr);

/* feasible.c: fills p->needs (each shard's device: shard + staging + workspace against its budget)
 * and p->feasible. */
void plan_count_needs(struct plan *p, const struct plan_world *w);

#endif /* QDP_PLAN_INTERNAL_H */
