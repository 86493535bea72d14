/* test_plan_policies.c — each explicit policy's placement (daemon/plan/plan.c): uneven, even (and
 * its exchange partners by link cost), capacity, single, a device subset, batch; 50-qubit plans
 * exact to the amplitude; iqp's placements (2^g equal ranges, or whole blocks over devices that
 * transform the top bits alone); and the policies' names. Expected values are worked out by hand.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "plan_fixture.h"

#define TIB (1ull << 40)

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

/* Over devices that transform iqp's top 3 bits alone (the CPU backend's), unequal ranges of whole
 * blocks of 2^(n-3) need no exchange. 12 qubits, blocks of 512: uneven over 3 ends at 1366, 2731
 * and 4096, moved to the nearest block edges 1536, 2560 and 4096 (3, 2 and 3 blocks); over 6 at
 * 683, 1366, 2049, 2732, 3414, 4096, moved to 1, 2, 1, 1, 2 and 1 blocks; capacity at 2:1 ends at
 * 2731, moved to 5 and 3 blocks; none of them counts an exchange buffer; an even plan of 4 needs
 * none either, one of 16 does (a stage below the top 3 bits); more than 8 devices unequally are
 * refused. */
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

/* iqp's global-bit exchange needs 2^g equal ranges, whatever the policy that made them: uneven
 * over 2 or 4 devices makes them (global bits 1 and 2), uneven over 3 and capacity over unequal
 * room do not and are refused with the ranges; one device and whole samples need no exchange. */
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

void plan_add_policies(TCase *tc) {
  tcase_add_test(tc, test_uneven_34_qubits_over_6_devices_gives_near_equal_ranges);
  tcase_add_test(tc, test_even_refuses_1_qubit_over_4_devices);
  tcase_add_test(tc, test_even_31_qubits_over_2_devices_gives_two_halves);
  tcase_add_test(tc, test_even_refuses_a_device_count_that_is_not_a_power_of_two);
  tcase_add_test(tc, test_even_orders_exchange_partners_by_link_cost);
  tcase_add_test(tc, test_capacity_splits_by_budget_80_40_40);
  tcase_add_test(tc, test_capacity_rounds_by_largest_remainder_and_leaves_no_shard_empty);
  tcase_add_test(tc, test_capacity_weighs_budget_minus_staging);
  tcase_add_test(tc, test_single_takes_the_largest_budget_with_ties_to_the_earliest);
  tcase_add_test(tc, test_subset_keeps_its_own_order);
  tcase_add_test(tc, test_50_qubit_plans_over_8_devices_are_exact);
  tcase_add_test(tc, test_iqp_needs_equal_power_of_two_ranges_not_a_policy);
  tcase_add_test(tc, test_iqp_over_devices_that_take_the_top_bits_splits_into_whole_blocks);
  tcase_add_test(tc, test_policy_names_round_trip);
}

/* plan_window: rows and an amplitude range of a one-shard plan, on its device, for an encode
 * into memory its caller holds; ranges only of encodings whose amplitudes are each a function of
 * their sample's parameters, whole states of any. */
START_TEST(test_windows_of_a_single_device_plan) {
  struct world_buf wb;
  world_same(&wb, 2, 1ull << 30);
  struct plan_request r = req_for(QDP_ENCODING_ANGLE, 5, PLAN_SINGLE);
  r.batch = 9;
  struct plan *p = compute_ok(&r, &wb.w), *w = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(plan_window(p, 4, 8, 16, &w, &e), QDP_OK);
  ck_assert_uint_eq(w->nshards, 1);
  ck_assert_uint_eq(w->shards[0].device, p->shards[0].device);
  ck_assert_uint_eq(w->shards[0].first, 8);
  ck_assert_uint_eq(w->shards[0].count, 16);
  ck_assert_uint_eq(w->shards[0].row_first, 0);
  ck_assert_uint_eq(w->shards[0].rows, 4);
  ck_assert_uint_eq(w->shards[0].bytes, 4 * 16 * 16);
  ck_assert_uint_eq(w->total_bytes, 4 * 16 * 16);
  ck_assert_uint_eq(w->batch, 4);
  ck_assert_uint_eq(w->amplitudes, 32);
  ck_assert(w->output_external && w->feasible);
  ck_assert_uint_eq(w->needs[0].shard_bytes, 0);
  plan_destroy(w);
  ck_assert(plan_windows_amplitudes(QDP_ENCODING_PHASE));
  ck_assert(plan_windows_amplitudes(QDP_ENCODING_BASIS));
  ck_assert(!plan_windows_amplitudes(QDP_ENCODING_AMPLITUDE));
  ck_assert(!plan_windows_amplitudes(QDP_ENCODING_IQP));
  /* Past the end, more rows than the plan's, nothing. */
  const uint64_t bad[][3] = {{4, 24, 16}, {10, 0, 32}, {0, 0, 32}, {4, 0, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(plan_window(p, bad[i][0], bad[i][1], bad[i][2], &w, &e),
                     QDP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(w);
  }
  plan_destroy(p);
  /* Amplitude: whole states only (its norm runs over the whole sample). */
  r = req_for(QDP_ENCODING_AMPLITUDE, 5, PLAN_SINGLE);
  r.batch = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(plan_window(p, 2, 0, 32, &w, &e), QDP_OK);
  plan_destroy(w);
  ck_assert_int_eq(plan_window(p, 2, 0, 16, &w, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "amplitude"));
  plan_destroy(p);
  /* Only of a plan of one shard. */
  r = req_for(QDP_ENCODING_ANGLE, 5, PLAN_EVEN);
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(plan_window(p, 1, 0, 32, &w, &e), QDP_ERR_INVALID_ARGUMENT);
  plan_destroy(p);
}
END_TEST

void plan_add_batch(TCase *tc) {
  tcase_add_test(tc, test_batch_of_3_over_8_devices_uses_the_3_largest_in_order);
  tcase_add_test(tc, test_odd_batch_splits_near_equal_rows);
  tcase_add_test(tc, test_batch_of_one_is_a_single_device_plan);
  tcase_add_test(tc, test_sharding_one_state_refuses_a_batch);
  tcase_add_test(tc, test_windows_of_a_single_device_plan);
}
