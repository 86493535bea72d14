/* test_kernels_cpu_checks.c — what the CPU kernels check and fall back to: the first non-finite
 * value, every basis and parameter fault with its row and position, iqp at the sum limit, absmax;
 * the norm's per-row exponents against prescaled input, and misaligned input read as aligned. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels_cpu_fixture.h"
#include "qdpk.h"

/* ---- checks ------------------------------------------------------------------------------- */

START_TEST(test_find_nonfinite_reports_first_position) {
  double v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int io = 0; io < 2; io++) {
    qdp_dtype in = IN_TYPES[io];
    uint64_t at = 12345;
    double w[10];
    void *x;

    x = make_input(in, v, 10);
    ck_assert_int_eq(qdpk_cpu_find_nonfinite(x, in, 10, &at), 0);
    ck_assert_uint_eq(at, 12345); /* untouched when nothing is found */
    free(x);

    memcpy(w, v, sizeof(w));
    w[5] = NAN;
    w[7] = INFINITY;
    x = make_input(in, w, 10);
    ck_assert_int_eq(qdpk_cpu_find_nonfinite(x, in, 10, &at), 1);
    ck_assert_uint_eq(at, 5);
    /* A count that stops before the fault finds nothing. */
    ck_assert_int_eq(qdpk_cpu_find_nonfinite(x, in, 5, &at), 0);
    free(x);

    memcpy(w, v, sizeof(w));
    w[3] = -INFINITY;
    x = make_input(in, w, 10);
    ck_assert_int_eq(qdpk_cpu_find_nonfinite(x, in, 10, &at), 1);
    ck_assert_uint_eq(at, 3);
    free(x);

    memcpy(w, v, sizeof(w));
    w[9] = INFINITY;
    x = make_input(in, w, 10);
    ck_assert_int_eq(qdpk_cpu_find_nonfinite(x, in, 10, &at), 1);
    ck_assert_uint_eq(at, 9);
    free(x);
  }
  /* float64 values too large for float32 stay finite in float64. */
  double big = 1e300;
  uint64_t at = 0;
  ck_assert_int_eq(qdpk_cpu_find_nonfinite(&big, QDP_DTYPE_FLOAT64, 1, &at), 0);
  int64_t ints[2] = {INT64_MIN, INT64_MAX};
  ck_assert_int_eq(qdpk_cpu_find_nonfinite(ints, QDP_DTYPE_INT64, 2, &at), 0);
}
END_TEST

/* One fault per case, placed at row 2 of 4 (rows 3 apart); rows 0, 1 and 3 are valid. */
static void expect_basis_fault(qdp_dtype in, double bad, uint32_t qubits,
                               enum qdpk_basis_fault want) {
  double v[12] = {0, 9, 9, 1, 9, 9, bad, 9, 9, 2, 9, 9};
  void *x = make_input(in, v, 12);
  uint64_t row = 777;
  ck_assert_int_eq(qdpk_cpu_check_basis(x, in, 3, 4, qubits, &row), want);
  ck_assert_uint_eq(row, 2);
  free(x);
}

START_TEST(test_check_basis_reports_each_fault_and_row) {
  for (int io = 0; io < 2; io++) {
    qdp_dtype in = IN_TYPES[io];
    expect_basis_fault(in, NAN, 3, QDPK_BASIS_NOT_FINITE);
    expect_basis_fault(in, INFINITY, 3, QDPK_BASIS_NOT_FINITE);
    expect_basis_fault(in, -INFINITY, 3, QDPK_BASIS_NOT_FINITE);
    expect_basis_fault(in, 2.5, 3, QDPK_BASIS_NOT_INTEGER);
    expect_basis_fault(in, 0.125, 3, QDPK_BASIS_NOT_INTEGER);
    expect_basis_fault(in, -1.5, 3, QDPK_BASIS_NOT_INTEGER);
    expect_basis_fault(in, -1, 3, QDPK_BASIS_NEGATIVE);
    expect_basis_fault(in, 8, 3, QDPK_BASIS_TOO_LARGE); /* 2^3 */
    expect_basis_fault(in, 1e30, 63, QDPK_BASIS_TOO_LARGE);
    expect_basis_fault(in, 0x1.0p63, 63, QDPK_BASIS_TOO_LARGE);
  }
  /* The fault of the first bad row is the one reported. */
  double v[3] = {1, -4, 0.5};
  uint64_t row = 0;
  ck_assert_int_eq(qdpk_cpu_check_basis(v, QDP_DTYPE_FLOAT64, 1, 3, 4, &row), QDPK_BASIS_NEGATIVE);
  ck_assert_uint_eq(row, 1);

  int64_t iv[4] = {0, 5, -1, 8};
  ck_assert_int_eq(qdpk_cpu_check_basis(iv, QDP_DTYPE_INT64, 1, 4, 3, &row), QDPK_BASIS_NEGATIVE);
  ck_assert_uint_eq(row, 2);
  int64_t iv2[3] = {7, 0, 8};
  ck_assert_int_eq(qdpk_cpu_check_basis(iv2, QDP_DTYPE_INT64, 1, 3, 3, &row), QDPK_BASIS_TOO_LARGE);
  ck_assert_uint_eq(row, 2);
  int64_t iv3[2] = {0, INT64_MIN};
  ck_assert_int_eq(qdpk_cpu_check_basis(iv3, QDP_DTYPE_INT64, 1, 2, 63, &row), QDPK_BASIS_NEGATIVE);
  ck_assert_uint_eq(row, 1);
}
END_TEST

START_TEST(test_check_basis_accepts_edges) {
  uint64_t row = 4242;
  for (int io = 0; io < 2; io++) {
    double v[4] = {0, -0.0, 7, 3}; /* 2^3 - 1 is the largest index */
    void *x = make_input(IN_TYPES[io], v, 4);
    ck_assert_int_eq(qdpk_cpu_check_basis(x, IN_TYPES[io], 1, 4, 3, &row), QDPK_BASIS_OK);
    free(x);
  }
  double top = 0x1.0p62;
  ck_assert_int_eq(qdpk_cpu_check_basis(&top, QDP_DTYPE_FLOAT64, 1, 1, 63, &row), QDPK_BASIS_OK);
  int64_t iv[3] = {0, 1023, INT64_MAX};
  ck_assert_int_eq(qdpk_cpu_check_basis(iv, QDP_DTYPE_INT64, 1, 2, 10, &row), QDPK_BASIS_OK);
  ck_assert_int_eq(qdpk_cpu_check_basis(iv, QDP_DTYPE_INT64, 1, 3, 63, &row), QDPK_BASIS_OK);
  ck_assert_uint_eq(row, 4242);
}
END_TEST

/* One row per case: faults are found value by value in index order, then the row's sum. */
static void expect_params(const double *v, uint64_t cols, uint64_t rows, qdp_dtype in,
                          qdp_dtype out, int summed, enum qdpk_param_fault want, uint64_t want_row,
                          uint64_t want_col) {
  void *x = make_input(in, v, cols * rows);
  uint64_t row = 777, col = 777;
  double sum = -1;
  ck_assert_int_eq(qdpk_cpu_check_params(x, in, cols, cols, rows, out, summed, &row, &col, &sum),
                   want);
  if (want != QDPK_PARAM_OK) {
    ck_assert_uint_eq(row, want_row);
    ck_assert_uint_eq(col, want_col);
  }
  if (want == QDPK_PARAM_SUM_OVERFLOW) {
    double direct = 0;
    for (uint64_t c = 0; c < cols; c++) {
      direct += fabs((double)in_at(x, in, want_row * cols + c));
    }
    ck_assert_double_eq(sum, direct);
  }
  free(x);
}

START_TEST(test_check_params_reports_each_fault_and_position) {
  /* float64 beyond float32 fits complex128 and float32 input always fits. */
  double v[6] = {0.5, -1.0, 2.0, 0.25, 1e39, NAN};
  expect_params(v, 3, 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 0, QDPK_PARAM_NOT_FLOAT32, 1, 1);
  expect_params(v, 3, 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 0, QDPK_PARAM_NOT_FINITE, 1, 2);
  expect_params(v, 3, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1, QDPK_PARAM_OK, 0, 0);
  v[4] = -INFINITY;
  expect_params(v, 3, 2, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 0, QDPK_PARAM_NOT_FINITE, 1, 1);
  /* The edge of float32: the largest double that rounds to FLT_MAX, and the tie that rounds to
   * Inf; negative alike. */
  double edge[2] = {0x1.fffffefffffffp127, -0x1.fffffefffffffp127};
  expect_params(edge, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 0, QDPK_PARAM_OK, 0, 0);
  edge[1] = -(0x1p128 - 0x1p103);
  expect_params(edge, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 0, QDPK_PARAM_NOT_FLOAT32, 0,
                1);
  /* Sums: each value fits, their magnitudes do not (the sum is reported after the values). */
  double sum[6] = {1.0, 2.0, 3.0, 3e38, -3e38, 1.0};
  expect_params(sum, 3, 2, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1, QDPK_PARAM_SUM_OVERFLOW, 1,
                3);
  expect_params(sum, 3, 2, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 0, QDPK_PARAM_OK, 0, 0);
  expect_params(sum, 3, 2, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX128, 1, QDPK_PARAM_OK, 0, 0);
  double dsum[2] = {DBL_MAX / 2, DBL_MAX / 2};
  expect_params(dsum, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1, QDPK_PARAM_SUM_OVERFLOW, 0,
                2);
  /* Just at the limit passes, just past it does not. */
  double lim = qdpk_param_sum_limit(QDP_DTYPE_COMPLEX64);
  double at[2] = {lim / 2, lim / 2};
  expect_params(at, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1, QDPK_PARAM_OK, 0, 0);
  at[1] = lim / 2 * (1 + 0x1p-40);
  expect_params(at, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1, QDPK_PARAM_SUM_OVERFLOW, 0, 2);
}
END_TEST

/* The sum limit is a true bound: iqp with every coefficient of one sign (theta of the all-ones
 * index then is the whole sum) and magnitudes summing to the limit is finite everywhere in
 * float32, at 3 qubits with pairs and at 11 with the table split of iqp.c. */
START_TEST(test_iqp_at_the_sum_limit_stays_finite) {
  static const uint32_t qubits[2] = {3, 11};
  for (int q = 0; q < 2; q++) {
    uint32_t n = qubits[q];
    uint64_t np = qdp_values_per_sample(QDP_ENCODING_IQP, n);
    float *d = qdpt_xmalloc(np * sizeof *d);
    /* Within 2^-20 of the limit, below it whatever the rounding to float. */
    float each = (float)(qdpk_param_sum_limit(QDP_DTYPE_COMPLEX64) / (double)np * (1 - 0x1p-20));
    for (uint64_t k = 0; k < np; k++) {
      d[k] = each;
    }
    uint64_t row, col;
    double sum;
    ck_assert_int_eq(qdpk_cpu_check_params(d, QDP_DTYPE_FLOAT32, np, np, 1, QDP_DTYPE_COMPLEX64, 1,
                                           &row, &col, &sum),
                     QDPK_PARAM_OK);
    struct qdpk_span s = span_of(n, 0, UINT64_C(1) << n, 1, QDP_DTYPE_COMPLEX64);
    float *o = qdpt_xmalloc(sizeof(float) * 2 << n);
    qdpk_cpu_iqp_phases(&s, d, QDP_DTYPE_FLOAT32, np, 1, o);
    for (uint64_t i = 0; i < (UINT64_C(2) << n); i++) {
      ck_assert_msg(isfinite(o[i]), "n=%u: value %llu is %g", n, (unsigned long long)i, o[i]);
    }
    free(o);
    free(d);
  }
}
END_TEST

START_TEST(test_absmax_skips_nan_and_keeps_inf) {
  double v[5] = {-3.0, 2.0, NAN, 0x1p-1074, -0.5};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 5);
    ck_assert_double_eq(qdpk_cpu_absmax(x, IN_TYPES[io], 5), 3.0);
    ck_assert_double_eq(qdpk_cpu_absmax(x, IN_TYPES[io], 0), 0.0);
    free(x);
  }
  ck_assert_double_eq(qdpk_cpu_absmax(v + 3, QDP_DTYPE_FLOAT64, 1), 0x1p-1074);
  v[1] = -INFINITY;
  ck_assert(isinf(qdpk_cpu_absmax(v, QDP_DTYPE_FLOAT64, 5)));
}
END_TEST

/* Per-row exponents: e = 0 is the unscaled tree; any other e gives the bits of the unscaled
 * kernels run on the values ldexp(x, e) themselves (exact here: nothing leaves the normal range),
 * for the sums and for pass 2, whatever the types. */
START_TEST(test_scaled_sums_and_amplitudes_equal_prescaled_input) {
  enum { N = 7, L = 100, ROWS = 3, STRIDE = 101 };
  qdpt_rng_seed(71);
  double v[ROWS * STRIDE], w[ROWS * STRIDE];
  for (int i = 0; i < ROWS * STRIDE; i++) {
    v[i] = qdpt_rng_uniform(-2, 2);
  }
  for (int io = 0; io < 2; io++) {
    qdp_dtype in = IN_TYPES[io];
    /* Row r holds v * 2^-e_r, in a range its type holds, so that x * 2^e_r is v exactly. */
    static const int32_t e64[ROWS] = {0, 600, -700}, e32[ROWS] = {0, 60, -70};
    const int32_t *e = in == QDP_DTYPE_FLOAT32 ? e32 : e64;
    for (int i = 0; i < ROWS * STRIDE; i++) {
      w[i] = ldexp(v[i], -e[i / STRIDE]);
    }
    void *x = make_input(in, w, ROWS * STRIDE), *xv = make_input(in, v, ROWS * STRIDE);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      double got[ROWS], want[ROWS];
      static const int32_t zeros[ROWS] = {0, 0, 0};
      qdpk_cpu_sumsq(x, in, STRIDE, L, 128, ROWS, out, e, got);
      qdpk_cpu_sumsq(xv, in, STRIDE, L, 128, ROWS, out, NULL, want);
      ck_assert_msg(memcmp(got, want, sizeof got) == 0, "%s -> %s: scaled sums differ",
                    qdp_dtype_name(in), qdp_dtype_name(out));
      qdpk_cpu_sumsq(xv, in, STRIDE, L, 128, ROWS, out, zeros, got);
      ck_assert(memcmp(got, want, sizeof got) == 0);
      struct qdpk_span s = span_of(N, 0, 128, ROWS, out);
      size_t bytes = ROWS * 128 * cplx_size(out);
      void *a = qdpt_xmalloc(bytes), *b = qdpt_xmalloc(bytes);
      qdpk_cpu_amplitude(&s, x, in, STRIDE, L, want, e, a);
      qdpk_cpu_amplitude(&s, xv, in, STRIDE, L, want, NULL, b);
      assert_bits_equal(a, b, out, ROWS * 128, "scaled pass 2");
      assert_rows_normalized(a, out, 128, ROWS);
      free(a);
      free(b);
    }
    free(x);
    free(xv);
  }
}
END_TEST

/* The CPU backend reads mapped files in place, where values may start at any byte (a version-2
 * .npy's data at byte 130). Every kernel that reads input gives, from a copy one and two bytes off
 * alignment, the bits it gives from an aligned copy. A build with -fsanitize=alignment (meson
 * -Db_sanitize=undefined) reports any misaligned load this makes. */
START_TEST(test_kernels_read_misaligned_input_as_aligned) {
  enum { N = 6, L = 64 + 29, P = N + N * (N - 1) / 2 };
  qdpt_rng_seed(130);
  double v[L];
  for (int i = 0; i < L; i++) {
    v[i] = qdpt_rng_uniform(-1.5, 1.5);
  }
  for (size_t off = 1; off <= 2; off++) {
    for (int io = 0; io < 2; io++) {
      qdp_dtype in = IN_TYPES[io];
      size_t isize = in == QDP_DTYPE_FLOAT32 ? 4 : 8;
      void *aligned = make_input(in, v, L);
      unsigned char *raw = qdpt_xmalloc(L * isize + off);
      void *odd = raw + off;
      memcpy(odd, aligned, L * isize);
      uint64_t at0 = 0, at1 = 0;
      ck_assert_int_eq(qdpk_cpu_find_nonfinite(odd, in, L, &at1),
                       qdpk_cpu_find_nonfinite(aligned, in, L, &at0));
      ck_assert(qdpk_cpu_absmax(odd, in, L) == qdpk_cpu_absmax(aligned, in, L));
      uint64_t row, col;
      double sum;
      ck_assert_int_eq(
          qdpk_cpu_check_params(odd, in, P, P, 1, QDP_DTYPE_COMPLEX64, 1, &row, &col, &sum),
          QDPK_PARAM_OK);
      for (int oo = 0; oo < 2; oo++) {
        qdp_dtype out = OUT_TYPES[oo];
        double s0[1], s1[1];
        int32_t e[1] = {3};
        qdpk_cpu_sumsq(aligned, in, L, L, 128, 1, out, NULL, s0);
        qdpk_cpu_sumsq(odd, in, L, L, 128, 1, out, NULL, s1);
        ck_assert(memcmp(s0, s1, sizeof s0) == 0);
        qdpk_cpu_sumsq(aligned, in, L, L, 128, 1, out, e, s0);
        qdpk_cpu_sumsq(odd, in, L, L, 128, 1, out, e, s1);
        ck_assert(memcmp(s0, s1, sizeof s0) == 0);
        size_t bytes = 128 * cplx_size(out);
        void *a = qdpt_xmalloc(bytes), *b = qdpt_xmalloc(bytes);
        struct qdpk_span amp = span_of(7, 0, 128, 1, out);
        qdpk_cpu_amplitude(&amp, aligned, in, L, L, s0, e, a);
        qdpk_cpu_amplitude(&amp, odd, in, L, L, s0, e, b);
        assert_bits_equal(b, a, out, 128, "misaligned amplitude");
        struct qdpk_span cf = span_of(N, 0, 1 << N, 1, out);
        qdpk_cpu_angle(&cf, aligned, in, N, a);
        qdpk_cpu_angle(&cf, odd, in, N, b);
        assert_bits_equal(b, a, out, 1 << N, "misaligned angle");
        qdpk_cpu_phase(&cf, aligned, in, N, a);
        qdpk_cpu_phase(&cf, odd, in, N, b);
        assert_bits_equal(b, a, out, 1 << N, "misaligned phase");
        qdpk_cpu_iqp_phases(&cf, aligned, in, P, 1, a);
        qdpk_cpu_iqp_phases(&cf, odd, in, P, 1, b);
        assert_bits_equal(b, a, out, 1 << N, "misaligned iqp");
        free(a);
        free(b);
      }
      free(raw);
      free(aligned);
    }
    /* Basis indices, int64 included. */
    int64_t idx[3] = {5, 0, 63};
    unsigned char raw[3 * sizeof(int64_t) + 2];
    memcpy(raw + off, idx, sizeof idx);
    uint64_t row = 0;
    ck_assert_int_eq(qdpk_cpu_check_basis(raw + off, QDP_DTYPE_INT64, 1, 3, N, &row),
                     QDPK_BASIS_OK);
    float a[2 * 3 << N], b[2 * 3 << N];
    struct qdpk_span bs = span_of(N, 0, 1 << N, 3, QDP_DTYPE_COMPLEX64);
    qdpk_cpu_basis(&bs, idx, QDP_DTYPE_INT64, 1, a);
    qdpk_cpu_basis(&bs, raw + off, QDP_DTYPE_INT64, 1, b);
    assert_bits_equal(b, a, QDP_DTYPE_COMPLEX64, 3 << N, "misaligned basis");
  }
}
END_TEST

void kernels_cpu_add_checks(TCase *tc) {
  tcase_add_test(tc, test_find_nonfinite_reports_first_position);
  tcase_add_test(tc, test_check_basis_reports_each_fault_and_row);
  tcase_add_test(tc, test_check_basis_accepts_edges);
  tcase_add_test(tc, test_check_params_reports_each_fault_and_position);
  tcase_add_test(tc, test_iqp_at_the_sum_limit_stays_finite);
  tcase_add_test(tc, test_absmax_skips_nan_and_keeps_inf);
}

void kernels_cpu_add_fallback_and_alignment(TCase *tc) {
  tcase_add_test(tc, test_scaled_sums_and_amplitudes_equal_prescaled_input);
  tcase_add_test(tc, test_kernels_read_misaligned_input_as_aligned);
}
