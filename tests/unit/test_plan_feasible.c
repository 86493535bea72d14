/* test_plan_feasible.c — what each device of a plan must hold against its budget
 * (daemon/plan/feasible.c): shard, staging and workspace to the byte, the workspace's documented
 * formulas, an external output that needs no shard, and the refusal that names every device's
 * figures and stays within its buffer. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "plan_fixture.h"

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
    ck_assert_ptr_nonnull(strstr(e.msg, "35-qubit complex128 state (512 GiB) does not fit: "));
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

void plan_add_feasibility(TCase *tc) {
  tcase_add_test(tc, test_35_qubits_complex128_over_two_139_gib_is_refused_with_the_numbers);
  tcase_add_test(tc, test_feasibility_counts_staging_and_workspace_to_the_byte);
  tcase_add_test(tc, test_an_external_output_needs_only_staging_and_workspace);
  tcase_add_test(tc, test_workspace_follows_the_documented_formulas);
  tcase_add_test(tc, test_refusal_message_stays_within_its_buffer);
}
