/* test_kernels_cpu_iqp.c — the iqp family on the CPU: the Walsh-Hadamard transform and the
 * butterfly against hand-computed values and the textbook order, and iqp (phases, then the
 * transform) against hand-computed states, the direct O(4^n) sum, theta written out term by term,
 * the reference path, and its sharded spans exchanging only below the top bits. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common.h"
#include "kernels_cpu_fixture.h"
#include "qdpk.h"

/* ---- wht and butterfly ------------------------------------------------------------------ */

START_TEST(test_wht_hand_computed_four_values) {
  /* re (1, 2, 3, 4) -> (10, -2, -4, 0); im (0, 1, 0, -1) -> (0, 0, 2, -2). */
  double re[4] = {1, 2, 3, 4}, im[4] = {0, 1, 0, -1};
  double wre[4] = {10, -2, -4, 0}, wim[4] = {0, 0, 2, -2};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double d[8];
    float f[8];
    for (int i = 0; i < 4; i++) {
      d[2 * i] = re[i];
      d[2 * i + 1] = im[i];
      f[2 * i] = (float)re[i];
      f[2 * i + 1] = (float)im[i];
    }
    void *data = out == QDP_DTYPE_COMPLEX64 ? (void *)f : (void *)d;
    qdpk_cpu_wht(data, out, 4, 1);
    for (int i = 0; i < 4; i++) {
      ck_assert_double_eq(re_at(data, out, i), wre[i]);
      ck_assert_double_eq(im_at(data, out, i), wim[i]);
    }
  }
}
END_TEST

/* The textbook order, one full pass per bit, ascending. */
static void wht_plain(double *v, uint64_t count) {
  for (uint64_t h = 1; h < count; h *= 2) {
    for (uint64_t i = 0; i < count; i++) {
      if (i & h) {
        continue;
      }
      for (int c = 0; c < 2; c++) {
        double a = v[2 * i + c], b = v[2 * (i + h) + c];
        v[2 * i + c] = a + b;
        v[2 * (i + h) + c] = a - b;
      }
    }
  }
}

static void wht_plain_f(float *v, uint64_t count) {
  for (uint64_t h = 1; h < count; h *= 2) {
    for (uint64_t i = 0; i < count; i++) {
      if (i & h) {
        continue;
      }
      for (int c = 0; c < 2; c++) {
        float a = v[2 * i + c], b = v[2 * (i + h) + c];
        v[2 * i + c] = a + b;
        v[2 * (i + h) + c] = a - b;
      }
    }
  }
}

START_TEST(test_wht_bits_equal_plain_ascending_order) {
  static const uint64_t counts[] = {1, 2, 4, 8, 64, 2048, 4096, 8192, 16384};
  uint64_t rows = 2;
  qdpt_rng_seed(41);
  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
    uint64_t count = counts[ci];
    double *d = qdpt_xmalloc(rows * count * 2 * sizeof(double)),
           *dw = qdpt_xmalloc(rows * count * 2 * 8);
    float *f = qdpt_xmalloc(rows * count * 2 * sizeof(float)),
          *fw = qdpt_xmalloc(rows * count * 2 * 4);
    for (uint64_t i = 0; i < rows * count * 2; i++) {
      dw[i] = d[i] = qdpt_rng_uniform(-1, 1);
      fw[i] = f[i] = (float)qdpt_rng_uniform(-1, 1);
    }
    qdpk_cpu_wht(d, QDP_DTYPE_COMPLEX128, count, rows);
    qdpk_cpu_wht(f, QDP_DTYPE_COMPLEX64, count, rows);
    for (uint64_t r = 0; r < rows; r++) {
      wht_plain(dw + 2 * r * count, count);
      wht_plain_f(fw + 2 * r * count, count);
    }
    assert_bits_equal(d, dw, QDP_DTYPE_COMPLEX128, rows * count, "wht");
    assert_bits_equal(f, fw, QDP_DTYPE_COMPLEX64, rows * count, "wht");
    free(d);
    free(dw);
    free(f);
    free(fw);
  }
}
END_TEST

/* H^2 = count * I; with small integers every intermediate is exact. */
START_TEST(test_wht_twice_scales_by_count) {
  uint64_t count = 4096;
  double *d = qdpt_xmalloc(count * 2 * sizeof(double)),
         *orig = qdpt_xmalloc(count * 2 * sizeof(double));
  qdpt_rng_seed(42);
  for (uint64_t i = 0; i < 2 * count; i++) {
    orig[i] = d[i] = (double)(int)qdpt_rng_uniform(-8, 8);
  }
  qdpk_cpu_wht(d, QDP_DTYPE_COMPLEX128, count, 1);
  qdpk_cpu_wht(d, QDP_DTYPE_COMPLEX128, count, 1);
  for (uint64_t i = 0; i < 2 * count; i++) {
    ck_assert_double_eq(d[i], (double)count * orig[i]);
  }
  free(d);
  free(orig);
}
END_TEST

START_TEST(test_butterfly_hand_computed) {
  /* (1 + 2i, 3 - 1i) -> (4 + 1i, -2 + 3i); (0.5, 0.25) -> (0.75, 0.25). */
  double a[4] = {1, 2, 0.5, 0}, b[4] = {3, -1, 0.25, 0};
  qdpk_cpu_butterfly(a, b, QDP_DTYPE_COMPLEX128, 2);
  ck_assert_double_eq(a[0], 4);
  ck_assert_double_eq(a[1], 1);
  ck_assert_double_eq(b[0], -2);
  ck_assert_double_eq(b[1], 3);
  ck_assert_double_eq(a[2], 0.75);
  ck_assert_double_eq(b[2], 0.25);
  float fa[2] = {1, 2}, fb[2] = {3, -1};
  qdpk_cpu_butterfly(fa, fb, QDP_DTYPE_COMPLEX64, 1);
  ck_assert_float_eq(fa[0], 4);
  ck_assert_float_eq(fa[1], 1);
  ck_assert_float_eq(fb[0], -2);
  ck_assert_float_eq(fb[1], 3);
}
END_TEST

/* ---- iqp ---------------------------------------------------------------------------------- */

/* The whole encoding over one span, as the CPU backend runs it (qdpk_cpu_iqp). */
static void encode_iqp(const void *x, qdp_dtype in, uint64_t stride, uint32_t n, uint64_t rows,
                       int pairs, qdp_dtype out, void *o) {
  struct qdpk_span s = span_of(n, 0, UINT64_C(1) << n, rows, out);
  ck_assert_int_eq(qdpk_cpu_iqp(&s, x, in, stride, pairs, o), 0);
}

/* The reference path: the phases, then the transform over all n bits in ascending order. */
static void encode_iqp_phases_then_wht(const void *x, qdp_dtype in, uint64_t stride, uint32_t n,
                                       uint64_t rows, int pairs, qdp_dtype out, void *o) {
  struct qdpk_span s = span_of(n, 0, UINT64_C(1) << n, rows, out);
  qdpk_cpu_iqp_phases(&s, x, in, stride, pairs, o);
  qdpk_cpu_wht(o, out, UINT64_C(1) << n, rows);
}

/* The definition summed directly, O(4^n): psi_b = 2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}.
 */
static void iqp_direct(const void *x, qdp_dtype in, uint64_t base, uint32_t n, int pairs,
                       long double *re, long double *im) {
  uint64_t count = UINT64_C(1) << n;
  for (uint64_t b = 0; b < count; b++) {
    long double sr = 0, si = 0;
    for (uint64_t z = 0; z < count; z++) {
      long double theta = 0;
      uint64_t p = n;
      for (uint32_t i = 0; i < n; i++) {
        theta += ((z >> i) & 1) ? in_at(x, in, base + i) : 0;
      }
      for (uint32_t i = 0; pairs && i < n; i++) {
        for (uint32_t j = i + 1; j < n; j++, p++) {
          if (((z >> i) & 1) && ((z >> j) & 1)) {
            theta += in_at(x, in, base + p);
          }
        }
      }
      long double sign = (__builtin_popcountll(z & b) & 1) ? -1 : 1;
      sr += sign * cosl(theta);
      si += sign * sinl(theta);
    }
    re[b] = sr / count;
    im[b] = si / count;
  }
}

START_TEST(test_iqp_z_hand_computed_one_qubit) {
  /* d = pi/2: phases (1, i) / 2, then psi = ((1 + i) / 2, (1 - i) / 2). */
  double v[1] = {M_PI / 2};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-7 : 1e-15;
    double o[4];
    struct qdpk_span s = span_of(1, 0, 2, 1, out);
    qdpk_cpu_iqp_phases(&s, v, QDP_DTYPE_FLOAT64, 1, 0, o);
    ck_assert_double_eq_tol(re_at(o, out, 0), 0.5, tol);
    ck_assert_double_eq_tol(im_at(o, out, 0), 0.0, tol);
    ck_assert_double_eq_tol(re_at(o, out, 1), 0.0, tol);
    ck_assert_double_eq_tol(im_at(o, out, 1), 0.5, tol);
    qdpk_cpu_wht(o, out, 2, 1);
    ck_assert_double_eq_tol(re_at(o, out, 0), 0.5, tol);
    ck_assert_double_eq_tol(im_at(o, out, 0), 0.5, tol);
    ck_assert_double_eq_tol(re_at(o, out, 1), 0.5, tol);
    ck_assert_double_eq_tol(im_at(o, out, 1), -0.5, tol);
  }
}
END_TEST

START_TEST(test_iqp_pair_term_hand_computed) {
  /* n = 2, d = (0, 0, pi): theta(3) = pi, phases (1, 1, 1, -1) / 4, psi = (1, 1, 1, -1) / 2. */
  double v[3] = {0, 0, M_PI};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-7 : 1e-15;
    double o[8];
    encode_iqp(v, QDP_DTYPE_FLOAT64, 3, 2, 1, 1, out, o);
    double want[4] = {0.5, 0.5, 0.5, -0.5};
    for (int b = 0; b < 4; b++) {
      ck_assert_double_eq_tol(re_at(o, out, b), want[b], tol);
      ck_assert_double_eq_tol(im_at(o, out, b), 0.0, tol);
    }
    /* Without pairs the same input is |0>. */
    encode_iqp(v, QDP_DTYPE_FLOAT64, 3, 2, 1, 0, out, o);
    ck_assert_double_eq_tol(re_at(o, out, 0), 1.0, tol);
    for (int b = 1; b < 4; b++) {
      ck_assert_double_eq_tol(re_at(o, out, b), 0.0, tol);
    }
  }
}
END_TEST

/* n = 3, singles 0, pairs (0,1) = 0.1, (0,2) = 0.2, (1,2) = 0.4: theta(3) = 0.1, theta(5) = 0.2,
 * theta(6) = 0.4, theta(7) = 0.7, others 0; phases 2^-3 e^{i theta}. */
START_TEST(test_iqp_pair_coefficients_in_pair_order) {
  double v[6] = {0, 0, 0, 0.1, 0.2, 0.4};
  double theta[8] = {0, 0, 0, 0.1, 0, 0.2, 0.4, 0.7};
  double o[16];
  struct qdpk_span s = span_of(3, 0, 8, 1, QDP_DTYPE_COMPLEX128);
  qdpk_cpu_iqp_phases(&s, v, QDP_DTYPE_FLOAT64, 6, 1, o);
  for (int b = 0; b < 8; b++) {
    ck_assert_double_eq_tol(o[2 * b], cos(theta[b]) / 8, 1e-16);
    ck_assert_double_eq_tol(o[2 * b + 1], sin(theta[b]) / 8, 1e-16);
  }
}
END_TEST

START_TEST(test_iqp_matches_direct_sum) {
  uint64_t rows = 3, stride = 21; /* 6 + 15 coefficients at most */
  double v[3 * 21];
  qdpt_rng_seed(51);
  for (int i = 0; i < 3 * 21; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  long double re[64], im[64];
  for (uint32_t n = 1; n <= 6; n++) {
    uint64_t count = UINT64_C(1) << n;
    for (int pairs = 0; pairs <= 1; pairs++) {
      for (int io = 0; io < 2; io++) {
        void *x = make_input(IN_TYPES[io], v, 3 * 21);
        for (int oo = 0; oo < 2; oo++) {
          qdp_dtype out = OUT_TYPES[oo];
          char *o = qdpt_xmalloc(rows * count * cplx_size(out));
          encode_iqp(x, IN_TYPES[io], stride, n, rows, pairs, out, o);
          for (uint64_t r = 0; r < rows; r++) {
            iqp_direct(x, IN_TYPES[io], r * stride, n, pairs, re, im);
            assert_state_close(o + r * count * cplx_size(out), out, re, im, count,
                               pairs ? "iqp" : "iqp-z");
          }
          assert_rows_normalized(o, out, count, rows);
          free(o);
        }
        free(x);
      }
    }
  }
}
END_TEST

/* 2^g shards, g = 0..5: qdpk_cpu_iqp per span (the top 3 bits with no exchange), then one
 * butterfly stage per global bit below those, ascending, between the span pairs that differ in
 * it (g = 4, 5), as the executor runs them: every shard has the bits of the whole state. */
START_TEST(test_iqp_sharded_bit_identical_exchanging_only_below_the_top_bits) {
  uint32_t n = 14;
  uint64_t rows = 2, count = UINT64_C(1) << n;
  uint64_t stride = qdp_values_per_sample(QDP_ENCODING_IQP, n);
  double *v = qdpt_xmalloc(rows * stride * sizeof(double));
  qdpt_rng_seed(52);
  for (uint64_t i = 0; i < rows * stride; i++) {
    v[i] = qdpt_rng_uniform(-1, 1);
  }
  for (int pairs = 0; pairs <= 1; pairs++) {
    for (int io = 0; io < 2; io++) {
      void *x = make_input(IN_TYPES[io], v, rows * stride);
      for (int oo = 0; oo < 2; oo++) {
        qdp_dtype out = OUT_TYPES[oo];
        size_t cs = cplx_size(out);
        char *whole = qdpt_xmalloc(rows * count * cs);
        encode_iqp(x, IN_TYPES[io], stride, n, rows, pairs, out, whole);
        for (uint32_t g = 0; g <= 5; g++) {
          uint64_t parts = UINT64_C(1) << g, sub = count >> g;
          uint32_t stages = g > QDPK_IQP_TOP_BITS ? g - QDPK_IQP_TOP_BITS : 0;
          char *shard[32];
          for (uint64_t p = 0; p < parts; p++) {
            shard[p] = qdpt_xmalloc(rows * sub * cs);
            struct qdpk_span s = span_of(n, p * sub, sub, rows, out);
            ck_assert_int_eq(qdpk_cpu_iqp(&s, x, IN_TYPES[io], stride, pairs, shard[p]), 0);
          }
          for (uint32_t bit = 0; bit < stages; bit++) {
            for (uint64_t p = 0; p < parts; p++) {
              if (p & (UINT64_C(1) << bit)) {
                continue;
              }
              uint64_t q = p | (UINT64_C(1) << bit);
              for (uint64_t r = 0; r < rows; r++) {
                qdpk_cpu_butterfly(shard[p] + r * sub * cs, shard[q] + r * sub * cs, out, sub);
              }
            }
          }
          for (uint64_t p = 0; p < parts; p++) {
            for (uint64_t r = 0; r < rows; r++) {
              assert_bits_equal(shard[p] + r * sub * cs, whole + (r * count + p * sub) * cs, out,
                                sub, pairs ? "iqp shard" : "iqp-z shard");
            }
            free(shard[p]);
          }
        }
        free(whole);
      }
      free(x);
    }
  }
  free(v);
}
END_TEST

/* Past the sizes the direct sum reaches: the whole path against the reference path (phases, then
 * the transform in ascending bit order; itself checked against the direct sum above), within
 * rounding, at qubit counts where the low index runs through several of qdpk_cpu_iqp's chunks
 * of 2^13 and the phase kernel's tables of 2^10. */
START_TEST(test_iqp_whole_matches_the_reference_path) {
  static const uint32_t qubits[] = {11, 17};
  for (size_t qi = 0; qi < 2; qi++) {
    uint32_t n = qubits[qi];
    uint64_t count = UINT64_C(1) << n, stride = qdp_values_per_sample(QDP_ENCODING_IQP, n);
    double *v = qdpt_xmalloc(stride * sizeof(double));
    qdpt_rng_seed(60 + n);
    for (uint64_t i = 0; i < stride; i++) {
      v[i] = qdpt_rng_uniform(-1, 1);
    }
    long double *re = qdpt_xmalloc(count * sizeof *re), *im = qdpt_xmalloc(count * sizeof *im);
    for (int pairs = 0; pairs <= 1; pairs++) {
      double *ref = qdpt_xmalloc(count * 2 * sizeof(double));
      encode_iqp_phases_then_wht(v, QDP_DTYPE_FLOAT64, stride, n, 1, pairs, QDP_DTYPE_COMPLEX128,
                                 ref);
      for (uint64_t i = 0; i < count; i++) {
        re[i] = ref[2 * i];
        im[i] = ref[2 * i + 1];
      }
      for (int oo = 0; oo < 2; oo++) {
        char *o = qdpt_xmalloc(count * cplx_size(OUT_TYPES[oo]));
        encode_iqp(v, QDP_DTYPE_FLOAT64, stride, n, 1, pairs, OUT_TYPES[oo], o);
        assert_state_close(o, OUT_TYPES[oo], re, im, count, pairs ? "iqp" : "iqp-z");
        assert_rows_normalized(o, OUT_TYPES[oo], count, 1);
        free(o);
      }
      free(ref);
    }
    free(re);
    free(im);
    free(v);
  }
}
END_TEST

/* n = 5: blocks of 4 amplitudes under the top 3 bits. Any run of whole blocks is taken (and has
 * the whole state's bits there); a part of a block must be a power of two aligned to its size. */
START_TEST(test_iqp_whole_takes_whole_blocks_or_an_aligned_part_of_one) {
  double v[15], o[2 * 32], whole[2 * 32];
  for (int i = 0; i < 15; i++) {
    v[i] = 0.1 * (i + 1);
  }
  encode_iqp(v, QDP_DTYPE_FLOAT64, 15, 5, 1, 1, QDP_DTYPE_COMPLEX128, whole);
  struct qdpk_span s = span_of(5, 4, 12, 1, QDP_DTYPE_COMPLEX128); /* blocks 1, 2 and 3 */
  ck_assert_int_eq(qdpk_cpu_iqp(&s, v, QDP_DTYPE_FLOAT64, 15, 1, o), 0);
  assert_bits_equal(o, whole + 2 * 4, QDP_DTYPE_COMPLEX128, 12, "three whole blocks");
  s = span_of(5, 1, 3, 1, QDP_DTYPE_COMPLEX128); /* 3 amplitudes: not a power of two */
  ck_assert_int_eq(qdpk_cpu_iqp(&s, v, QDP_DTYPE_FLOAT64, 15, 1, o), QDPK_IQP_BAD_SPAN);
  s = span_of(5, 2, 4, 1, QDP_DTYPE_COMPLEX128); /* a block's size, across two blocks */
  ck_assert_int_eq(qdpk_cpu_iqp(&s, v, QDP_DTYPE_FLOAT64, 15, 1, o), QDPK_IQP_BAD_SPAN);
  s = span_of(5, 1, 2, 1, QDP_DTYPE_COMPLEX128); /* 2 amplitudes at 1: not aligned */
  ck_assert_int_eq(qdpk_cpu_iqp(&s, v, QDP_DTYPE_FLOAT64, 15, 1, o), QDPK_IQP_BAD_SPAN);
}
END_TEST

/* Phases of any window equal those of the whole index (each depends only on its own index). */
static void iqp_z_kernel(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t stride,
                         void *out) {
  qdpk_cpu_iqp_phases(s, x, in, stride, 0, out);
}

static void iqp_kernel(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t stride,
                       void *out) {
  qdpk_cpu_iqp_phases(s, x, in, stride, 1, out);
}

START_TEST(test_iqp_phases_uneven_spans_bit_identical) {
  static const uint32_t qubits[] = {10, 12};
  for (size_t qi = 0; qi < 2; qi++) {
    uint32_t n = qubits[qi];
    uint64_t stride = qdp_values_per_sample(QDP_ENCODING_IQP, n);
    double *v = qdpt_xmalloc(2 * stride * sizeof(double));
    qdpt_rng_seed(53);
    for (uint64_t i = 0; i < 2 * stride; i++) {
      v[i] = qdpt_rng_uniform(-2, 2);
    }
    for (int oo = 0; oo < 2; oo++) {
      check_spans_bit_identical(iqp_kernel, v, QDP_DTYPE_FLOAT64, stride, n, 2, OUT_TYPES[oo],
                                "iqp phases");
      check_spans_bit_identical(iqp_z_kernel, v, QDP_DTYPE_FLOAT64, stride, n, 2, OUT_TYPES[oo],
                                "iqp-z phases");
    }
    free(v);
  }
}
END_TEST

/* Step 1 alone against theta written out term by term, for n past the 10 low bits that the
 * kernel tabulates (so the terms across the split are exercised), on whole states and on windows
 * that start and end inside a run of 1024 amplitudes. */
START_TEST(test_iqp_phases_match_theta_definition) {
  static const uint32_t qubits[] = {11, 13};
  for (size_t qi = 0; qi < 2; qi++) {
    uint32_t n = qubits[qi];
    uint64_t stride = qdp_values_per_sample(QDP_ENCODING_IQP, n), rows = 2;
    double *v = qdpt_xmalloc(rows * stride * sizeof(double));
    qdpt_rng_seed(54 + n);
    for (uint64_t i = 0; i < rows * stride; i++) {
      v[i] = qdpt_rng_uniform(-1, 1);
    }
    uint64_t windows[3][2] = {
        {0, UINT64_C(1) << n}, {1000, (UINT64_C(1) << n) - 1100}, {(UINT64_C(1) << n) - 5, 5}};
    for (int pairs = 0; pairs <= 1; pairs++) {
      for (int io = 0; io < 2; io++) {
        void *x = make_input(IN_TYPES[io], v, rows * stride);
        for (int oo = 0; oo < 2; oo++) {
          qdp_dtype out = OUT_TYPES[oo];
          for (int wi = 0; wi < 3; wi++) {
            uint64_t first = windows[wi][0], count = windows[wi][1];
            char *o = qdpt_xmalloc(rows * count * cplx_size(out));
            long double *re = qdpt_xmalloc(count * sizeof(long double));
            long double *im = qdpt_xmalloc(count * sizeof(long double));
            struct qdpk_span s = span_of(n, first, count, rows, out);
            qdpk_cpu_iqp_phases(&s, x, IN_TYPES[io], stride, pairs, o);
            for (uint64_t r = 0; r < rows; r++) {
              for (uint64_t j = 0; j < count; j++) {
                uint64_t z = first + j, p = n;
                long double theta = 0;
                for (uint32_t i = 0; i < n; i++) {
                  theta += ((z >> i) & 1) ? in_at(x, IN_TYPES[io], r * stride + i) : 0;
                }
                for (uint32_t i = 0; pairs && i < n; i++) {
                  for (uint32_t k = i + 1; k < n; k++, p++) {
                    if (((z >> i) & 1) && ((z >> k) & 1)) {
                      theta += in_at(x, IN_TYPES[io], r * stride + p);
                    }
                  }
                }
                re[j] = ldexpl(cosl(theta), -(int)n);
                im[j] = ldexpl(sinl(theta), -(int)n);
              }
              assert_state_close(o + r * count * cplx_size(out), out, re, im, count,
                                 pairs ? "iqp phases" : "iqp-z phases");
            }
            free(re);
            free(im);
            free(o);
          }
        }
        free(x);
      }
    }
    free(v);
  }
}
END_TEST

void kernels_cpu_add_wht(TCase *tc) {
  tcase_add_test(tc, test_wht_hand_computed_four_values);
  tcase_add_test(tc, test_wht_bits_equal_plain_ascending_order);
  tcase_add_test(tc, test_wht_twice_scales_by_count);
  tcase_add_test(tc, test_butterfly_hand_computed);
}

void kernels_cpu_add_iqp(TCase *tc) {
  tcase_add_test(tc, test_iqp_z_hand_computed_one_qubit);
  tcase_add_test(tc, test_iqp_pair_term_hand_computed);
  tcase_add_test(tc, test_iqp_pair_coefficients_in_pair_order);
  tcase_add_test(tc, test_iqp_matches_direct_sum);
  tcase_add_test(tc, test_iqp_phases_match_theta_definition);
  tcase_add_test(tc, test_iqp_sharded_bit_identical_exchanging_only_below_the_top_bits);
  tcase_add_test(tc, test_iqp_whole_matches_the_reference_path);
  tcase_add_test(tc, test_iqp_whole_takes_whole_blocks_or_an_aligned_part_of_one);
  tcase_add_test(tc, test_iqp_phases_uneven_spans_bit_identical);
}
