/* plan_fixture.c — the helpers of plan_fixture.h. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "plan_fixture.h"

void world1(struct world_buf *wb, const char *kind, size_t n, const uint64_t *budgets) {
  memset(wb, 0, sizeof *wb);
  for (size_t i = 0; i < n; i++) {
    wb->dev[i].rank = 0;
    wb->dev[i].ordinal = (int)i;
    snprintf(wb->dev[i].name, sizeof wb->dev[i].name, "%s:%zu", kind, i);
    wb->dev[i].budget_bytes = budgets[i];
  }
  wb->w.devices = wb->dev;
  wb->w.count = n;
  wb->w.ranks = 1;
}

void world_same(struct world_buf *wb, size_t n, uint64_t budget) {
  uint64_t b[64] = {0};
  for (size_t i = 0; i < n; i++) {
    b[i] = budget;
  }
  world1(wb, "cuda", n, b);
}

uint64_t params_for(qdp_encoding e, uint32_t n) {
  switch (e) {
  case QDP_ENCODING_AMPLITUDE:
    return 1ull << n;
  case QDP_ENCODING_IQP:
    return n + (uint64_t)n * (n - 1) / 2;
  case QDP_ENCODING_BASIS:
    return 1;
  default:
    return n;
  }
}

struct plan_request req_for(qdp_encoding e, uint32_t qubits, enum plan_policy pol) {
  struct plan_request r;
  memset(&r, 0, sizeof r);
  r.encoding = e;
  r.qubits = qubits;
  r.batch = 1;
  r.values_per_sample = params_for(e, qubits);
  r.in_dtype = QDP_DTYPE_FLOAT64;
  r.out_dtype = QDP_DTYPE_COMPLEX128;
  r.policy = pol;
  return r;
}

void assert_tiles(const struct plan *p, const struct plan_world *w) {
  const uint64_t n_amp = 1ull << p->qubits;
  const unsigned esz = p->out_dtype == QDP_DTYPE_COMPLEX64 ? 8 : 16;
  ck_assert_uint_eq(p->amplitudes, n_amp);
  ck_assert_uint_ge(p->nshards, 1);
  ck_assert_uint_eq(p->nneeds, p->nshards);
  ck_assert_int_ne(p->policy, PLAN_AUTO);
  u128 area = 0, bytes = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *s = &p->shards[i];
    ck_assert_uint_ge(s->count, 1);
    ck_assert_uint_ge(s->rows, 1);
    ck_assert_uint_lt(s->first, n_amp);
    ck_assert_uint_le(s->count, n_amp - s->first);
    ck_assert_uint_lt(s->row_first, p->batch);
    ck_assert_uint_le(s->rows, p->batch - s->row_first);
    ck_assert((u128)s->bytes == (u128)s->count * s->rows * esz);
    ck_assert_uint_lt(s->device, w->count);
    ck_assert_int_eq(s->rank, w->devices[s->device].rank);
    ck_assert_int_eq(s->ordinal, w->devices[s->device].ordinal);
    ck_assert_uint_eq(p->needs[i].device, s->device);
    ck_assert_uint_eq(p->needs[i].shard_bytes, p->output_external ? 0 : s->bytes);
    ck_assert_uint_eq(p->needs[i].budget_bytes, w->devices[s->device].budget_bytes);
    area += (u128)s->count * s->rows;
    bytes += s->bytes;
    if (i > 0) {
      const struct plan_shard *q = &p->shards[i - 1];
      ck_assert(q->row_first < s->row_first ||
                (q->row_first == s->row_first && q->first < s->first));
    }
    for (size_t j = 0; j < i; j++) {
      const struct plan_shard *o = &p->shards[j];
      int rows_meet =
          s->row_first < o->row_first + o->rows && o->row_first < s->row_first + s->rows;
      int amps_meet = s->first < o->first + o->count && o->first < s->first + s->count;
      ck_assert_msg(!(rows_meet && amps_meet), "shards %zu and %zu overlap", j, i);
      ck_assert_uint_ne(o->device, s->device);
    }
  }
  ck_assert((u128)p->batch * n_amp == area);
  ck_assert(bytes == (u128)p->total_bytes);
  ck_assert((u128)p->total_bytes == (u128)p->batch * n_amp * esz);
}

struct plan *compute_ok(const struct plan_request *r, const struct plan_world *w) {
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_status rc = plan_compute(r, w, NULL, &p, &e);
  CK_OK_AT(rc, e, "plan_compute");
  ck_assert_ptr_nonnull(p);
  assert_tiles(p, w);
  return p;
}
