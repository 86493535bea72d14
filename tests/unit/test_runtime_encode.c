/* test_runtime_encode.c — encodes through the runtime on the CPU backend: amplitude by hand and
 * through the norm's scaled fallback, every encoding from 1, 2, 4, 8 and uneven shards giving the
 * one-device bits, iqp against its direct sum and its refusal of a plan for other top bits, and a
 * batch over devices against its samples encoded one by one. */
#include <check.h>
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "runtime_fixture.h"

START_TEST(test_amplitude_hand_computed) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  double x[3] = {3.0, 0.0, 4.0}; /* 2 qubits, padded to 4 */
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 2, 1, 3,
                                QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 3};
  double complex *psi = qdpt_encode_read(m, p, &in);
  ck_assert_double_eq_tol(creal(psi[0]), 0.6, 1e-15);
  ck_assert_double_eq(creal(psi[1]), 0.0);
  ck_assert_double_eq_tol(creal(psi[2]), 0.8, 1e-15);
  ck_assert_double_eq(creal(psi[3]), 0.0);
  for (int i = 0; i < 4; i++) {
    ck_assert_double_eq(cimag(psi[i]), 0.0);
  }
  free(psi);
  plan_destroy(p);
  qdpt_assert_mesh_idle(m, "after the hand-computed amplitudes");
  runtime_mesh_destroy(m);
}
END_TEST

/* Encodes one amplitude sample of `cols` values (float64 or float32, given as doubles) on one
 * device and checks every amplitude against x / ||x|| in long double, whose range holds the
 * squares of every double: within `tol` of the largest amplitude. */
static void expect_amplitudes(const double *x, uint64_t cols, uint32_t n, qdp_dtype in,
                              qdp_dtype out, double tol) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  float x32[64];
  for (uint64_t i = 0; i < cols; i++) {
    x32[i] = (float)x[i];
  }
  long double norm = 0;
  for (uint64_t i = 0; i < cols; i++) {
    long double v = in == QDP_DTYPE_FLOAT32 ? (long double)x32[i] : (long double)x[i];
    norm += v * v;
  }
  norm = sqrtl(norm);
  struct runtime_input input = {.data = in == QDP_DTYPE_FLOAT32 ? (const void *)x32 : x,
                                .dtype = in,
                                .rows = 1,
                                .cols = cols};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, n, 1, cols, in, out);
  void *psi = qdpt_encode_read(m, p, &input);
  for (uint64_t b = 0; b < (UINT64_C(1) << n); b++) {
    long double v = b < cols ? (in == QDP_DTYPE_FLOAT32 ? x32[b] : x[b]) : 0;
    double want = (double)(v / norm);
    double got = out == QDP_DTYPE_COMPLEX64 ? ((float *)psi)[2 * b] : ((double *)psi)[2 * b];
    double im = out == QDP_DTYPE_COMPLEX64 ? ((float *)psi)[2 * b + 1] : ((double *)psi)[2 * b + 1];
    ck_assert_msg(fabs(got - want) <= tol && im == 0.0,
                  "%s -> %s, %llu values from %g: amplitude %llu is %.17g%+gi, want %.17g",
                  qdp_dtype_name(in), qdp_dtype_name(out), (unsigned long long)cols, x[0],
                  (unsigned long long)b, got, im, want);
  }
  free(psi);
  plan_destroy(p);
  qdpt_assert_mesh_idle(m, "after the amplitudes");
  runtime_mesh_destroy(m);
}

/* States the math defines are computed, whatever the range of the values: sums of squares that
 * are subnormal (3e-162: they lost precision), zero (1e-200: every square underflowed) or
 * infinite (1e154) go through the scaled fallback; so do float64 values that round to 0 or Inf in
 * float32 for complex64 output, and float32 ones whose squares do. */
START_TEST(test_amplitude_norm_is_scaled_where_its_squares_leave_the_range) {
  const double e64 = 0x1p-52, e32 = 0x1p-23;
  static const double tiny[2] = {3e-162, 3e-162}, zero_sq[2] = {1e-200, 1e-200},
                      huge[2] = {1e154, 1e154}, beyond_f32[2] = {1e39, 1e39};
  expect_amplitudes(tiny, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, e64);
  expect_amplitudes(zero_sq, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, e64);
  expect_amplitudes(huge, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, e64);
  expect_amplitudes(zero_sq, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, e32);
  expect_amplitudes(beyond_f32, 2, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, e32);
  /* The extremes of float64: one subnormal, and the largest with a 1 beside it whose amplitude
   * (2^-1024.5) is itself subnormal. */
  static const double sub[1] = {0x1p-1074}, top[3] = {DBL_MAX, -DBL_MAX, 1.0};
  expect_amplitudes(sub, 1, 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 0);
  expect_amplitudes(top, 3, 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, e64);
  expect_amplitudes(sub, 1, 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 0);
  /* float32 input whose squares underflow or overflow in float. */
  static const double f32_tiny[3] = {1e-25, -2e-25, 3e-30}, f32_big[3] = {3e38, -3e38, 1.0};
  expect_amplitudes(f32_tiny, 3, 2, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, e32);
  expect_amplitudes(f32_big, 3, 2, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, e32);
  /* Many values: pairwise sums of squares that underflow partly and overflow. */
  double x[64];
  for (int i = 0; i < 64; i++) {
    x[i] = (double)((i * 37) % 61 - 30) / 7.0 * 1e-165;
  }
  expect_amplitudes(x, 64, 6, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 4 * e64);
  expect_amplitudes(x, 64, 6, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 4 * e32);
  for (int i = 0; i < 64; i++) {
    x[i] = x[i] * 1e160 * 1e160; /* about 1e155: squares that overflow */
  }
  expect_amplitudes(x, 64, 6, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 4 * e64);
}
END_TEST

/* A batch where one sample needs the fallback: that sample and every other has the bits it has
 * when encoded alone, on one device and split by sample over three. */
START_TEST(test_amplitude_fallback_in_one_row_keeps_the_batch_bits) {
  enum { N = 5, B = 4, L = 29 };
  struct runtime_mesh *m = qdpt_mesh("cpu:3", GIB, 0);
  double *x = random_values(B * L, 11);
  for (int i = 0; i < L; i++) {
    x[2 * L + i] *= 1e-170;
  }
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = L};
  for (size_t ndev = 1; ndev <= 3; ndev += 2) {
    struct plan *p = qdpt_plan_on(m, ndev, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, N, B, L,
                                  QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
    double complex *all = qdpt_encode_read(m, p, &in);
    for (int r = 0; r < B; r++) {
      struct runtime_input one = {
          .data = x + r * L, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = L};
      struct plan *p1 = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, N, 1, L,
                                     QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
      double complex *single = qdpt_encode_read(m, p1, &one);
      ck_assert_msg(memcmp(single, all + r * (1 << N), sizeof(double complex) << N) == 0,
                    "row %d over %zu devices differs from the row alone", r, ndev);
      double norm = 0;
      for (int i = 0; i < (1 << N); i++) {
        norm += creal(single[i]) * creal(single[i]);
      }
      ck_assert_double_eq_tol(norm, 1.0, 1e-14);
      free(single);
      plan_destroy(p1);
    }
    free(all);
    plan_destroy(p);
  }
  free(x);
  qdpt_assert_mesh_idle(m, "after the batch");
  runtime_mesh_destroy(m);
}
END_TEST

/* One encoding on one device, then over 2, 4, 8, 16 and 32 even shards, 2, 3 and 6 uneven ones and
 * 4 by capacity: the same bits (iqp over 16 and 32: one and two exchange stages below the top
 * bits its shards transform themselves; uneven and capacity: whole blocks of those bits). The
 * values are random in [-2, 2), times `scale` (amplitude: a scale whose squares under- or overflow
 * sends every sharding through the norm's fallback). */
static void check_sharding_is_bit_identical(qdp_encoding enc, uint32_t n, uint64_t cols,
                                            qdp_dtype in, qdp_dtype out, double scale) {
  struct runtime_mesh *m = qdpt_mesh("cpu:32", GIB, 0);
  double *x64 = random_values(cols, 7 + (unsigned)enc);
  float *x32 = malloc(cols * sizeof *x32);
  for (uint64_t i = 0; i < cols; i++) {
    x64[i] *= scale;
    x32[i] = (float)x64[i];
  }
  struct runtime_input input = {.data = in == QDP_DTYPE_FLOAT32 ? (void *)x32 : (void *)x64,
                                .dtype = in,
                                .rows = 1,
                                .cols = cols};
  struct plan *p1 = qdpt_plan_on(m, 1, PLAN_SINGLE, enc, n, 1, cols, in, out);
  void *ref = qdpt_encode_read(m, p1, &input);
  size_t bytes = (size_t)p1->total_bytes;
  plan_destroy(p1);
  if (enc == QDP_ENCODING_AMPLITUDE) {
    /* The reference itself is a unit vector, whatever the scale. */
    double norm = 0;
    for (uint64_t b = 0; b < (UINT64_C(1) << n); b++) {
      double v = out == QDP_DTYPE_COMPLEX64 ? ((float *)ref)[2 * b] : ((double *)ref)[2 * b];
      norm += v * v;
    }
    ck_assert_double_eq_tol(norm, 1.0, out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12);
  }
  struct {
    size_t ndev;
    enum plan_policy policy;
  } cases[] = {{2, PLAN_EVEN},   {4, PLAN_EVEN},   {8, PLAN_EVEN},
               {16, PLAN_EVEN},  {32, PLAN_EVEN},  {3, PLAN_UNEVEN},
               {6, PLAN_UNEVEN}, {2, PLAN_UNEVEN}, {4, PLAN_CAPACITY}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    /* iqp over 3 and 6 uneven devices and 4 by capacity: ranges of whole blocks of its top 3 bits,
     * which the CPU devices transform alone. */
    struct plan *p = qdpt_plan_on(m, cases[c].ndev, cases[c].policy, enc, n, 1, cols, in, out);
    ck_assert_uint_eq(p->nshards, cases[c].ndev);
    void *got = qdpt_encode_read(m, p, &input);
    ck_assert_msg(memcmp(ref, got, bytes) == 0, "%s over %zu %s shards differs from one device",
                  qdp_encoding_name(enc), cases[c].ndev, plan_policy_name(cases[c].policy));
    free(got);
    plan_destroy(p);
  }
  qdpt_assert_mesh_idle(m, "after the sharded encodes");
  free(ref);
  free(x32);
  free(x64);
  runtime_mesh_destroy(m);
}

START_TEST(test_amplitude_sharded_bits_equal_one_device) {
  /* L not a power of two and not a multiple of any shard size: zero padding inside shards. */
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 12, 4096 - 777, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128, 1.0);
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 11, 2048, QDP_DTYPE_FLOAT32,
                                  QDP_DTYPE_COMPLEX64, 1.0);
}
END_TEST

/* The fallback's scaled sums follow the same tree and its exponent is a plain maximum, so every
 * sharding keeps the one-device bits: squares that underflow (float64 and float32 input, and
 * float64 rounded to float32) and squares that overflow. */
START_TEST(test_amplitude_fallback_sharded_bits_equal_one_device) {
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 12, 4096 - 777, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128, 1e-170);
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 12, 4096 - 777, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128, 1e160);
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 11, 2000, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX64, 1e-30);
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 11, 2000, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX64, 1e30);
  check_sharding_is_bit_identical(QDP_ENCODING_AMPLITUDE, 11, 2048, QDP_DTYPE_FLOAT32,
                                  QDP_DTYPE_COMPLEX64, 1e-25);
}
END_TEST

START_TEST(test_param_encodings_sharded_bits_equal_one_device) {
  check_sharding_is_bit_identical(QDP_ENCODING_ANGLE, 10, 10, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128, 1.0);
  check_sharding_is_bit_identical(QDP_ENCODING_PHASE, 9, 9, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64,
                                  1.0);
  check_sharding_is_bit_identical(QDP_ENCODING_IQP_Z, 8, 8, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
                                  1.0);
  check_sharding_is_bit_identical(QDP_ENCODING_IQP, 7, 7 + 21, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128, 1.0);
  check_sharding_is_bit_identical(QDP_ENCODING_IQP, 6, 6 + 15, QDP_DTYPE_FLOAT32,
                                  QDP_DTYPE_COMPLEX64, 1.0);
}
END_TEST

/* A plan that splits an iqp sample for devices that take another number of top bits (as a CUDA
 * coordinator's would for CPU ranks) is refused before anything runs; one that keeps whole
 * samples is not. */
START_TEST(test_iqp_plan_for_other_top_bits_is_refused) {
  enum { N = 6, P = N + N * (N - 1) / 2 };
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double *d = random_values(2 * P, 5);
  struct runtime_input in = {.data = d, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = P};
  struct plan *p = qdpt_plan_on(m, 2, PLAN_EVEN, QDP_ENCODING_IQP, N, 1, P, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(p->iqp_top_bits, 3);
  p->iqp_top_bits = 0;
  struct runtime_state *st = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(runtime_encode(m, p, &in, &st, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_ptr_null(st);
  ck_assert_msg(strstr(e.msg,
                       "transforms the top 3 bits of an iqp state alone, but the plan "
                       "was made for devices that take 0") != NULL,
                "%s", e.msg);
  plan_destroy(p);
  p = qdpt_plan_on(m, 2, PLAN_BATCH, QDP_ENCODING_IQP, N, 2, P, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX128);
  p->iqp_top_bits = 0;
  in.rows = 2;
  CK_OK(runtime_encode(m, p, &in, &st, &e), e);
  runtime_state_destroy(st);
  plan_destroy(p);
  qdpt_assert_mesh_idle(m, "after the refusal");
  free(d);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_iqp_sharded_matches_direct_sum) {
  /* psi_b = 2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}, summed directly. */
  enum { N = 5, P = N + N * (N - 1) / 2 };
  struct runtime_mesh *m = qdpt_mesh("cpu:4", GIB, 0);
  double *d = random_values(P, 99);
  struct runtime_input in = {.data = d, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = P};
  struct plan *p = qdpt_plan_on(m, 4, PLAN_EVEN, QDP_ENCODING_IQP, N, 1, P, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  double complex *psi = qdpt_encode_read(m, p, &in);
  for (unsigned b = 0; b < (1u << N); b++) {
    double complex sum = 0;
    for (unsigned z = 0; z < (1u << N); z++) {
      double theta = 0;
      int k = N;
      for (int i = 0; i < N; i++) {
        theta += ((z >> i) & 1) * d[i];
      }
      for (int i = 0; i < N; i++) {
        for (int j = i + 1; j < N; j++, k++) {
          theta += ((z >> i) & (z >> j) & 1) * d[k];
        }
      }
      sum += (__builtin_popcount(z & b) & 1 ? -1.0 : 1.0) * cexp(I * theta);
    }
    sum /= (double)(1u << N);
    ck_assert_double_eq_tol(creal(psi[b]), creal(sum), 1e-12);
    ck_assert_double_eq_tol(cimag(psi[b]), cimag(sum), 1e-12);
  }
  free(psi);
  free(d);
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_batch_over_devices_matches_per_sample) {
  /* 5 samples over 3 devices by sample: each equals the sample encoded alone. */
  enum { N = 6, B = 5, L = 50 };
  struct runtime_mesh *m = qdpt_mesh("cpu:3", GIB, 0);
  double *x = random_values(B * L, 3);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = L};
  struct plan *p = qdpt_plan_on(m, 3, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, N, B, L,
                                QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(p->nshards, 3);
  double complex *all = qdpt_encode_read(m, p, &in);
  for (int r = 0; r < B; r++) {
    struct runtime_input one = {
        .data = x + r * L, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = L};
    struct plan *p1 = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, N, 1, L,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
    double complex *single = qdpt_encode_read(m, p1, &one);
    ck_assert(memcmp(single, all + r * (1 << N), sizeof(double complex) << N) == 0);
    double norm = 0;
    for (int i = 0; i < (1 << N); i++) {
      norm += creal(single[i]) * creal(single[i]);
    }
    ck_assert_double_eq_tol(norm, 1.0, 1e-14);
    free(single);
    plan_destroy(p1);
  }
  free(all);
  free(x);
  plan_destroy(p);
  qdpt_assert_mesh_idle(m, "after the batch");
  runtime_mesh_destroy(m);
}
END_TEST

void runtime_add_encode_sharding(TCase *tc) {
  tcase_add_test(tc, test_amplitude_hand_computed);
  tcase_add_test(tc, test_amplitude_norm_is_scaled_where_its_squares_leave_the_range);
  tcase_add_test(tc, test_amplitude_fallback_in_one_row_keeps_the_batch_bits);
  tcase_add_test(tc, test_amplitude_sharded_bits_equal_one_device);
  tcase_add_test(tc, test_amplitude_fallback_sharded_bits_equal_one_device);
  tcase_add_test(tc, test_param_encodings_sharded_bits_equal_one_device);
  tcase_add_test(tc, test_iqp_sharded_matches_direct_sum);
  tcase_add_test(tc, test_iqp_plan_for_other_top_bits_is_refused);
  tcase_add_test(tc, test_batch_over_devices_matches_per_sample);
}
