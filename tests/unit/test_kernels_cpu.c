/* test_kernels_cpu.c — the CPU twins of the encode kernels (kernels/cpu) against hand-computed
 * values, direct sums written out here, and their own one-span results for sharded launches.
 *
 * Tolerances: 1e-5 (complex64) and 1e-12 (complex128) of the largest reference magnitude of the
 * state, the reference computed in long double from the exact input values the kernel read.
 * Everything the sharding contract promises (sumsq for any partition, every amplitude a function
 * of its global index, wht across shards) is compared bit for bit.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "qdpk.h"

#define PI_L 3.141592653589793238462643383279502884L

static const qdp_dtype IN_TYPES[2] = {QDP_DTYPE_FLOAT32, QDP_DTYPE_FLOAT64};
static const qdp_dtype OUT_TYPES[2] = {QDP_DTYPE_COMPLEX64, QDP_DTYPE_COMPLEX128};

/* ---- helpers ---------------------------------------------------------------------------- */

/* An input buffer of type `in` holding v (rounded to float for float32). */
static void *make_input(qdp_dtype in, const double *v, size_t n) {
  if (in == QDP_DTYPE_FLOAT32) {
    float *p = qdpt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
      p[i] = (float)v[i];
    }
    return p;
  }
  double *p = qdpt_xmalloc(n * sizeof(double));
  memcpy(p, v, n * sizeof(double));
  return p;
}

/* The value the kernel reads, exactly. */
static long double in_at(const void *x, qdp_dtype in, uint64_t i) {
  if (in == QDP_DTYPE_FLOAT32) {
    return ((const float *)x)[i];
  }
  return ((const double *)x)[i];
}

static size_t cplx_size(qdp_dtype out) {
  return out == QDP_DTYPE_COMPLEX64 ? 2 * sizeof(float) : 2 * sizeof(double);
}

static double re_at(const void *o, qdp_dtype out, uint64_t i) {
  if (out == QDP_DTYPE_COMPLEX64) {
    return ((const float *)o)[2 * i];
  }
  return ((const double *)o)[2 * i];
}

static double im_at(const void *o, qdp_dtype out, uint64_t i) {
  if (out == QDP_DTYPE_COMPLEX64) {
    return ((const float *)o)[2 * i + 1];
  }
  return ((const double *)o)[2 * i + 1];
}

static double tol_of(qdp_dtype out) {
  return out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12;
}

/* Asserts |psi - ref| <= tol * max|ref| over `count` amplitudes of one row. */
static void assert_state_close(const void *o, qdp_dtype out, const long double *ref_re,
                               const long double *ref_im, uint64_t count, const char *what) {
  long double maxref = 0, maxerr = 0;
  uint64_t worst = 0;
  for (uint64_t i = 0; i < count; i++) {
    long double m = hypotl(ref_re[i], ref_im[i]);
    if (m > maxref) {
      maxref = m;
    }
    long double e = hypotl(re_at(o, out, i) - ref_re[i], im_at(o, out, i) - ref_im[i]);
    if (!(e <= maxerr)) {
      maxerr = e;
      worst = i;
    }
  }
  ck_assert_msg(
      maxerr <= tol_of(out) * maxref,
      "%s (%s): error %.3Le at index %llu (got %.17g%+.17gi, want %.17Lg%+.17Lgi) exceeds "
      "%.0e of max |ref| %.6Lg",
      what, qdp_dtype_name(out), maxerr, (unsigned long long)worst, re_at(o, out, worst),
      im_at(o, out, worst), ref_re[worst], ref_im[worst], tol_of(out), maxref);
}

/* Asserts sum |psi|^2 = 1 for each row. */
static void assert_rows_normalized(const void *o, qdp_dtype out, uint64_t count, uint64_t rows) {
  for (uint64_t r = 0; r < rows; r++) {
    long double s = 0;
    for (uint64_t i = 0; i < count; i++) {
      long double a = re_at(o, out, r * count + i), b = im_at(o, out, r * count + i);
      s += a * a + b * b;
    }
    ck_assert_double_eq_tol((double)s, 1.0, out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12);
  }
}

/* Asserts two buffers of complex values are identical, naming the first differing value. */
static void assert_bits_equal(const void *got, const void *want, qdp_dtype out, uint64_t count,
                              const char *what) {
  if (memcmp(got, want, count * cplx_size(out)) == 0) {
    return;
  }
  uint64_t i = 0;
  while (i < count && memcmp((const char *)got + i * cplx_size(out),
                             (const char *)want + i * cplx_size(out), cplx_size(out)) == 0) {
    i++;
  }
  ck_abort_msg("%s (%s): first differing amplitude %llu: %a%+ai vs %a%+ai", what,
               qdp_dtype_name(out), (unsigned long long)i, re_at(got, out, i), im_at(got, out, i),
               re_at(want, out, i), im_at(want, out, i));
}

static struct qdpk_span span_of(uint32_t qubits, uint64_t first, uint64_t count, uint64_t rows,
                                qdp_dtype out) {
  struct qdpk_span s = {qubits, first, count, rows, out};
  return s;
}

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

/* ---- angle and phase ------------------------------------------------------------------------ */

typedef void (*span_kernel)(const struct qdpk_span *s, const void *x, qdp_dtype in,
                            uint64_t in_stride, void *out);

static long double angle_ref(const void *x, qdp_dtype in, uint64_t base, uint32_t n, uint64_t b) {
  long double p = 1;
  for (uint32_t k = 0; k < n; k++) {
    long double a = in_at(x, in, base + k);
    p *= ((b >> k) & 1) ? sinl(a) : cosl(a);
  }
  return p;
}

/* The closed form 2^(-n/2) e^{i sum}, not a product: an independent route to the same values. */
static void phase_ref(const void *x, qdp_dtype in, uint64_t base, uint32_t n, uint64_t b,
                      long double *re, long double *im) {
  long double sum = 0;
  for (uint32_t k = 0; k < n; k++) {
    if ((b >> k) & 1) {
      sum += in_at(x, in, base + k);
    }
  }
  long double scale = powl(2.0L, -(long double)n / 2);
  *re = scale * cosl(sum);
  *im = scale * sinl(sum);
}

START_TEST(test_angle_hand_computed_two_qubits) {
  /* x = (pi/3, pi/4): cos = (1/2, sqrt(2)/2), sin = (sqrt(3)/2, sqrt(2)/2). */
  double v[2] = {M_PI / 3, M_PI / 4};
  double want[4] = {0.3535533905932738, 0.6123724356957946, 0.3535533905932738, 0.6123724356957946};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 2);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      double o[8];
      struct qdpk_span s = span_of(2, 0, 4, 1, out);
      qdpk_cpu_angle(&s, x, IN_TYPES[io], 2, o);
      double tol = (out == QDP_DTYPE_COMPLEX64 || IN_TYPES[io] == QDP_DTYPE_FLOAT32) ? 1e-6 : 1e-15;
      for (int b = 0; b < 4; b++) {
        ck_assert_double_eq_tol(re_at(o, out, b), want[b], tol);
        ck_assert_double_eq(im_at(o, out, b), 0.0);
      }
    }
    free(x);
  }
}
END_TEST

START_TEST(test_angle_bit_order_first_qubit_is_bit_zero) {
  double v[3] = {M_PI / 2, 0, 0};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double o[16];
    struct qdpk_span s = span_of(3, 0, 8, 1, out);
    qdpk_cpu_angle(&s, v, QDP_DTYPE_FLOAT64, 3, o);
    ck_assert_double_eq_tol(re_at(o, out, 1), 1.0, 1e-7);
    for (int b = 0; b < 8; b++) {
      if (b != 1) {
        ck_assert_double_eq_tol(re_at(o, out, b), 0.0, 1e-7);
      }
    }
  }
}
END_TEST

/* With x/2 the single qubit at x = pi would be (0, 1); with x it is (-1, 0). */
START_TEST(test_angle_uses_x_not_half_x) {
  double v[1] = {M_PI};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double o[4];
    struct qdpk_span s = span_of(1, 0, 2, 1, out);
    qdpk_cpu_angle(&s, v, QDP_DTYPE_FLOAT64, 1, o);
    ck_assert_double_eq_tol(re_at(o, out, 0), -1.0, 1e-7);
    ck_assert_double_eq_tol(re_at(o, out, 1), 0.0, 1e-7);
  }
}
END_TEST

START_TEST(test_phase_hand_computed) {
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-7 : 1e-15;
    double o[8];
    /* One qubit at pi/2: (1, i) / sqrt(2). */
    double v1[1] = {M_PI / 2};
    struct qdpk_span s1 = span_of(1, 0, 2, 1, out);
    qdpk_cpu_phase(&s1, v1, QDP_DTYPE_FLOAT64, 1, o);
    ck_assert_double_eq_tol(re_at(o, out, 0), M_SQRT1_2, tol);
    ck_assert_double_eq_tol(im_at(o, out, 0), 0.0, tol);
    ck_assert_double_eq_tol(re_at(o, out, 1), 0.0, tol);
    ck_assert_double_eq_tol(im_at(o, out, 1), M_SQRT1_2, tol);
    /* (pi/2, pi): (1, i, -1, -i) / 2. */
    double v2[2] = {M_PI / 2, M_PI};
    struct qdpk_span s2 = span_of(2, 0, 4, 1, out);
    qdpk_cpu_phase(&s2, v2, QDP_DTYPE_FLOAT64, 2, o);
    double wre[4] = {0.5, 0, -0.5, 0}, wim[4] = {0, 0.5, 0, -0.5};
    for (int b = 0; b < 4; b++) {
      ck_assert_double_eq_tol(re_at(o, out, b), wre[b], tol);
      ck_assert_double_eq_tol(im_at(o, out, b), wim[b], tol);
    }
  }
}
END_TEST

/* Batches of rows with different parameters, each against the long double reference; n runs past
 * the table split (10 bits) so the high-bit product is exercised. */
static void check_closed_form(span_kernel k, int is_phase) {
  static const uint32_t qubits[] = {1, 2, 3, 7, 10, 11, 13};
  uint64_t rows = 3, stride = 17;
  double v[3 * 17];
  qdpt_rng_seed(is_phase ? 32 : 31);
  for (int i = 0; i < 3 * 17; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  for (size_t qi = 0; qi < sizeof(qubits) / sizeof(qubits[0]); qi++) {
    uint32_t n = qubits[qi];
    uint64_t count = UINT64_C(1) << n;
    long double *re = qdpt_xmalloc(count * sizeof(long double)),
                *im = qdpt_xmalloc(count * sizeof(long double));
    for (int io = 0; io < 2; io++) {
      void *x = make_input(IN_TYPES[io], v, 3 * 17);
      for (int oo = 0; oo < 2; oo++) {
        qdp_dtype out = OUT_TYPES[oo];
        char *o = qdpt_xmalloc(rows * count * cplx_size(out));
        struct qdpk_span s = span_of(n, 0, count, rows, out);
        k(&s, x, IN_TYPES[io], stride, o);
        for (uint64_t r = 0; r < rows; r++) {
          for (uint64_t b = 0; b < count; b++) {
            if (is_phase) {
              phase_ref(x, IN_TYPES[io], r * stride, n, b, &re[b], &im[b]);
            } else {
              re[b] = angle_ref(x, IN_TYPES[io], r * stride, n, b);
              im[b] = 0;
            }
          }
          assert_state_close(o + r * count * cplx_size(out), out, re, im, count,
                             is_phase ? "phase" : "angle");
        }
        assert_rows_normalized(o, out, count, rows);
        free(o);
      }
      free(x);
    }
    free(re);
    free(im);
  }
}

/* A window of a 40-qubit state, far from index 0 and across table boundaries. */
static void check_high_window(span_kernel k, int is_phase) {
  uint32_t n = 40;
  uint64_t rows = 2, first = (UINT64_C(1) << 39) + (UINT64_C(1) << 25) + 1000, count = 3000;
  double v[80];
  qdpt_rng_seed(is_phase ? 34 : 33);
  for (int i = 0; i < 80; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  long double *re = qdpt_xmalloc(count * sizeof(long double)),
              *im = qdpt_xmalloc(count * sizeof(long double));
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    char *o = qdpt_xmalloc(rows * count * cplx_size(out));
    struct qdpk_span s = span_of(n, first, count, rows, out);
    k(&s, v, QDP_DTYPE_FLOAT64, 40, o);
    for (uint64_t r = 0; r < rows; r++) {
      for (uint64_t j = 0; j < count; j++) {
        if (is_phase) {
          phase_ref(v, QDP_DTYPE_FLOAT64, r * 40, n, first + j, &re[j], &im[j]);
        } else {
          re[j] = angle_ref(v, QDP_DTYPE_FLOAT64, r * 40, n, first + j);
          im[j] = 0;
        }
      }
      assert_state_close(o + r * count * cplx_size(out), out, re, im, count,
                         is_phase ? "phase window" : "angle window");
    }
    free(o);
  }
  free(re);
  free(im);
}

/* The same rows from the whole index, from 2, 4 and 8 even spans and from uneven spans: every
 * amplitude depends only on its global index, so the bits must match. */
static void check_spans_bit_identical(span_kernel k, const void *x, qdp_dtype in, uint64_t stride,
                                      uint32_t n, uint64_t rows, qdp_dtype out, const char *what) {
  uint64_t count = UINT64_C(1) << n;
  size_t cs = cplx_size(out);
  char *whole = qdpt_xmalloc(rows * count * cs);
  struct qdpk_span s = span_of(n, 0, count, rows, out);
  k(&s, x, in, stride, whole);
  uint64_t cuts[8][10];
  uint64_t ncuts[8] = {0};
  int layouts = 0;
  for (uint64_t parts = 2; parts <= 8; parts *= 2) {
    for (uint64_t p = 0; p <= parts; p++) {
      cuts[layouts][p] = p * (count / parts);
    }
    ncuts[layouts++] = parts + 1;
  }
  /* Uneven: odd sizes that straddle the table's 1024-amplitude runs where n allows. */
  uint64_t uneven[5] = {0, 1, count / 3, count - count / 4 - 1, count};
  memcpy(cuts[layouts], uneven, sizeof(uneven));
  ncuts[layouts++] = 5;
  for (int l = 0; l < layouts; l++) {
    for (uint64_t c = 0; c + 1 < ncuts[l]; c++) {
      uint64_t lo = cuts[l][c], len = cuts[l][c + 1] - lo;
      if (len == 0) {
        continue;
      }
      char *part = qdpt_xmalloc(rows * len * cs);
      struct qdpk_span ps = span_of(n, lo, len, rows, out);
      k(&ps, x, in, stride, part);
      for (uint64_t r = 0; r < rows; r++) {
        assert_bits_equal(part + r * len * cs, whole + (r * count + lo) * cs, out, len, what);
      }
      free(part);
    }
  }
  free(whole);
}

static void check_sharding(span_kernel k, const char *what) {
  static const uint32_t qubits[] = {3, 10, 12};
  uint64_t rows = 3, stride = 12;
  double v[36];
  qdpt_rng_seed(35);
  for (int i = 0; i < 36; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  for (size_t qi = 0; qi < 3; qi++) {
    for (int io = 0; io < 2; io++) {
      void *x = make_input(IN_TYPES[io], v, 36);
      for (int oo = 0; oo < 2; oo++) {
        check_spans_bit_identical(k, x, IN_TYPES[io], stride, qubits[qi], rows, OUT_TYPES[oo],
                                  what);
      }
      free(x);
    }
  }
}

START_TEST(test_angle_batch_matches_product_reference) {
  check_closed_form(qdpk_cpu_angle, 0);
}
END_TEST

START_TEST(test_angle_high_qubit_window_matches_reference) {
  check_high_window(qdpk_cpu_angle, 0);
}
END_TEST

START_TEST(test_angle_sharded_spans_bit_identical) {
  check_sharding(qdpk_cpu_angle, "angle span");
}
END_TEST

START_TEST(test_phase_batch_matches_closed_form) {
  check_closed_form(qdpk_cpu_phase, 1);
}
END_TEST

START_TEST(test_phase_high_qubit_window_matches_closed_form) {
  check_high_window(qdpk_cpu_phase, 1);
}
END_TEST

START_TEST(test_phase_sharded_spans_bit_identical) {
  check_sharding(qdpk_cpu_phase, "phase span");
}
END_TEST

/* ---- basis -------------------------------------------------------------------------------- */

START_TEST(test_basis_index_three_on_three_qubits) {
  double vd[1] = {3};
  int64_t vi[1] = {3};
  qdp_dtype ins[3] = {QDP_DTYPE_FLOAT32, QDP_DTYPE_FLOAT64, QDP_DTYPE_INT64};
  for (int io = 0; io < 3; io++) {
    void *x = ins[io] == QDP_DTYPE_INT64 ? NULL : make_input(ins[io], vd, 1);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      double o[16];
      memset(o, 0x55, sizeof(o));
      struct qdpk_span s = span_of(3, 0, 8, 1, out);
      qdpk_cpu_basis(&s, x ? x : (void *)vi, ins[io], 1, o);
      for (int b = 0; b < 8; b++) {
        ck_assert_double_eq(re_at(o, out, b), b == 3 ? 1.0 : 0.0);
        ck_assert_double_eq(im_at(o, out, b), 0.0);
      }
    }
    free(x);
  }
}
END_TEST

START_TEST(test_basis_rows_follow_stride) {
  int64_t vi[6] = {0, 99, 7, 99, 5, 99};
  double o[3 * 8 * 2];
  struct qdpk_span s = span_of(3, 0, 8, 3, QDP_DTYPE_COMPLEX128);
  qdpk_cpu_basis(&s, vi, QDP_DTYPE_INT64, 2, o);
  uint64_t want[3] = {0, 7, 5};
  for (uint64_t r = 0; r < 3; r++) {
    for (uint64_t b = 0; b < 8; b++) {
      ck_assert_double_eq(o[2 * (r * 8 + b)], b == want[r] ? 1.0 : 0.0);
      ck_assert_double_eq(o[2 * (r * 8 + b) + 1], 0.0);
    }
  }
}
END_TEST

static void basis_kernel(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t stride,
                         void *out) {
  qdpk_cpu_basis(s, x, in, stride, out);
}

START_TEST(test_basis_sharded_only_owner_writes_one) {
  double v[4] = {0, 1023, 600, 257};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 4);
    for (int oo = 0; oo < 2; oo++) {
      check_spans_bit_identical(basis_kernel, x, IN_TYPES[io], 1, 10, 4, OUT_TYPES[oo],
                                "basis span");
    }
    free(x);
  }
  /* A span that does not hold the index is all zeros. */
  double o[2 * 256];
  double idx = 600;
  struct qdpk_span s = span_of(10, 0, 256, 1, QDP_DTYPE_COMPLEX128);
  qdpk_cpu_basis(&s, &idx, QDP_DTYPE_FLOAT64, 1, o);
  for (int i = 0; i < 512; i++) {
    ck_assert_double_eq(o[i], 0.0);
  }
  /* The owner writes its 1 at the local offset 600 - 512 = 88. */
  s.first = 512;
  qdpk_cpu_basis(&s, &idx, QDP_DTYPE_FLOAT64, 1, o);
  ck_assert_double_eq(o[2 * 88], 1.0);
}
END_TEST

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

/* ---- suite -------------------------------------------------------------------------------- */

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

static Suite *kernels_cpu_suite(void) {
  Suite *s = suite_create("kernels_cpu");
  TCase *tc;

  tc = tcase_create("params_per_sample");
  tcase_add_test(tc, test_params_per_sample_counts_each_encoding);
  suite_add_tcase(s, tc);

  tc = tcase_create("sumsq");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_sumsq_hand_computed_values);
  tcase_add_test(tc, test_sumsq_float_is_pairwise_not_sequential);
  tcase_add_test(tc, test_sumsq_matches_recursive_definition);
  tcase_add_test(tc, test_sumsq_partition_independent);
  tcase_add_test(tc, test_sumsq_rows_follow_stride_and_ignore_past_len);
  suite_add_tcase(s, tc);

  tc = tcase_create("amplitude");
  tcase_add_test(tc, test_amplitude_hand_computed_row);
  tcase_add_test(tc, test_amplitude_pads_with_zeros);
  tcase_add_test(tc, test_amplitude_batch_matches_double_reference);
  tcase_add_test(tc, test_amplitude_sharded_spans_bit_identical);
  suite_add_tcase(s, tc);

  tc = tcase_create("angle");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_angle_hand_computed_two_qubits);
  tcase_add_test(tc, test_angle_bit_order_first_qubit_is_bit_zero);
  tcase_add_test(tc, test_angle_uses_x_not_half_x);
  tcase_add_test(tc, test_angle_batch_matches_product_reference);
  tcase_add_test(tc, test_angle_high_qubit_window_matches_reference);
  tcase_add_test(tc, test_angle_sharded_spans_bit_identical);
  suite_add_tcase(s, tc);

  tc = tcase_create("phase");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_phase_hand_computed);
  tcase_add_test(tc, test_phase_batch_matches_closed_form);
  tcase_add_test(tc, test_phase_high_qubit_window_matches_closed_form);
  tcase_add_test(tc, test_phase_sharded_spans_bit_identical);
  suite_add_tcase(s, tc);

  tc = tcase_create("basis");
  tcase_add_test(tc, test_basis_index_three_on_three_qubits);
  tcase_add_test(tc, test_basis_rows_follow_stride);
  tcase_add_test(tc, test_basis_sharded_only_owner_writes_one);
  suite_add_tcase(s, tc);

  tc = tcase_create("wht");
  tcase_add_test(tc, test_wht_hand_computed_four_values);
  tcase_add_test(tc, test_wht_bits_equal_plain_ascending_order);
  tcase_add_test(tc, test_wht_twice_scales_by_count);
  tcase_add_test(tc, test_butterfly_hand_computed);
  suite_add_tcase(s, tc);

  tc = tcase_create("iqp");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_iqp_z_hand_computed_one_qubit);
  tcase_add_test(tc, test_iqp_pair_term_hand_computed);
  tcase_add_test(tc, test_iqp_pair_coefficients_in_pair_order);
  tcase_add_test(tc, test_iqp_matches_direct_sum);
  tcase_add_test(tc, test_iqp_phases_match_theta_definition);
  tcase_add_test(tc, test_iqp_sharded_bit_identical_exchanging_only_below_the_top_bits);
  tcase_add_test(tc, test_iqp_whole_matches_the_reference_path);
  tcase_add_test(tc, test_iqp_whole_takes_whole_blocks_or_an_aligned_part_of_one);
  tcase_add_test(tc, test_iqp_phases_uneven_spans_bit_identical);
  suite_add_tcase(s, tc);

  tc = tcase_create("checks");
  tcase_add_test(tc, test_find_nonfinite_reports_first_position);
  tcase_add_test(tc, test_check_basis_reports_each_fault_and_row);
  tcase_add_test(tc, test_check_basis_accepts_edges);
  tcase_add_test(tc, test_check_params_reports_each_fault_and_position);
  tcase_add_test(tc, test_iqp_at_the_sum_limit_stays_finite);
  tcase_add_test(tc, test_absmax_skips_nan_and_keeps_inf);
  suite_add_tcase(s, tc);

  tc = tcase_create("fallback_and_alignment");
  tcase_add_test(tc, test_scaled_sums_and_amplitudes_equal_prescaled_input);
  tcase_add_test(tc, test_kernels_read_misaligned_input_as_aligned);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return qdpt_run_suite(kernels_cpu_suite(), CK_FORK_GETENV);
}
