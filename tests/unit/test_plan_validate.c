/* test_plan_validate.c — the planner's checks before any placement (daemon/plan/validate.c): every
 * bad request refused with the field it names, empty and inconsistent worlds, a max_qubits above
 * the hard ceiling, and sizes that overflow at 60 qubits. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "plan_fixture.h"

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

void plan_add_validation(TCase *tc) {
  tcase_add_test(tc, test_every_bad_request_names_its_field);
  tcase_add_test(tc, test_an_empty_world_is_refused);
  tcase_add_test(tc, test_an_inconsistent_world_is_an_internal_error);
  tcase_add_test(tc, test_max_qubits_above_the_hard_ceiling_is_not_trusted);
  tcase_add_test(tc, test_size_overflow_at_60_qubits);
}
