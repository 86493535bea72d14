/* Unit tests of the placement planner (daemon/plan): validation, each policy's placement, AUTO's
 * choices, per-device feasibility and its message, multi-rank worlds, and the tiling invariant over
 * many random requests. Expected values are computed by hand or by an independent formula here. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "plan.h"

#define GIB (1ull << 30)
#define TIB (1ull << 40)

__extension__ typedef unsigned __int128 u128;

struct world_buf {
  struct plan_device dev[64];
  struct plan_world w;
};

/* A world of one rank with n devices named "<kind>:i", with the given budgets. */
static void world1(struct world_buf *wb, const char *kind, size_t n, const uint64_t *budgets) {
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

static void world_same(struct world_buf *wb, size_t n, uint64_t budget) {
  uint64_t b[64] = {0};
  for (size_t i = 0; i < n; i++) {
    b[i] = budget;
  }
  world1(wb, "cuda", n, b);
}

static uint64_t params_for(qdp_encoding e, uint32_t n) {
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

static struct plan_request req_for(qdp_encoding e, uint32_t qubits, enum plan_policy pol) {
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

/* The tiling invariant, checked from the shards alone: every shard lies inside [0, B) x [0, N),
 * is non-empty, no two overlap, their areas sum to B * N (so together they cover it exactly), the
 * order is (row_first, first), bytes are count * rows * element size and sum to total_bytes, each
 * device holds at most one shard, and needs mirror the shards. */
static void assert_tiles(const struct plan *p, const struct plan_world *w) {
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

static struct plan *compute_ok(const struct plan_request *r, const struct plan_world *w) {
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_status rc = plan_compute(r, w, NULL, &p, &e);
  CK_OK_AT(rc, e, "plan_compute");
  ck_assert_ptr_nonnull(p);
  assert_tiles(p, w);
  return p;
}

/* ---- policies ----------------------------------------------------------------------------- */

START_TEST(test_uneven_34_qubits_over_6_devices_gives_near_equal_ranges) {
  struct world_buf wb;
  world_same(&wb, 6, 139 * GIB);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 34, PLAN_UNEVEN);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_UNEVEN);
  ck_assert_uint_eq(p->global_bits, 0);
  ck_assert_uint_eq(p->nshards, 6);
  /* 2^34 = 17179869184 = 6 * 2863311530 + 4: four shards of 2863311531, two of 2863311530. */
  ck_assert_uint_eq(p->shards[0].first, 0);
  ck_assert_uint_eq(p->shards[0].count, 2863311531ull);
  ck_assert_uint_eq(p->shards[3].count, 2863311531ull);
  ck_assert_uint_eq(p->shards[4].count, 2863311530ull);
  ck_assert_uint_eq(p->shards[5].first + p->shards[5].count, 1ull << 34);
  uint64_t sum = 0;
  for (size_t i = 0; i < 6; i++) {
    ck_assert_uint_eq(p->shards[i].first, sum); /* contiguous */
    ck_assert_uint_eq(p->shards[i].ordinal, i);
    ck_assert_uint_eq(p->shards[i].bytes, p->shards[i].count * 8);
    sum += p->shards[i].count;
  }
  ck_assert_uint_eq(sum, 1ull << 34);
  ck_assert_uint_eq(p->total_bytes, (1ull << 34) * 8);
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_int_eq(plan_check_feasible(p, NULL), QDP_OK);
  plan_destroy(p);
}
END_TEST

START_TEST(test_even_refuses_1_qubit_over_4_devices) {
  struct world_buf wb;
  world_same(&wb, 4, 10 * GIB);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 1, PLAN_EVEN);
  struct qdp_error e = QDP_ERROR_INIT;
  struct plan *p = NULL;
  ck_assert_int_eq(plan_compute(&r, &wb.w, NULL, &p, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(e.field, "placement.devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "over 4 devices"));
  ck_assert_ptr_nonnull(strstr(e.msg, "give 2"));
  /* Two devices are enough for 2 amplitudes. */
  world_same(&wb, 2, 10 * GIB);
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->global_bits, 1);
  ck_assert_uint_eq(p->shards[1].first, 1);
  ck_assert_uint_eq(p->shards[1].count, 1);
  plan_destroy(p);
}
END_TEST

START_TEST(test_even_31_qubits_over_2_devices_gives_two_halves) {
  struct world_buf wb;
  world_same(&wb, 2, 139 * GIB);
  struct plan_request r = req_for(QDP_ENCODING_PHASE, 31, PLAN_EVEN);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_uint_eq(p->global_bits, 1);
  ck_assert_uint_eq(p->nshards, 2);
  ck_assert_uint_eq(p->shards[0].first, 0);
  ck_assert_uint_eq(p->shards[0].count, 1ull << 30);
  ck_assert_uint_eq(p->shards[1].first, 1ull << 30);
  ck_assert_uint_eq(p->shards[1].count, 1ull << 30);
  ck_assert_uint_eq(p->shards[1].bytes, 16 * GIB);
  ck_assert_uint_eq(p->total_bytes, 32 * GIB);
  ck_assert_str_eq(p->needs[1].name, "cuda:1");
  plan_destroy(p);
}
END_TEST

/* Four GPUs where NVLink joins 0-3 and 1-2 (cost 1), PCIe 0-2 and 1-3 (2), and nothing usable
 * 0-1 and 2-3 (3). In S's order the stages pair (0,1),(2,3) then (0,2),(1,3): 3 + 2. The
 * cheapest order puts an NVLink pair in one stage and a PCIe pair in the other: 1 + 2. */
START_TEST(test_even_orders_exchange_partners_by_link_cost) {
  struct world_buf wb;
  world_same(&wb, 4, 139 * GIB);
  static const uint8_t cost[16] = {0, 3, 2, 1, /**/ 3, 0, 1, 2, /**/ 2, 1, 0, 3, /**/ 1, 2, 3, 0};
  struct plan_request r = req_for(QDP_ENCODING_IQP_Z, 30, PLAN_EVEN);
  struct plan *p = compute_ok(&r, &wb.w);
  size_t d[4];
  for (size_t i = 0; i < 4; i++) {
    d[i] = p->shards[i].device;
  }
  ck_assert(d[0] == 0 && d[1] == 1 && d[2] == 2 && d[3] == 3); /* no costs: S's order */
  plan_destroy(p);

  wb.w.link_cost = cost;
  p = compute_ok(&r, &wb.w);
  for (size_t i = 0; i < 4; i++) {
    d[i] = p->shards[i].device;
  }
  unsigned stage0 =
      cost[d[0] * 4 + d[1]] > cost[d[2] * 4 + d[3]] ? cost[d[0] * 4 + d[1]] : cost[d[2] * 4 + d[3]];
  unsigned stage1 =
      cost[d[0] * 4 + d[2]] > cost[d[1] * 4 + d[3]] ? cost[d[0] * 4 + d[2]] : cost[d[1] * 4 + d[3]];
  ck_assert_uint_eq(stage0 + stage1, 3);
  ck_assert_uint_eq(d[0], 0); /* the first device keeps shard 0 */
  assert_tiles(p, &wb.w);
  plan_destroy(p);

  /* Every pair alike (one NVSwitch): S's order stays. */
  static const uint8_t flat[16] = {0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0};
  wb.w.link_cost = flat;
  p = compute_ok(&r, &wb.w);
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(p->shards[i].device, i);
  }
  plan_destroy(p);
}
END_TEST

START_TEST(test_even_refuses_a_device_count_that_is_not_a_power_of_two) {
  struct world_buf wb;
  world_same(&wb, 6, 10 * GIB);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 20, PLAN_EVEN);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "placement.devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "got 6"));
}
END_TEST

START_TEST(test_capacity_splits_by_budget_80_40_40) {
  uint64_t b[3] = {80 * GIB, 40 * GIB, 40 * GIB};
  struct world_buf wb;
  world1(&wb, "cuda", 3, b);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 33, PLAN_CAPACITY);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_uint_eq(p->shards[0].count, 1ull << 32);
  ck_assert_uint_eq(p->shards[1].first, 1ull << 32);
  ck_assert_uint_eq(p->shards[1].count, 1ull << 31);
  ck_assert_uint_eq(p->shards[2].first, 3ull << 31);
  ck_assert_uint_eq(p->shards[2].count, 1ull << 31);
  ck_assert_uint_eq(p->shards[0].bytes, 32 * GIB);
  ck_assert_int_eq(p->feasible, 1); /* 32 GiB in 80, 16 GiB in 40 */
  plan_destroy(p);
}
END_TEST

START_TEST(test_capacity_rounds_by_largest_remainder_and_leaves_no_shard_empty) {
  struct world_buf wb;
  /* 4 amplitudes over three equal budgets: 1 + 1/3 each; the leftover goes to the earliest. */
  world_same(&wb, 3, GIB);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 2, PLAN_CAPACITY);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].count, 2);
  ck_assert_uint_eq(p->shards[1].count, 1);
  ck_assert_uint_eq(p->shards[2].count, 1);
  plan_destroy(p);
  /* Budgets 1 TiB, 1 B, 1 B: quotas 4, 0, 0; each tiny device takes one from the largest. */
  uint64_t b[3] = {TIB, 1, 1};
  world1(&wb, "cuda", 3, b);
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].count, 2);
  ck_assert_uint_eq(p->shards[1].count, 1);
  ck_assert_uint_eq(p->shards[2].count, 1);
  ck_assert_int_eq(p->feasible, 0); /* 16 B does not fit 1 B */
  plan_destroy(p);
}
END_TEST

START_TEST(test_capacity_weighs_budget_minus_staging) {
  /* 31 qubits complex128 = 32 GiB over budgets of 26 and 10 GiB with 2 GiB staging each: the
   * usable 24 and 8 GiB take 3/4 and 1/4 and fit to the byte (weighing raw budgets would put
   * 8.9 GiB + 2 GiB staging on the 10 GiB device). */
  uint64_t b[2] = {26 * GIB, 10 * GIB};
  struct world_buf wb;
  world1(&wb, "cuda", 2, b);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 31, PLAN_CAPACITY);
  r.staging_bytes = 2 * GIB;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].count, 3ull << 29);
  ck_assert_uint_eq(p->shards[1].count, 1ull << 29);
  ck_assert_uint_eq(p->needs[0].staging_bytes, 2 * GIB);
  ck_assert_uint_eq(p->needs[0].need_bytes, 26 * GIB);
  ck_assert_uint_eq(p->needs[1].need_bytes, 10 * GIB);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* Budgets 10 and 6 GiB leave 8 and 4: 2/3 and 1/3 of 2^30 amplitudes. 2^31 / 3 = 715827882.67
   * and 2^30 / 3 = 357913941.33: the larger remainder takes the one left over. */
  b[0] = 10 * GIB;
  b[1] = 6 * GIB;
  world1(&wb, "cuda", 2, b);
  r.qubits = 30;
  r.values_per_sample = 30;
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].count, 715827883ull);
  ck_assert_uint_eq(p->shards[1].count, 357913941ull);
  ck_assert_uint_eq(p->needs[0].need_bytes, 715827883ull * 8 + 2 * GIB);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
}
END_TEST

START_TEST(test_single_takes_the_largest_budget_with_ties_to_the_earliest) {
  uint64_t b[4] = {10 * GIB, 30 * GIB, 20 * GIB, 30 * GIB};
  struct world_buf wb;
  world1(&wb, "cuda", 4, b);
  struct plan_request r = req_for(QDP_ENCODING_BASIS, 10, PLAN_SINGLE);
  r.batch = 3;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  ck_assert_uint_eq(p->nshards, 1);
  ck_assert_uint_eq(p->shards[0].device, 1);
  ck_assert_uint_eq(p->shards[0].rows, 3);
  ck_assert_uint_eq(p->shards[0].count, 1024);
  ck_assert_uint_eq(p->shards[0].bytes, 3 * 1024 * 16);
  plan_destroy(p);
}
END_TEST

START_TEST(test_subset_keeps_its_own_order) {
  struct world_buf wb;
  world_same(&wb, 4, 10 * GIB);
  size_t subset[2] = {3, 1};
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 8, PLAN_EVEN);
  r.device_subset = subset;
  r.device_subset_count = 2;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 2);
  ck_assert_uint_eq(p->shards[0].device, 3);
  ck_assert_uint_eq(p->shards[0].first, 0);
  ck_assert_uint_eq(p->shards[1].device, 1);
  ck_assert_uint_eq(p->shards[1].first, 128);
  plan_destroy(p);
}
END_TEST

/* ---- batches --------------------------------------------------------------------------------- */

START_TEST(test_batch_of_3_over_8_devices_uses_the_3_largest_in_order) {
  uint64_t b[8] = {5 * GIB, 9 * GIB, 1 * GIB, 7 * GIB, 2 * GIB, 9 * GIB, 3 * GIB, 4 * GIB};
  struct world_buf wb;
  world1(&wb, "cuda", 8, b);
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 12, PLAN_BATCH);
  r.batch = 3;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_BATCH);
  ck_assert_uint_eq(p->nshards, 3);
  /* The largest budgets are devices 1 and 5 (9 GiB) and 3 (7 GiB), in world order 1, 3, 5. */
  ck_assert_uint_eq(p->shards[0].device, 1);
  ck_assert_uint_eq(p->shards[1].device, 3);
  ck_assert_uint_eq(p->shards[2].device, 5);
  for (size_t i = 0; i < 3; i++) {
    ck_assert_uint_eq(p->shards[i].row_first, i);
    ck_assert_uint_eq(p->shards[i].rows, 1);
    ck_assert_uint_eq(p->shards[i].first, 0);
    ck_assert_uint_eq(p->shards[i].count, 4096);
  }
  plan_destroy(p);
}
END_TEST

START_TEST(test_odd_batch_splits_near_equal_rows) {
  struct world_buf wb;
  world_same(&wb, 2, 10 * GIB);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 16, PLAN_BATCH);
  r.batch = 7;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].rows, 4);
  ck_assert_uint_eq(p->shards[1].row_first, 4);
  ck_assert_uint_eq(p->shards[1].rows, 3);
  ck_assert_uint_eq(p->shards[1].bytes, 3 * 65536 * 16);
  plan_destroy(p);
  world_same(&wb, 4, 10 * GIB);
  r.batch = 5;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 4);
  uint64_t want[4] = {2, 1, 1, 1}, row = 0;
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(p->shards[i].row_first, row);
    ck_assert_uint_eq(p->shards[i].rows, want[i]);
    row += want[i];
  }
  plan_destroy(p);
}
END_TEST

START_TEST(test_batch_of_one_is_a_single_device_plan) {
  uint64_t b[3] = {4 * GIB, 8 * GIB, 6 * GIB};
  struct world_buf wb;
  world1(&wb, "cpu", 3, b);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 16, PLAN_BATCH);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  ck_assert_uint_eq(p->nshards, 1);
  ck_assert_uint_eq(p->shards[0].device, 1);
  plan_destroy(p);
}
END_TEST

START_TEST(test_sharding_one_state_refuses_a_batch) {
  struct world_buf wb;
  world_same(&wb, 4, 10 * GIB);
  enum plan_policy pols[3] = {PLAN_EVEN, PLAN_UNEVEN, PLAN_CAPACITY};
  for (int i = 0; i < 3; i++) {
    struct plan_request r = req_for(QDP_ENCODING_ANGLE, 16, pols[i]);
    r.batch = 2;
    struct qdp_error e = QDP_ERROR_INIT;
    ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(e.field, "placement.policy");
    ck_assert_ptr_nonnull(strstr(e.msg, "2 samples"));
  }
}
END_TEST

/* ---- feasibility ----------------------------------------------------------------------------- */

START_TEST(test_35_qubits_complex128_over_two_139_gib_is_refused_with_the_numbers) {
  struct world_buf wb;
  world_same(&wb, 2, 139 * GIB); /* 149250113536 B */
  enum plan_policy pols[3] = {PLAN_AUTO, PLAN_EVEN, PLAN_CAPACITY};
  for (int i = 0; i < 3; i++) {
    struct plan_request r = req_for(QDP_ENCODING_ANGLE, 35, pols[i]);
    struct plan *p = compute_ok(&r, &wb.w); /* a dry run succeeds and shows the arithmetic */
    ck_assert_int_eq(p->feasible, 0);
    ck_assert_uint_eq(p->nneeds, 2);
    ck_assert_uint_eq(p->needs[0].need_bytes, 274877906944ull);
    ck_assert_int_eq(p->needs[0].fits, 0);
    struct qdp_error e = QDP_ERROR_INIT;
    ck_assert_int_eq(plan_check_feasible(p, &e), QDP_ERR_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(e.code, QDP_ERR_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(
        strstr(e.msg, "35-qubit complex128 state (512 GiB) does not fit: "));
    ck_assert_ptr_nonnull(strstr(e.msg,
                                 "cuda:0 needs 256 GiB (shard 256 GiB + staging 0 B + "
                                 "workspace 0 B) but its budget is 139 GiB; cuda:1 needs "
                                 "256 GiB"));
    ck_assert_ptr_nonnull(strstr(e.msg, "lower 'qubits', use complex64, or add devices"));
    ck_assert_uint_eq(e.need_bytes, 274877906944ull);
    ck_assert_uint_eq(e.free_bytes, 149250113536ull);
    ck_assert_int_eq(e.device, 0);
    ck_assert_int_eq(e.rank, 0);
    ck_assert_uint_lt(strlen(e.msg), sizeof e.msg);
    plan_destroy(p);
  }
  /* complex64 halves it: 128 GiB per device fits 139 GiB, and AUTO picks even. */
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 35, PLAN_AUTO);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_int_eq(plan_check_feasible(p, NULL), QDP_OK);
  plan_destroy(p);
}
END_TEST

START_TEST(test_feasibility_counts_staging_and_workspace_to_the_byte) {
  /* Amplitude, 20 qubits complex64, one device: shard 2^20 * 8 = 8388608, workspace
   * 8 * (1 + 2^20 / 1024) = 8200, staging 1000. Fits a budget of exactly the sum, not one less. */
  const uint64_t need = 8388608ull + 8200 + 1000;
  uint64_t b[1] = {need};
  struct world_buf wb;
  world1(&wb, "cpu", 1, b);
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 20, PLAN_SINGLE);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  r.values_per_sample = 1000;
  r.staging_bytes = 1000;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 8200);
  ck_assert_uint_eq(p->needs[0].need_bytes, need);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  wb.dev[0].budget_bytes = need - 1;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->feasible, 0);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_check_feasible(p, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg,
                               "cpu:0 needs 8397808 B (shard 8 MiB + staging 1000 B + "
                               "workspace 8 KiB) but its budget is 8397807 B"));
  /* complex64 already: no complex64 hint. */
  ck_assert_ptr_null(strstr(e.msg, "use complex64"));
  plan_destroy(p);
}
END_TEST

/* A state written into its caller's own memory takes no shard bytes of the device: the need is
 * staging + workspace, so it fits where the shard alone would not, and its total stays the
 * state's size. */
START_TEST(test_an_external_output_needs_only_staging_and_workspace) {
  uint64_t b[1] = {8200 + 1000};
  struct world_buf wb;
  world1(&wb, "cuda", 1, b);
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 20, PLAN_SINGLE);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  r.values_per_sample = 1000;
  r.staging_bytes = 1000;
  r.output_external = 1;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->output_external, 1);
  ck_assert_uint_eq(p->total_bytes, 8388608ull);
  ck_assert_uint_eq(p->needs[0].shard_bytes, 0);
  ck_assert_uint_eq(p->needs[0].need_bytes, 8200 + 1000);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  wb.dev[0].budget_bytes = 8200 + 1000 - 1;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->feasible, 0);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_check_feasible(p, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg,
                               "cuda:0 needs 9200 B (shard 0 B + staging 1000 B + "
                               "workspace 8 KiB) but its budget is 9199 B"));
  plan_destroy(p);
}
END_TEST

START_TEST(test_workspace_follows_the_documented_formulas) {
  struct world_buf wb;
  world_same(&wb, 4, 1ull << 50);
  /* Amplitude batch: 3 rows of 2^12 amplitudes -> 8 * 3 * (1 + 4). */
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 12, PLAN_BATCH);
  r.batch = 12;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 8 * 3 * 5);
  plan_destroy(p);
  /* A leaf that is not full still needs its partial: 1500 amplitudes -> 2 leaves. */
  struct plan_shard s = {0, 0, 0, 0, 1500, 0, 2, 1500 * 16};
  struct plan fake;
  memset(&fake, 0, sizeof fake);
  fake.encoding = QDP_ENCODING_AMPLITUDE;
  ck_assert_uint_eq(plan_workspace_bytes(&fake, &s), 8 * 2 * 3);
  /* iqp: the exchange buffer, capped at one chunk, only with global bits. */
  r = req_for(QDP_ENCODING_IQP, 30, PLAN_EVEN);
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->global_bits, 2);
  ck_assert_uint_eq(p->shards[0].bytes, 4 * GIB);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, PLAN_EXCHANGE_CHUNK_BYTES);
  plan_destroy(p);
  r = req_for(QDP_ENCODING_IQP_Z, 10, PLAN_EVEN);
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 256 * 16); /* the whole small shard */
  plan_destroy(p);
  r = req_for(QDP_ENCODING_IQP, 10, PLAN_SINGLE);
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 0); /* in place on one device */
  plan_destroy(p);
  r = req_for(QDP_ENCODING_PHASE, 10, PLAN_EVEN);
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 0);
  plan_destroy(p);
}
END_TEST

START_TEST(test_refusal_message_stays_within_its_buffer) {
  struct world_buf wb;
  world_same(&wb, 64, 1000);
  for (size_t i = 0; i < 64; i++) {
    snprintf(wb.dev[i].name, sizeof wb.dev[i].name, "r%zu/cuda:%zu", i / 8, i % 8);
    wb.dev[i].rank = (int)(i / 8);
    wb.dev[i].ordinal = (int)(i % 8);
  }
  wb.dev[37].budget_bytes = 10; /* the worst shortfall */
  wb.w.ranks = 8;
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 20, PLAN_UNEVEN);
  struct plan *p = compute_ok(&r, &wb.w);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_check_feasible(p, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_lt(strlen(e.msg), sizeof e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "; ...; lower 'qubits'"));
  ck_assert_ptr_nonnull(strstr(e.msg, "r0/cuda:0 needs 256 KiB"));
  const char *end = "or add devices";
  ck_assert_str_eq(e.msg + strlen(e.msg) - strlen(end), end);
  ck_assert_int_eq(e.rank, 4);
  ck_assert_int_eq(e.device, 5);
  ck_assert_uint_eq(e.need_bytes, 262144);
  ck_assert_uint_eq(e.free_bytes, 10);
  plan_destroy(p);
}
END_TEST

/* ---- validation ------------------------------------------------------------------------------ */

struct bad_case {
  const char *what;
  struct plan_request req;
  const char *field;
  const char *text;
};

START_TEST(test_every_bad_request_names_its_field) {
  struct world_buf wb;
  world_same(&wb, 4, 10 * GIB);
  /* 2^20 complex128 amplitudes are 16 MiB: one byte over max_state_bytes. */
  struct plan_limits lim = {20, 10, 16 * 1024 * 1024 - 1};
  size_t bad_index[1] = {4}, dup[3] = {0, 2, 0}, three[3] = {0, 1, 2};
  struct bad_case c[40];
  size_t n = 0;
#define CASE(w, f, t) \
  (c[n] = (struct bad_case){w, req_for(QDP_ENCODING_ANGLE, 5, PLAN_AUTO), f, t}, &c[n++].req)
  CASE("unknown encoding 0", "encoding", "encoding 0 is unknown")->encoding = 0;
  CASE("unknown encoding 99", "encoding", "encoding 99 is unknown")->encoding = 99;
  CASE("zero qubits", "qubits", "qubits 0 is out of range: expected 1..20")->qubits = 0;
  CASE("above max_qubits", "qubits", "qubits 21 is out of range: expected 1..20")->qubits = 21;
  CASE("zero batch", "input.rows", "batch 0")->batch = 0;
  CASE("above max_batch", "input.rows", "batch 11 is out of range: max_batch is 10")->batch = 11;
  struct plan_request *q = CASE("empty amplitude", "input.cols", "empty input");
  q->encoding = QDP_ENCODING_AMPLITUDE;
  q->values_per_sample = 0;
  q = CASE("long amplitude", "input.cols", "at most 32 values per sample, got 33");
  q->encoding = QDP_ENCODING_AMPLITUDE;
  q->values_per_sample = 33;
  CASE("short angle", "input.cols", "angle encoding of 5 qubits expects 5 values per sample, got 4")
      ->values_per_sample = 4;
  q = CASE("long phase", "input.cols",
           "phase encoding of 5 qubits expects 5 values per sample, got 6");
  q->encoding = QDP_ENCODING_PHASE;
  q->values_per_sample = 6;
  q = CASE("iqp without pairs", "input.cols",
           "iqp encoding of 5 qubits expects 15 values per sample, got 5");
  q->encoding = QDP_ENCODING_IQP;
  q->values_per_sample = 5;
  q = CASE("iqp-z with pairs", "input.cols",
           "iqp-z encoding of 5 qubits expects 5 values per sample, got 15");
  q->encoding = QDP_ENCODING_IQP_Z;
  q->values_per_sample = 15;
  q = CASE("two basis indices", "input.cols",
           "basis encoding of 5 qubits expects 1 values per sample, got 2");
  q->encoding = QDP_ENCODING_BASIS;
  q->values_per_sample = 2;
  CASE("complex input", "input.dtype", "input dtype complex64")->in_dtype = QDP_DTYPE_COMPLEX64;
  CASE("int64 angles", "input.dtype", "float32 or float64")->in_dtype = QDP_DTYPE_INT64;
  CASE("unspecified input", "input.dtype", "unknown (0)")->in_dtype = QDP_DTYPE_UNSPECIFIED;
  CASE("real output", "output_dtype", "output dtype float64")->out_dtype = QDP_DTYPE_FLOAT64;
  CASE("unspecified output", "output_dtype", "expected complex64 or complex128")->out_dtype = 0;
  CASE("unknown policy", "placement.policy", "placement policy 9 is unknown")->policy = 9;
  q = CASE("subset index past the world", "placement.devices",
           "device index 4, but the world has devices 0..3");
  q->device_subset = bad_index;
  q->device_subset_count = 1;
  q = CASE("subset repeats a device", "placement.devices", "entry 2 repeats device 'cuda:0'");
  q->device_subset = dup;
  q->device_subset_count = 3;
  q = CASE("subset count without a list", "placement.devices", "no list");
  q->device_subset_count = 2;
  q = CASE(
      "state above max_state_bytes", "qubits",
      "size overflow: 1 samples x 2^20 amplitudes x 16 B = 16777216 B exceeds max_state_bytes");
  q->qubits = 20;
  q->values_per_sample = 20;
  q = CASE("even over 3 devices", "placement.devices", "power-of-two number of devices, got 3");
  q->policy = PLAN_EVEN;
  q->device_subset = three;
  q->device_subset_count = 3;
  q = CASE("uneven with more devices than amplitudes", "placement.devices",
           "over 4 devices needs at least 4 amplitudes");
  q->policy = PLAN_UNEVEN;
  q->qubits = 1;
  q->values_per_sample = 1;
#undef CASE
  for (size_t i = 0; i < n; i++) {
    struct qdp_error e = QDP_ERROR_INIT;
    struct plan *p = NULL;
    qdp_status rc = plan_validate(&c[i].req, &wb.w, &lim, &e);
    ck_assert_msg(rc == QDP_ERR_INVALID_ARGUMENT, "%s: got %s", c[i].what, qdp_status_name(rc));
    ck_assert_msg(strcmp(e.field, c[i].field) == 0, "%s: field '%s', want '%s'", c[i].what, e.field,
                  c[i].field);
    ck_assert_msg(strstr(e.msg, c[i].text) != NULL, "%s: message '%s' lacks '%s'", c[i].what, e.msg,
                  c[i].text);
    struct qdp_error e2 = QDP_ERROR_INIT;
    rc = plan_compute(&c[i].req, &wb.w, &lim, &p, &e2);
    ck_assert_msg(rc == QDP_ERR_INVALID_ARGUMENT, "%s: compute gave %s", c[i].what,
                  qdp_status_name(rc));
    ck_assert_ptr_null(p);
    ck_assert_str_eq(e2.msg, e.msg);
  }
  /* The valid neighbours of those cases pass: basis takes int64, amplitude takes 1..2^n. */
  struct plan_request ok = req_for(QDP_ENCODING_BASIS, 5, PLAN_AUTO);
  ok.in_dtype = QDP_DTYPE_INT64;
  ck_assert_int_eq(plan_validate(&ok, &wb.w, &lim, NULL), QDP_OK);
  ok = req_for(QDP_ENCODING_AMPLITUDE, 5, PLAN_AUTO);
  ok.values_per_sample = 1;
  ck_assert_int_eq(plan_validate(&ok, &wb.w, &lim, NULL), QDP_OK);
  ok.values_per_sample = 32;
  ok.in_dtype = QDP_DTYPE_FLOAT32;
  ck_assert_int_eq(plan_validate(&ok, &wb.w, &lim, NULL), QDP_OK);
  ok = req_for(QDP_ENCODING_ANGLE, 20, PLAN_AUTO);
  ok.batch = 10;
  ok.out_dtype = QDP_DTYPE_COMPLEX64;
  lim.max_state_bytes = 10ull * 8 << 20; /* exactly the 10 states */
  ck_assert_int_eq(plan_validate(&ok, &wb.w, &lim, NULL), QDP_OK);
  ok.batch = 11;
  lim.max_batch = 11;
  ck_assert_int_eq(plan_validate(&ok, &wb.w, &lim, NULL), QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_an_empty_world_is_refused) {
  struct world_buf wb;
  world_same(&wb, 0, 0);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 4, PLAN_AUTO);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "placement.devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "0 devices"));
}
END_TEST

START_TEST(test_an_inconsistent_world_is_an_internal_error) {
  struct world_buf wb;
  world_same(&wb, 3, GIB);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 4, PLAN_AUTO);
  struct qdp_error e = QDP_ERROR_INIT;
  wb.dev[2].ordinal = 0; /* duplicates device 0 */
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INTERNAL);
  ck_assert_ptr_nonnull(strstr(e.msg, "rank 0 device ordinal 0 twice"));
  wb.dev[2].ordinal = 2;
  wb.dev[1].rank = 1; /* the world has one rank */
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INTERNAL);
  ck_assert_ptr_nonnull(strstr(e.msg, "on rank 1, outside 0..0"));
}
END_TEST

START_TEST(test_max_qubits_above_the_hard_ceiling_is_not_trusted) {
  struct world_buf wb;
  world_same(&wb, 1, UINT64_MAX);
  const struct plan_limits lim = {64, 0, 0};
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 61, PLAN_AUTO);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_validate(&r, &wb.w, &lim, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "qubits");
  ck_assert_ptr_nonnull(strstr(e.msg, "expected 1..60"));
}
END_TEST

START_TEST(test_size_overflow_at_60_qubits) {
  struct world_buf wb;
  world_same(&wb, 8, UINT64_MAX);
  /* 2^60 complex64 = 2^63 B: representable, and plans exactly over 8 devices. */
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 60, PLAN_EVEN);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->total_bytes, 1ull << 63);
  ck_assert_uint_eq(p->shards[7].first, 7ull << 57);
  ck_assert_uint_eq(p->shards[7].bytes, 1ull << 60);
  plan_destroy(p);
  /* complex128 doubles it past 2^64 - 1. */
  struct qdp_error e = QDP_ERROR_INIT;
  r.out_dtype = QDP_DTYPE_COMPLEX128;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "qubits");
  ck_assert_ptr_nonnull(strstr(e.msg, "size overflow: 1 samples x 2^60 amplitudes x 16 B"));
  /* A large batch of complex64 60-qubit states overflows too, on the batch. */
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  r.policy = PLAN_BATCH;
  r.batch = 1000000;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "input.rows");
  ck_assert_ptr_nonnull(strstr(e.msg, "size overflow: 1000000 samples x 2^60 amplitudes x 8 B"));
  ck_assert_ptr_nonnull(strstr(e.msg, "18446744073709551615"));
  /* The batch product alone overflowing: 2^40 samples of 2^30 complex128. */
  r = req_for(QDP_ENCODING_ANGLE, 30, PLAN_BATCH);
  r.batch = 1ull << 40;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "input.rows");
  /* One less doubling fits exactly: 2^30 samples x 2^30 x 16 B = 2^64 still overflows, 2^29 not. */
  r.batch = 1ull << 30;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, NULL), QDP_ERR_INVALID_ARGUMENT);
  r.batch = 1ull << 29;
  ck_assert_int_eq(plan_validate(&r, &wb.w, NULL, NULL), QDP_OK);
}
END_TEST

/* ---- 50 qubits ------------------------------------------------------------------------------- */

START_TEST(test_50_qubit_plans_over_8_devices_are_exact) {
  const uint64_t n_amp = 1ull << 50;
  struct world_buf wb;
  uint64_t b[8];
  for (size_t i = 0; i < 8; i++) {
    b[i] = (i + 1) * (1ull << 50); /* 1..8 PiB: weights 1..8, total 36 */
  }
  world1(&wb, "cuda", 8, b);
  struct plan_request r = req_for(QDP_ENCODING_PHASE, 50, PLAN_EVEN);
  r.out_dtype = QDP_DTYPE_COMPLEX64;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->global_bits, 3);
  for (size_t i = 0; i < 8; i++) {
    ck_assert_uint_eq(p->shards[i].first, i << 47);
    ck_assert_uint_eq(p->shards[i].count, 1ull << 47);
    ck_assert_uint_eq(p->shards[i].bytes, 1ull << 50);
  }
  plan_destroy(p);

  /* Uneven over 7: 2^50 = 7 q + 4 (2^3 = 1 mod 7, so 2^50 = 2^48 * 4 = 4 mod 7). */
  size_t seven[7] = {0, 1, 2, 3, 4, 5, 6};
  r.policy = PLAN_UNEVEN;
  r.device_subset = seven;
  r.device_subset_count = 7;
  p = compute_ok(&r, &wb.w);
  const uint64_t q = n_amp / 7;
  ck_assert_uint_eq(n_amp % 7, 4);
  for (size_t i = 0; i < 7; i++) {
    ck_assert_uint_eq(p->shards[i].count, i < 4 ? q + 1 : q);
  }
  ck_assert_uint_eq(p->shards[6].first + p->shards[6].count, n_amp);
  plan_destroy(p);

  /* Capacity over 8 with weights 1..8: shard i holds 2^50 (i + 1) / 36, computed in 128 bits here
   * and rounded by largest remainder. */
  r.policy = PLAN_CAPACITY;
  r.device_subset = NULL;
  r.device_subset_count = 0;
  p = compute_ok(&r, &wb.w);
  uint64_t floor_sum = 0;
  for (size_t i = 0; i < 8; i++) {
    u128 num = (u128)n_amp * (i + 1);
    uint64_t lo = (uint64_t)(num / 36);
    floor_sum += lo;
    ck_assert_uint_ge(p->shards[i].count, lo);
    ck_assert_uint_le(p->shards[i].count, lo + 1);
  }
  ck_assert_uint_lt(n_amp - floor_sum, 8);
  plan_destroy(p);

  /* Batch of 3 at 50 qubits: rows 1 each on the three largest (devices 5, 6, 7). */
  r.policy = PLAN_BATCH;
  r.batch = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 3);
  ck_assert_uint_eq(p->shards[0].device, 5);
  ck_assert_uint_eq(p->shards[2].device, 7);
  ck_assert_uint_eq(p->shards[2].bytes, 1ull << 53);
  plan_destroy(p);
}
END_TEST

/* ---- multi-rank worlds ----------------------------------------------------------------------- */

START_TEST(test_three_ranks_with_different_meshes_each_get_their_shards) {
  /* Rank 0: 2 devices, rank 1: 4, rank 2: 1; listed out of order to exercise world order. */
  struct world_buf wb;
  memset(&wb, 0, sizeof wb);
  const int ranks[7] = {2, 1, 0, 1, 1, 0, 1};
  const int ords[7] = {0, 3, 1, 0, 2, 0, 1};
  const uint64_t budgets[7] = {40 * GIB, 20 * GIB, 80 * GIB, 20 * GIB,
                               20 * GIB, 80 * GIB, 20 * GIB};
  for (size_t i = 0; i < 7; i++) {
    wb.dev[i].rank = ranks[i];
    wb.dev[i].ordinal = ords[i];
    wb.dev[i].budget_bytes = budgets[i];
    snprintf(wb.dev[i].name, sizeof wb.dev[i].name, "r%d/cuda:%d", ranks[i], ords[i]);
  }
  wb.w.devices = wb.dev;
  wb.w.count = 7;
  wb.w.ranks = 3;
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 32, PLAN_UNEVEN);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 7);
  const size_t world_pos[7] = {5, 2, 3, 6, 4, 1, 0}; /* (0,0) (0,1) (1,0) (1,1) (1,2) (1,3) (2,0) */
  for (size_t i = 0; i < 7; i++) {
    ck_assert_uint_eq(p->shards[i].device, world_pos[i]);
  }
  size_t idx[8];
  ck_assert_uint_eq(plan_rank_shards(p, 0, idx, 8), 2);
  ck_assert_uint_eq(idx[0], 0);
  ck_assert_uint_eq(idx[1], 1);
  ck_assert_uint_eq(plan_rank_shards(p, 1, idx, 8), 4);
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(idx[i], 2 + i);
    ck_assert_int_eq(p->shards[idx[i]].rank, 1);
    ck_assert_int_eq(p->shards[idx[i]].ordinal, (int)i);
  }
  ck_assert_uint_eq(plan_rank_shards(p, 2, idx, 8), 1);
  ck_assert_uint_eq(idx[0], 6);
  ck_assert_str_eq(p->needs[6].name, "r2/cuda:0");
  ck_assert_uint_eq(plan_rank_shards(p, 3, idx, 8), 0);
  /* A short buffer gets what fits; the return value still says how many. */
  idx[1] = 99;
  ck_assert_uint_eq(plan_rank_shards(p, 1, idx, 1), 4);
  ck_assert_uint_eq(idx[0], 2);
  ck_assert_uint_eq(idx[1], 99);
  ck_assert_uint_eq(plan_rank_shards(p, 1, NULL, 0), 4);
  plan_destroy(p);

  /* Capacity over the same world: weights 80 80 | 20 20 20 20 | 40 of 280 (GiB). */
  r.policy = PLAN_CAPACITY;
  p = compute_ok(&r, &wb.w);
  const uint64_t w8[7] = {80, 80, 20, 20, 20, 20, 40};
  for (size_t i = 0; i < 7; i++) {
    u128 num = (u128)(1ull << 32) * w8[i];
    uint64_t lo = (uint64_t)(num / 280);
    ck_assert_uint_ge(p->shards[i].count, lo);
    ck_assert_uint_le(p->shards[i].count, lo + 1);
  }
  /* Each rank's bytes sum to its shards' counts. */
  uint64_t per_rank[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) {
    size_t n = plan_rank_shards(p, k, idx, 8);
    for (size_t i = 0; i < n; i++) {
      per_rank[k] += p->shards[idx[i]].bytes;
    }
  }
  ck_assert_uint_eq(per_rank[0] + per_rank[1] + per_rank[2], p->total_bytes);
  plan_destroy(p);

  /* Even over rank 1's four devices, named by a subset. */
  size_t r1[4] = {3, 6, 4, 1};
  r.policy = PLAN_EVEN;
  r.device_subset = r1;
  r.device_subset_count = 4;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(plan_rank_shards(p, 1, idx, 8), 4);
  ck_assert_uint_eq(plan_rank_shards(p, 0, idx, 8), 0);
  ck_assert_uint_eq(p->global_bits, 2);
  plan_destroy(p);
}
END_TEST

/* ---- AUTO ------------------------------------------------------------------------------------ */

START_TEST(test_auto_picks_single_even_capacity_or_batch) {
  struct world_buf wb;
  /* 30 qubits complex128 = 16 GiB: fits one 20 GiB device -> single on the largest budget. */
  uint64_t b4[4] = {20 * GIB, 24 * GIB, 24 * GIB, 20 * GIB};
  world1(&wb, "cuda", 4, b4);
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 30, PLAN_AUTO);
  r.values_per_sample = 100;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  ck_assert_uint_eq(p->shards[0].device, 1);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* 32 qubits = 64 GiB: no single device, 4 x 16 GiB fits -> even. */
  r.qubits = 32;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_uint_eq(p->global_bits, 2);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* 2 of the 4 hold less than 16 GiB: even no longer fits, capacity does (80 GiB usable). */
  wb.dev[0].budget_bytes = 12 * GIB;
  wb.dev[3].budget_bytes = 12 * GIB;
  wb.dev[1].budget_bytes = 28 * GIB;
  wb.dev[2].budget_bytes = 28 * GIB;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_uint_gt(p->shards[1].count, p->shards[0].count);
  plan_destroy(p);
  /* Three devices: no even set -> capacity. */
  uint64_t b3[3] = {30 * GIB, 30 * GIB, 30 * GIB};
  world1(&wb, "cuda", 3, b3);
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_uint_eq(p->nshards, 3);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* A batch goes data parallel even when it would fit one device. */
  r.qubits = 10;
  r.batch = 5;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_BATCH);
  ck_assert_uint_eq(p->nshards, 3);
  plan_destroy(p);
  /* One device too small: it stays single and infeasible. */
  uint64_t b1[1] = {GIB};
  world1(&wb, "cuda", 1, b1);
  r.qubits = 30;
  r.batch = 1;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  ck_assert_int_eq(p->feasible, 0);
  plan_destroy(p);
}
END_TEST

START_TEST(test_auto_iqp_uses_even_over_the_largest_power_of_two_set) {
  /* iqp, 32 qubits complex128 = 64 GiB over 6 devices: no single fits; even over the 4 largest
   * (devices 1, 2, 4, 5), kept in world order. */
  uint64_t b[6] = {10 * GIB, 20 * GIB, 20 * GIB, 5 * GIB, 20 * GIB, 20 * GIB};
  struct world_buf wb;
  world1(&wb, "cuda", 6, b);
  struct plan_request r = req_for(QDP_ENCODING_IQP, 32, PLAN_AUTO);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_uint_eq(p->global_bits, 2);
  const size_t want[4] = {1, 2, 4, 5};
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(p->shards[i].device, want[i]);
    ck_assert_uint_eq(p->shards[i].count, 1ull << 30);
  }
  /* 16 GiB shard + 256 MiB exchange buffer fits 20 GiB. */
  ck_assert_uint_eq(p->needs[0].need_bytes, 16 * GIB + PLAN_EXCHANGE_CHUNK_BYTES);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* A small iqp state still goes to one device. */
  r = req_for(QDP_ENCODING_IQP_Z, 20, PLAN_AUTO);
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  plan_destroy(p);
  /* 64 GiB over budgets of 20, 20 and four of 12 GiB: even over the 4 largest needs 16 GiB on
   * 12; devices that take the top 3 bits alone get capacity over all 6 in blocks of 8 GiB (ends
   * at 0.227, 0.455, 0.591, 0.727, 0.864 of the state move to 2, 4, 5, 6, 7 eighths): 2, 2, 1, 1,
   * 1 and 1 blocks, which fit. Without them the infeasible even plan stands. */
  uint64_t b2[6] = {20 * GIB, 20 * GIB, 12 * GIB, 12 * GIB, 12 * GIB, 12 * GIB};
  world1(&wb, "cpu", 6, b2);
  r = req_for(QDP_ENCODING_IQP, 32, PLAN_AUTO);
  r.iqp_top_bits = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_uint_eq(p->global_bits, 0);
  const uint64_t blocks[6] = {2, 2, 1, 1, 1, 1};
  for (size_t i = 0; i < 6; i++) {
    ck_assert_uint_eq(p->shards[i].count, blocks[i] << 29);
  }
  plan_destroy(p);
  r.iqp_top_bits = 0;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_int_eq(p->feasible, 0);
  plan_destroy(p);
}
END_TEST

/* iqp's global-bit exchange needs 2^g equal ranges, whatever the policy that made them: uneven
 * over 2 or 4 devices makes them (global bits 1 and 2), uneven over 3 and capacity over unequal
 * room do not and are refused with the ranges; one device and whole samples need no exchange. */
/* Over devices that transform iqp's top 3 bits alone (the CPU backend's), unequal ranges of whole
 * blocks of 2^(n-3) need no exchange. 12 qubits, blocks of 512: uneven over 3 ends at 1366, 2731
 * and 4096, moved to the nearest block edges 1536, 2560 and 4096 (3, 2 and 3 blocks); over 6 at
 * 683, 1366, 2049, 2732, 3414, 4096, moved to 1, 2, 1, 1, 2 and 1 blocks; capacity at 2:1 ends at
 * 2731, moved to 5 and 3 blocks; none of them counts an exchange buffer; an even plan of 4 needs none either, one of 16 does
 * (a stage below the top 3 bits); more than 8 devices unequally are refused. */
START_TEST(test_iqp_over_devices_that_take_the_top_bits_splits_into_whole_blocks) {
  struct world_buf wb;
  world_same(&wb, 6, 10 * GIB);
  size_t three[3] = {0, 1, 2};
  struct plan_request r = req_for(QDP_ENCODING_IQP, 12, PLAN_UNEVEN);
  r.iqp_top_bits = 3;
  r.device_subset = three;
  r.device_subset_count = 3;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->iqp_top_bits, 3);
  ck_assert_uint_eq(p->global_bits, 0);
  uint64_t want3[3] = {3 * 512, 2 * 512, 3 * 512};
  for (size_t i = 0; i < 3; i++) {
    ck_assert_uint_eq(p->shards[i].count, want3[i]);
    ck_assert_uint_eq(p->needs[i].workspace_bytes, 0);
  }
  plan_destroy(p);
  r.device_subset_count = 0; /* all 6 */
  p = compute_ok(&r, &wb.w);
  uint64_t want6[6] = {1, 2, 1, 1, 2, 1};
  for (size_t i = 0; i < 6; i++) {
    ck_assert_uint_eq(p->shards[i].count, want6[i] * 512);
  }
  plan_destroy(p);
  uint64_t budgets[2] = {8 * GIB, 4 * GIB};
  world1(&wb, "cpu", 2, budgets);
  r = req_for(QDP_ENCODING_IQP_Z, 12, PLAN_CAPACITY);
  r.iqp_top_bits = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].count, 5 * 512); /* 2731 rounds to 2560 */
  ck_assert_uint_eq(p->shards[1].count, 3 * 512);
  plan_destroy(p);
  /* Budgets of 23 and 50 KiB (blocks of 8 KiB): capacity ends shard 0 at 1290.5 of 4096, nearest
   * 3 blocks (24 KiB, past 23): it takes 2, and device 1 the other 6 (48 KiB), which fit. */
  uint64_t tight[2] = {23 * 1024, 50 * 1024};
  world1(&wb, "cpu", 2, tight);
  r = req_for(QDP_ENCODING_IQP, 12, PLAN_CAPACITY);
  r.iqp_top_bits = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->shards[0].count, 2 * 512);
  ck_assert_uint_eq(p->shards[1].count, 6 * 512);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  world_same(&wb, 16, 10 * GIB);
  r = req_for(QDP_ENCODING_IQP, 12, PLAN_EVEN);
  r.iqp_top_bits = 3;
  size_t four[4] = {0, 1, 2, 3};
  r.device_subset = four;
  r.device_subset_count = 4;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->global_bits, 2);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 0);
  plan_destroy(p);
  r.device_subset_count = 0;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->global_bits, 4);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 256 * 16); /* the exchange below the top bits */
  plan_destroy(p);
  size_t nine[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  r.policy = PLAN_UNEVEN;
  r.device_subset = nine;
  r.device_subset_count = 9;
  struct qdp_error e = QDP_ERROR_INIT;
  p = NULL;
  ck_assert_int_eq(plan_compute(&r, &wb.w, NULL, &p, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(e.field, "placement.policy");
  ck_assert_msg(strstr(e.msg, "at most 8 shards of whole blocks of 512 amplitudes") != NULL, "%s",
                e.msg);
}
END_TEST

START_TEST(test_iqp_needs_equal_power_of_two_ranges_not_a_policy) {
  struct world_buf wb;
  world_same(&wb, 4, 10 * GIB);
  size_t two[2] = {0, 1}, three[3] = {0, 1, 2};
  struct plan_request r = req_for(QDP_ENCODING_IQP, 12, PLAN_UNEVEN);
  r.device_subset = two;
  r.device_subset_count = 2;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 2);
  ck_assert_uint_eq(p->global_bits, 1);
  ck_assert_uint_eq(p->shards[1].first, 2048);
  ck_assert_uint_eq(p->shards[1].count, 2048);
  ck_assert_uint_eq(p->needs[0].workspace_bytes, 2048 * 16); /* the exchange buffer */
  plan_destroy(p);
  r.encoding = QDP_ENCODING_IQP_Z;
  r.values_per_sample = 12;
  r.device_subset_count = 0; /* all 4 */
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->global_bits, 2);
  plan_destroy(p);
  r.policy = PLAN_CAPACITY; /* equal budgets: equal quarters */
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->policy, PLAN_CAPACITY);
  ck_assert_uint_eq(p->global_bits, 2);
  plan_destroy(p);

  struct qdp_error e = QDP_ERROR_INIT;
  r = req_for(QDP_ENCODING_IQP, 12, PLAN_UNEVEN);
  r.device_subset = three;
  r.device_subset_count = 3;
  p = NULL;
  ck_assert_int_eq(plan_compute(&r, &wb.w, NULL, &p, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(e.field, "placement.policy");
  ck_assert_msg(strstr(e.msg,
                       "placement policy uneven cuts the state of 4096 amplitudes into 3 "
                       "ranges of 1365 to 1366") != NULL,
                "%s", e.msg);
  ck_assert_msg(strstr(e.msg, "iqp encoding's Walsh-Hadamard stages") != NULL, "%s", e.msg);
  /* Capacity over unequal room: two devices, 2:1. */
  uint64_t budgets[2] = {8 * GIB, 4 * GIB};
  world1(&wb, "cuda", 2, budgets);
  r = req_for(QDP_ENCODING_IQP_Z, 12, PLAN_CAPACITY);
  e = (struct qdp_error)QDP_ERROR_INIT;
  ck_assert_int_eq(plan_compute(&r, &wb.w, NULL, &p, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(e.msg,
                       "policy capacity cuts the state of 4096 amplitudes into 2 ranges "
                       "of 1365 to 2731") != NULL,
                "%s", e.msg);
  /* One device, and whole samples per device, exchange nothing. */
  world_same(&wb, 3, 10 * GIB);
  r = req_for(QDP_ENCODING_IQP, 12, PLAN_CAPACITY);
  size_t one[1] = {2};
  r.device_subset = one;
  r.device_subset_count = 1;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 1);
  ck_assert_uint_eq(p->shards[0].device, 2);
  plan_destroy(p);
  r = req_for(QDP_ENCODING_IQP, 12, PLAN_BATCH);
  r.batch = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 3);
  ck_assert_uint_eq(p->global_bits, 0);
  plan_destroy(p);
}
END_TEST

START_TEST(test_policy_names_round_trip) {
  const char *names[6] = {"auto", "single", "even", "uneven", "capacity", "batch"};
  for (int i = 0; i < 6; i++) {
    enum plan_policy got = PLAN_AUTO;
    ck_assert_str_eq(plan_policy_name((enum plan_policy)i), names[i]);
    ck_assert_int_eq(plan_policy_from_name(names[i], &got), 1);
    ck_assert_int_eq(got, i);
  }
  ck_assert_str_eq(plan_policy_name((enum plan_policy)6), "unknown");
  ck_assert_int_eq(plan_policy_from_name("Even", NULL), 0);
  ck_assert_int_eq(plan_policy_from_name(NULL, NULL), 0);
  plan_destroy(NULL);
}
END_TEST

/* ---- random sweep ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) { /* splitmix64: fixed seed, so failures reproduce */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Whether p's shards are 2^g > 1 equal ranges of the index in order (an independent formula for
 * the layout global_bits describes). */
static int equal_pow2_ranges(const struct plan *p) {
  const uint64_t k = p->nshards;
  if (k < 2 || (k & (k - 1)) != 0) {
    return 0;
  }
  for (size_t i = 0; i < k; i++) {
    if (p->shards[i].count != p->amplitudes / k || p->shards[i].first != i * (p->amplitudes / k)) {
      return 0;
    }
  }
  return 1;
}

START_TEST(test_random_plans_tile_the_state_exactly) {
  const qdp_encoding encs[4] = {QDP_ENCODING_AMPLITUDE, QDP_ENCODING_ANGLE, QDP_ENCODING_IQP,
                                QDP_ENCODING_BASIS};
  size_t checked = 0;
  for (int iter = 0; iter < 4000; iter++) {
    struct world_buf wb;
    const size_t d = 1 + rnd() % 12;
    uint64_t b[12];
    for (size_t i = 0; i < d; i++) {
      switch (rnd() % 4) {
      case 0:
        b[i] = 0;
        break;
      case 1:
        b[i] = rnd() % 4096;
        break;
      case 2:
        b[i] = rnd() % (64 * GIB);
        break;
      default:
        b[i] = rnd() >> (rnd() % 20);
        break;
      }
    }
    world1(&wb, "cuda", d, b);
    const qdp_encoding enc = encs[rnd() % 4];
    const uint32_t qubits = 1 + (uint32_t)(rnd() % 50);
    struct plan_request r = req_for(enc, qubits, (enum plan_policy)(rnd() % 6));
    if (enc == QDP_ENCODING_AMPLITUDE) {
      r.values_per_sample = 1 + rnd() % (1ull << qubits);
    }
    r.out_dtype = rnd() % 2 ? QDP_DTYPE_COMPLEX64 : QDP_DTYPE_COMPLEX128;
    r.batch = rnd() % 3 == 0 ? 1 + rnd() % 20 : 1;
    if (qubits > 40) {
      r.batch = 1; /* keep batch * 2^n * 16 within 64 bits */
    }
    r.staging_bytes = rnd() % 2 ? 0 : rnd() % GIB;
    const uint64_t n_amp = 1ull << qubits;
    const int sharded =
        r.policy == PLAN_EVEN || r.policy == PLAN_UNEVEN || r.policy == PLAN_CAPACITY;
    const int bad_request =
        sharded && (r.batch > 1 || d > n_amp || (r.policy == PLAN_EVEN && (d & (d - 1)) != 0));
    /* iqp splits a sample only into 2^g equal ranges: what the same placement of angle gives
     * (placement does not depend on the encoding) says whether it can. */
    int unequal = 0;
    if (!bad_request && enc == QDP_ENCODING_IQP && d > 1 &&
        (r.policy == PLAN_UNEVEN || r.policy == PLAN_CAPACITY)) {
      struct plan_request ra = r;
      ra.encoding = QDP_ENCODING_ANGLE;
      ra.values_per_sample = qubits;
      struct plan *pa = compute_ok(&ra, &wb.w);
      unequal = !equal_pow2_ranges(pa);
      plan_destroy(pa);
    }
    const int refuse = bad_request || unequal;
    struct plan *p = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    qdp_status rc = plan_compute(&r, &wb.w, NULL, &p, &e);
    if (refuse) {
      ck_assert_msg(rc == QDP_ERR_INVALID_ARGUMENT, "iter %d: want a refusal, got %s", iter,
                    qdp_status_name(rc));
      continue;
    }
    CK_OK_AT(rc, e, "iter %d: plan_compute", iter);
    assert_tiles(p, &wb.w);
    int all_fit = 1;
    for (size_t i = 0; i < p->nneeds; i++) {
      const struct plan_need *n = &p->needs[i];
      u128 sum = (u128)n->shard_bytes + n->staging_bytes + n->workspace_bytes;
      ck_assert(sum > UINT64_MAX ? n->need_bytes == UINT64_MAX : n->need_bytes == (uint64_t)sum);
      ck_assert_uint_eq(n->staging_bytes, r.staging_bytes);
      ck_assert_int_eq(n->fits, sum <= n->budget_bytes);
      all_fit &= n->fits;
    }
    ck_assert_int_eq(p->feasible, all_fit);
    ck_assert_int_eq(plan_check_feasible(p, NULL), all_fit ? QDP_OK : QDP_ERR_RESOURCE_EXHAUSTED);
    ck_assert_uint_eq(p->global_bits,
                      equal_pow2_ranges(p) ? (uint32_t)__builtin_ctzll(p->nshards) : 0);
    switch (p->policy) {
    case PLAN_EVEN:
      ck_assert_uint_eq((uint64_t)1 << p->global_bits, p->nshards);
      for (size_t i = 0; i < p->nshards; i++) {
        ck_assert_uint_eq(p->shards[i].count, n_amp >> p->global_bits);
      }
      break;
    case PLAN_UNEVEN:
      ck_assert_uint_eq(p->nshards, d);
      for (size_t i = 0; i < p->nshards; i++) {
        ck_assert_uint_eq(p->shards[i].count, n_amp / d + (i < n_amp % d));
      }
      break;
    case PLAN_BATCH: {
      const uint64_t k = r.batch < d ? r.batch : d;
      ck_assert_uint_eq(p->nshards, k);
      for (size_t i = 0; i < p->nshards; i++) {
        ck_assert_uint_eq(p->shards[i].rows, r.batch / k + (i < r.batch % k));
        ck_assert_uint_eq(p->shards[i].count, n_amp);
      }
      break;
    }
    case PLAN_CAPACITY: {
      /* Against quotas N * w_i / W in long double; where every quota is at least 1, largest
       * remainder keeps each count within one of it. */
      long double wsum = 0, q[12];
      int min_ok = 1;
      for (size_t i = 0; i < p->nshards; i++) {
        uint64_t bb = p->needs[i].budget_bytes;
        q[i] = bb > r.staging_bytes ? (long double)(bb - r.staging_bytes) : 0;
        wsum += q[i];
      }
      for (size_t i = 0; i < p->nshards; i++) {
        q[i] = wsum > 0 ? q[i] * (long double)n_amp / wsum : (long double)n_amp / p->nshards;
        min_ok &= q[i] >= 1;
      }
      for (size_t i = 0; min_ok && i < p->nshards; i++) {
        ck_assert_msg(fabsl((long double)p->shards[i].count - q[i]) < 1.0001L,
                      "iter %d: capacity shard %zu holds %llu, quota %Lf", iter, i,
                      (unsigned long long)p->shards[i].count, q[i]);
      }
      break;
    }
    case PLAN_SINGLE: {
      ck_assert_uint_eq(p->nshards, 1);
      for (size_t i = 0; i < d; i++) {
        ck_assert_uint_le(b[i], p->needs[0].budget_bytes);
      }
      break;
    }
    default:
      ck_abort_msg("iter %d: unresolved policy %d", iter, p->policy);
    }
    checked++;
    plan_destroy(p);
  }
  ck_assert_uint_gt(checked, 2000);
}
END_TEST

static Suite *plan_suite(void) {
  Suite *s = suite_create("plan");
  TCase *t = tcase_create("policies");
  tcase_add_test(t, test_uneven_34_qubits_over_6_devices_gives_near_equal_ranges);
  tcase_add_test(t, test_even_refuses_1_qubit_over_4_devices);
  tcase_add_test(t, test_even_31_qubits_over_2_devices_gives_two_halves);
  tcase_add_test(t, test_even_refuses_a_device_count_that_is_not_a_power_of_two);
  tcase_add_test(t, test_even_orders_exchange_partners_by_link_cost);
  tcase_add_test(t, test_capacity_splits_by_budget_80_40_40);
  tcase_add_test(t, test_capacity_rounds_by_largest_remainder_and_leaves_no_shard_empty);
  tcase_add_test(t, test_capacity_weighs_budget_minus_staging);
  tcase_add_test(t, test_single_takes_the_largest_budget_with_ties_to_the_earliest);
  tcase_add_test(t, test_subset_keeps_its_own_order);
  tcase_add_test(t, test_50_qubit_plans_over_8_devices_are_exact);
  tcase_add_test(t, test_iqp_needs_equal_power_of_two_ranges_not_a_policy);
  tcase_add_test(t, test_iqp_over_devices_that_take_the_top_bits_splits_into_whole_blocks);
  tcase_add_test(t, test_policy_names_round_trip);
  suite_add_tcase(s, t);

  t = tcase_create("batch");
  tcase_add_test(t, test_batch_of_3_over_8_devices_uses_the_3_largest_in_order);
  tcase_add_test(t, test_odd_batch_splits_near_equal_rows);
  tcase_add_test(t, test_batch_of_one_is_a_single_device_plan);
  tcase_add_test(t, test_sharding_one_state_refuses_a_batch);
  suite_add_tcase(s, t);

  t = tcase_create("feasibility");
  tcase_add_test(t, test_35_qubits_complex128_over_two_139_gib_is_refused_with_the_numbers);
  tcase_add_test(t, test_feasibility_counts_staging_and_workspace_to_the_byte);
  tcase_add_test(t, test_an_external_output_needs_only_staging_and_workspace);
  tcase_add_test(t, test_workspace_follows_the_documented_formulas);
  tcase_add_test(t, test_refusal_message_stays_within_its_buffer);
  suite_add_tcase(s, t);

  t = tcase_create("validation");
  tcase_add_test(t, test_every_bad_request_names_its_field);
  tcase_add_test(t, test_an_empty_world_is_refused);
  tcase_add_test(t, test_an_inconsistent_world_is_an_internal_error);
  tcase_add_test(t, test_max_qubits_above_the_hard_ceiling_is_not_trusted);
  tcase_add_test(t, test_size_overflow_at_60_qubits);
  suite_add_tcase(s, t);

  t = tcase_create("ranks");
  tcase_add_test(t, test_three_ranks_with_different_meshes_each_get_their_shards);
  suite_add_tcase(s, t);

  t = tcase_create("auto");
  tcase_add_test(t, test_auto_picks_single_even_capacity_or_batch);
  tcase_add_test(t, test_auto_iqp_uses_even_over_the_largest_power_of_two_set);
  suite_add_tcase(s, t);

  t = tcase_create("invariants");
  tcase_add_test(t, test_random_plans_tile_the_state_exactly);
  tcase_set_timeout(t, 60);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(plan_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
