/* test_qdpk_checks.c — the GPU's checks of inputs against their CPU twins: the first non-finite
 * value, the first bad basis row, the closed forms' parameter check; and the launchers' refusal of
 * bad arguments. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "qdpk_fixture.h"

/* ---- checks ---- */

static void expect_nonfinite(const void *hx, qdp_dtype in, uint64_t count, int want_found,
                             uint64_t want_index) {
  size_t bytes = (size_t)count * in_size(in);
  void *dx = to_device(hx, bytes ? bytes : 1);
  int *dfound = dmalloc(sizeof(int));
  uint64_t *dindex = dmalloc(sizeof(uint64_t));
  poison_device(dfound, sizeof(int));
  poison_device(dindex, sizeof(uint64_t));
  expect_launch(qdpk_find_nonfinite(dx, in, count, dfound, dindex, 0), "find_nonfinite");
  int found;
  uint64_t index;
  from_device(&found, dfound, sizeof found);
  from_device(&index, dindex, sizeof index);
  uint64_t cpu_index = 0;
  int cpu_found = qdpk_cpu_find_nonfinite(hx, in, count, &cpu_index);
  ck_assert_int_eq(found, want_found);
  ck_assert_int_eq(cpu_found, want_found);
  if (want_found) {
    ck_assert_uint_eq(index, want_index);
    ck_assert_uint_eq(cpu_index, want_index);
  } else {
    ck_assert_uint_eq(index, 0);
  }
  cudaFree(dx);
  cudaFree(dfound);
  cudaFree(dindex);
}

START_TEST(test_find_nonfinite_reports_the_first_position) {
  const uint64_t count = 3000017;
  for (int t = 0; t < 2; t++) {
    qdp_dtype in = t ? QDP_DTYPE_FLOAT32 : QDP_DTYPE_FLOAT64;
    void *x = random_reals(in, count, -1e3, 1e3, 0);
#define SET(i, v) \
  do { \
    if (in == QDP_DTYPE_FLOAT32) { \
      ((float *)x)[i] = (float)(v); \
    } else { \
      ((double *)x)[i] = (double)(v); \
    } \
  } while (0)
    expect_nonfinite(x, in, count, 0, 0);
    SET(count - 1, NAN);
    expect_nonfinite(x, in, count, 1, count - 1);
    SET(1234567, -INFINITY);
    expect_nonfinite(x, in, count, 1, 1234567);
    SET(2049, INFINITY);
    SET(2050, NAN);
    expect_nonfinite(x, in, count, 1, 2049);
    SET(0, NAN);
    expect_nonfinite(x, in, count, 1, 0);
    expect_nonfinite(x, in, 0, 0, 0); /* empty: nothing to find */
#undef SET
    free(x);
  }
  int64_t ints[5] = {1, -2, 3, INT64_MAX, INT64_MIN};
  expect_nonfinite(ints, QDP_DTYPE_INT64, 5, 0, 0);
}
END_TEST

static void expect_basis_check(const void *hx, qdp_dtype in, uint64_t stride, uint64_t rows,
                               uint32_t qubits, int want_fault, uint64_t want_row) {
  size_t bytes = (size_t)((rows - 1) * stride + 1) * in_size(in);
  void *dx = to_device(hx, bytes);
  int *dfault = dmalloc(sizeof(int));
  uint64_t *drow = dmalloc(sizeof(uint64_t));
  poison_device(dfault, sizeof(int));
  poison_device(drow, sizeof(uint64_t));
  expect_launch(qdpk_check_basis(dx, in, stride, rows, qubits, dfault, drow, 0), "check_basis");
  int fault;
  uint64_t row;
  from_device(&fault, dfault, sizeof fault);
  from_device(&row, drow, sizeof row);
  uint64_t cpu_row = 0;
  int cpu_fault = (int)qdpk_cpu_check_basis(hx, in, stride, rows, qubits, &cpu_row);
  ck_assert_int_eq(fault, want_fault);
  ck_assert_int_eq(cpu_fault, want_fault);
  if (want_fault != QDPK_BASIS_OK) {
    ck_assert_uint_eq(row, want_row);
    ck_assert_uint_eq(cpu_row, want_row);
  }
  cudaFree(dx);
  cudaFree(dfault);
  cudaFree(drow);
}

START_TEST(test_check_basis_reports_the_first_bad_row) {
  const uint64_t rows = 100003, stride = 3;
  const uint32_t n = 10;
  double *xd = qdpt_xmalloc((size_t)rows * stride * sizeof(double));
  int64_t *xi = qdpt_xmalloc((size_t)rows * stride * sizeof(int64_t));
  for (uint64_t r = 0; r < rows * stride; r++) {
    uint64_t v = qdpt_rng_next() % 1024;
    xd[r] = (double)v;
    xi[r] = (int64_t)v;
  }
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n, QDPK_BASIS_OK, 0);
  expect_basis_check(xi, QDP_DTYPE_INT64, stride, rows, n, QDPK_BASIS_OK, 0);
  xd[99999 * stride] = 1024.0; /* 2^n */
  xi[99999 * stride] = 1024;
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n, QDPK_BASIS_TOO_LARGE, 99999);
  expect_basis_check(xi, QDP_DTYPE_INT64, stride, rows, n, QDPK_BASIS_TOO_LARGE, 99999);
  xd[70000 * stride] = -1.5; /* fractional before negative */
  xi[70000 * stride] = -1;
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n, QDPK_BASIS_NOT_INTEGER, 70000);
  expect_basis_check(xi, QDP_DTYPE_INT64, stride, rows, n, QDPK_BASIS_NEGATIVE, 70000);
  xd[5000 * stride] = -3.0;
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n, QDPK_BASIS_NEGATIVE, 5000);
  xd[4999 * stride] = NAN;
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n, QDPK_BASIS_NOT_FINITE, 4999);
  xd[7 * stride] = 2.25;
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n, QDPK_BASIS_NOT_INTEGER, 7);
  /* A value that is bad for 10 qubits only is good for 11. */
  xd[7 * stride] = 1.0;
  xd[4999 * stride] = 1.0;
  xd[5000 * stride] = 1.0;
  xd[70000 * stride] = 1.0;
  expect_basis_check(xd, QDP_DTYPE_FLOAT64, stride, rows, n + 1, QDPK_BASIS_OK, 0);
  float xf[4] = {3.0f, -0.0f, 7.0f, 8.0f};
  expect_basis_check(xf, QDP_DTYPE_FLOAT32, 1, 4, 3, QDPK_BASIS_TOO_LARGE, 3);
  free(xd);
  free(xi);
}
END_TEST

static void expect_params_check(const void *hx, qdp_dtype in, uint64_t stride, uint64_t cols,
                                uint64_t rows, qdp_dtype out, int summed, int want_fault,
                                uint64_t want_row, uint64_t want_col) {
  size_t bytes = (size_t)((rows - 1) * stride + cols) * in_size(in);
  void *dx = to_device(hx, bytes);
  int *dfault = dmalloc(sizeof(int));
  uint64_t *drow = dmalloc(sizeof(uint64_t)), *dcol = dmalloc(sizeof(uint64_t));
  poison_device(dfault, sizeof(int));
  poison_device(drow, sizeof(uint64_t));
  poison_device(dcol, sizeof(uint64_t));
  expect_launch(qdpk_check_params(dx, in, stride, cols, rows, out, summed, dfault, drow, dcol, 0),
                "check_params");
  int fault;
  uint64_t row, col, cpu_row = 0, cpu_col = 0;
  double sum = 0;
  from_device(&fault, dfault, sizeof fault);
  from_device(&row, drow, sizeof row);
  from_device(&col, dcol, sizeof col);
  int cpu_fault =
      (int)qdpk_cpu_check_params(hx, in, stride, cols, rows, out, summed, &cpu_row, &cpu_col, &sum);
  ck_assert_int_eq(fault, want_fault);
  ck_assert_int_eq(cpu_fault, want_fault);
  if (want_fault != QDPK_PARAM_OK) {
    ck_assert_uint_eq(row, want_row);
    ck_assert_uint_eq(cpu_row, want_row);
    ck_assert_uint_eq(col, want_col);
    ck_assert_uint_eq(cpu_col, want_col);
  }
  cudaFree(dx);
  cudaFree(dfault);
  cudaFree(drow);
  cudaFree(dcol);
}

/* The closed forms' parameter check: the first faulty row over many rows (threads race for it),
 * its value or its sum, NaN before out-of-range by position, float64 beyond float32 only for
 * complex64, the sum bound of qdpk_param_sum_limit exactly as the CPU computes it. */
START_TEST(test_check_params_reports_the_first_fault_like_cpu) {
  const uint64_t rows = 100003, cols = 21, stride = 23; /* iqp of 6 qubits, padded rows */
  double *xd = random_reals(QDP_DTYPE_FLOAT64, rows * stride, -3.0, 3.0, 0);
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX64, QDP_DTYPE_COMPLEX128};
  for (int o = 0; o < 2; o++) {
    for (int summed = 0; summed < 2; summed++) {
      expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, outs[o], summed, QDPK_PARAM_OK,
                          0, 0);
    }
  }
  xd[99999 * stride + 20] = 1e39;
  expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, QDP_DTYPE_COMPLEX64, 0,
                      QDPK_PARAM_NOT_FLOAT32, 99999, 20);
  expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, QDP_DTYPE_COMPLEX128, 0,
                      QDPK_PARAM_OK, 0, 0);
  /* 3e38 + 3e38 fits neither sum; the row before the out-of-range one comes first. */
  xd[70000 * stride + 3] = 3e38;
  xd[70000 * stride + 9] = -3e38;
  expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, QDP_DTYPE_COMPLEX64, 1,
                      QDPK_PARAM_SUM_OVERFLOW, 70000, cols);
  expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, QDP_DTYPE_COMPLEX64, 0,
                      QDPK_PARAM_NOT_FLOAT32, 99999, 20);
  xd[70000 * stride + 12] = NAN;
  xd[70000 * stride + 13] = 1e39;
  expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, QDP_DTYPE_COMPLEX64, 1,
                      QDPK_PARAM_NOT_FINITE, 70000, 12);
  /* float64's own bound. */
  xd[5 * stride] = DBL_MAX / 2;
  xd[5 * stride + 1] = DBL_MAX / 2;
  expect_params_check(xd, QDP_DTYPE_FLOAT64, stride, cols, rows, QDP_DTYPE_COMPLEX128, 1,
                      QDPK_PARAM_SUM_OVERFLOW, 5, cols);
  /* The edge of float32 and of the sum bound, one row each. */
  double edge[4] = {0x1.fffffefffffffp127, 0.0, 0x1p128 - 0x1p103, 0.0};
  expect_params_check(edge, QDP_DTYPE_FLOAT64, 2, 2, 2, QDP_DTYPE_COMPLEX64, 0,
                      QDPK_PARAM_NOT_FLOAT32, 1, 0);
  double lim = qdpk_param_sum_limit(QDP_DTYPE_COMPLEX64);
  double at[4] = {lim / 2, lim / 2, lim / 2, lim / 2 * (1 + 0x1p-40)};
  expect_params_check(at, QDP_DTYPE_FLOAT64, 2, 2, 2, QDP_DTYPE_COMPLEX64, 1,
                      QDPK_PARAM_SUM_OVERFLOW, 1, 2);
  float xf[6] = {3e38f, 3e38f, 1.0f, 1.0f, INFINITY, 1.0f};
  expect_params_check(xf, QDP_DTYPE_FLOAT32, 2, 2, 3, QDP_DTYPE_COMPLEX64, 1,
                      QDPK_PARAM_SUM_OVERFLOW, 0, 2);
  expect_params_check(xf, QDP_DTYPE_FLOAT32, 2, 2, 3, QDP_DTYPE_COMPLEX128, 1,
                      QDPK_PARAM_NOT_FINITE, 2, 0);
  free(xd);
}
END_TEST

START_TEST(test_launchers_refuse_bad_arguments) {
  void *d = dmalloc(1024);
  struct qdpk_span s = {3, 0, 8, 1, QDP_DTYPE_COMPLEX128};
  ck_assert_int_eq(qdpk_wht(d, QDP_DTYPE_COMPLEX128, 3, 1, 0), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(qdpk_wht(d, QDP_DTYPE_FLOAT64, 4, 1, 0), QDP_ERR_INVALID_ARGUMENT);
  s.count = 0;
  ck_assert_int_eq(qdpk_angle(&s, d, QDP_DTYPE_FLOAT64, 3, d, 0), QDP_ERR_INVALID_ARGUMENT);
  s.count = 9; /* past 2^3 */
  ck_assert_int_eq(qdpk_phase(&s, d, QDP_DTYPE_FLOAT64, 3, d, 0), QDP_ERR_INVALID_ARGUMENT);
  s.count = 8;
  s.out = QDP_DTYPE_FLOAT32;
  ck_assert_int_eq(qdpk_basis(&s, d, QDP_DTYPE_INT64, 1, d, 0), QDP_ERR_INVALID_ARGUMENT);
  s.out = QDP_DTYPE_COMPLEX64;
  ck_assert_int_eq(qdpk_amplitude(&s, d, QDP_DTYPE_INT64, 8, 8, d, NULL, d, 0),
                   QDP_ERR_INVALID_ARGUMENT);
  cudaFree(d);
}
END_TEST

void qdpk_add_find_nonfinite(TCase *tc) {
  tcase_add_test(tc, test_find_nonfinite_reports_the_first_position);
}

void qdpk_add_check_basis(TCase *tc) {
  tcase_add_test(tc, test_check_basis_reports_the_first_bad_row);
}

void qdpk_add_check_params(TCase *tc) {
  tcase_add_test(tc, test_check_params_reports_the_first_fault_like_cpu);
}

void qdpk_add_arguments(TCase *tc) {
  tcase_add_test(tc, test_launchers_refuse_bad_arguments);
}
