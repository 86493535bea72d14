/* The runtime on the CPU backend: meshes, the executor's sharding (every encoding built from 1, 2,
 * 4, 8 and uneven shards gives the one-device bits), the norm tree, value checks with their
 * messages, reservations, reading states back across shard boundaries, and the same jobs split
 * over the ranks of a world (ranks as threads: tests/unit/world_harness.h). */
#include <check.h>
#include <complex.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common_runtime.h"
#include "launcher.h"
#include "plan/plan.h"
#include "runtime/norm.h"
#include "runtime/runtime.h"
#include "runtime/workers.h"
#include "world_harness.h"

#define GIB (UINT64_C(1) << 30)

static double *random_values(uint64_t count, uint64_t seed) {
  double *x = qdpt_xmalloc(count * sizeof *x);
  qdpt_rng_seed(seed);
  for (uint64_t i = 0; i < count; i++) {
    x[i] = qdpt_rng_uniform(-2.0, 2.0);
  }
  return x;
}

START_TEST(test_mesh_cpu_spec_gives_named_devices) {
  struct runtime_mesh *m = qdpt_mesh("cpu:3", GIB, 0);
  ck_assert_str_eq(runtime_mesh_backend(m), "cpu");
  ck_assert_uint_eq(runtime_mesh_count(m), 3);
  struct runtime_device_info info;
  runtime_mesh_device_info(m, 2, &info);
  ck_assert_str_eq(info.name, "cpu:2");
  ck_assert_uint_eq(info.budget_bytes, GIB);
  ck_assert_uint_eq(info.free_bytes, GIB);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_mesh_refuses_bad_specs) {
  const char *bad[] = {"cpu:0", "cpu:x", "cpu:65", "cpu:"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct runtime_mesh_config cfg = {.devices = bad[i], .device_budget_bytes = GIB};
    struct runtime_mesh *m = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_STATUS(runtime_mesh_create(&cfg, &m, &e), QDP_ERR_INVALID_ARGUMENT, e);
    ck_assert_str_eq(e.field, "devices");
    ck_assert_ptr_null(m);
  }
}
END_TEST

/* 'local-rank' needs the launcher's local index; given one, it asks for that GPU (cuda:999, which
 * no machine has, so the refusal names it). */
START_TEST(test_mesh_local_rank_takes_the_launchers_index) {
  for (size_t i = 0; launcher_var_name(i); i++) {
    unsetenv(launcher_var_name(i));
  }
  struct runtime_mesh_config cfg = {.devices = "local-rank", .device_budget_bytes = GIB};
  struct runtime_mesh *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(runtime_mesh_create(&cfg, &m, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "OMPI_COMM_WORLD_LOCAL_RANK"));
  setenv("SLURM_LOCALID", "999", 1);
  e = (struct qdp_error)QDP_ERROR_INIT;
  qdp_status rc = runtime_mesh_create(&cfg, &m, &e);
  ck_assert_msg(rc != QDP_OK, "mesh 'local-rank' at SLURM_LOCALID=999 returned %s",
                qdp_status_name(rc));
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(e.msg, "cuda:999") != NULL, "message: %s", e.msg);
  unsetenv("SLURM_LOCALID");
}
END_TEST

START_TEST(test_norm_split_covers_range_with_aligned_blocks) {
  struct norm_block b[NORM_BLOCKS_MAX];
  /* [0, 2863311531): the first shard of 34 qubits over 6 devices. */
  uint64_t lo = 5, hi = 2863311531;
  size_t n = norm_split(lo, hi, b);
  uint64_t at = lo;
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(b[i].first, at);
    ck_assert_uint_eq(b[i].first % (UINT64_C(1) << b[i].log2), 0);
    at += UINT64_C(1) << b[i].log2;
  }
  ck_assert_uint_eq(at, hi);
  ck_assert_uint_eq(norm_split(0, UINT64_C(1) << 40, b), 1);
  ck_assert_uint_eq(b[0].log2, 40);
}
END_TEST

START_TEST(test_norm_combine_follows_the_pairwise_tree) {
  /* Leaves 1, 2, 3, 4 of [0, 4) as four blocks, as two, and as one give ((1+2)+(3+4)). */
  struct norm_block four[4] = {{0, 0, 1e16}, {1, 0, 1.0}, {2, 0, -1e16}, {3, 0, 1.0}};
  /* Pairwise: (1e16 + 1) + (-1e16 + 1) = 1e16 + -1e16 = 0 in double; a running sum gives 1. */
  ck_assert(norm_combine(four, 4, 2, 0) == 0.0);
  struct norm_block gap[1] = {{2, 1, 5.0}}; /* only [2, 4) given: the rest is zero */
  ck_assert(norm_combine(gap, 1, 3, 0) == 5.0);
}
END_TEST

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
 * bits its shards transform themselves; uneven and capacity: whole blocks of those bits). The values are random in [-2, 2), times `scale` (amplitude: a scale
 * whose squares under- or overflow sends every sharding through the norm's fallback). */
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
  } cases[] = {{2, PLAN_EVEN},   {4, PLAN_EVEN},   {8, PLAN_EVEN},    {16, PLAN_EVEN},
               {32, PLAN_EVEN},  {3, PLAN_UNEVEN}, {6, PLAN_UNEVEN},  {2, PLAN_UNEVEN},
               {4, PLAN_CAPACITY}};
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
  ck_assert_msg(strstr(e.msg, "transforms the top 3 bits of an iqp state alone, but the plan "
                              "was made for devices that take 0") != NULL, "%s", e.msg);
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
  ck_assert_msg(strstr(e.msg, "cpu:0 needs 4 KiB") && strstr(e.msg, "only 0 B of its 4 KiB"),
                "%s", e.msg);
  ck_assert_uint_eq(e.need_bytes, 4096); /* the exact figures travel in the detail */
  ck_assert_uint_eq(e.free_bytes, 0);
  runtime_state_destroy(first);
  qdpt_assert_mesh_idle(m, "after the refusal");
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_read_spans_shards_and_refuses_past_end) {
  enum { N = 5 };
  struct runtime_mesh *m = qdpt_mesh("cpu:4", GIB, 0);
  double x[N] = {0.3, 1.1, -0.7, 2.0, 0.25};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = N};
  struct plan *p1 = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, N, 1, N, QDP_DTYPE_FLOAT64,
                                 QDP_DTYPE_COMPLEX128);
  double complex *ref = qdpt_encode_read(m, p1, &in);
  struct plan *p = qdpt_plan_on(m, 3, PLAN_UNEVEN, QDP_ENCODING_ANGLE, N, 1, N, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_encode(m, p, &in, &s, &e), e);
  double complex part[20];
  CK_OK(runtime_state_read(s, 7, 20, part, &e), e); /* crosses both boundaries */
  ck_assert(memcmp(part, ref + 7, sizeof part) == 0);
  CK_STATUS(runtime_state_read(s, 30, 3, part, &e), QDP_ERR_OUT_OF_RANGE, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "outside the state's 32"));
  runtime_state_destroy(s);
  free(ref);
  plan_destroy(p);
  plan_destroy(p1);
  runtime_mesh_destroy(m);
}
END_TEST

/* ---- an encode into memory the mesh does not own (runtime_encode_into) ---- */

#define GUARD 64 /* bytes poisoned on each side of an output */

static bool all_bytes_are(const unsigned char *b, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++) {
    if (b[i] != v) {
      return false;
    }
  }
  return true;
}

/* On host memory (the CPU backend's device memory): the bits runtime_encode gives, for an
 * amplitude batch, angle and iqp in both precisions, written exactly in the range
 * (the guards around it untouched), with nothing reserved on the device, and left as they are
 * by runtime_state_destroy (a free of them would be a double free below). */
START_TEST(test_encode_into_writes_the_bits_in_place_and_holds_nothing) {
  enum { N = 6, B = 5 };
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double *x = random_values(B * (1u << N), 11);
  static const struct {
    qdp_encoding enc;
    qdp_dtype out;
  } jobs[] = {{QDP_ENCODING_AMPLITUDE, QDP_DTYPE_COMPLEX128},
              {QDP_ENCODING_AMPLITUDE, QDP_DTYPE_COMPLEX64},
              {QDP_ENCODING_ANGLE, QDP_DTYPE_COMPLEX128},
              {QDP_ENCODING_IQP, QDP_DTYPE_COMPLEX64}};
  for (size_t k = 0; k < sizeof jobs / sizeof jobs[0]; k++) {
    uint64_t cols = jobs[k].enc == QDP_ENCODING_AMPLITUDE ? (1u << N) - 3
                                                          : qdp_values_per_sample(jobs[k].enc, N);
    struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = cols};
    struct plan *p =
        qdpt_plan_on(m, 2, PLAN_SINGLE, jobs[k].enc, N, B, cols, QDP_DTYPE_FLOAT64, jobs[k].out);
    void *want = qdpt_encode_read(m, p, &in);
    size_t bytes = (size_t)p->total_bytes;
    unsigned char *buf = qdpt_xmalloc(bytes + 2 * GUARD);
    memset(buf, 0xa5, bytes + 2 * GUARD);
    struct runtime_output out = {
        .data = buf + GUARD, .device = p->shards[0].device, .bytes = bytes};
    struct runtime_state *s = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_OK_AT(runtime_encode_into(m, p, &in, &out, &s, &e), e, "job %zu", k);
    ck_assert_uint_eq(runtime_state_bytes(s), 0);
    ck_assert_uint_eq(runtime_state_plan(s)->total_bytes, bytes);
    qdpt_assert_mesh_idle(m, "while the output's state lives");
    runtime_state_destroy(s);
    ck_assert_msg(memcmp(buf + GUARD, want, bytes) == 0, "job %zu: the bits differ", k);
    ck_assert_msg(
        all_bytes_are(buf, GUARD, 0xa5) && all_bytes_are(buf + GUARD + bytes, GUARD, 0xa5),
        "job %zu wrote outside its %zu B", k, bytes);
    free(buf);
    free(want);
    plan_destroy(p);
  }
  free(x);
  runtime_mesh_destroy(m);
}
END_TEST

/* An output that does not fit the plan is refused before anything is written: too few bytes
 * (with both numbers), a misaligned address, another device than the shard's, a plan of two
 * shards. */
START_TEST(test_encode_into_refuses_an_output_that_does_not_fit_the_plan) {
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double x[2 * 4];
  for (int i = 0; i < 8; i++) {
    x[i] = 0.1 * i;
  }
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 2, .cols = 4};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 4, 2, 4, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128); /* 2 x 16 x 16 = 512 B on cpu:0 */
  struct plan *two = qdpt_plan_on(m, 2, PLAN_BATCH, QDP_ENCODING_ANGLE, 4, 2, 4, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128);
  unsigned char *buf = qdpt_xmalloc(1024);
  memset(buf, 0xa5, 1024);
  const struct {
    const struct plan *p;
    struct runtime_output out;
    qdp_status want;
    const char *field, *fragment;
  } cases[] = {
      {p,
       {buf, 0, 511},
       QDP_ERR_INVALID_ARGUMENT,
       "out.bytes",
       "the state needs 512 B but the output holds 511 B"},
      {p,
       {buf + 8, 0, 512},
       QDP_ERR_INVALID_ARGUMENT,
       "out.offset",
       "is not aligned to its 16 B amplitudes"},
      {p,
       {buf, 1, 512},
       QDP_ERR_FAILED_PRECONDITION,
       "placement",
       "an encode into an allocation of device 1 needs one shard there, but the plan has 1, the "
       "first on rank 0 device 0"},
      {two, {buf, 0, 1024}, QDP_ERR_FAILED_PRECONDITION, "placement", "the plan has 2"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    struct runtime_state *s = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_STATUS(runtime_encode_into(m, cases[k].p, &in, &cases[k].out, &s, &e), cases[k].want, e);
    ck_assert_ptr_null(s);
    ck_assert_str_eq(e.field, cases[k].field);
    ck_assert_msg(strstr(e.msg, cases[k].fragment), "case %zu: '%s' lacks '%s'", k, e.msg,
                  cases[k].fragment);
    if (k == 0) {
      ck_assert_uint_eq(e.need_bytes, 512);
      ck_assert_uint_eq(e.free_bytes, 511);
    }
  }
  ck_assert_msg(all_bytes_are(buf, 1024, 0xa5), "a refused encode wrote its output");
  qdpt_assert_mesh_idle(m, "after the refusals");
  free(buf);
  plan_destroy(two);
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

/* ---- ranks ---- */

/* Encodes on `ranks` ranks of cpu:per_rank each, over the first ndev devices of the world
 * (rank-major), and on one device of one mesh; the two must have the same bits. */
static void check_ranks_give_one_device_bits(int ranks, size_t per_rank, size_t ndev,
                                             enum plan_policy policy, qdp_encoding enc, uint32_t n,
                                             uint64_t batch, uint64_t cols, qdp_dtype in,
                                             qdp_dtype out, double scale) {
  struct runtime_mesh *meshes[16];
  char spec[16];
  snprintf(spec, sizeof spec, "cpu:%zu", per_rank);
  for (int r = 0; r < ranks; r++) {
    meshes[r] = qdpt_mesh(spec, GIB, 0);
  }
  struct plan_device devs[64];
  harness_plan_devices(meshes, ranks, per_rank, devs);
  size_t subset[64];
  for (size_t i = 0; i < ndev; i++) {
    subset[i] = i;
  }
  struct plan_world world = {.devices = devs, .count = (size_t)ranks * per_rank, .ranks = ranks};
  struct plan_request req = {.encoding = enc,
                             .qubits = n,
                             .batch = batch,
                             .values_per_sample = cols,
                             .in_dtype = in,
                             .out_dtype = out,
                             .policy = policy,
                             .device_subset = subset,
                             .device_subset_count = ndev,
                             .iqp_top_bits = runtime_mesh_iqp_top_bits(meshes[0])};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  CK_OK(plan_check_feasible(p, &e), e);
  ck_assert_int_eq(p->shards[p->nshards - 1].rank, ranks - 1); /* the last rank takes part */

  uint64_t count = batch * cols;
  double *x = random_values(count, 7 + n);
  if (enc == QDP_ENCODING_BASIS) {
    for (uint64_t i = 0; i < count; i++) {
      x[i] = (double)((i * 2654435761u) % (UINT64_C(1) << n));
    }
  }
  float *x32 = malloc(count * sizeof *x32);
  for (uint64_t i = 0; i < count; i++) {
    x[i] *= scale;
    x32[i] = (float)x[i];
  }
  struct runtime_input input = {.data = in == QDP_DTYPE_FLOAT32 ? (void *)x32 : (void *)x,
                                .dtype = in,
                                .rows = batch,
                                .cols = cols};
  void *got = NULL;
  CK_OK(harness_encode(meshes, ranks, per_rank, p, &input, &got, &e), e);
  struct runtime_mesh *one = qdpt_mesh("cpu:1", GIB, 0);
  struct plan *p1 =
      qdpt_plan_on(one, 1, batch > 1 ? PLAN_BATCH : PLAN_SINGLE, enc, n, batch, cols, in, out);
  void *want = qdpt_encode_read(one, p1, &input);
  size_t bytes = batch * p->amplitudes * qdp_dtype_size(out);
  ck_assert_msg(memcmp(got, want, bytes) == 0,
                "encoding %d, %u qubits over %d ranks x %zu devices (%zu used): the bits differ "
                "from one device",
                (int)enc, n, ranks, per_rank, ndev);
  for (int r = 0; r < ranks; r++) {
    qdpt_assert_mesh_idle(meshes[r], "after the ranks' encode");
    runtime_mesh_destroy(meshes[r]);
  }
  free(got);
  free(want);
  free(x);
  free(x32);
  plan_destroy(p);
  plan_destroy(p1);
  runtime_mesh_destroy(one);
}

START_TEST(test_amplitude_over_ranks_gives_one_device_bits) {
  /* The norm's blocks of every rank are gathered and combined along the one tree. */
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 12, 1, 4096 - 777,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(3, 2, 6, PLAN_UNEVEN, QDP_ENCODING_AMPLITUDE, 11, 1, 2048,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  /* The last ranks hold only padding: their input window is empty. */
  check_ranks_give_one_device_bits(4, 1, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 10, 1, 300,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  /* Whole samples per device, samples split between ranks. */
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, 6, 9, 50,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
}
END_TEST

/* The norm's fallback across ranks: every rank decides it from the same gathered sums, the
 * exponent is the maximum over every rank's values, and the scaled blocks are gathered and
 * combined as the plain ones are, so the bits are one device's. */
START_TEST(test_amplitude_fallback_over_ranks_gives_one_device_bits) {
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 12, 1, 4096 - 777,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-170);
  check_ranks_give_one_device_bits(3, 2, 6, PLAN_UNEVEN, QDP_ENCODING_AMPLITUDE, 11, 1, 2000,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1e30);
  check_ranks_give_one_device_bits(3, 1, 3, PLAN_CAPACITY, QDP_ENCODING_AMPLITUDE, 10, 1, 1000,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1e-25);
  check_ranks_give_one_device_bits(4, 1, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 10, 1, 300,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e160);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, 6, 9, 50,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-200);
}
END_TEST

START_TEST(test_iqp_over_ranks_gives_one_device_bits) {
  /* 8 shards on 4 ranks: the top 3 bits, each shard alone, no exchange. */
  check_ranks_give_one_device_bits(4, 2, 8, PLAN_EVEN, QDP_ENCODING_IQP, 7, 1, 7 + 21,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  /* 32 shards on 8 ranks of 4: global bits 0 and 1, below the top 3, pair shards of one rank.
   * 16 on 16 ranks of 1: bit 0 pairs ranks, which exchange through the world. */
  check_ranks_give_one_device_bits(8, 4, 32, PLAN_EVEN, QDP_ENCODING_IQP, 8, 1, 8 + 28,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(16, 1, 16, PLAN_EVEN, QDP_ENCODING_IQP, 8, 1, 8 + 28,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(16, 1, 16, PLAN_EVEN, QDP_ENCODING_IQP_Z, 8, 1, 8,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_ranks_give_one_device_bits(2, 1, 2, PLAN_EVEN, QDP_ENCODING_IQP, 6, 1, 6 + 15,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_IQP_Z, 8, 1, 8,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
}
END_TEST

START_TEST(test_closed_forms_over_ranks_give_one_device_bits) {
  check_ranks_give_one_device_bits(3, 2, 6, PLAN_UNEVEN, QDP_ENCODING_ANGLE, 9, 1, 9,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_PHASE, 8, 1, 8,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_BATCH, QDP_ENCODING_BASIS, 5, 7, 1,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
}
END_TEST

START_TEST(test_zero_norm_over_ranks_is_refused_on_every_rank) {
  /* Every rank sees every block, so every rank refuses (no rank waits for another). */
  struct runtime_mesh *meshes[2] = {qdpt_mesh("cpu:1", GIB, 0), qdpt_mesh("cpu:1", GIB, 0)};
  struct plan_device devs[2];
  harness_plan_devices(meshes, 2, 1, devs);
  struct plan_world world = {.devices = devs, .count = 2, .ranks = 2};
  struct plan_request req = {.encoding = QDP_ENCODING_AMPLITUDE,
                             .qubits = 4,
                             .batch = 1,
                             .values_per_sample = 16,
                             .in_dtype = QDP_DTYPE_FLOAT64,
                             .out_dtype = QDP_DTYPE_COMPLEX128,
                             .policy = PLAN_EVEN};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  double x[16] = {0};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 16};
  void *got = NULL;
  CK_STATUS(harness_encode(meshes, 2, 1, p, &in, &got, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_ptr_null(got);
  ck_assert_msg(strstr(e.msg, "sample 0 has zero norm"), "%s", e.msg);
  /* On rank 1 only: the ranks gather where each sample's first bad value is, so rank 0 names it
   * too. */
  x[12] = NAN;
  CK_STATUS(harness_encode(meshes, 2, 1, p, &in, &got, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_msg(strstr(e.msg, "sample 0 value 12 is nan"), "rank 0 says: %s", e.msg);
  for (int r = 0; r < 2; r++) {
    qdpt_assert_mesh_idle(meshes[r], "after the refusals");
    runtime_mesh_destroy(meshes[r]);
  }
  plan_destroy(p);
}
END_TEST

/* ---- the mesh's workers ---- */

struct work_item {
  pthread_t ran_on;
  int runs;
  int *arrived; /* items of the run that have started */
  int expect;   /* how many to wait for (in parallel they all arrive) */
  int saw_all;
};

static void *work_rendezvous(void *arg) {
  struct work_item *it = arg;
  it->ran_on = pthread_self();
  it->runs++;
  __atomic_add_fetch(it->arrived, 1, __ATOMIC_SEQ_CST);
  for (int spins = 0; spins < 5000; spins++) {
    if (__atomic_load_n(it->arrived, __ATOMIC_SEQ_CST) >= it->expect) {
      it->saw_all = 1;
      break;
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return NULL;
}

/* One item per slot runs in parallel, slot 0 on the caller; more items than slots wrap around. */
START_TEST(test_workers_run_every_item_once_and_in_parallel) {
  struct runtime_workers *w = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_workers_create(3, &w, &e), e);
  int arrived = 0;
  struct work_item items[4] = {{0}};
  for (int i = 0; i < 4; i++) {
    items[i] = (struct work_item){.arrived = &arrived, .expect = 4};
  }
  runtime_workers_run(w, items, 4, sizeof items[0], work_rendezvous);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(items[i].runs, 1);
    ck_assert_msg(items[i].saw_all, "item %d did not run alongside the others", i);
    for (int j = 0; j < i; j++) {
      ck_assert(!pthread_equal(items[i].ran_on, items[j].ran_on));
    }
  }
  ck_assert(pthread_equal(items[0].ran_on, pthread_self()));
  /* Ten items over four slots: each runs once, slot by slot in order. */
  struct work_item many[10];
  int none = 0;
  for (int i = 0; i < 10; i++) {
    many[i] = (struct work_item){.arrived = &none, .expect = 0};
  }
  runtime_workers_run(w, many, 10, sizeof many[0], work_rendezvous);
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(many[i].runs, 1);
    ck_assert(pthread_equal(many[i].ran_on, many[i % 4].ran_on));
  }
  runtime_workers_destroy(w);
  /* No workers: everything on the caller. */
  CK_OK(runtime_workers_create(0, &w, &e), e);
  runtime_workers_run(w, many, 3, sizeof many[0], work_rendezvous);
  ck_assert(pthread_equal(many[2].ran_on, pthread_self()));
  runtime_workers_destroy(w);
}
END_TEST

struct runner {
  struct runtime_workers *w;
  struct work_item items[6];
  int arrived;
};

static void *run_from_thread(void *arg) {
  struct runner *r = arg;
  for (int i = 0; i < 6; i++) {
    r->items[i] = (struct work_item){.arrived = &r->arrived, .expect = 0};
  }
  for (int round = 0; round < 200; round++) {
    runtime_workers_run(r->w, r->items, 6, sizeof r->items[0], work_rendezvous);
  }
  return NULL;
}

/* Runs from several threads at once share the workers and each waits for its own items only. */
START_TEST(test_workers_take_runs_from_many_threads) {
  struct runtime_workers *w = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_workers_create(2, &w, &e), e);
  struct runner r[3];
  pthread_t tid[3];
  for (int i = 0; i < 3; i++) {
    r[i] = (struct runner){.w = w};
    ck_assert_int_eq(pthread_create(&tid[i], NULL, run_from_thread, &r[i]), 0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(tid[i], NULL);
    for (int k = 0; k < 6; k++) {
      ck_assert_int_eq(r[i].items[k].runs, 200);
    }
  }
  runtime_workers_destroy(w);
}
END_TEST

static Suite *runtime_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("mesh");
  tcase_add_test(tc, test_mesh_cpu_spec_gives_named_devices);
  tcase_add_test(tc, test_mesh_refuses_bad_specs);
  tcase_add_test(tc, test_mesh_local_rank_takes_the_launchers_index);
  suite_add_tcase(s, tc);
  tc = tcase_create("workers");
  tcase_add_test(tc, test_workers_run_every_item_once_and_in_parallel);
  tcase_add_test(tc, test_workers_take_runs_from_many_threads);
  suite_add_tcase(s, tc);
  tc = tcase_create("norm");
  tcase_add_test(tc, test_norm_split_covers_range_with_aligned_blocks);
  tcase_add_test(tc, test_norm_combine_follows_the_pairwise_tree);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_amplitude_hand_computed);
  tcase_add_test(tc, test_amplitude_norm_is_scaled_where_its_squares_leave_the_range);
  tcase_add_test(tc, test_amplitude_fallback_in_one_row_keeps_the_batch_bits);
  tcase_add_test(tc, test_amplitude_sharded_bits_equal_one_device);
  tcase_add_test(tc, test_amplitude_fallback_sharded_bits_equal_one_device);
  tcase_add_test(tc, test_param_encodings_sharded_bits_equal_one_device);
  tcase_add_test(tc, test_iqp_sharded_matches_direct_sum);
  tcase_add_test(tc, test_iqp_plan_for_other_top_bits_is_refused);
  tcase_add_test(tc, test_batch_over_devices_matches_per_sample);
  tcase_add_test(tc, test_zero_norm_sample_in_batch_is_refused_not_zeroed);
  tcase_add_test(tc, test_bad_parameters_are_refused_with_position);
  tcase_add_test(tc, test_closed_forms_refuse_values_beyond_float32);
  tcase_add_test(tc, test_sums_that_overflow_the_output_precision_are_refused_or_computed);
  tcase_add_test(tc, test_device_that_filled_up_since_planning_refuses_with_numbers);
  tcase_add_test(tc, test_read_spans_shards_and_refuses_past_end);
  tcase_add_test(tc, test_encode_into_writes_the_bits_in_place_and_holds_nothing);
  tcase_add_test(tc, test_encode_into_refuses_an_output_that_does_not_fit_the_plan);
  tcase_add_test(tc, test_amplitude_over_ranks_gives_one_device_bits);
  tcase_add_test(tc, test_amplitude_fallback_over_ranks_gives_one_device_bits);
  tcase_add_test(tc, test_iqp_over_ranks_gives_one_device_bits);
  tcase_add_test(tc, test_closed_forms_over_ranks_give_one_device_bits);
  tcase_add_test(tc, test_zero_norm_over_ranks_is_refused_on_every_rank);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return qdpt_run_suite(runtime_suite(), CK_FORK_GETENV);
}
