/* test_runtime_refusals.c — what an encode on the CPU backend refuses, with the field, the
 * position and a message, leaving nothing allocated: a zero-norm sample in a batch, bad
 * parameters, closed forms beyond float32, sums that overflow the output precision (or are
 * computed through the fallback), and a device that filled up since planning. */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "runtime_fixture.h"

/* Runs a job expected to fail; checks status, field and a message fragment, and that nothing stays
 * allocated. */
static void expect_refusal(struct runtime_mesh *m, const struct plan *p,
                           const struct runtime_input *in, qdp_status want, const char *fragment) {
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(runtime_encode(m, p, in, &s, &e), want, e);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(e.msg, fragment) != NULL, "message '%s' lacks '%s'", e.msg, fragment);
  qdpt_assert_mesh_idle(m, fragment);
}

START_TEST(test_zero_norm_sample_in_batch_is_refused_not_zeroed) {
  enum { N = 4, B = 4, L = 16 };
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double *x = random_values(B * L, 5);
  memset(x + 2 * L, 0, L * sizeof *x); /* sample 2 is all zeros */
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = L};
  struct plan *p = qdpt_plan_on(m, 2, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, N, B, L,
                                QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT, "sample 2 has zero norm");
  x[2 * L] = 1.0;
  x[3 * L + 5] = NAN;
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT, "sample 3 value 5 is nan");
  x[3 * L + 5] = INFINITY;
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT, "sample 3 value 5 is inf");
  free(x);
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_bad_parameters_are_refused_with_position) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  double angles[2][3] = {{0.1, 0.2, 0.3}, {0.4, INFINITY, 0.6}};
  struct runtime_input in = {.data = angles, .dtype = QDP_DTYPE_FLOAT64, .rows = 2, .cols = 3};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_BATCH, QDP_ENCODING_ANGLE, 3, 2, 3, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT, "sample 1 value 1 is inf");
  plan_destroy(p);

  double idx[3] = {1.0, 2.5, 3.0};
  struct runtime_input bin = {.data = idx, .dtype = QDP_DTYPE_FLOAT64, .rows = 3, .cols = 1};
  p = qdpt_plan_on(m, 1, PLAN_BATCH, QDP_ENCODING_BASIS, 2, 3, 1, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX64);
  expect_refusal(m, p, &bin, QDP_ERR_INVALID_ARGUMENT, "2.5 of sample 1 is not an integer");
  idx[1] = 4.0;
  expect_refusal(m, p, &bin, QDP_ERR_INVALID_ARGUMENT, "is not below 2^qubits");
  idx[1] = -1.0;
  expect_refusal(m, p, &bin, QDP_ERR_INVALID_ARGUMENT, "is negative");
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

/* complex64 output computes in float32: a finite float64 parameter beyond float32's range would
 * become Inf there and the state NaN, so it is refused with its position and what to ask for,
 * in one row of a batch and in a state sharded over devices alike; complex128 computes it. */
START_TEST(test_closed_forms_refuse_values_beyond_float32) {
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double one[1] = {1e39};
  struct runtime_input in = {.data = one, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 1};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 1, 1, 1, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX64);
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT,
                 "input sample 0 value 0 is 1e+39, which does not fit float32");
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT,
                 "the precision complex64 output is computed in: ask for complex128 output");
  plan_destroy(p);
  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 1, 1, 1, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX128);
  double complex *psi = qdpt_encode_read(m, p, &in);
  ck_assert_double_eq_tol(creal(psi[0]), cos(1e39), 1e-15);
  ck_assert_double_eq_tol(creal(psi[1]), sin(1e39), 1e-15);
  free(psi);
  plan_destroy(p);

  double rows[2][2] = {{0.1, 0.2}, {0.3, -1e39}};
  struct runtime_input batch = {.data = rows, .dtype = QDP_DTYPE_FLOAT64, .rows = 2, .cols = 2};
  static const qdp_encoding encs[3] = {QDP_ENCODING_ANGLE, QDP_ENCODING_PHASE, QDP_ENCODING_IQP_Z};
  for (int k = 0; k < 3; k++) {
    p = qdpt_plan_on(m, 2, PLAN_BATCH, encs[k], 2, 2, 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64);
    expect_refusal(m, p, &batch, QDP_ERR_INVALID_ARGUMENT, "input sample 1 value 1 is -1e+39");
    plan_destroy(p);
  }
  /* iqp's pair coefficient, in a state sharded over two devices. */
  double d[3] = {0.5, 0.25, 4e38};
  struct runtime_input iqp = {.data = d, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 3};
  p = qdpt_plan_on(m, 2, PLAN_EVEN, QDP_ENCODING_IQP, 2, 1, 3, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX64);
  expect_refusal(m, p, &iqp, QDP_ERR_INVALID_ARGUMENT, "input sample 0 value 2 is 4e+38");
  plan_destroy(p);
  /* The largest value that rounds to FLT_MAX fits; the next rounds to Inf. */
  one[0] = 0x1.fffffefffffffp127;
  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_PHASE, 1, 1, 1, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX64);
  free(qdpt_encode_read(m, p, &in));
  one[0] = 0x1p128 - 0x1p103;
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT, "does not fit float32");
  plan_destroy(p);
  qdpt_assert_mesh_idle(m, "after the refusals");
  runtime_mesh_destroy(m);
}
END_TEST

/* iqp's theta(z) sums the coefficients: values that fit but whose magnitudes sum past what the
 * output precision can hold are refused with the sum, in float32 (ask for complex128) and in
 * float64. phase multiplies per-qubit factors e^{i x_k} instead of summing, so its state is
 * defined and computed: complex64 agrees with complex128 from the same float32 values. */
START_TEST(test_sums_that_overflow_the_output_precision_are_refused_or_computed) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  float big[2] = {3e38f, 3e38f};
  struct runtime_input in = {.data = big, .dtype = QDP_DTYPE_FLOAT32, .rows = 1, .cols = 2};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_IQP_Z, 2, 1, 2, QDP_DTYPE_FLOAT32,
                                QDP_DTYPE_COMPLEX64);
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT,
                 "input sample 0 has coefficients whose magnitudes sum to 6e+38: theta(z), summed "
                 "in float32 (the precision complex64 output is computed in), could overflow");
  expect_refusal(m, p, &in, QDP_ERR_INVALID_ARGUMENT, "ask for complex128 output");
  plan_destroy(p);
  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_IQP_Z, 2, 1, 2, QDP_DTYPE_FLOAT32,
                   QDP_DTYPE_COMPLEX128);
  double complex *psi = qdpt_encode_read(m, p, &in);
  for (int b = 0; b < 4; b++) {
    ck_assert(isfinite(creal(psi[b])) && isfinite(cimag(psi[b])));
  }
  free(psi);
  plan_destroy(p);
  double huge[2] = {1e308, 1e308};
  struct runtime_input in64 = {.data = huge, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 2};
  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_IQP_Z, 2, 1, 2, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX128);
  expect_refusal(m, p, &in64, QDP_ERR_INVALID_ARGUMENT, "summed in float64, could overflow");
  expect_refusal(m, p, &in64, QDP_ERR_INVALID_ARGUMENT, "scale the coefficients down");
  plan_destroy(p);

  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_PHASE, 2, 1, 2, QDP_DTYPE_FLOAT32,
                   QDP_DTYPE_COMPLEX64);
  float complex *got = qdpt_encode_read(m, p, &in);
  plan_destroy(p);
  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_PHASE, 2, 1, 2, QDP_DTYPE_FLOAT32,
                   QDP_DTYPE_COMPLEX128);
  psi = qdpt_encode_read(m, p, &in);
  for (int b = 0; b < 4; b++) {
    ck_assert_msg(cabs((double complex)got[b] - psi[b]) < 1e-6,
                  "phase amplitude %d: %g%+gi vs %g%+gi", b, crealf(got[b]), cimagf(got[b]),
                  creal(psi[b]), cimag(psi[b]));
  }
  free(got);
  free(psi);
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_device_that_filled_up_since_planning_refuses_with_numbers) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", 4096, 0);
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 8, 1, 8, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128); /* 4096 B: exactly the budget */
  double x[8] = {0};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 8};
  struct runtime_state *first = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_encode(m, p, &in, &first, &e), e);
  struct runtime_state *second = NULL;
  CK_STATUS(runtime_encode(m, p, &in, &second, &e), QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_ptr_null(second);
  ck_assert_msg(strstr(e.msg, "cpu:0 needs 4 KiB") && strstr(e.msg, "only 0 B of its 4 KiB"), "%s",
                e.msg);
  ck_assert_uint_eq(e.need_bytes, 4096); /* the exact figures travel in the detail */
  ck_assert_uint_eq(e.free_bytes, 0);
  runtime_state_destroy(first);
  qdpt_assert_mesh_idle(m, "after the refusal");
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

void runtime_add_encode_refusals(TCase *tc) {
  tcase_add_test(tc, test_zero_norm_sample_in_batch_is_refused_not_zeroed);
  tcase_add_test(tc, test_bad_parameters_are_refused_with_position);
  tcase_add_test(tc, test_closed_forms_refuse_values_beyond_float32);
  tcase_add_test(tc, test_sums_that_overflow_the_output_precision_are_refused_or_computed);
  tcase_add_test(tc, test_device_that_filled_up_since_planning_refuses_with_numbers);
}
