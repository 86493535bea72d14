/* test_kernels_cpu_amplitude.c — the amplitude family on the CPU: the values per sample of every
 * encoding, sumsq against its recursive definition and for any partition (bit for bit), and
 * amplitude against hand-computed rows, a long double reference and its own sharded spans. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels_cpu_fixture.h"
#include "qdpk.h"

/* ---- qdp_values_per_sample ------------------------------------------------------------- */

START_TEST(test_params_per_sample_counts_each_encoding) {
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_AMPLITUDE, 3), 8);
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_AMPLITUDE, 63), UINT64_C(1) << 63);
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_ANGLE, 5), 5);
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_PHASE, 7), 7);
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_IQP_Z, 4), 4);
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_IQP, 4), 10);    /* 4 + 6 pairs */
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_IQP, 1), 1);     /* no pairs */
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_IQP, 63), 2016); /* 63 + 1953 */
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_BASIS, 20), 1);
  ck_assert_uint_eq(qdp_values_per_sample(QDP_ENCODING_UNSPECIFIED, 4), 0);
  ck_assert_uint_eq(qdp_values_per_sample((qdp_encoding)99, 4), 0);
}
END_TEST

/* ---- sumsq -------------------------------------------------------------------------------- */

/* The header's definition, written recursively: T(a,b) = T(a,m) + T(m,b), leaves x*x, zero past
 * len, in float or double. */
static float sumsq_rec_f(const double *v, uint64_t a, uint64_t b, uint64_t len) {
  if (b - a == 1) {
    float t = a < len ? (float)v[a] : 0.0f;
    return t * t;
  }
  uint64_t m = a + (b - a) / 2;
  return sumsq_rec_f(v, a, m, len) + sumsq_rec_f(v, m, b, len);
}

static double sumsq_rec_d(const double *v, uint64_t a, uint64_t b, uint64_t len) {
  if (b - a == 1) {
    double t = a < len ? v[a] : 0.0;
    return t * t;
  }
  uint64_t m = a + (b - a) / 2;
  return sumsq_rec_d(v, a, m, len) + sumsq_rec_d(v, m, b, len);
}

static uint64_t pow2_at_least(uint64_t n) {
  uint64_t p = 1;
  while (p < n) {
    p *= 2;
  }
  return p;
}

START_TEST(test_sumsq_hand_computed_values) {
  for (int io = 0; io < 2; io++) {
    for (int oo = 0; oo < 2; oo++) {
      double v[] = {3, 4, 1, 2, 2, 0};
      void *x = make_input(IN_TYPES[io], v, 6);
      double s[2] = {-1, -1};
      qdpk_cpu_sumsq(x, IN_TYPES[io], 0, 2, 2, 1, OUT_TYPES[oo], NULL, s);
      ck_assert_double_eq(s[0], 25.0);
      /* 1 + 4 + 4 over a block of 8 padded with zeros. */
      qdpk_cpu_sumsq((char *)x + 2 * (IN_TYPES[io] == QDP_DTYPE_FLOAT32 ? 4 : 8), IN_TYPES[io], 0,
                     3, 8, 1, OUT_TYPES[oo], NULL, s);
      ck_assert_double_eq(s[0], 9.0);
      qdpk_cpu_sumsq(x, IN_TYPES[io], 0, 0, 4, 1, OUT_TYPES[oo], NULL, s);
      ck_assert_double_eq(s[0], 0.0);
      free(x);
    }
  }
}
END_TEST

/* In float, squares 1, 2^-24, 2^-24, 2^-24: a left-to-right sum loses each 2^-24 to rounding
 * (1 + 2^-24 ties to 1) and gives 1; the pairwise tree adds the two small ones first and keeps
 * 2^-23: (1 + 2^-24) + (2^-24 + 2^-24) = 1 + 2^-23. */
START_TEST(test_sumsq_float_is_pairwise_not_sequential) {
  float x[4] = {1.0f, 0x1.0p-12f, 0x1.0p-12f, 0x1.0p-12f};
  double s = 0;
  qdpk_cpu_sumsq(x, QDP_DTYPE_FLOAT32, 4, 4, 4, 1, QDP_DTYPE_COMPLEX64, NULL, &s);
  ck_assert_double_eq(s, 1.0 + 0x1.0p-23);
  /* Computed in double the sum is exact: 1 + 3 * 2^-24. */
  qdpk_cpu_sumsq(x, QDP_DTYPE_FLOAT32, 4, 4, 4, 1, QDP_DTYPE_COMPLEX128, NULL, &s);
  ck_assert_double_eq(s, 1.0 + 3 * 0x1.0p-24);
}
END_TEST

START_TEST(test_sumsq_matches_recursive_definition) {
  static const uint64_t big[] = {511, 512, 513, 1000, 1023, 1025, 4095, 4097, 65535, 65537, 100003};
  uint64_t maxlen = 100003;
  double *v = qdpt_xmalloc(maxlen * sizeof(double));
  qdpt_rng_seed(11);
  for (uint64_t i = 0; i < maxlen; i++) {
    v[i] = qdpt_rng_uniform(-3, 3);
  }
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, maxlen);
    /* Recompute from what the kernel reads (float32 inputs are rounded). */
    double *seen = qdpt_xmalloc(maxlen * sizeof(double));
    for (uint64_t i = 0; i < maxlen; i++) {
      seen[i] = (double)in_at(x, IN_TYPES[io], i);
    }
    for (uint64_t t = 0; t < 300 + sizeof(big) / sizeof(big[0]); t++) {
      uint64_t len = t < 300 ? t : big[t - 300];
      uint64_t block = pow2_at_least(len);
      for (uint64_t blk = block; blk <= 4 * block; blk *= 4) {
        double got[2];
        qdpk_cpu_sumsq(x, IN_TYPES[io], 0, len, blk, 1, QDP_DTYPE_COMPLEX64, NULL, &got[0]);
        qdpk_cpu_sumsq(x, IN_TYPES[io], 0, len, blk, 1, QDP_DTYPE_COMPLEX128, NULL, &got[1]);
        float want_f = sumsq_rec_f(seen, 0, blk, len);
        double want_d = sumsq_rec_d(seen, 0, blk, len);
        ck_assert_msg(got[0] == (double)want_f, "float len %llu block %llu: %a vs %a",
                      (unsigned long long)len, (unsigned long long)blk, got[0], (double)want_f);
        ck_assert_msg(got[1] == want_d, "double len %llu block %llu: %a vs %a",
                      (unsigned long long)len, (unsigned long long)blk, got[1], want_d);
      }
    }
    free(seen);
    free(x);
  }
  free(v);
}
END_TEST

/* Sum of the 2^g shards of a block in the tree's own order: ((s0 + s1) + (s2 + s3)) ... */
static double combine_shards(const double *sums, uint64_t parts, qdp_dtype out) {
  if (parts == 1) {
    return sums[0];
  }
  double l = combine_shards(sums, parts / 2, out),
         r = combine_shards(sums + parts / 2, parts / 2, out);
  if (out == QDP_DTYPE_COMPLEX64) {
    return (double)((float)l + (float)r);
  }
  return l + r;
}

START_TEST(test_sumsq_partition_independent) {
  static const uint64_t lens[] = {1, 5, 64, 65, 200, 256, 257, 700, 1024};
  uint64_t block = 1024;
  double v[1024];
  qdpt_rng_seed(12);
  for (int i = 0; i < 1024; i++) {
    v[i] = qdpt_rng_uniform(-1, 1);
  }
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, block);
    size_t esz = IN_TYPES[io] == QDP_DTYPE_FLOAT32 ? 4 : 8;
    for (int oo = 0; oo < 2; oo++) {
      for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        uint64_t len = lens[li];
        double whole;
        qdpk_cpu_sumsq(x, IN_TYPES[io], 0, len, block, 1, OUT_TYPES[oo], NULL, &whole);
        for (uint64_t parts = 2; parts <= 16; parts *= 2) {
          uint64_t sub = block / parts;
          double sums[16];
          for (uint64_t p = 0; p < parts; p++) {
            uint64_t lo = p * sub;
            uint64_t plen = len <= lo ? 0 : (len - lo < sub ? len - lo : sub);
            qdpk_cpu_sumsq((const char *)x + lo * esz, IN_TYPES[io], 0, plen, sub, 1, OUT_TYPES[oo],
                           NULL, &sums[p]);
          }
          double combined = combine_shards(sums, parts, OUT_TYPES[oo]);
          ck_assert_msg(combined == whole, "len %llu in %llu parts (%s): %a vs %a",
                        (unsigned long long)len, (unsigned long long)parts,
                        qdp_dtype_name(OUT_TYPES[oo]), combined, whole);
        }
      }
    }
    free(x);
  }
}
END_TEST

START_TEST(test_sumsq_rows_follow_stride_and_ignore_past_len) {
  /* Rows 5 apart, len 3: the two trailing values of each row must not count. */
  double v[15] = {1, 2, 2, 100, 100, 0, 3, 4, -50, 7, 2, 0, 0, 9, 9};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 15);
    for (int oo = 0; oo < 2; oo++) {
      double s[3] = {0, 0, 0};
      qdpk_cpu_sumsq(x, IN_TYPES[io], 5, 3, 4, 3, OUT_TYPES[oo], NULL, s);
      ck_assert_double_eq(s[0], 9.0);
      ck_assert_double_eq(s[1], 25.0);
      ck_assert_double_eq(s[2], 4.0);
    }
    free(x);
  }
}
END_TEST

/* ---- amplitude ---------------------------------------------------------------------------- */

/* sumsq then amplitude over one span [first, first + count) of `rows` rows, as the runtime runs. */
static void encode_amplitude(const void *x, qdp_dtype in, uint64_t stride, uint64_t len, uint32_t n,
                             uint64_t rows, qdp_dtype out, void *o) {
  double *sums = qdpt_xmalloc(rows * sizeof(double));
  qdpk_cpu_sumsq(x, in, stride, len, UINT64_C(1) << n, rows, out, NULL, sums);
  struct qdpk_span s = span_of(n, 0, UINT64_C(1) << n, rows, out);
  qdpk_cpu_amplitude(&s, x, in, stride, len, sums, NULL, o);
  free(sums);
}

START_TEST(test_amplitude_hand_computed_row) {
  double v[2] = {3, 4};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 2);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      double o[4];
      encode_amplitude(x, IN_TYPES[io], 2, 2, 1, 1, out, o);
      double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-7 : 1e-15;
      ck_assert_double_eq_tol(re_at(o, out, 0), 0.6, tol);
      ck_assert_double_eq_tol(re_at(o, out, 1), 0.8, tol);
      ck_assert_double_eq(im_at(o, out, 0), 0.0);
      ck_assert_double_eq(im_at(o, out, 1), 0.0);
    }
    free(x);
  }
}
END_TEST

START_TEST(test_amplitude_pads_with_zeros) {
  double v[3] = {1, -1, 1};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double o[8];
    memset(o, 0x7f, sizeof(o)); /* garbage the kernel must overwrite */
    encode_amplitude(v, QDP_DTYPE_FLOAT64, 3, 3, 2, 1, out, o);
    double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-7 : 1e-15;
    ck_assert_double_eq_tol(re_at(o, out, 0), 0.5773502691896258, tol);
    ck_assert_double_eq_tol(re_at(o, out, 1), -0.5773502691896258, tol);
    ck_assert_double_eq_tol(re_at(o, out, 2), 0.5773502691896258, tol);
    ck_assert_double_eq(re_at(o, out, 3), 0.0);
    ck_assert_double_eq(im_at(o, out, 3), 0.0);
  }
}
END_TEST

START_TEST(test_amplitude_batch_matches_double_reference) {
  uint32_t n = 5;
  uint64_t rows = 4, len = 20, stride = 23, count = 32;
  double v[4 * 23];
  qdpt_rng_seed(21);
  for (int i = 0; i < 4 * 23; i++) {
    v[i] = qdpt_rng_uniform(-2, 2) * (1 + i / 23); /* rows of different scales */
  }
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 4 * 23);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      void *o = qdpt_xmalloc(rows * count * cplx_size(out));
      encode_amplitude(x, IN_TYPES[io], stride, len, n, rows, out, o);
      for (uint64_t r = 0; r < rows; r++) {
        long double norm = 0, re[32] = {0}, im[32] = {0};
        for (uint64_t j = 0; j < len; j++) {
          long double a = in_at(x, IN_TYPES[io], r * stride + j);
          norm += a * a;
        }
        norm = sqrtl(norm);
        for (uint64_t j = 0; j < len; j++) {
          re[j] = in_at(x, IN_TYPES[io], r * stride + j) / norm;
        }
        assert_state_close((const char *)o + r * count * cplx_size(out), out, re, im, count,
                           "amplitude row");
      }
      assert_rows_normalized(o, out, count, rows);
      free(o);
    }
    free(x);
  }
}
END_TEST

/* 2^g shards of the index: each computes its slice's sum of squares, the sums combine in tree
 * order (the all-reduce), and each scales its own slice. The result must be the one-span bits. */
START_TEST(test_amplitude_sharded_spans_bit_identical) {
  uint32_t n = 10;
  uint64_t rows = 3, stride = 1000, count = 1024;
  uint64_t lens[] = {1000, 1024, 300, 1};
  double *v = qdpt_xmalloc(rows * stride * sizeof(double));
  qdpt_rng_seed(22);
  for (uint64_t i = 0; i < rows * stride; i++) {
    v[i] = qdpt_rng_uniform(-1, 1);
  }
  for (size_t li = 0; li < 4; li++) {
    uint64_t len = lens[li], st = len > stride ? len : stride;
    double *vv = qdpt_xcalloc(rows * st, sizeof(double));
    for (uint64_t r = 0; r < rows; r++) {
      for (uint64_t j = 0; j < len && j < stride; j++) {
        vv[r * st + j] = v[r * stride + j];
      }
    }
    for (int io = 0; io < 2; io++) {
      void *x = make_input(IN_TYPES[io], vv, rows * st);
      size_t esz = IN_TYPES[io] == QDP_DTYPE_FLOAT32 ? 4 : 8;
      for (int oo = 0; oo < 2; oo++) {
        qdp_dtype out = OUT_TYPES[oo];
        size_t cs = cplx_size(out);
        char *whole = qdpt_xmalloc(rows * count * cs);
        encode_amplitude(x, IN_TYPES[io], st, len, n, rows, out, whole);
        for (uint64_t parts = 1; parts <= 8; parts *= 2) {
          uint64_t sub = count / parts;
          double sums[8][3];
          for (uint64_t p = 0; p < parts; p++) {
            uint64_t lo = p * sub;
            uint64_t plen = len <= lo ? 0 : (len - lo < sub ? len - lo : sub);
            qdpk_cpu_sumsq((const char *)x + lo * esz, IN_TYPES[io], st, plen, sub, rows, out, NULL,
                           sums[p]);
          }
          double total[3];
          for (uint64_t r = 0; r < rows; r++) {
            double col[8];
            for (uint64_t p = 0; p < parts; p++) {
              col[p] = sums[p][r];
            }
            total[r] = combine_shards(col, parts, out);
          }
          for (uint64_t p = 0; p < parts; p++) {
            uint64_t lo = p * sub;
            uint64_t plen = len <= lo ? 0 : (len - lo < sub ? len - lo : sub);
            char *part = qdpt_xmalloc(rows * sub * cs);
            struct qdpk_span s = span_of(n, lo, sub, rows, out);
            qdpk_cpu_amplitude(&s, (const char *)x + lo * esz, IN_TYPES[io], st, plen, total, NULL,
                               part);
            for (uint64_t r = 0; r < rows; r++) {
              assert_bits_equal(part + r * sub * cs, whole + (r * count + lo) * cs, out, sub,
                                "amplitude shard");
            }
            free(part);
          }
        }
        free(whole);
      }
      free(x);
    }
    free(vv);
  }
  free(v);
}
END_TEST

void kernels_cpu_add_params_per_sample(TCase *tc) {
  tcase_add_test(tc, test_params_per_sample_counts_each_encoding);
}

void kernels_cpu_add_sumsq(TCase *tc) {
  tcase_add_test(tc, test_sumsq_hand_computed_values);
  tcase_add_test(tc, test_sumsq_float_is_pairwise_not_sequential);
  tcase_add_test(tc, test_sumsq_matches_recursive_definition);
  tcase_add_test(tc, test_sumsq_partition_independent);
  tcase_add_test(tc, test_sumsq_rows_follow_stride_and_ignore_past_len);
}

void kernels_cpu_add_amplitude(TCase *tc) {
  tcase_add_test(tc, test_amplitude_hand_computed_row);
  tcase_add_test(tc, test_amplitude_pads_with_zeros);
  tcase_add_test(tc, test_amplitude_batch_matches_double_reference);
  tcase_add_test(tc, test_amplitude_sharded_spans_bit_identical);
}
