/* test_qdpk_wht.c — the Walsh-Hadamard transform on the GPU against its CPU twin, bit for bit:
 * whole, from the direct passes, in shards joined by butterflies, the butterfly alone, and the
 * whole iqp state at 26 qubits. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "qdpk_fixture.h"
#include "qdpk_tune.h"

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
      {1, 3},        {2, 1},        {2, 70001},    {8, 5},        {256, 3},      {2048, 7},
      {4096, 1},     {4096, 3},     {8192, 1},     {1u << 13, 5}, {1u << 16, 2}, {1u << 17, 1},
      {1u << 18, 2}, {1u << 19, 1}, {1u << 20, 1}, {1u << 21, 3}, {1u << 22, 1},
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

void qdpk_add_wht(TCase *tc) {
  tcase_add_test(tc, test_wht_is_bit_identical_to_cpu);
  tcase_add_test(tc, test_wht_from_direct_passes_equal_natural_passes);
  tcase_add_test(tc, test_wht_shards_with_butterflies_equal_one_transform);
  tcase_add_test(tc, test_iqp_state_matches_cpu_at_26_qubits);
}

void qdpk_add_butterfly(TCase *tc) {
  tcase_add_test(tc, test_butterfly_is_bit_identical_to_cpu);
}
