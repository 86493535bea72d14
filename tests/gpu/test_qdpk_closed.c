/* test_qdpk_closed.c — the closed forms on the GPU against their CPU twins: angle, phase, iqp's
 * phases within the tolerance and basis exactly, over sizes, windows, row counts past the grid-y
 * limit, odd strides and misaligned inputs; and iqp whole and in shards, which must give the bits
 * of one launch. */
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

void qdpk_add_angle(TCase *tc) {
  tcase_add_test(tc, test_angle_matches_cpu);
}

void qdpk_add_phase(TCase *tc) {
  tcase_add_test(tc, test_phase_matches_cpu);
}

void qdpk_add_basis(TCase *tc) {
  tcase_add_test(tc, test_basis_matches_cpu);
}

void qdpk_add_iqp_phases(TCase *tc) {
  tcase_add_test(tc, test_iqp_phases_match_cpu);
}

void qdpk_add_iqp(TCase *tc) {
  tcase_add_test(tc, test_iqp_whole_matches_cpu);
  tcase_add_test(tc, test_iqp_shards_are_bit_identical);
}
