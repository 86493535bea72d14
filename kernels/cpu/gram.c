/* gram.c — the kernel matrix's block products on the CPU (qdpk.h, "the kernel matrix").
 *
 * Each product keeps QDPK_GRAM_LANES partial sums per entry, lane l taking k = l, l + LANES, ...
 * in ascending order, and adds the lanes in order at the end: independent chains the compiler can
 * keep in registers, and an order fixed by k alone. The project is built without contraction into
 * fused multiply-adds (-ffp-contract=off, meson.build), so the products round as written.
 */
#include <stdint.h>
#include <string.h>

#include "qdpk.h"

#define L QDPK_GRAM_LANES

/* One entry: sum_k conj(x[k]) y[k] over n complex values. */
#define DEFINE_DOT(NAME, T) \
  static void NAME(const T *x, const T *y, uint64_t n, T *ret) { \
    T re[L] = {0}, im[L] = {0}; \
    uint64_t k = 0; \
    for (; k + L <= n; k += L) { \
      for (unsigned l = 0; l < L; l++) { \
        T xr = x[2 * (k + l)], xi = x[2 * (k + l) + 1]; \
        T yr = y[2 * (k + l)], yi = y[2 * (k + l) + 1]; \
        re[l] += xr * yr + xi * yi; \
        im[l] += xr * yi - xi * yr; \
      } \
    } \
    for (unsigned l = 0; k < n; k++, l++) { \
      T xr = x[2 * k], xi = x[2 * k + 1], yr = y[2 * k], yi = y[2 * k + 1]; \
      re[l] += xr * yr + xi * yi; \
      im[l] += xr * yi - xi * yr; \
    } \
    T sr = re[0], si = im[0]; \
    for (unsigned l = 1; l < L; l++) { \
      sr += re[l]; \
      si += im[l]; \
    } \
    ret[0] = sr; \
    ret[1] = si; \
  }
DEFINE_DOT(dot_f, float)
DEFINE_DOT(dot_d, double)

/* One entry of real operands: sum_k x[k] y[k] over n values. */
#define DEFINE_REAL_DOT(NAME, T) \
  static T NAME(const T *x, const T *y, uint64_t n) { \
    T acc[L] = {0}; \
    uint64_t k = 0; \
    for (; k + L <= n; k += L) { \
      for (unsigned l = 0; l < L; l++) { \
        acc[l] += x[k + l] * y[k + l]; \
      } \
    } \
    for (unsigned l = 0; k < n; k++, l++) { \
      acc[l] += x[k] * y[k]; \
    } \
    T sum = acc[0]; \
    for (unsigned l = 1; l < L; l++) { \
      sum += acc[l]; \
    } \
    return sum; \
  }
DEFINE_REAL_DOT(real_dot_f, float)
DEFINE_REAL_DOT(real_dot_d, double)

void qdpk_cpu_gram(const void *a, uint64_t lda, uint64_t rows, const void *b, uint64_t ldb,
                   uint64_t cols, uint64_t len, qdp_dtype dt, int upper, int real, void *g) {
  size_t vs = qdp_dtype_size(dt) / (real ? 2 : 1); /* bytes of one value of g */
  for (uint64_t i = 0; i < rows; i++) {
    if (upper) { /* the half left out holds zeros, so that sums over it read defined values */
      memset((char *)g + i * cols * vs, 0, i * vs);
    }
    for (uint64_t j = upper ? i : 0; j < cols; j++) {
      uint64_t at = i * cols + j;
      if (real && dt == QDP_DTYPE_COMPLEX64) {
        ((float *)g)[at] = real_dot_f((const float *)a + i * lda, (const float *)b + j * ldb, len);
      } else if (real) {
        ((double *)g)[at] =
            real_dot_d((const double *)a + i * lda, (const double *)b + j * ldb, len);
      } else if (dt == QDP_DTYPE_COMPLEX64) {
        dot_f((const float *)a + 2 * i * lda, (const float *)b + 2 * j * ldb, len,
              (float *)g + 2 * at);
      } else {
        dot_d((const double *)a + 2 * i * lda, (const double *)b + 2 * j * ldb, len,
              (double *)g + 2 * at);
      }
    }
  }
}

void qdpk_cpu_gram_real_rows(void *dst, uint64_t dst_pitch, const void *src, uint64_t src_pitch,
                             uint64_t width, uint64_t rows, qdp_dtype dt) {
  for (uint64_t r = 0; r < rows; r++) {
    const char *from = (const char *)src + r * src_pitch;
    char *to = (char *)dst + r * dst_pitch;
    for (uint64_t j = 0; j < width; j++) {
      if (dt == QDP_DTYPE_COMPLEX64) {
        ((float *)to)[j] = ((const float *)from)[2 * j];
      } else {
        ((double *)to)[j] = ((const double *)from)[2 * j];
      }
    }
  }
}

void qdpk_cpu_gram_add(void *g, const void *h, uint64_t n, qdp_dtype dt, int real) {
  uint64_t scalars = real ? n : 2 * n;
  if (dt == QDP_DTYPE_COMPLEX64) {
    float *x = g;
    const float *y = h;
    for (uint64_t i = 0; i < scalars; i++) {
      x[i] += y[i];
    }
  } else {
    double *x = g;
    const double *y = h;
    for (uint64_t i = 0; i < scalars; i++) {
      x[i] += y[i];
    }
  }
}

/* Entry (i, j) of g as a complex number, taken from (j, i) conjugated where fill asks. */
#define DEFINE_ENTRY(NAME, T) \
  static void NAME(const T *g, uint64_t cols, int real, int fill, uint64_t i, uint64_t j, \
                   T *re, T *im) { \
    int swap = fill && j < i; \
    uint64_t at = swap ? j * cols + i : i * cols + j; \
    *re = real ? g[at] : g[2 * at]; \
    *im = real ? 0 : (swap ? -g[2 * at + 1] : g[2 * at + 1]); \
  }
DEFINE_ENTRY(entry_f, float)
DEFINE_ENTRY(entry_d, double)

/* One value of the matrix at `to`: |v|^2, or v (conjugated with conj) for overlaps. */
#define DEFINE_PUT(NAME, T) \
  static void NAME(char *to, int overlaps, int conj, T re, T im) { \
    if (overlaps) { \
      ((T *)to)[0] = re; \
      ((T *)to)[1] = conj ? -im : im; \
    } else { \
      ((T *)to)[0] = re * re + im * im; \
    } \
  }
DEFINE_PUT(put_f, float)
DEFINE_PUT(put_d, double)

void qdpk_cpu_gram_finish(const void *g, uint64_t rows, uint64_t cols, qdp_dtype dt, int real,
                          int overlaps, int fill, void *out, void *mirror, uint64_t pitch_bytes) {
  size_t os = qdp_dtype_size(dt) / (overlaps ? 1 : 2); /* bytes of one value of the matrix */
  for (uint64_t i = 0; i < rows; i++) {
    for (uint64_t j = 0; j < cols; j++) {
      char *to = (char *)out + i * pitch_bytes + j * os;
      char *back = mirror ? (char *)mirror + j * pitch_bytes + i * os : NULL;
      if (dt == QDP_DTYPE_COMPLEX64) {
        float re, im;
        entry_f(g, cols, real, fill, i, j, &re, &im);
        put_f(to, overlaps, 0, re, im);
        if (back) {
          put_f(back, overlaps, 1, re, im);
        }
      } else {
        double re, im;
        entry_d(g, cols, real, fill, i, j, &re, &im);
        put_d(to, overlaps, 0, re, im);
        if (back) {
          put_d(back, overlaps, 1, re, im);
        }
      }
    }
  }
}
