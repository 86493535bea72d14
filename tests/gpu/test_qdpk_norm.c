/* test_qdpk_norm.c — the norm's kernels on the GPU against their CPU twins: sumsq bit for bit
 * (whole, in shard-sized blocks joined into the full tree, refusing a short workspace), the
 * norm's fallback with per-row exponents (subnormal results of ldexp included), and amplitude
 * within the tolerance, also in two passes. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "qdpk_fixture.h"
#include "qdpk_tune.h"

/* ---- sumsq ---- */

/* GPU sums of `rows` rows (device input dx) into host ret (rows doubles). */
static void gpu_sumsq(const void *dx, qdp_dtype in, uint64_t stride, uint64_t len, uint64_t block,
                      uint64_t rows, qdp_dtype out, double *ret) {
  size_t ws_bytes = qdpk_sumsq_workspace_bytes(block, rows);
  void *ws = ws_bytes ? dmalloc(ws_bytes) : NULL;
  double *dsums = dmalloc(rows * sizeof(double));
  if (ws) {
    poison_device(ws, ws_bytes);
  }
  poison_device(dsums, rows * sizeof(double));
  expect_launch(qdpk_sumsq(dx, in, stride, len, block, rows, out, NULL, ws, ws_bytes, dsums, 0),
                "qdpk_sumsq");
  from_device(ret, dsums, rows * sizeof(double));
  cudaFree(dsums);
  cudaFree(ws);
}

struct sumsq_case {
  uint64_t block, len, rows, stride;
  int misalign; /* input starts one element past an aligned address */
};

static void check_sumsq_case(const struct sumsq_case *c, qdp_dtype in, qdp_dtype out) {
  char what[160];
  snprintf(what, sizeof what, "sumsq in=%s out=%s block=%llu len=%llu rows=%llu stride=%llu%s",
           qdp_dtype_name(in), qdp_dtype_name(out), (unsigned long long)c->block,
           (unsigned long long)c->len, (unsigned long long)c->rows, (unsigned long long)c->stride,
           c->misalign ? " misaligned" : "");
  uint64_t n = (c->rows - 1) * c->stride + c->len + (uint64_t)c->misalign;
  void *hx = random_reals(in, n, -1.0, 1.0, 1);
  void *dbase = to_device(hx, (size_t)n * real_size(in));
  const char *hrow = (const char *)hx + (size_t)c->misalign * real_size(in);
  const void *dx = (const char *)dbase + (size_t)c->misalign * real_size(in);
  double *cpu = qdpt_xmalloc(c->rows * sizeof(double));
  double *gpu = qdpt_xmalloc(c->rows * sizeof(double));
  poison_host(cpu, c->rows * sizeof(double));
  qdpk_cpu_sumsq(hrow, in, c->stride, c->len, c->block, c->rows, out, NULL, cpu);
  gpu_sumsq(dx, in, c->stride, c->len, c->block, c->rows, out, gpu);
  expect_same_bits(gpu, cpu, c->rows * sizeof(double), sizeof(double), what);
  /* The oracle itself: within rounding of a long double direct sum (row 0). */
  long double direct = 0;
  for (uint64_t i = 0; i < c->len; i++) {
    long double v = in == QDP_DTYPE_FLOAT32 ? (long double)((const float *)hrow)[i]
                                            : (long double)((const double *)hrow)[i];
    direct += v * v;
  }
  double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-4 : 1e-10;
  ck_assert_msg(fabsl(direct - (long double)cpu[0]) <= tol * direct,
                "%s: sum %.17g vs direct %.17Lg", what, cpu[0], direct);
  free(cpu);
  free(gpu);
  cudaFree(dbase);
  free(hx);
}

static const qdp_dtype in_dtypes[] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32};
static const qdp_dtype out_dtypes[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};

/* Runs CHECK on each case in both input and both output precisions, under every launch shape the
 * tuning knob selects (the default, 4 or 8 loads in flight): each must build the same tree. */
static void check_every_launch(const struct sumsq_case *cases, size_t count,
                               void (*check)(const struct sumsq_case *, qdp_dtype, qdp_dtype)) {
  static const int chunks[] = {0, 4, 8};
  for (int k = 0; k < 3; k++) {
    qdpk_tune_sumsq_chunks = chunks[k];
    for (size_t i = 0; i < count; i++) {
      for (int a = 0; a < 2; a++) {
        for (int b = 0; b < 2; b++) {
          check(&cases[i], in_dtypes[a], out_dtypes[b]);
        }
      }
    }
  }
  qdpk_tune_sumsq_chunks = 0;
}

START_TEST(test_sumsq_is_bit_identical_to_cpu_tree) {
  static const struct sumsq_case cases[] = {
      {1, 1, 1, 1, 0},
      {2, 1, 3, 1, 0},
      {4, 3, 5, 3, 0},
      {32, 32, 7, 33, 0},
      {64, 63, 3, 64, 1},
      {256, 200, 9, 201, 0},
      {1024, 1024, 4096, 1024, 0},
      {1024, 1000, 5, 1000, 1},
      {2048, 2047, 3, 2049, 0},
      {4096, 4096, 2, 4096, 0},
      {8192, 5000, 3, 5000, 0},
      {1u << 16, (1u << 16) - 5, 5, 1u << 16, 0},
      {1u << 20, 1u << 20, 1, 1u << 20, 0},
      {1u << 20, 777777, 2, 777777, 0},
      {1u << 22, (1u << 21) + 3, 1, 1u << 22, 1},
      {2, 2, 70001, 2, 0},
      {4, 3, 70001, 3, 0},
  };
  check_every_launch(cases, sizeof cases / sizeof cases[0], check_sumsq_case);
  /* 26 qubits, one row, both precisions of the natural input. */
  struct sumsq_case big = {1u << 26, (1u << 26) - 3, 1, 1u << 26, 0};
  check_sumsq_case(&big, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  check_sumsq_case(&big, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64);
}
END_TEST

/* A state split into 4 shards: each shard's sum over its own aligned block, joined pairwise as the
 * tree joins them, gives the bits of the one-block sum. */
START_TEST(test_sumsq_shard_sums_join_to_the_full_tree) {
  const uint64_t block = 1u << 20, len = block - 12345;
  for (int o = 0; o < 2; o++) {
    qdp_dtype out = out_dtypes[o];
    double *hx = random_reals(QDP_DTYPE_FLOAT64, len, -2.0, 2.0, 1);
    double *dx = to_device(hx, len * sizeof(double));
    double full, part[4];
    gpu_sumsq(dx, QDP_DTYPE_FLOAT64, len, len, block, 1, out, &full);
    for (int s = 0; s < 4; s++) {
      uint64_t lo = s * (block / 4);
      uint64_t n = lo >= len ? 0 : (len - lo < block / 4 ? len - lo : block / 4);
      gpu_sumsq(dx + lo, QDP_DTYPE_FLOAT64, n, n, block / 4, 1, out, &part[s]);
    }
    double joined;
    if (out == QDP_DTYPE_COMPLEX64) {
      float a = (float)part[0] + (float)part[1], b = (float)part[2] + (float)part[3];
      joined = (double)(a + b);
    } else {
      joined = (part[0] + part[1]) + (part[2] + part[3]);
    }
    ck_assert_msg(memcmp(&joined, &full, sizeof full) == 0, "%s: joined %.17g != full %.17g",
                  qdp_dtype_name(out), joined, full);
    cudaFree(dx);
    free(hx);
  }
}
END_TEST

START_TEST(test_sumsq_refuses_a_short_workspace) {
  const uint64_t block = 1u << 16, rows = 3;
  size_t need = qdpk_sumsq_workspace_bytes(block, rows);
  ck_assert_uint_gt(need, 0);
  double *dx = dmalloc(block * rows * sizeof(double));
  double *dsums = dmalloc(rows * sizeof(double));
  void *ws = dmalloc(need);
  ck_assert_int_eq(qdpk_sumsq(dx, QDP_DTYPE_FLOAT64, block, block, block, rows,
                              QDP_DTYPE_COMPLEX128, NULL, ws, need - 1, dsums, 0),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(qdpk_sumsq(dx, QDP_DTYPE_FLOAT64, block, block, 3 * 1024, rows,
                              QDP_DTYPE_COMPLEX128, NULL, ws, need, dsums, 0),
                   QDP_ERR_INVALID_ARGUMENT); /* block not a power of two */
  cudaFree(ws);
  cudaFree(dsums);
  cudaFree(dx);
}
END_TEST

/* The norm's fallback: per-row exponents, rows with e = 0 among them. Row r holds values of
 * magnitude about 2^-e_r (so x * 2^e_r is about 1); in every fifth row the odd values are tiny
 * instead, and x * 2^e_r takes them below the normal range, where ldexp rounds: the GPU's ldexp
 * must round as the CPU's does. Sums, and pass 2 with those sums, against the CPU twins. */
static int32_t scaled_exponent(qdp_dtype in, uint64_t r) {
  static const int32_t e64[5] = {0, 600, -700, 1000, -60}, e32[5] = {0, 60, -70, 100, -40};
  return (in == QDP_DTYPE_FLOAT32 ? e32 : e64)[r % 5];
}

static void check_scaled_case(const struct sumsq_case *c, qdp_dtype in, qdp_dtype out) {
  char what[200];
  snprintf(what, sizeof what,
           "scaled sumsq+amplitude in=%s out=%s block=%llu len=%llu rows=%llu stride=%llu%s",
           qdp_dtype_name(in), qdp_dtype_name(out), (unsigned long long)c->block,
           (unsigned long long)c->len, (unsigned long long)c->rows, (unsigned long long)c->stride,
           c->misalign ? " misaligned" : "");
  uint64_t n = (c->rows - 1) * c->stride + c->len + (uint64_t)c->misalign;
  size_t isz = real_size(in);
  char *hx = qdpt_xmalloc((size_t)n * isz);
  int32_t *e = qdpt_xmalloc(c->rows * sizeof *e);
  for (uint64_t r = 0; r < c->rows; r++) {
    e[r] = scaled_exponent(in, r);
    /* Rows 4, 9, ...: odd values about 2^-1000 (2^-100 in float), which e = -60 (-40) makes
     * subnormal. */
    int tiny = in == QDP_DTYPE_FLOAT32 ? -100 : -1000;
    for (uint64_t i = 0; i < c->len; i++) {
      double v = ldexp(qdpt_rng_uniform(-1.0, 1.0), r % 5 == 4 && (i & 1) ? tiny : -e[r]);
      size_t k = (size_t)(c->misalign + r * c->stride + i);
      if (in == QDP_DTYPE_FLOAT32) {
        ((float *)hx)[k] = (float)v;
      } else {
        ((double *)hx)[k] = v;
      }
    }
  }
  void *dbase = to_device(hx, (size_t)n * isz);
  const char *hrow = hx + (size_t)c->misalign * isz;
  const void *dx = (const char *)dbase + (size_t)c->misalign * isz;
  int32_t *de = to_device(e, c->rows * sizeof *e);
  double *cpu = qdpt_xmalloc(c->rows * sizeof(double)),
         *gpu = qdpt_xmalloc(c->rows * sizeof(double));
  qdpk_cpu_sumsq(hrow, in, c->stride, c->len, c->block, c->rows, out, e, cpu);
  size_t ws_bytes = qdpk_sumsq_workspace_bytes(c->block, c->rows);
  void *ws = ws_bytes ? dmalloc(ws_bytes) : NULL;
  double *dsums = dmalloc(c->rows * sizeof(double));
  poison_device(dsums, c->rows * sizeof(double));
  expect_launch(
      qdpk_sumsq(dx, in, c->stride, c->len, c->block, c->rows, out, de, ws, ws_bytes, dsums, 0),
      what);
  from_device(gpu, dsums, c->rows * sizeof(double));
  expect_same_bits(gpu, cpu, c->rows * sizeof(double), sizeof(double), what);
  /* Pass 2 over the whole block with those sums (a state of at least 1 qubit): each row a unit
   * vector. */
  uint32_t qubits = c->block > 1 ? (uint32_t)__builtin_ctzll(c->block) : 1;
  struct qdpk_span s = {qubits, 0, c->block, c->rows, out};
  size_t bytes = (size_t)(c->rows * c->block) * cplx_size(out);
  void *hc = qdpt_xmalloc(bytes), *hg = qdpt_xmalloc(bytes), *dout = dmalloc(bytes);
  poison_host(hc, bytes);
  poison_device(dout, bytes);
  qdpk_cpu_amplitude(&s, hrow, in, c->stride, c->len, cpu, e, hc);
  expect_launch(qdpk_amplitude(&s, dx, in, c->stride, c->len, dsums, de, dout, 0), what);
  from_device(hg, dout, bytes);
  expect_close(hg, hc, out, c->rows * c->block, what);
  for (uint64_t r = 0; r < c->rows; r++) {
    long double norm = 0;
    for (uint64_t j = 0; j < c->block; j++) {
      double v = get_re(hg, out, r * c->block + j, 0);
      norm += (long double)v * v;
    }
    ck_assert_msg(fabsl(norm - 1) < (out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12),
                  "%s: row %llu has norm %.17Lg", what, (unsigned long long)r, norm);
  }
  free(hc);
  free(hg);
  cudaFree(dout);
  cudaFree(dsums);
  cudaFree(ws);
  free(gpu);
  free(cpu);
  cudaFree(de);
  cudaFree(dbase);
  free(e);
  free(hx);
}

START_TEST(test_scaled_sumsq_and_amplitude_match_cpu) {
  static const struct sumsq_case cases[] = {
      {1, 1, 5, 1, 0},
      {4, 3, 7, 3, 0},
      {64, 63, 5, 64, 1},
      {1024, 1000, 10, 1001, 0},
      {2048, 2047, 5, 2049, 1},
      {1u << 16, (1u << 16) - 5, 5, 1u << 16, 0},
      {1u << 20, 777777, 5, 777777, 0},
      {4, 3, 70001, 3, 0},
  };
  check_every_launch(cases, sizeof cases / sizeof cases[0], check_scaled_case);
  /* Pass 2's other launch shapes with exponents. */
  static const int per_thread[] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    qdpk_tune_amplitude_per_thread = per_thread[k];
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 2; b++) {
        check_scaled_case(&cases[3], in_dtypes[a], out_dtypes[b]);
      }
    }
  }
  qdpk_tune_amplitude_per_thread = 0;
}
END_TEST

/* ---- amplitude ---- */

struct amp_case {
  uint32_t qubits;
  uint64_t first, count, len, rows, stride;
};

/* out for the span of c, and the same rows' full-state output when `full` is non-NULL. */
static void check_amplitude_case(const struct amp_case *c, qdp_dtype in, qdp_dtype out) {
  char what[200];
  snprintf(what, sizeof what, "amplitude n=%u first=%llu count=%llu len=%llu rows=%llu %s->%s",
           c->qubits, (unsigned long long)c->first, (unsigned long long)c->count,
           (unsigned long long)c->len, (unsigned long long)c->rows, qdp_dtype_name(in),
           qdp_dtype_name(out));
  uint64_t n = (c->rows - 1) * c->stride + c->len;
  void *hx = random_reals(in, n ? n : 1, -1.0, 1.0, 0);
  void *dx = to_device(hx, (size_t)(n ? n : 1) * real_size(in));
  double *sums = qdpt_xmalloc(c->rows * sizeof(double));
  for (uint64_t r = 0; r < c->rows; r++) {
    sums[r] = qdpt_rng_uniform(0.5, 4.0); /* any positive scale: pass 2 alone is under test */
  }
  double *dsums = to_device(sums, c->rows * sizeof(double));
  struct qdpk_span s = {c->qubits, c->first, c->count, c->rows, out};
  size_t bytes = (size_t)(c->rows * c->count) * cplx_size(out);
  void *cpu = qdpt_xmalloc(bytes), *gpu = qdpt_xmalloc(bytes), *dout = dmalloc(bytes);
  poison_host(cpu, bytes);
  poison_device(dout, bytes);
  qdpk_cpu_amplitude(&s, hx, in, c->stride, c->len, sums, NULL, cpu);
  expect_launch(qdpk_amplitude(&s, dx, in, c->stride, c->len, dsums, NULL, dout, 0), what);
  from_device(gpu, dout, bytes);
  expect_close(gpu, cpu, out, c->rows * c->count, what);
  free(cpu);
  free(gpu);
  free(sums);
  free(hx);
  cudaFree(dout);
  cudaFree(dsums);
  cudaFree(dx);
}

START_TEST(test_amplitude_matches_cpu) {
  static const struct amp_case cases[] = {
      {1, 0, 2, 2, 1, 2},
      {1, 0, 2, 1, 70001, 1},
      {3, 0, 8, 5, 7, 5},
      {3, 1, 7, 7, 3, 9},
      {10, 0, 1024, 1024, 4096, 1024},
      {11, 0, 2048, 2000, 3, 2001},
      {17, 0, 1u << 17, 100001, 2, 100001},
      {20, 0, 1u << 20, 1u << 20, 1, 1u << 20},
      {20, 1u << 19, 1u << 19, 300001, 1, 300001},
      {26, 0, 1u << 26, (1u << 26) - 1, 1, 1u << 26},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 2; b++) {
        check_amplitude_case(&cases[i], in_dtypes[a], out_dtypes[b]);
      }
    }
  }
  /* The other launch shapes of pass 2 (amplitudes per thread, block order, cache hints), on the
   * cases up to 17 qubits. */
  static const int per_thread[] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    for (int v = 0; v < 4; v++) {
      qdpk_tune_amplitude_per_thread = per_thread[k];
      qdpk_tune_amplitude_forward = v & 1;
      qdpk_tune_amplitude_streaming = v >> 1;
      for (size_t i = 0; cases[i].qubits <= 17; i++) {
        for (int a = 0; a < 2; a++) {
          for (int b = 0; b < 2; b++) {
            check_amplitude_case(&cases[i], in_dtypes[a], out_dtypes[b]);
          }
        }
      }
    }
  }
  qdpk_tune_amplitude_per_thread = 0;
  qdpk_tune_amplitude_forward = 0;
  qdpk_tune_amplitude_streaming = 0;
}
END_TEST

/* The end-to-end path the runtime takes: GPU sums, then GPU pass 2, against the CPU twins. */
START_TEST(test_amplitude_two_passes_normalize_like_cpu) {
  const uint32_t n = 21;
  const uint64_t rows = 3, len = (1u << n) - 999, count = 1u << n;
  for (int o = 0; o < 2; o++) {
    qdp_dtype out = out_dtypes[o];
    double *hx = random_reals(QDP_DTYPE_FLOAT64, rows * len, -1.0, 1.0, 1);
    double *dx = to_device(hx, rows * len * sizeof(double));
    double gsums[3], csums[3];
    gpu_sumsq(dx, QDP_DTYPE_FLOAT64, len, len, count, rows, out, gsums);
    qdpk_cpu_sumsq(hx, QDP_DTYPE_FLOAT64, len, len, count, rows, out, NULL, csums);
    double *dsums = to_device(gsums, sizeof gsums);
    struct qdpk_span s = {n, 0, count, rows, out};
    size_t bytes = (size_t)(rows * count) * cplx_size(out);
    void *cpu = qdpt_xmalloc(bytes), *gpu = qdpt_xmalloc(bytes), *dout = dmalloc(bytes);
    poison_host(cpu, bytes);
    poison_device(dout, bytes);
    qdpk_cpu_amplitude(&s, hx, QDP_DTYPE_FLOAT64, len, len, csums, NULL, cpu);
    expect_launch(qdpk_amplitude(&s, dx, QDP_DTYPE_FLOAT64, len, len, dsums, NULL, dout, 0),
                  "amplitude two passes");
    from_device(gpu, dout, bytes);
    expect_close(gpu, cpu, out, rows * count, "amplitude two passes");
    /* Each row has unit norm. */
    for (uint64_t r = 0; r < rows; r++) {
      long double norm = 0;
      for (uint64_t j = 0; j < count; j++) {
        double v = get_re(gpu, out, r * count + j, 0);
        norm += (long double)v * v;
      }
      ck_assert_double_eq_tol((double)norm, 1.0, out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12);
    }
    free(cpu);
    free(gpu);
    free(hx);
    cudaFree(dout);
    cudaFree(dsums);
    cudaFree(dx);
  }
}
END_TEST

void qdpk_add_sumsq(TCase *tc) {
  tcase_add_test(tc, test_sumsq_is_bit_identical_to_cpu_tree);
  tcase_add_test(tc, test_sumsq_shard_sums_join_to_the_full_tree);
  tcase_add_test(tc, test_sumsq_refuses_a_short_workspace);
  tcase_add_test(tc, test_scaled_sumsq_and_amplitude_match_cpu);
}

void qdpk_add_amplitude(TCase *tc) {
  tcase_add_test(tc, test_amplitude_matches_cpu);
  tcase_add_test(tc, test_amplitude_two_passes_normalize_like_cpu);
}
