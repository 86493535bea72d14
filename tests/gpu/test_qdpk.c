/* test_qdpk.c — every CUDA launcher of kernels/qdpk_cuda.h against its CPU twin (kernels/cpu).
 *
 * The CPU twins are the oracle: sumsq and wht must match them bit for bit (memcmp), basis exactly,
 * the other encodings within 1e-12 (complex128) or 1e-5 (complex64) of the largest reference
 * magnitude. Sizes spread from 1 to 26 qubits, with odd lengths that are not multiples of any block
 * or tile, odd row counts, rows beyond the 65535 grid-y limit, odd strides and misaligned inputs.
 * Sharded launches (first/count, shard-sized sumsq blocks, wht + butterfly) must give the bits of
 * one launch. The norm's fallback (per-row exponents, subnormal results of ldexp included) and the
 * closed forms' parameter check are compared with the CPU the same way. Outputs are poisoned with
 * NaN bytes before every launch, so an amplitude a kernel forgets to write fails the comparison.
 *
 * Check runs without fork (a CUDA context does not survive one); the binary exits 77 (a skip for
 * meson) when no CUDA device is usable.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "common.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "qdpk_tune.h"

#define TOL64 1e-12
#define TOL32 1e-5

/* ---- helpers ---- */

static size_t real_size(qdp_dtype t) {
  return t == QDP_DTYPE_FLOAT32 ? 4 : 8;
}

static size_t cplx_size(qdp_dtype t) {
  return t == QDP_DTYPE_COMPLEX64 ? 8 : 16;
}

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  ck_assert_msg(e == cudaSuccess, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorName(e));
  return p;
}

static void *to_device(const void *host, size_t bytes) {
  void *d = dmalloc(bytes);
  ck_assert_int_eq(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

static void from_device(void *host, const void *dev, size_t bytes) {
  ck_assert_int_eq(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* All-ones bytes are a NaN in float and double: a value left unwritten cannot pass. */
static void poison_device(void *dev, size_t bytes) {
  ck_assert_int_eq(cudaMemset(dev, 0xff, bytes), cudaSuccess);
}

static void poison_host(void *host, size_t bytes) {
  memset(host, 0xff, bytes);
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double t_start;

/* Every launch is logged with the time since the start, so a log shows where a run spends it. */
static void expect_launch(qdp_status rc, const char *what) {
  fprintf(stderr, "%8.2f s  %s\n", seconds() - t_start, what);
  ck_assert_msg(rc == QDP_OK, "%s: launcher returned %s (%s)", what, qdp_status_name(rc),
                cudaGetErrorName(cudaPeekAtLastError()));
  cudaError_t e = cudaDeviceSynchronize();
  ck_assert_msg(e == cudaSuccess, "%s: kernel failed: %s", what, cudaGetErrorName(e));
}

/* Random real inputs of type t: values in [lo, hi), scaled by 2^-8..2^8 when `spread` so that
 * summation order shows in the low bits. */
static void *random_reals(qdp_dtype t, uint64_t n, double lo, double hi, int spread) {
  void *p = qdpt_xmalloc((size_t)n * real_size(t));
  for (uint64_t i = 0; i < n; i++) {
    double v = qdpt_rng_uniform(lo, hi);
    if (spread) {
      v = ldexp(v, (int)(qdpt_rng_next() % 17) - 8);
    }
    if (t == QDP_DTYPE_FLOAT32) {
      ((float *)p)[i] = (float)v;
    } else {
      ((double *)p)[i] = v;
    }
  }
  return p;
}

static double get_re(const void *p, qdp_dtype out, uint64_t i, int part) {
  return out == QDP_DTYPE_COMPLEX64 ? (double)((const float *)p)[2 * i + part]
                                    : ((const double *)p)[2 * i + part];
}

/* Largest |gpu - cpu| over n complex values, relative to the largest |cpu|; fails on a NaN the
 * reference does not have (an amplitude left poisoned). Plain comparisons in the loop and one
 * assertion at the end: every passing Check assertion costs a system call. */
static void expect_close(const void *gpu, const void *cpu, qdp_dtype out, uint64_t n,
                         const char *what) {
  double tol = out == QDP_DTYPE_COMPLEX64 ? TOL32 : TOL64;
  double max_ref = 0, max_diff = 0;
  uint64_t worst = 0, ref_nan = 0, gpu_nan = 0;
  int any_ref_nan = 0, any_gpu_nan = 0;
  for (uint64_t i = 0; i < n; i++) {
    for (int part = 0; part < 2; part++) {
      double g = get_re(gpu, out, i, part), c = get_re(cpu, out, i, part);
      if (isnan(c) && !any_ref_nan) {
        any_ref_nan = 1;
        ref_nan = i;
      }
      if (isnan(g) && !any_gpu_nan) {
        any_gpu_nan = 1;
        gpu_nan = i;
      }
      if (fabs(c) > max_ref) {
        max_ref = fabs(c);
      }
      if (fabs(g - c) > max_diff) {
        max_diff = fabs(g - c);
        worst = i;
      }
    }
  }
  ck_assert_msg(!any_ref_nan, "%s: reference value %llu is NaN", what, (unsigned long long)ref_nan);
  ck_assert_msg(!any_gpu_nan, "%s: amplitude %llu was not written (NaN)", what,
                (unsigned long long)gpu_nan);
  ck_assert_msg(max_ref > 0, "%s: reference is all zeros", what);
  ck_assert_msg(max_diff <= tol * max_ref,
                "%s: max |gpu - cpu| = %.3e at %llu (gpu %.17g%+.17gi, cpu %.17g%+.17gi), "
                "relative %.3e > %.0e",
                what, max_diff, (unsigned long long)worst, get_re(gpu, out, worst, 0),
                get_re(gpu, out, worst, 1), get_re(cpu, out, worst, 0), get_re(cpu, out, worst, 1),
                max_diff / max_ref, tol);
}

static void expect_same_bits(const void *gpu, const void *cpu, size_t bytes, size_t elem,
                             const char *what) {
  if (memcmp(gpu, cpu, bytes) == 0) {
    return;
  }
  size_t i = 0;
  while (memcmp((const char *)gpu + i * elem, (const char *)cpu + i * elem, elem) == 0) {
    i++;
  }
  ck_abort_msg("%s: bits differ first at element %zu of %zu", what, i, bytes / elem);
}

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
  static const qdp_dtype ins[] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32};
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  /* Every launch shape the tuning knob selects (4 or 8 loads in flight) builds the same tree. */
  static const int chunks[] = {0, 4, 8};
  for (int k = 0; k < 3; k++) {
    qdpk_tune_sumsq_chunks = chunks[k];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      for (int a = 0; a < 2; a++) {
        for (int b = 0; b < 2; b++) {
          check_sumsq_case(&cases[i], ins[a], outs[b]);
        }
      }
    }
  }
  qdpk_tune_sumsq_chunks = 0;
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
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (int o = 0; o < 2; o++) {
    qdp_dtype out = outs[o];
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
struct scaled_case {
  uint64_t block, len, rows, stride;
  int misalign;
};

static int32_t scaled_exponent(qdp_dtype in, uint64_t r) {
  static const int32_t e64[5] = {0, 600, -700, 1000, -60}, e32[5] = {0, 60, -70, 100, -40};
  return (in == QDP_DTYPE_FLOAT32 ? e32 : e64)[r % 5];
}

static void check_scaled_case(const struct scaled_case *c, qdp_dtype in, qdp_dtype out) {
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
  static const struct scaled_case cases[] = {
      {1, 1, 5, 1, 0},
      {4, 3, 7, 3, 0},
      {64, 63, 5, 64, 1},
      {1024, 1000, 10, 1001, 0},
      {2048, 2047, 5, 2049, 1},
      {1u << 16, (1u << 16) - 5, 5, 1u << 16, 0},
      {1u << 20, 777777, 5, 777777, 0},
      {4, 3, 70001, 3, 0},
  };
  static const qdp_dtype ins[] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32};
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  static const int chunks[] = {0, 4, 8};
  for (int k = 0; k < 3; k++) {
    qdpk_tune_sumsq_chunks = chunks[k];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      for (int a = 0; a < 2; a++) {
        for (int b = 0; b < 2; b++) {
          check_scaled_case(&cases[i], ins[a], outs[b]);
        }
      }
    }
  }
  qdpk_tune_sumsq_chunks = 0;
  /* Pass 2's other launch shapes with exponents. */
  static const int per_thread[] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    qdpk_tune_amplitude_per_thread = per_thread[k];
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 2; b++) {
        check_scaled_case(&cases[3], ins[a], outs[b]);
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
  static const qdp_dtype ins[] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32};
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int a = 0; a < 2; a++) {
      for (int b = 0; b < 2; b++) {
        check_amplitude_case(&cases[i], ins[a], outs[b]);
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
            check_amplitude_case(&cases[i], ins[a], outs[b]);
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
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (int o = 0; o < 2; o++) {
    qdp_dtype out = outs[o];
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

/* ---- closed forms: angle, phase, basis, iqp ---- */

enum closed_op { OP_ANGLE, OP_PHASE, OP_BASIS, OP_IQP, OP_IQP_Z };

static const char *op_name(enum closed_op op) {
  static const char *names[] = {"angle", "phase", "basis", "iqp", "iqp-z"};
  return names[op];
}

static qdp_status gpu_closed(enum closed_op op, const struct qdpk_span *s, const void *dx,
                             qdp_dtype in, uint64_t stride, void *dout) {
  switch (op) {
  case OP_ANGLE:
    return qdpk_angle(s, dx, in, stride, dout, 0);
  case OP_PHASE:
    return qdpk_phase(s, dx, in, stride, dout, 0);
  case OP_BASIS:
    return qdpk_basis(s, dx, in, stride, dout, 0);
  case OP_IQP:
    return qdpk_iqp_phases(s, dx, in, stride, 1, dout, 0);
  default:
    return qdpk_iqp_phases(s, dx, in, stride, 0, dout, 0);
  }
}

static void cpu_closed(enum closed_op op, const struct qdpk_span *s, const void *hx, qdp_dtype in,
                       uint64_t stride, void *out) {
  switch (op) {
  case OP_ANGLE:
    qdpk_cpu_angle(s, hx, in, stride, out);
    break;
  case OP_PHASE:
    qdpk_cpu_phase(s, hx, in, stride, out);
    break;
  case OP_BASIS:
    qdpk_cpu_basis(s, hx, in, stride, out);
    break;
  case OP_IQP:
    qdpk_cpu_iqp_phases(s, hx, in, stride, 1, out);
    break;
  default:
    qdpk_cpu_iqp_phases(s, hx, in, stride, 0, out);
    break;
  }
}

static uint64_t op_params(enum closed_op op, uint32_t n) {
  switch (op) {
  case OP_IQP:
    return qdp_values_per_sample(QDP_ENCODING_IQP, n);
  case OP_BASIS:
    return 1;
  default:
    return n;
  }
}

/* Inputs for rows samples: angles in [-pi, pi); IQP coefficients in [-0.5, 0.5), or [-0.1, 0.1)
 * for complex64, where theta sums up to n(n+1)/2 terms in float and its rounding (CPU and GPU sum
 * in different orders) must stay well inside the 1e-5 tolerance; basis indices valid for n
 * qubits. */
static void *closed_inputs(enum closed_op op, qdp_dtype in, qdp_dtype out, uint32_t n,
                           uint64_t rows, uint64_t stride) {
  uint64_t total = (rows - 1) * stride + op_params(op, n);
  if (op == OP_BASIS) {
    void *p = qdpt_xmalloc((size_t)total * 8);
    for (uint64_t i = 0; i < total; i++) {
      uint64_t idx = qdpt_rng_next() & (((uint64_t)1 << n) - 1);
      if (in == QDP_DTYPE_INT64) {
        ((int64_t *)p)[i] = (int64_t)idx;
      } else if (in == QDP_DTYPE_FLOAT32) {
        ((float *)p)[i] = (float)(idx & 0xffffff); /* exact in float */
      } else {
        ((double *)p)[i] = (double)idx;
      }
    }
    return p;
  }
  double r = M_PI;
  if (op == OP_IQP || op == OP_IQP_Z) {
    r = out == QDP_DTYPE_COMPLEX64 ? 0.1 : 0.5;
  }
  return random_reals(in, total, -r, r, 0);
}

static size_t in_size(qdp_dtype in) {
  return in == QDP_DTYPE_FLOAT32 ? 4 : 8;
}

struct closed_case {
  uint32_t qubits;
  uint64_t first, count, rows, stride_extra;
};

static void check_closed_case(enum closed_op op, const struct closed_case *c, qdp_dtype in,
                              qdp_dtype out) {
  char what[200];
  snprintf(what, sizeof what, "%s n=%u first=%llu count=%llu rows=%llu %s->%s", op_name(op),
           c->qubits, (unsigned long long)c->first, (unsigned long long)c->count,
           (unsigned long long)c->rows, qdp_dtype_name(in), qdp_dtype_name(out));
  uint64_t stride = op_params(op, c->qubits) + c->stride_extra;
  uint64_t total = (c->rows - 1) * stride + op_params(op, c->qubits);
  void *hx = closed_inputs(op, in, out, c->qubits, c->rows, stride);
  void *dx = to_device(hx, (size_t)total * in_size(in));
  struct qdpk_span s = {c->qubits, c->first, c->count, c->rows, out};
  size_t bytes = (size_t)(c->rows * c->count) * cplx_size(out);
  void *cpu = qdpt_xmalloc(bytes), *gpu = qdpt_xmalloc(bytes), *dout = dmalloc(bytes);
  poison_host(cpu, bytes);
  poison_device(dout, bytes);
  cpu_closed(op, &s, hx, in, stride, cpu);
  expect_launch(gpu_closed(op, &s, dx, in, stride, dout), what);
  from_device(gpu, dout, bytes);
  if (op == OP_BASIS) {
    expect_same_bits(gpu, cpu, bytes, cplx_size(out), what);
  } else {
    expect_close(gpu, cpu, out, c->rows * c->count, what);
  }
  /* Sharded: the span [first + count/3, + count/2) launched alone equals that slice of the whole
   * span's launch, bit for bit. */
  if (c->count >= 6) {
    struct qdpk_span sh = s;
    sh.first = c->first + c->count / 3;
    sh.count = c->count / 2;
    size_t sbytes = (size_t)(c->rows * sh.count) * cplx_size(out);
    void *dsh = dmalloc(sbytes), *hsh = qdpt_xmalloc(sbytes);
    poison_device(dsh, sbytes);
    expect_launch(gpu_closed(op, &sh, dx, in, stride, dsh), what);
    from_device(hsh, dsh, sbytes);
    uint64_t bad_rows = 0, first_bad = 0;
    for (uint64_t r = 0; r < c->rows; r++) {
      const char *whole =
          (const char *)gpu + (size_t)(r * c->count + c->count / 3) * cplx_size(out);
      const char *part = (const char *)hsh + (size_t)(r * sh.count) * cplx_size(out);
      if (memcmp(whole, part, (size_t)sh.count * cplx_size(out)) != 0 && bad_rows++ == 0) {
        first_bad = r;
      }
    }
    ck_assert_msg(bad_rows == 0,
                  "%s: sharded launch differs from the whole launch in %llu rows, first row %llu",
                  what, (unsigned long long)bad_rows, (unsigned long long)first_bad);
    cudaFree(dsh);
    free(hsh);
  }
  free(cpu);
  free(gpu);
  free(hx);
  cudaFree(dout);
  cudaFree(dx);
}

static void set_closed_per_thread(int k) {
  qdpk_tune_angle_per_thread = k;
  qdpk_tune_phase_per_thread = k;
  qdpk_tune_basis_per_thread = k;
  qdpk_tune_iqp_per_thread = k;
}

/* Every case with the default launch shape, and the cases up to 2^13 amplitudes with each
 * amplitudes-per-thread variant (1, 4, 16). */
static void check_closed_op(enum closed_op op, const struct closed_case *cases, size_t ncases) {
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  static const int per_thread[] = {0, 1, 4, 16};
  qdp_dtype ins[3] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32, QDP_DTYPE_INT64};
  int nin = op == OP_BASIS ? 3 : 2;
  for (int k = 0; k < 4; k++) {
    set_closed_per_thread(per_thread[k]);
    for (size_t i = 0; i < ncases; i++) {
      if (k > 0 && cases[i].count > 8192) {
        continue;
      }
      for (int a = 0; a < nin; a++) {
        for (int b = 0; b < 2; b++) {
          check_closed_case(op, &cases[i], ins[a], outs[b]);
        }
      }
    }
  }
  set_closed_per_thread(0);
}

#define FULL(n) 0, (1ull << (n))

START_TEST(test_angle_matches_cpu) {
  static const struct closed_case cases[] = {
      {1, FULL(1), 1, 0},   {2, FULL(2), 70001, 1}, {5, FULL(5), 3, 2},   {8, FULL(8), 5, 0},
      {9, FULL(9), 2, 0},   {9, 37, 401, 3, 1},     {13, FULL(13), 7, 0}, {13, 1000, 5001, 1, 0},
      {20, FULL(20), 1, 0}, {24, FULL(24), 1, 0},
  };
  check_closed_op(OP_ANGLE, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_phase_matches_cpu) {
  static const struct closed_case cases[] = {
      {1, FULL(1), 1, 0},   {2, FULL(2), 70001, 1}, {5, FULL(5), 3, 2},   {8, FULL(8), 5, 0},
      {9, FULL(9), 2, 0},   {9, 37, 401, 3, 1},     {13, FULL(13), 7, 0}, {13, 1000, 5001, 1, 0},
      {20, FULL(20), 1, 0}, {24, FULL(24), 1, 0},
  };
  check_closed_op(OP_PHASE, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_basis_matches_cpu) {
  static const struct closed_case cases[] = {
      {1, FULL(1), 1, 0},   {2, FULL(2), 70001, 1}, {7, FULL(7), 9, 0},         {7, 3, 101, 9, 2},
      {16, FULL(16), 3, 0}, {20, FULL(20), 2, 0},   {22, 12345, 3000001, 1, 0},
  };
  check_closed_op(OP_BASIS, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_iqp_phases_match_cpu) {
  static const struct closed_case cases[] = {
      {1, FULL(1), 1, 0},   {2, FULL(2), 70001, 1}, {3, FULL(3), 5, 0},
      {8, FULL(8), 3, 0},   {9, FULL(9), 2, 2},     {9, 37, 401, 3, 0},
      {12, FULL(12), 3, 0}, {16, 777, 40001, 1, 0}, {20, FULL(20), 1, 0},
  };
  check_closed_op(OP_IQP, cases, sizeof cases / sizeof cases[0]);
  check_closed_op(OP_IQP_Z, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* ---- iqp whole (qdpk_iqp) ---- */

/* qdpk_iqp against its CPU twin qdpk_cpu_iqp (within rounding: the sums and the sines differ),
 * iqp and iqp-z, both input and output types, padded rows: states with fewer low bits than the
 * fused pass's tile (n < 12), one tile, several, and those that need the strided passes. */
START_TEST(test_iqp_whole_matches_cpu) {
  static const struct {
    uint32_t n;
    uint64_t rows, extra;
  } cases[] = {{1, 3, 0},  {2, 5, 1},  {3, 2, 0},  {5, 7, 0},  {8, 3, 2},  {11, 2, 0},
               {12, 2, 0}, {13, 1, 1}, {15, 1, 0}, {17, 2, 0}, {21, 1, 0}, {23, 1, 0}};
  static const qdp_dtype ins[] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32};
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int pairs = 0; pairs <= 1; pairs++) {
      enum closed_op op = pairs ? OP_IQP : OP_IQP_Z;
      for (int a = 0; a < 2; a++) {
        for (int b = 0; b < 2; b++) {
          uint32_t n = cases[i].n;
          uint64_t rows = cases[i].rows, count = 1ull << n;
          uint64_t stride = op_params(op, n) + cases[i].extra;
          uint64_t total = (rows - 1) * stride + op_params(op, n);
          char what[160];
          snprintf(what, sizeof what, "qdpk_iqp %s n=%u rows=%llu %s->%s", op_name(op), n,
                   (unsigned long long)rows, qdp_dtype_name(ins[a]), qdp_dtype_name(outs[b]));
          void *hx = closed_inputs(op, ins[a], outs[b], n, rows, stride);
          void *dx = to_device(hx, (size_t)total * in_size(ins[a]));
          struct qdpk_span s = {n, 0, count, rows, outs[b]};
          size_t bytes = (size_t)(rows * count) * cplx_size(outs[b]);
          void *cpu = qdpt_xmalloc(bytes), *gpu = qdpt_xmalloc(bytes), *dout = dmalloc(bytes);
          poison_device(dout, bytes);
          ck_assert_int_eq(qdpk_cpu_iqp(&s, hx, ins[a], stride, pairs, cpu), 0);
          expect_launch(qdpk_iqp(&s, dx, ins[a], stride, pairs, dout, 0), what);
          from_device(gpu, dout, bytes);
          expect_close(gpu, cpu, outs[b], rows * count, what);
          free(cpu);
          free(gpu);
          free(hx);
          cudaFree(dout);
          cudaFree(dx);
        }
      }
    }
  }
}
END_TEST

/* One state in 2^g shards, g = 0..5: qdpk_iqp per span, then the butterfly stages over the global
 * bits below the top 3, ascending (g = 4, 5), as the executor runs them; and uneven runs of whole
 * blocks (3, 1 and 4 of the 8). Every shard has the bits of the whole launch. */
START_TEST(test_iqp_shards_are_bit_identical) {
  static const struct {
    uint32_t n;
    uint64_t rows;
  } cases[] = {{6, 3}, {13, 2}, {16, 2}, {22, 1}};
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int pairs = 0; pairs <= 1; pairs++) {
      enum closed_op op = pairs ? OP_IQP : OP_IQP_Z;
      for (int b = 0; b < 2; b++) {
        uint32_t n = cases[i].n;
        uint64_t rows = cases[i].rows, count = 1ull << n, stride = op_params(op, n);
        qdp_dtype out = outs[b];
        size_t cs = cplx_size(out), bytes = (size_t)(rows * count) * cs;
        char what[160];
        snprintf(what, sizeof what, "%s n=%u rows=%llu %s", op_name(op), n,
                 (unsigned long long)rows, qdp_dtype_name(out));
        void *hx = closed_inputs(op, QDP_DTYPE_FLOAT64, out, n, rows, stride);
        void *dx = to_device(hx, (size_t)(rows * stride) * 8);
        char *whole = qdpt_xmalloc(bytes), *got = qdpt_xmalloc(bytes);
        void *dwhole = dmalloc(bytes);
        struct qdpk_span s = {n, 0, count, rows, out};
        expect_launch(qdpk_iqp(&s, dx, QDP_DTYPE_FLOAT64, stride, pairs, dwhole, 0), what);
        from_device(whole, dwhole, bytes);
        /* Shard p of a split is rows x (last - first) at the start of its own allocation. */
        uint64_t blk = count >> QDPK_IQP_TOP_BITS;
        uint64_t edges[7][33];
        size_t nsplits = 0, nparts[7];
        for (uint32_t g = 0; g <= 5; g++, nsplits++) {
          nparts[nsplits] = (size_t)1 << g;
          for (uint64_t p = 0; p <= nparts[nsplits]; p++) {
            edges[nsplits][p] = p * (count >> g);
          }
        }
        const uint64_t uneven[4] = {0, 3 * blk, 4 * blk, 8 * blk};
        nparts[nsplits] = 3;
        memcpy(edges[nsplits++], uneven, sizeof uneven);
        for (size_t k = 0; k < nsplits; k++) {
          void *dsh[32];
          for (size_t p = 0; p < nparts[k]; p++) {
            uint64_t len = edges[k][p + 1] - edges[k][p];
            dsh[p] = dmalloc((size_t)(rows * len) * cs);
            poison_device(dsh[p], (size_t)(rows * len) * cs);
            struct qdpk_span sh = {n, edges[k][p], len, rows, out};
            expect_launch(qdpk_iqp(&sh, dx, QDP_DTYPE_FLOAT64, stride, pairs, dsh[p], 0), what);
          }
          uint32_t g = k < 6 ? (uint32_t)k : 0;
          uint64_t sub = count >> g;
          for (uint32_t bit = 0; g > QDPK_IQP_TOP_BITS && bit < g - QDPK_IQP_TOP_BITS; bit++) {
            for (size_t p = 0; p < nparts[k]; p++) {
              if (p & ((size_t)1 << bit)) {
                continue;
              }
              size_t q = p | ((size_t)1 << bit);
              for (uint64_t r = 0; r < rows; r++) {
                expect_launch(qdpk_butterfly((char *)dsh[p] + r * sub * cs,
                                             (char *)dsh[q] + r * sub * cs, out, sub, 0),
                              what);
              }
            }
          }
          for (size_t p = 0; p < nparts[k]; p++) {
            uint64_t len = edges[k][p + 1] - edges[k][p];
            from_device(got, dsh[p], (size_t)(rows * len) * cs);
            for (uint64_t r = 0; r < rows; r++) {
              ck_assert_msg(memcmp(got + r * len * cs, whole + (r * count + edges[k][p]) * cs,
                                   (size_t)len * cs) == 0,
                            "%s: %s split into %zu, shard %zu row %llu differs from the whole "
                            "launch",
                            what, k < 6 ? "even" : "uneven", nparts[k], p, (unsigned long long)r);
            }
            cudaFree(dsh[p]);
          }
        }
        /* Spans of neither shape are refused. */
        struct qdpk_span bad = {n, 1, 3, rows, out};
        ck_assert_int_eq(qdpk_iqp(&bad, dx, QDP_DTYPE_FLOAT64, stride, pairs, dwhole, 0),
                         QDP_ERR_INVALID_ARGUMENT);
        free(whole);
        free(got);
        free(hx);
        cudaFree(dwhole);
        cudaFree(dx);
      }
    }
  }
}
END_TEST

/* ---- wht and butterfly ---- */

static void *random_state(qdp_dtype out, uint64_t n) {
  void *p = qdpt_xmalloc((size_t)n * cplx_size(out));
  for (uint64_t i = 0; i < 2 * n; i++) {
    double v = ldexp(qdpt_rng_uniform(-1.0, 1.0), (int)(qdpt_rng_next() % 9) - 4);
    if (out == QDP_DTYPE_COMPLEX64) {
      ((float *)p)[i] = (float)v;
    } else {
      ((double *)p)[i] = v;
    }
  }
  return p;
}

static void check_wht_case(qdp_dtype out, uint64_t count, uint64_t rows) {
  char what[120];
  snprintf(what, sizeof what, "wht %s count=%llu rows=%llu", qdp_dtype_name(out),
           (unsigned long long)count, (unsigned long long)rows);
  size_t bytes = (size_t)(count * rows) * cplx_size(out);
  void *h = random_state(out, count * rows);
  void *d = to_device(h, bytes);
  void *gpu = qdpt_xmalloc(bytes);
  qdpk_cpu_wht(h, out, count, rows);
  expect_launch(qdpk_wht(d, out, count, rows, 0), what);
  poison_host(gpu, bytes);
  from_device(gpu, d, bytes);
  expect_same_bits(gpu, h, bytes, cplx_size(out), what);
  free(gpu);
  free(h);
  cudaFree(d);
}

START_TEST(test_wht_is_bit_identical_to_cpu) {
  static const struct {
    uint64_t count, rows;
  } cases[] = {
      {1, 3},        {2, 1},        {2, 70001},    {8, 5},        {256, 3},
      {2048, 7},     {4096, 1},     {4096, 3},     {8192, 1},     {1u << 13, 5},
      {1u << 16, 2}, {1u << 17, 1}, {1u << 18, 2}, {1u << 19, 1}, {1u << 20, 1},
      {1u << 21, 3}, {1u << 22, 1},
  };
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  /* The strided passes loaded straight into the layout of their first stages (the default) and
   * in the natural layout (qdpk_tune_wht_load = 2). */
  for (int load = 1; load <= 2; load++) {
    qdpk_tune_wht_load = load;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      for (int o = 0; o < 2; o++) {
        check_wht_case(outs[o], cases[i].count, cases[i].rows);
      }
    }
    check_wht_case(QDP_DTYPE_COMPLEX128, 1u << 26, 1); /* three passes: 12 + 7 + 7 stages */
    check_wht_case(QDP_DTYPE_COMPLEX64, 1u << 25, 1);
  }
  qdpk_tune_wht_load = 0;
}
END_TEST

/* The stages from bit 9 up (what qdpk_iqp leaves to qdpk_wht_from), passes of 4 to 10 stages
 * (2^19: one pass of 10 in 64-byte runs of complex128; 2^28: 10 + 9): the strided passes loaded
 * straight into the layout of their first stages and those loaded in the natural layout give
 * the same bits. */
START_TEST(test_wht_from_direct_passes_equal_natural_passes) {
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  static const uint32_t sizes[] = {13, 15, 17, 18, 19, 21, 23, 25, 27, 28};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    const uint32_t bits = sizes[i];
    for (int o = 0; o < 2; o++) {
      const uint64_t count = 1ull << bits, rows = bits <= 21 ? 3 : 1;
      size_t esz = cplx_size(outs[o]), bytes = (size_t)(count * rows) * esz;
      char what[96];
      snprintf(what, sizeof what, "wht_from 9 %s count=2^%u rows=%llu", qdp_dtype_name(outs[o]),
               bits, (unsigned long long)rows);
      void *h = random_state(outs[o], count * rows);
      void *dd = to_device(h, bytes), *dt = to_device(h, bytes);
      expect_launch(qdpk_wht_from(dd, outs[o], count, rows, 9, 0), what);
      qdpk_tune_wht_load = 2;
      expect_launch(qdpk_wht_from(dt, outs[o], count, rows, 9, 0), what);
      qdpk_tune_wht_load = 0;
      void *a = qdpt_xmalloc(bytes), *b = qdpt_xmalloc(bytes);
      from_device(a, dd, bytes);
      from_device(b, dt, bytes);
      expect_same_bits(a, b, bytes, esz, what);
      free(a);
      free(b);
      free(h);
      cudaFree(dd);
      cudaFree(dt);
    }
  }
}
END_TEST

/* A 2^20 state in 4 shards: a local transform per shard, then the butterflies over the two shard
 * bits in ascending order, equal the one-device transform bit for bit, on the GPU and on the CPU.
 */
START_TEST(test_wht_shards_with_butterflies_equal_one_transform) {
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  const uint64_t count = 1u << 20, q = count / 4;
  for (int o = 0; o < 2; o++) {
    qdp_dtype out = outs[o];
    size_t esz = cplx_size(out), bytes = (size_t)count * esz;
    void *h = random_state(out, count);
    void *dfull = to_device(h, bytes);
    void *dsh = to_device(h, bytes);
    char *sh = dsh;
    expect_launch(qdpk_wht(dfull, out, count, 1, 0), "wht full");
    for (int s = 0; s < 4; s++) {
      expect_launch(qdpk_wht(sh + s * q * esz, out, q, 1, 0), "wht shard");
    }
    expect_launch(qdpk_butterfly(sh, sh + q * esz, out, q, 0), "butterfly 0-1");
    expect_launch(qdpk_butterfly(sh + 2 * q * esz, sh + 3 * q * esz, out, q, 0), "butterfly 2-3");
    expect_launch(qdpk_butterfly(sh, sh + 2 * q * esz, out, q, 0), "butterfly 0-2");
    expect_launch(qdpk_butterfly(sh + q * esz, sh + 3 * q * esz, out, q, 0), "butterfly 1-3");
    void *a = qdpt_xmalloc(bytes), *b = qdpt_xmalloc(bytes);
    from_device(a, dfull, bytes);
    from_device(b, dsh, bytes);
    expect_same_bits(b, a, bytes, esz, "sharded wht vs one transform");
    /* The CPU butterfly on CPU shard transforms gives the same bits. */
    char *c = h;
    for (int s = 0; s < 4; s++) {
      qdpk_cpu_wht(c + s * q * esz, out, q, 1);
    }
    qdpk_cpu_butterfly(c, c + q * esz, out, q);
    qdpk_cpu_butterfly(c + 2 * q * esz, c + 3 * q * esz, out, q);
    qdpk_cpu_butterfly(c, c + 2 * q * esz, out, q);
    qdpk_cpu_butterfly(c + q * esz, c + 3 * q * esz, out, q);
    expect_same_bits(b, c, bytes, esz, "GPU shards vs CPU shards");
    free(a);
    free(b);
    free(h);
    cudaFree(dfull);
    cudaFree(dsh);
  }
}
END_TEST

START_TEST(test_butterfly_is_bit_identical_to_cpu) {
  static const uint64_t counts[] = {1, 3, 257, 100003};
  static const qdp_dtype outs[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    for (int o = 0; o < 2; o++) {
      qdp_dtype out = outs[o];
      size_t bytes = (size_t)counts[i] * cplx_size(out);
      void *ha = random_state(out, counts[i]), *hb = random_state(out, counts[i]);
      void *da = to_device(ha, bytes), *db = to_device(hb, bytes);
      expect_launch(qdpk_butterfly(da, db, out, counts[i], 0), "butterfly");
      qdpk_cpu_butterfly(ha, hb, out, counts[i]);
      void *ga = qdpt_xmalloc(bytes), *gb = qdpt_xmalloc(bytes);
      from_device(ga, da, bytes);
      from_device(gb, db, bytes);
      expect_same_bits(ga, ha, bytes, cplx_size(out), "butterfly a");
      expect_same_bits(gb, hb, bytes, cplx_size(out), "butterfly b");
      free(ga);
      free(gb);
      free(ha);
      free(hb);
      cudaFree(da);
      cudaFree(db);
    }
  }
}
END_TEST

/* The IQP reference path (phases, then the transform) and qdpk_iqp against the CPU's reference
 * path, 26 qubits. */
START_TEST(test_iqp_state_matches_cpu_at_26_qubits) {
  const uint32_t n = 26;
  const uint64_t count = 1ull << n;
  struct qdpk_span s = {n, 0, count, 1, QDP_DTYPE_COMPLEX128};
  uint64_t np = qdp_values_per_sample(QDP_ENCODING_IQP, n);
  double *hx = random_reals(QDP_DTYPE_FLOAT64, np, -0.5, 0.5, 0);
  double *dx = to_device(hx, np * sizeof(double));
  size_t bytes = (size_t)count * 16;
  void *cpu = qdpt_xmalloc(bytes), *gpu = qdpt_xmalloc(bytes), *dout = dmalloc(bytes);
  poison_host(cpu, bytes);
  poison_device(dout, bytes);
  qdpk_cpu_iqp_phases(&s, hx, QDP_DTYPE_FLOAT64, np, 1, cpu);
  qdpk_cpu_wht(cpu, QDP_DTYPE_COMPLEX128, count, 1);
  expect_launch(qdpk_iqp_phases(&s, dx, QDP_DTYPE_FLOAT64, np, 1, dout, 0), "iqp 26 phases");
  expect_launch(qdpk_wht(dout, QDP_DTYPE_COMPLEX128, count, 1, 0), "iqp 26 wht");
  from_device(gpu, dout, bytes);
  expect_close(gpu, cpu, QDP_DTYPE_COMPLEX128, count, "iqp 26 qubits");
  /* And the path a device runs (qdpk_iqp) against the same reference. */
  poison_device(dout, bytes);
  expect_launch(qdpk_iqp(&s, dx, QDP_DTYPE_FLOAT64, np, 1, dout, 0), "qdpk_iqp 26");
  from_device(gpu, dout, bytes);
  expect_close(gpu, cpu, QDP_DTYPE_COMPLEX128, count, "qdpk_iqp 26 qubits");
  free(cpu);
  free(gpu);
  free(hx);
  cudaFree(dout);
  cudaFree(dx);
}
END_TEST

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

static Suite *qdpk_suite(void) {
  Suite *s = suite_create("qdpk_cuda");
  struct {
    const char *name;
    const TTest *test;
  } cases[] = {
      {"sumsq", test_sumsq_is_bit_identical_to_cpu_tree},
      {"sumsq", test_sumsq_shard_sums_join_to_the_full_tree},
      {"sumsq", test_sumsq_refuses_a_short_workspace},
      {"sumsq", test_scaled_sumsq_and_amplitude_match_cpu},
      {"amplitude", test_amplitude_matches_cpu},
      {"amplitude", test_amplitude_two_passes_normalize_like_cpu},
      {"angle", test_angle_matches_cpu},
      {"phase", test_phase_matches_cpu},
      {"basis", test_basis_matches_cpu},
      {"iqp_phases", test_iqp_phases_match_cpu},
      {"iqp", test_iqp_whole_matches_cpu},
      {"iqp", test_iqp_shards_are_bit_identical},
      {"wht", test_wht_is_bit_identical_to_cpu},
      {"wht", test_wht_from_direct_passes_equal_natural_passes},
      {"wht", test_wht_shards_with_butterflies_equal_one_transform},
      {"wht", test_iqp_state_matches_cpu_at_26_qubits},
      {"butterfly", test_butterfly_is_bit_identical_to_cpu},
      {"find_nonfinite", test_find_nonfinite_reports_the_first_position},
      {"check_basis", test_check_basis_reports_the_first_bad_row},
      {"check_params", test_check_params_reports_the_first_fault_like_cpu},
      {"arguments", test_launchers_refuse_bad_arguments},
  };
  TCase *tc = NULL;
  const char *cur = NULL;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cur == NULL || strcmp(cur, cases[i].name) != 0) {
      tc = tcase_create(cases[i].name);
      suite_add_tcase(s, tc);
      cur = cases[i].name;
    }
    tcase_add_test(tc, cases[i].test);
  }
  return s;
}

int main(void) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    printf("no usable CUDA device (%s, %d devices): skipping\n", cudaGetErrorName(e), devices);
    return 77;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    printf("device 0: %s, %d multiprocessors, %zu MiB\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem >> 20);
  }
  t_start = seconds();
  /* One stream through every test (no fork), from the seed the inputs were always drawn from. */
  qdpt_rng_seed(0x9e3779b97f4a7c15ull);
  return qdpt_run_suite(qdpk_suite(), CK_NOFORK);
}
