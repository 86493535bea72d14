/* kernels_cpu_fixture.c — the helpers of kernels_cpu_fixture.h. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels_cpu_fixture.h"

const qdp_dtype IN_TYPES[2] = {QDP_DTYPE_FLOAT32, QDP_DTYPE_FLOAT64};

const qdp_dtype OUT_TYPES[2] = {QDP_DTYPE_COMPLEX64, QDP_DTYPE_COMPLEX128};

void *make_input(qdp_dtype in, const double *v, size_t n) {
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

long double in_at(const void *x, qdp_dtype in, uint64_t i) {
  if (in == QDP_DTYPE_FLOAT32) {
    return ((const float *)x)[i];
  }
  return ((const double *)x)[i];
}

size_t cplx_size(qdp_dtype out) {
  return out == QDP_DTYPE_COMPLEX64 ? 2 * sizeof(float) : 2 * sizeof(double);
}

double re_at(const void *o, qdp_dtype out, uint64_t i) {
  if (out == QDP_DTYPE_COMPLEX64) {
    return ((const float *)o)[2 * i];
  }
  return ((const double *)o)[2 * i];
}

double im_at(const void *o, qdp_dtype out, uint64_t i) {
  if (out == QDP_DTYPE_COMPLEX64) {
    return ((const float *)o)[2 * i + 1];
  }
  return ((const double *)o)[2 * i + 1];
}

double tol_of(qdp_dtype out) {
  return out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12;
}

void assert_state_close(const void *o, qdp_dtype out, const long double *ref_re,
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

void assert_rows_normalized(const void *o, qdp_dtype out, uint64_t count, uint64_t rows) {
  for (uint64_t r = 0; r < rows; r++) {
    long double s = 0;
    for (uint64_t i = 0; i < count; i++) {
      long double a = re_at(o, out, r * count + i), b = im_at(o, out, r * count + i);
      s += a * a + b * b;
    }
    ck_assert_double_eq_tol((double)s, 1.0, out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12);
  }
}

void assert_bits_equal(const void *got, const void *want, qdp_dtype out, uint64_t count,
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

struct qdpk_span span_of(uint32_t qubits, uint64_t first, uint64_t count, uint64_t rows,
                         qdp_dtype out) {
  struct qdpk_span s = {qubits, first, count, rows, out};
  return s;
}

void check_spans_bit_identical(span_kernel k, const void *x, qdp_dtype in, uint64_t stride,
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
